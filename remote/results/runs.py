"""Runs: a run's state and summary, its metrics, a stop, the known-good, the compile health, the fleet's status."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

State = Literal["running", "exited", "stopped", "lost"]
"""A run's state: running; exited (with its own status); stopped (by `remote stop`); lost (it ended
without an exit record: the container restarted, or its wrapper was killed)."""


# -- runs ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveRun:
    """A live run of a container: no exit record, a process of it alive (pid None: no pid file yet, starting)."""

    run: str
    pid: int | None


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint of a run's (train.checkpoint) as the container has it; complete only where remote could tell
    (a torch.save zip with its end record, a folder with its marker: remote/sh/ckpt.py), never assumed."""

    path: str
    complete: bool
    kind: str  # torch | safetensors | dcp | hf | folder | file | missing
    size: int = 0  # bytes (0 for a folder)
    mtime: float | None = None  # seconds since the epoch (the container's clock)
    step: int | None = None  # where the checkpoint tells it (its pickle's iter_num/step, trainer_state.json, its name)
    step_from: str | None = None  # where the step was read
    why: str = ""  # why it is not complete
    kept: bool = False  # the watch's copy of the last complete one (kept for a job that saves in place)


@dataclass(frozen=True)
class RunStatus:
    """A run's state as the container holds it now (its folder's pid, exit, manifest, watch files)."""

    run: str | None  # None: the container has no runs
    path: str = ""
    pid: int | None = None
    alive: bool = False
    exit: int | None = None
    lost: bool = False  # ended without an exit record
    stopped: bool = False  # ended by `remote stop`
    orphans: tuple[int, ...] = ()  # processes of a lost run still alive
    log_size: int = 0
    manifest: Mapping[str, Any] | None = None
    live: tuple[LiveRun, ...] = ()  # every live run of the container
    stalled: Mapping[str, Any] | None = None
    stalls: int = 0
    gpu: Mapping[str, Any] | None = None
    attempt: int | None = None
    attempts_max: int | None = None
    checkpoint: Checkpoint | None = None  # a resume: the checkpoint it started from (its manifest's record)
    parent: str | None = None  # a resume: the run it continues

    @property
    def state(self) -> State:
        return ("running" if self.alive else "lost" if self.lost else "stopped" if self.stopped else "exited")

    @property
    def exit_code(self) -> int | None:
        """The exit status a finished run reports: the job's own, 1 when it was lost; None while it runs."""
        if self.alive:
            return None
        return 1 if self.lost else (self.exit or 0)


@dataclass(frozen=True)
class RunSummary:
    """One run as `runs` lists it."""

    id: str
    started: str | None
    started_epoch: float | None
    state: State
    exit: int | None
    throughput: float | None
    unit: str | None
    command: str | None
    nodes: tuple[int, ...] | None
    path: str
    checkpoint: Checkpoint | None = None  # a resume: the checkpoint it started from
    parent: str | None = None  # a resume: the run it continues

    @property
    def resumes(self) -> str | None:
        """`resumes RUN at step N` for a resume (None for a run that started fresh)."""
        return resumes_text(self.parent, self.checkpoint)


@dataclass(frozen=True)
class Metric:
    """One line of a run's metrics.jsonl: t (seconds), value and unit where the line has them; `fields`
    the whole line (the container's JSON object, untrusted)."""

    t: float | None
    value: float | None
    unit: str | None
    fields: Mapping[str, Any]


def resumes_text(parent: str | None, checkpoint: Checkpoint | None) -> str | None:
    """A resume's lineage in words: `resumes RUN at step N` (or `from PATH` where the step is not known)."""
    if checkpoint is None:
        return None
    at = f"at step {checkpoint.step}" if checkpoint.step is not None else f"from {checkpoint.path}"
    return f"resumes {parent} {at}" if parent else f"resumed {at}"


SaveOutcome = Literal["saved", "none-yet", "no-new", "not-running"]
"""What `stop(save=True)` got: a new complete checkpoint (saved); no checkpoint at all existed yet (none-yet);
none came within train.checkpoint.grace, or the job ended first (no-new: the latest older one is what it left);
the run was not running (not-running)."""


@dataclass(frozen=True)
class Saved:
    """What `stop(save=True)` left: the checkpoint (the new one, or the latest older one), how long it waited."""

    outcome: SaveOutcome
    checkpoint: Checkpoint | None  # None: the run left no complete checkpoint at all
    age_s: float | None = None  # the checkpoint's age when the job was stopped
    last_step: int | None = None  # the last step the job's log showed
    steps_lost: int | None = None  # last_step less the checkpoint's step, where both are known
    waited_s: float = 0.0
    signals: int = 0  # how many times the job was sent train.checkpoint.signal


@dataclass(frozen=True)
class Stopped:
    """A stopped run: verified that no process of it is left."""

    run: str
    was_alive: bool
    signal: str | None
    exit_code: int | None
    gpu_left: tuple[int, ...] | None  # None where the GPUs could not be checked
    others: tuple[Stopped, ...] = ()  # other live runs stopped with it (no run id given)
    nodes: tuple[int, ...] | None = None  # a multi-node run's containers
    saved: Saved | None = None  # stop(save=True): what it saved (None: no save was asked for)
    # stop(save=True) of a multi-node run: what each node saved (ctid -> Saved), the step every rank resumes at
    # (None: no common step or no checkpoint) and why, in words
    saves: Mapping[int, Saved] | None = None
    resume_step: int | None = None
    resume_note: str = ""


