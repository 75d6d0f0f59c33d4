"""Every value an operation returns, defined once: the ops build them, the API returns the same objects.

Frozen dataclasses, typed, with no rendering (the command line's format module turns them into text and
JSON). Below the operations and the transport: this module imports only remote.errors.

    Result        a finished command                 CacheCopy     a compile cache copied between containers
    DeployPlan    what a deploy changed, or would    Transfer      a push or pull, verified
    Warmup        a warmup's devices and cache gain  CacheHolding  what a container's compile cache holds
    Snapshot      a Proxmox snapshot                 RolledBack    a container rolled back to one
    Finding       one thing doctor found             Stopped       a stopped run (and the others with it)
    Diagnosis     doctor on one container            GpuReport     doctor --gpu: GpuHost and GpuContainer
    RunStatus     a run's state, read now            RunSummary    one row of `runs`
    Metric        one value of metrics.jsonl         KnownGood     a run recorded as known-good
    PulledRun     a run's files brought home         ImportedCache a compile-cache bundle loaded
    HostStatus, ContainerStatus, JobStatus, FleetStatus           `status`: hosts, containers, their jobs
    CompileEvent  one line of compile.jsonl          CompileHealth a run's compile events summed
    Outcome, GroupResult                                           one call on many containers
    CreateStep, Created                                            `remote create`: a container made, step by step
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from .errors import CommandError

__all__ = [  # the API re-exports these as they are (remote.api)
    "Result", "Transfer", "DeployPlan", "Warmup", "CacheHolding", "CacheCopy", "ImportedCache", "Snapshot", "RolledBack", "Finding", "RunStatus", "LiveRun", "RunSummary", "Metric",
    "Diagnosis", "GpuReport", "GpuHost", "GpuContainer", "Stopped", "KnownGood", "PulledRun", "CompileEvent", "CompileHealth", "JobStatus", "ContainerStatus",
    "HostStatus", "FleetStatus", "Outcome", "GroupResult", "State", "GpuFix", "HostSetup", "CreateStep", "Created",
]

T = TypeVar("T")

State = Literal["running", "exited", "stopped", "lost"]
"""A run's state: running; exited (with its own status); stopped (by `remote stop`); lost (it ended
without an exit record: the container restarted, or its wrapper was killed)."""


# -- commands ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    """A finished command: its argv, its own exit status and output (bytes, exactly as it wrote them)."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def out(self) -> str:
        return self.text

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def check(self, where: str = "") -> Result:
        """Raise CommandError unless the command succeeded."""
        if self.exit_code != 0:
            raise CommandError(shlex.join(self.argv), self.exit_code, self.err, where)
        return self


# -- files -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """A push or pull: what arrived, verified by sha256 (a file's hash, a tree's manifest)."""

    direction: str  # "push" | "pull"
    src: str
    dest: str
    files: int
    bytes: int  # of file content now at the destination
    seconds: float
    attempts: int = 1
    sha256: str | None = None  # of a single file
    refused: tuple[str, ...] = ()  # members of a pulled tree not written, each "<path>: <why>"
    verified: bool = True  # always: a transfer that does not verify raises TransferError
    kind: Literal["file", "tree"] = "file"
    sent: int = 0  # bytes of file content that travelled this time (less than `bytes` after a resume)
    resumed_from: int = 0  # the byte a resumed file transfer started at

    @property
    def mb_per_s(self) -> float:
        return self.sent / 1e6 / self.seconds if self.seconds > 0 else 0.0


# -- deploy ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeployPlan:
    """What a deploy changed (applied) or would (check=True, or a dry run); cli.format.deploy_text words it."""

    container: int
    applied: bool
    changed: tuple[str, ...]
    kept: tuple[str, ...]
    saved: tuple[str, ...]  # patches and tarballs of container edits
    drift: tuple[str, ...]  # hand-installed or changed packages
    torch: Mapping[str, Any] | None  # the venv's verify report (torch, cuda_build, triton, gpu_count, ...)
    seconds: float
    dry: bool = field(default=False, repr=False)  # a dry run: `changed` is what would have been

    @property
    def noop(self) -> bool:
        return not self.changed


# -- compile caches ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheCopy:
    """A compile cache copied from one container to another (only the files it lacked; sha256-verified)."""

    src: int
    dst: int
    via: str  # "host <name>", "controller", "nothing to send" or "dry run"
    files: int  # written now
    bytes: int
    present: int  # already there (skipped)
    total: int  # files the source holds
    seconds: float


@dataclass(frozen=True)
class Warmup:
    """A warmup: per device, seconds and what it added to the compile cache."""

    container: int
    devices: tuple[str, ...]
    seconds: float
    new_files: int
    new_bytes: int
    hits: int
    misses: int
    guarded: bool  # the compile guard reported hits and misses
    copied: CacheCopy | None = None  # no compile ran: a matching cache of another container was copied


