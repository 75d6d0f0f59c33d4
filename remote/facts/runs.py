"""A run's state as a fact: state.sh's answer (remote/sh/state.sh) parsed once into a frozen `RunState`.

As the other facts: a pure parser from the container's text to typed values, tested as data. Everything
here was written in the container, most of it by the job itself (its manifest.json, its watch's files):
untrusted, each field checked and bounded where it is read, so a wrong one is that field's None (or, for the
manifest, a named problem), never a KeyError or a TypeError in the operation that reads it.
Adding a field to RunState: one line in the type, one in `parse_state`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..naming import json_loads, printable
from ..results import Checkpoint, LiveRun

CHECKPOINT_KINDS = ("torch", "safetensors", "dcp", "hf", "folder", "file", "missing")  # remote/sh/ckpt.py's

COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # what `git rev-parse HEAD` prints (sha1, sha256 repos)
TAIL_LIMIT = 1 << 20  # state.sh sends 32 KiB of the log; a container that sends more is cut here


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A JSON number that is a finite float (no bool, no NaN or Infinity, no integer too large for a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value, limit: int) -> str:
    """A string the container wrote, bounded, then made safe to print (remote.naming.printable)."""
    return printable(str(value if value is not None else "")[:limit])


# -- the job's manifest ----------------------------------------------------------------------------------------

# What remote reads of a manifest: key -> (a check of its value, what it must be). A job may rewrite its
# manifest.json, so a value of another type is refused (its accessor answers None; `problem` names it).
_CHECKS: dict[str, tuple[Any, str]] = {
    "commit": (lambda v: isinstance(v, str), "a string"),
    "command": (lambda v: isinstance(v, str), "a string"),
    "started_at": (lambda v: isinstance(v, str), "a string"),
    "started_epoch": (_is_number, "a number"),
    "nodes": (lambda v: isinstance(v, list) and all(_is_int(n) for n in v), "a list of container ids"),
    "node_rank": (_is_int, "an integer"),
    "node": (lambda v: isinstance(v, str), "a string"),
    "outputs": (lambda v: isinstance(v, list) and all(isinstance(o, str) for o in v), "a list of paths"),
    "restarts": (_is_int, "an integer"),
    "metric": (lambda v: isinstance(v, dict), "an object"),
    "baseline": (_is_number, "a number"),
    "torch": (lambda v: isinstance(v, str), "a string"),
    "cuda_build": (lambda v: isinstance(v, str), "a string"),
    "triton": (lambda v: isinstance(v, str), "a string"),
    "driver": (lambda v: isinstance(v, str), "a string"),
    "venv_lock_sha256": (lambda v: isinstance(v, str), "a string"),
    "compile_cache": (lambda v: isinstance(v, str), "a string"),
    "gpus": (lambda v: isinstance(v, list) and all(isinstance(g, dict) for g in v), "a list of objects"),
    # a resume's: the checkpoint it started from ({path, step, kind}) and the run it continues
    "checkpoint": (lambda v: isinstance(v, dict) and isinstance(v.get("path"), str)
                   and (v.get("step") is None or _is_int(v.get("step"))), "an object with a path"),
    "parent": (lambda v: isinstance(v, str), "a string"),
}


@dataclass(frozen=True)
class Manifest:
    """A run's manifest.json (written by launch, rewritable by the job): `raw` is the object as it is there,
    kept only to be shown or recorded as is (None where it is missing or not a JSON object); the fields remote
    reads are the typed accessors below, each None where absent or of the wrong type."""

    raw: Mapping[str, Any] | None = None
    shape: str = "missing"  # "object", "missing" (no file, or not JSON), or the JSON type it is instead ("list")

    def _get(self, key: str) -> Any:
        value = (self.raw or {}).get(key)
        return value if value is not None and _CHECKS[key][0](value) else None

    def problem(self, key: str) -> str | None:
        """Why a field the run's manifest has was refused ("... has nodes "200,201", not a list of container
        ids"); None where it is absent or well formed."""
        if self.shape not in ("object", "missing"):
            return f"the run's manifest.json is a {self.shape}, not an object"
        value = (self.raw or {}).get(key)
        check, what = _CHECKS[key]
        if value is None or check(value):
            return None
        return f"the run's manifest.json has {key} {printable(repr(value))[:40]}, not {what}"

    @property
    def commit(self) -> str | None:
        return self._get("commit")

    @property
    def command(self) -> str | None:
        return self._get("command")

    @property
    def started_at(self) -> str | None:
        return self._get("started_at")

    @property
    def started_epoch(self) -> float | None:
        return self._get("started_epoch")

    @property
    def nodes(self) -> tuple[int, ...] | None:
        """A multi-node run's containers (None for a run of one container)."""
        got = self._get("nodes")
        return tuple(got) if got else None

    @property
    def node_rank(self) -> int | None:
        return self._get("node_rank") if self.nodes else None

    @property
    def node(self) -> str | None:
        """The Proxmox node it started on (a cluster's container may move since)."""
        return self._get("node")

    @property
    def outputs(self) -> tuple[str, ...] | None:
        got = self._get("outputs")
        return tuple(got) if got is not None else None

    @property
    def restarts(self) -> int | None:
        return self._get("restarts")

    @property
    def metric(self) -> Mapping[str, Any] | None:
        return self._get("metric")

    @property
    def baseline(self) -> float | None:
        return self._get("baseline")

    @property
    def torch(self) -> str | None:
        return self._get("torch")

    @property
    def cuda_build(self) -> str | None:
        return self._get("cuda_build")

    @property
    def triton(self) -> str | None:
        return self._get("triton")

    @property
    def driver(self) -> str | None:
        return self._get("driver")

    @property
    def venv_lock_sha256(self) -> str | None:
        return self._get("venv_lock_sha256")

    @property
    def compile_cache(self) -> str | None:
        return self._get("compile_cache")

    @property
    def checkpoint(self) -> Checkpoint | None:
        """A resume: the checkpoint it started from, as launch recorded it (path, step, kind)."""
        got = self._get("checkpoint")
        if got is None:
            return None
        step = got.get("step")
        kind = got.get("kind") if got.get("kind") in CHECKPOINT_KINDS else "file"
        path = got["path"]
        if not path.startswith("/") or len(path) > 4096 or "\0" in path:
            return None  # the job may rewrite its manifest: a path no checkpoint could have is none at all
        # kept exactly, never escaped or cut: the words escape it whole (remote.naming.path_words)
        return Checkpoint(path, True, kind, step=step if step is None or step >= 0 else None, step_from="manifest")

    @property
    def parent(self) -> str | None:
        """A resume: the run it continues."""
        got = self._get("parent")
        return shown(got, 128) if got is not None else None

    @property
    def gpus(self) -> tuple[Mapping[str, Any], ...] | None:
        got = self._get("gpus")
        return tuple(got) if got is not None else None