@dataclass(frozen=True)
class KnownGood:
    """A run recorded as its container's known-good (for doctor); `record` is the whole record as saved
    in the container (docs/doctor.md)."""

    run: str
    container: int
    commit: str | None
    torch: str | None
    path: str  # where the container keeps it
    record: Mapping[str, Any]


@dataclass(frozen=True)
class PulledRun:
    """A run's log, manifest and outputs brought into `dest` (a folder named after the run)."""

    run: str
    dest: str
    pulled: Mapping[str, str]  # what arrived: name -> "<n> file(s), <bytes> bytes"
    refused: tuple[str, ...]  # what was not written, each "<name>: <why>"


# -- compile health (the compile watch's compile.jsonl, read by remote/ops/compilelog.py) --------------------

@dataclass(frozen=True)
class CompileEvent:
    """One line of compile.jsonl (docs/guide/compile-health.md): what torch did to one function, when, in which process."""

    t: float
    kind: str  # one of KINDS
    fn: str | None = None
    file: str | None = None
    line: int | None = None
    n: int = 1  # this kind's count for this function (recompile #3)
    why: str | None = None  # eager-fallback only: one of WHY
    reason: str | None = None  # torch's text: the failed guard, the break reason, the error
    where: str | None = None  # the source line torch names in its reason (file:line)
    seconds: float = 0.0
    rank: int | None = None
    pid: int | None = None
    thread: str | None = None
    compile_id: str | None = None
    cache: Mapping[str, int] = field(default_factory=dict, compare=False)

    @property
    def function(self) -> str:
        """`f (train.py:12)`: the function and where it starts."""
        place = f"{os.path.basename(self.file)}:{self.line}" if self.file and self.line is not None else None
        return f"{self.fn or '?'}" + (f" ({place})" if place else "")


@dataclass(frozen=True)
class CompileHealth:
    """A run's compile events summed: for `status`, `doctor`, `report` and the library's Run."""

    compiles: int = 0
    recompiles: int = 0
    graph_breaks: int = 0
    eager_fallbacks: int = 0
    seconds: float = 0.0  # compiling, all processes, the whole run
    steady_at: float | None = None  # the first steady step's time (None: not reached or unknown)
    steady_seconds: float = 0.0  # compiling after the first steady step
    steady_counts: Mapping[str, int] = field(default_factory=dict)  # kind -> events after the first steady step
    events: tuple[CompileEvent, ...] = ()  # the events read (bounded), oldest first
    processes: int = 0

    def __bool__(self) -> bool:
        return bool(self.events) or self.processes > 0

    def counts(self) -> dict[str, int]:
        return {"compile": self.compiles, "recompile": self.recompiles, "graph-break": self.graph_breaks,
                "eager-fallback": self.eager_fallbacks}

    def after_steady(self) -> list[CompileEvent]:
        return [e for e in self.events if self.steady_at is not None and e.t > self.steady_at]


# -- the fleet at a glance ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobStatus:
    """A container's latest run, as `status` shows it."""

    id: str
    alive: bool
    lost: bool
    orphans: tuple[int, ...]
    exit: int | None
    pid: int | None
    stopped: bool
    uptime_s: int | None
    throughput: float | None
    rolling: float | None
    unit: str | None
    higher_is_better: bool
    baseline: float | None
    low: bool
    problems: tuple[str, ...]
    spark: str
    stalled: Mapping[str, Any] | None
    attempt: int | None
    attempts_max: int | None
    gpu: Mapping[str, Any] | None
    nodes: tuple[int, ...] | None = None  # one node of a multi-node run: every node's container
    node_rank: int | None = None
    compile: CompileHealth | None = None  # the compile watch's counts (docs/guide/compile-health.md)
    moved_from: str | None = None  # lost because its container moved: the cluster node it started on
    checkpoint: Checkpoint | None = None  # a resume: the checkpoint it started from
    parent: str | None = None  # a resume: the run it continues
    oom_killed: tuple[int, ...] = ()  # the attempts the kernel's OOM killer ended (the container's memory limit)

    @property
    def state(self) -> State:
        return "running" if self.alive else "lost" if self.lost else "stopped" if self.stopped else "exited"


@dataclass(frozen=True)
class ContainerStatus:
    """One container in `status`: its state as `pct list` says, its latest run, its venv lock."""

    container: int
    host: str
    state: str  # pct's: running, stopped, missing, unknown, ...
    run: JobStatus | None = None
    also_live: tuple[LiveRun, ...] = ()  # live runs besides the latest
    probed: bool = False  # its run state was read (then venv_lock is what the venv's record says)
    venv_lock: str | None = None
    error: str | None = None
    venv_lock_differs: str | None = None  # the lock its siblings (same venv spec) have, where it differs
    node: str | None = None  # the Proxmox node holding it (a cluster's container: as its guest list says)
    # Its GPU memory in use now, by every process (remote.facts.gpu_use: used_mib, total_mib, processes, foreign:
    # the GPU processes of no run, each pid, name, used_mib and command); None without GPUs or not read.
    gpu_memory: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class HostStatus:
    host: str
    reachable: bool
    error: str | None
    kept: str | None  # the kept connection, where there is one
    containers: Mapping[int, str]  # ctid -> pct's state
    node: str | None = None  # its Proxmox node name
    cluster: str | None = None  # the cluster it is a node of (hosts file's cluster:), None for a host of its own


@dataclass(frozen=True)
class FleetStatus:
    hosts: tuple[HostStatus, ...]
    containers: tuple[ContainerStatus, ...]

    @property
    def reachable(self) -> bool:
        return all(h.reachable for h in self.hosts)