@dataclass(frozen=True)
class CacheHolding:
    """What a container's compile cache holds (`remote cache`): its folder, files, size and passport, or
    why it could not be read (error)."""

    container: int
    folder: str = ""
    files: int = 0
    bytes: int = 0
    passport: Mapping[str, Any] | None = None
    serves_itself: bool = False  # made for exactly what the container runs now
    mismatch: str = ""  # where it holds files but does not serve itself: how its passport differs
    error: str | None = None


@dataclass(frozen=True)
class ImportedCache:
    """A bundle made by export_cache, loaded into a container's compile cache."""

    files: int
    cache_dir: str
    warmups: tuple[str, ...]  # the devices whose warmup records were kept (they match what runs now)
    refused: tuple[str, ...]  # the bundle's members not imported, each "<name>: <why>"


# -- snapshots -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """A Proxmox snapshot of a container: name, time (the host's local time, as pct prints it),
    description; ours: made by remote's deploy (the only ones remote ever deletes)."""

    name: str
    time: str
    description: str
    ours: bool = False
    depth: int = 0  # its place in pct's tree (0: a snapshot of the current state's line)


@dataclass(frozen=True)
class RolledBack:
    """A container rolled back to a snapshot: what was restored (its rootfs), kept (mount points), started again."""

    container: int
    snapshot: Snapshot
    started: bool
    kept: tuple[str, ...]
    restored: tuple[str, ...]


# -- health --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One thing doctor, doctor --gpu or the compile watch found. `code` a stable identifier (package-changed,
    cgroup-major-stale, recompiling); `severity` error or warning (not healthy) or info (a note); `what`, `why`;
    `since` against the known-good record, where it tells; `fix` the command that fixes it (or None); where it is
    about one, the `container`, the `host` (a cluster node, for a move) and the device `node` (/dev/nvidiactl)."""

    code: str
    severity: str
    what: str
    since: str | None
    why: str
    fix: str | None
    container: int | None = None
    host: str | None = None
    node: str | None = None

    @property
    def message(self) -> str:
        """what, and why where there is one."""
        return f"{self.what}: {self.why}" if self.why else self.what

    @property
    def healthy(self) -> bool:
        """An info finding is a note: it leaves the container healthy."""
        return self.severity not in ("error", "warning")


class ContainerFacts(Protocol):
    """remote.facts.Facts (this module sits below the facts) as a Diagnosis uses it: the record and the JSON."""
    @property
    def known_good(self) -> Mapping[str, Any] | None: ...
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Diagnosis:
    """doctor on one container (Fleet.doctor; Container.doctor returns its findings): what it found, or the error
    that kept it from being probed (then no facts)."""

    container: int
    host: str
    findings: tuple[Finding, ...]
    error: str | None = None
    facts: ContainerFacts | None = field(default=None, repr=False, compare=False)

    @property
    def known_good(self) -> Mapping[str, Any] | None:  # the record the findings compare with (docs/doctor.md)
        return self.facts.known_good if self.facts is not None else None

    @property
    def healthy(self) -> bool:
        return self.error is None and all(f.healthy for f in self.findings)


class GpuFacts(Protocol):
    """remote.facts.gpu's HostGpu, CtGpu, CtConfig as a report uses them: dataclasses, --json writes them whole."""
    __dataclass_fields__: ClassVar[dict[str, Any]]


class GpuHostFacts(GpuFacts, Protocol):
    @property
    def loaded(self) -> str | None: ...  # the loaded NVIDIA module's version
    @property
    def open_module(self) -> bool: ...
    @property
    def packages(self) -> Mapping[str, str]: ...  # pve-manager, pve-container -> version


class GpuContainerFacts(GpuFacts, Protocol):
    @property
    def gpu(self) -> bool: ...  # a node, a driver library or nvidia-smi's driver: not a CPU container
    @property
    def lib_versions(self) -> Mapping[str, str]: ...  # the driver libraries its loader finds -> version
    @property
    def cuda_init(self) -> int | None: ...  # cuInit(0)'s return code


class GpuConfigFacts(GpuFacts, Protocol):
    @property
    def gpu(self) -> bool: ...  # its config has an NVIDIA line


@dataclass(frozen=True)
class GpuHost:
    """doctor --gpu on one host: its NVIDIA driver's facts and findings, or why it could not be probed."""

    host: str
    facts: GpuHostFacts | None
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    stale: tuple[int, ...] = ()  # its containers whose driver user space is not its module's (`remote gpu fix`)

    @property
    def healthy(self) -> bool:
        return self.error is None and not self.findings


@dataclass(frozen=True)
class GpuContainer:
    """doctor --gpu on one container: what it sees, its config's GPU lines, the findings, or why not probed."""

    container: int
    host: str
    facts: GpuContainerFacts | None
    config: GpuConfigFacts | None
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def gpu(self) -> bool:  # configured for a GPU, or it sees one: not a CPU container
        return bool((self.facts and self.facts.gpu) or (self.config and self.config.gpu))

    @property
    def healthy(self) -> bool:
        return self.error is None and all(f.healthy for f in self.findings)