def parse_manifest(text: str, attempts: tuple[Attempt, ...] = ()) -> Manifest:
    """manifest.json's text (state.sh prints `null` when there is none); the wrapper's attempts, newer than
    the watch's copy in it, replace its "attempts"."""
    try:
        obj = json_loads(text) if text.strip() else None
    except ValueError:
        return Manifest()
    return manifest_of(obj, attempts)


def manifest_of(obj: object, attempts: tuple[Attempt, ...] = ()) -> Manifest:
    """A manifest from its JSON value (None: there is none)."""
    if obj is None:
        return Manifest()
    if not isinstance(obj, dict):
        return Manifest(None, type(obj).__name__)
    return Manifest({**obj, "attempts": [asdict(a) for a in attempts]} if attempts else dict(obj), "object")


# -- the watch and the wrapper ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    """One attempt of a run (remote/sh/job.sh's `start K EPOCH [COMMIT]` / `end K EPOCH STATUS` lines)."""

    attempt: int
    started: float
    ended: float | None = None
    exit: int | None = None
    commit: str | None = None  # the checkout's commit when it started
    killed: str | None = None  # "oom": the kernel's OOM killer ended it (the container's count rose; job.sh)


def parse_attempts(text: str) -> tuple[Attempt, ...]:
    """The wrapper's attempts file: one Attempt per `start` line, its `end` line's time and status where there is one
    (and a `killed K oom` line's cause)."""
    out: dict[int, Attempt] = {}
    for line in text.splitlines():
        f = line.split()
        try:
            if len(f) in (3, 4) and f[0] == "start" and _is_number(float(f[2])):
                commit = f[3] if len(f) == 4 and COMMIT.fullmatch(f[3]) else None  # the checkout's then (job.sh)
                out[int(f[1])] = Attempt(int(f[1]), float(f[2]), commit=commit)
            elif len(f) == 4 and f[0] == "end" and int(f[1]) in out and _is_number(float(f[2])):
                k = int(f[1])
                out[k] = Attempt(k, out[k].started, float(f[2]), int(f[3]), out[k].commit)
            elif len(f) == 3 and f[0] == "killed" and int(f[1]) in out and f[2] == "oom":
                out[int(f[1])] = replace(out[int(f[1])], killed="oom")
        except ValueError:
            continue
    return tuple(out[k] for k in sorted(out))