@dataclass(frozen=True)
class GpuReport:
    """`doctor --gpu`: each host's NVIDIA driver and each container's GPU passthrough, as findings."""

    hosts: tuple[GpuHost, ...]
    containers: tuple[GpuContainer, ...]

    @property
    def healthy(self) -> bool:
        return all(h.healthy for h in self.hosts) and all(c.healthy for c in self.containers)


# -- runs ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveRun:
    """A live run of a container: no exit record, a process of it alive (pid None: no pid file yet, starting)."""

    run: str
    pid: int | None


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


@dataclass(frozen=True)
class Metric:
    """One line of a run's metrics.jsonl: t (seconds), value and unit where the line has them; `fields`
    the whole line (the container's JSON object, untrusted)."""

    t: float | None
    value: float | None
    unit: str | None
    fields: Mapping[str, Any]


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


# -- one call on many containers -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One container's part of a GroupResult: its value, or the error it failed with (and the exit
    status and message the command line shows for it)."""

    container: int
    host: str
    value: T | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    skipped: bool = False
    exit_code: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.skipped


class GroupResult(dict[int, Outcome[T]], Generic[T]):
    """A result per container ({ctid: Outcome}), as Fabric's GroupResult: `.succeeded`, `.failed`.
    `callback_errors`: what a caller's on_done/on_tick callback raised, by container (None: an on_tick), caught
    so that it neither killed a worker nor stopped the work (and logged, with its traceback, to `remote`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.callback_errors: dict[int | None, BaseException] = {}

    @property
    def succeeded(self) -> dict[int, T | None]:
        return {k: o.value for k, o in self.items() if o.ok}

    @property
    def failed(self) -> dict[int, BaseException]:
        return {k: o.error for k, o in self.items() if o.error is not None}

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.values())


# -- GPU passthrough repaired ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuFix:
    """`remote gpu fix` on one container: what doctor --gpu found before (finding kinds), what was done (or,
    dry, would be) for them, the config change as diff lines (`- dev2: ...`, `+ dev2: ...`) and the commands,
    what it cannot fix (kind, message, the manual step), the snapshot taken first, whether the container was
    restarted and why it had to be, cuInit(0) afterwards, and the finding kinds left after."""

    container: int
    host: str
    dry: bool
    before: tuple[str, ...]
    fixed: tuple[str, ...]
    diff: tuple[str, ...]
    commands: tuple[str, ...]
    manual: tuple[tuple[str, str, str], ...]
    snapshot: str | None
    restarted: bool
    restart_reason: str | None
    cuda_init: int | None
    after: tuple[str, ...]
    probe_error: str | None = None  # why the container could not be probed (stopped), where it could not

    @property
    def noop(self) -> bool:
        """Nothing to do: no fixable finding."""
        return not self.fixed and not self.diff and not self.commands

    @property
    def ok(self) -> bool:
        """Nothing of an error left that gpu fix could fix, and CUDA starts (cuInit 0) where it was probed."""
        return (self.dry or self.cuda_init in (0, None)) and not (set(self.after) - {m[0] for m in self.manual}
                                                                   - {"host-reboot-pending", "persistence-off"})


@dataclass(frozen=True)
class HostSetup:
    """`remote host setup`: the files written (dry: that would be), those already as they should be, and the
    unit enabled (or that would be). Nothing written and nothing enabled: the host was set up already."""

    host: str
    dry: bool
    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    enabled: tuple[str, ...]

    @property
    def noop(self) -> bool:
        return not self.written and not self.enabled

# -- create ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CreateStep:
    """One step of `remote create`, with the time it took (0 in a dry run: nothing ran)."""

    name: str  # preflight | create | gpu config | start | packages | driver | proof | hosts file
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class Created:
    """A container `remote create` made (or found already made as asked: `made` False), on `host`."""

    ctid: int
    host: str
    made: bool  # False: it was there already, as asked (a no-op), or a dry run
    dry: bool
    source: str  # the template volume, or `clone N`
    gpus: tuple[int, ...]  # the host's /dev/nvidiaN numbers passed (empty: --gpu none)
    driver: str | None  # the loaded module's version the driver's user space matches (None: no GPU)
    config: tuple[str, ...]  # the GPU lines as pct config shows them (devN, mpN)
    commands: tuple[str, ...]  # the commands that change something, as run (or, dry, as they would run)
    steps: tuple[CreateStep, ...]
    hosts_file: str | None  # the hosts file the entry was added to (None: already there, or dry)
    seconds: float
    notes: tuple[str, ...] = ()  # what the user should know (packages installed, an entry already there, ...)