@dataclass(frozen=True)
class Stall:
    """The stall watch's latest finding (remote/sh/watch.py): no output for `seconds`, the stacks it took."""

    seconds: float
    stacks: str  # the file with the py-spy stacks, as the watch named it (bounded, printable)
    action: str  # train.on_stall's: stop, restart, none
    at: float | None = None  # when, as the container's epoch


@dataclass(frozen=True)
class Watch:
    """watch.json as the controller reads it: the latest stall, the number of stalls, the latest GPU sample."""

    stalled: Stall | None = None
    stalls: int = 0
    gpu: Mapping[str, float] | None = None  # t, gpus, util_pct, mem_used_mib, mem_total_mib, mem_peak_mib: those there


GPU_KEYS = ("t", "gpus", "util_pct", "mem_used_mib", "mem_total_mib", "mem_peak_mib")


def read_watch(text: str) -> Watch:
    """watch.json as the container wrote it (untrusted): only the fields and types status shows."""
    try:
        data = json_loads(text) if text.strip() else {}
    except ValueError:
        return Watch()
    if not isinstance(data, dict):
        return Watch()
    stalled, gpu = data.get("stalled"), data.get("gpu")
    stall = None
    if isinstance(stalled, dict) and _is_number(stalled.get("seconds")):
        at = stalled.get("at")
        stall = Stall(stalled["seconds"], shown(stalled.get("stacks"), 500), shown(stalled.get("action"), 20),
                      at if _is_number(at) else None)
    stalls = max(0, min(data["stalls"], 1000)) if _is_int(data.get("stalls")) else 0
    sample = {k: gpu[k] for k in GPU_KEYS if _is_number(gpu.get(k))} if isinstance(gpu, dict) else None
    return Watch(stall, stalls, sample)


# -- the run ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunState:
    """A run's state as state.sh reads it in the container: the latest run (or the one asked for), every
    live run, the log's tail. `run` None: the container has no runs (or not the one asked for: `latest`)."""

    run: str | None
    path: str = ""
    pid: int | None = None  # the job's session leader (its pid file); None before it is written
    alive: bool = False  # its leader runs, or (no exit record) any process of it does
    exit: int | None = None  # its exit record
    lost: bool = False  # not alive and no exit record: the wrapper vanished (container restart, kill -9)
    orphans: tuple[int, ...] = ()  # processes of a run that is not alive, still running
    stopped: bool = False  # ended by `remote stop` (its mark): its 143 or 137 is no failure of its own
    log_size: int = 0
    now: int = 0  # the container's clock when read (epoch seconds)
    manifest: Manifest = field(default_factory=Manifest)
    tail: str = ""  # the log's last 32 KiB
    live: tuple[LiveRun, ...] = ()  # every live run of the container, this one or not
    watch: Watch = field(default_factory=Watch)
    attempts: tuple[Attempt, ...] = ()  # the wrapper's last 64 attempt lines' records
    latest: tuple[str, ...] = ()  # without `run`, for a run asked for by id: the latest ids there (untrusted)

    @property
    def stalled(self) -> Stall | None:
        return self.watch.stalled

    @property
    def stalls(self) -> int:
        return self.watch.stalls

    @property
    def gpu(self) -> Mapping[str, float] | None:
        return self.watch.gpu

    @property
    def checkpoint(self) -> Checkpoint | None:
        """A resume: the checkpoint the run started from (its manifest's record)."""
        return self.manifest.checkpoint

    @property
    def parent(self) -> str | None:
        """A resume: the run it continues."""
        return self.manifest.parent

    @property
    def attempt(self) -> int | None:
        """The attempt running or last run (the wrapper's restarts count up from 1)."""
        return self.attempts[-1].attempt if self.attempts else None

    @property
    def attempts_max(self) -> int | None:
        """1 + train.restarts as the run's manifest says; None where it does not."""
        restarts = self.manifest.restarts
        return restarts + 1 if restarts is not None else None

    @property
    def final_status(self) -> int:
        """The exit status a task reports for a finished run: the job's own, 1 when it was lost."""
        return 1 if self.lost else (self.exit or 0)


def fields_of(text: str) -> dict[str, str]:
    """The `key=value` lines the job scripts print (state.sh, stop.sh)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_live(text: str) -> tuple[LiveRun, ...]:
    """state.sh's `live=<id>:<pid> ...`: every live run (no exit record, a process of it alive), the latest
    or not; pid None while its wrapper has not written its pid file."""
    out = []
    for item in text.split():
        rid, _, pid = item.rpartition(":")
        if rid:
            out.append(LiveRun(rid, int(pid) if pid.isdigit() else None))
    return tuple(out)


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.lstrip("-").isdigit() and len(text) < 20 else None


def parse_state(text: str) -> RunState:
    """state.sh's output: key=value lines, then the manifest and the log's tail after marker lines."""
    head, _, rest = text.partition("--manifest--\n")
    manifest_text, _, tail = rest.partition("\n--tail--\n")
    f = fields_of(head)
    live = parse_live(f.get("live", ""))
    if not f.get("run"):
        return RunState(None, live=live, latest=tuple(f.get("latest", "").split()))
    exit_text = f.get("exit", "").strip()
    # Alive: its leader runs, or (no exit record) any process of it does: a wrapper that has not written
    # its pid file yet, or was killed while its processes run on.
    alive = f.get("alive") == "1" or (not exit_text and any(r.run == f["run"] for r in live))
    attempts = parse_attempts(f.get("attempts", "").replace(";", "\n"))
    pid = f.get("pid", "").strip()
    return RunState(
        run=f["run"], path=f.get("path", ""), pid=int(pid) if pid.isdigit() and len(pid) < 20 else None,
        alive=alive, exit=_int(exit_text), lost=not alive and not exit_text,
        orphans=tuple(int(p) for p in f.get("marked", "").split() if p.isdigit()) if not alive else (),
        stopped=not alive and bool(exit_text) and f.get("stopped") == "1",
        log_size=_int(f.get("log_size")) or 0, now=_int(f.get("now")) or 0,
        manifest=parse_manifest(manifest_text, attempts), tail=tail[-TAIL_LIMIT:], live=live,
        watch=read_watch(f.get("watch", "")), attempts=attempts)


def live_in(raw: Mapping[str, Any]) -> tuple[LiveRun, ...]:
    """The runs with a live process in a facts probe's answer (part "jobs"), as the launch wrapper counts
    them (no exit record; its leader or any process of it alive)."""
    rj = raw.get("jobs")
    runs = rj.get("runs") if isinstance(rj, dict) else None
    if not isinstance(runs, dict):
        return ()
    return tuple(LiveRun(str(rid), r.get("pid") if _is_int(r.get("pid")) else None) for rid, r in sorted(runs.items())
                 if isinstance(r, dict) and r.get("exists", True) and not r.get("exit")
                 and (r.get("leader_alive") or r.get("marked")))
