"""The public Python API: what `import remote` gives a script, a notebook or a user's own tasks.py.

    with remote.open("hosts.yaml") as fleet:
        ct = fleet.container(200)
        r = ct.exec(["python", "-c", "print(1)"])        # Result
        ct.deploy()                                       # DeployPlan (applied); check=True: what would change
        run = ct.train(detach=True)                       # Run
        for line in run.follow(): ...

Everything here returns data and raises the exception tree of remote.errors; nothing prints or exits.
Progress (the steps a deploy takes, a followed log's lines, dry-run commands) goes to the `progress`
callback given to `open` and to `logging` (logger `remote.api`, a child of `remote`). The command line
(remote/cli.py) and the invoke collection (remote/tasks.py) are faces of this module: a script reaches
whatever they do. docs/library.md documents every public name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError, JobError, RemoteError
from .results import (
    CacheCopy,
    Finding,
    FleetStatus,
    GroupResult,
    HostStatus,
    ImportedCache,
    KnownGood,
    Metric,
    Outcome,
    PulledRun,
    Result,
    RolledBack,
    RunStatus,
    RunSummary,
    Snapshot,
    State,
    Stopped,
)

if TYPE_CHECKING:  # imported where used: `import remote` loads no transport, no yaml
    from .config import Config, ContainerSpec
    from .transport.pct import Container as _PctContainer
    from .transport.session import Session

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", chunk), as the command prints it
T = TypeVar("T")

ALL = "all"


# -- what calls return ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """A push or pull: what arrived, verified by sha256 (a file's hash, a tree's manifest)."""

    direction: str  # "push" | "pull"
    src: str
    dest: str
    files: int
    bytes: int
    seconds: float
    attempts: int = 1
    sha256: str | None = None  # of a single file
    refused: tuple[str, ...] = ()  # members of a pulled tree not written, each "<path>: <why>"
    verified: bool = True  # always: a transfer that does not verify raises TransferError

    def render(self) -> str:
        return self._stats.render() if self._stats is not None else f"{self.direction} {self.src} -> {self.dest}"

    _stats: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Diagnosis:
    """doctor's answer for one container (Container.doctor returns its findings; Fleet.doctor these)."""

    container: int
    host: str
    findings: tuple[Finding, ...]
    error: str | None
    healthy: bool
    _report: Any = field(default=None, repr=False, compare=False)

    def render(self) -> str:
        return self._report.render()

    def to_dict(self) -> dict:
        return self._report.to_dict()


@dataclass(frozen=True)
class DeployPlan:
    """What a deploy changed (applied) or would change (check=True, or a dry run): data, never printed."""

    container: int
    applied: bool
    changed: tuple[str, ...]
    kept: tuple[str, ...]
    saved: tuple[str, ...]  # patches and tarballs of container edits
    drift: tuple[str, ...]  # hand-installed or changed packages
    torch: Mapping[str, Any] | None
    seconds: float
    _summary: Any = field(default=None, repr=False, compare=False)

    @property
    def noop(self) -> bool:
        return not self.changed

    def render(self) -> str:
        return self._summary.render()


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
class GpuReport:
    """`doctor --gpu`: each host's NVIDIA driver and each container's GPU passthrough, as findings."""

    hosts: tuple[Any, ...]
    containers: tuple[Any, ...]

    @property
    def healthy(self) -> bool:
        return bool(self.to_json()["healthy"])

    def render(self) -> str:
        from . import gpudoctor

        return gpudoctor.render(list(self.hosts), list(self.containers))

    def to_json(self) -> dict:
        from . import gpudoctor

        return gpudoctor.to_json(list(self.hosts), list(self.containers))


# -- the fleet: a hosts file, one connection per host --------------------------------------------------

def _emitter(progress: Progress | None) -> Progress:
    def emit(line: str) -> None:
        log.info("%s", line)
        if progress is not None:
            progress(line)
    return emit


def open(source: str | os.PathLike | Mapping[str, Any] | None = None, *, dry: bool = False,
         progress: Progress | None = None, keep: bool = True) -> Fleet:
    """The fleet of a hosts file (a path; None: $REMOTE_HOSTS_FILE, else ./hosts.yaml) or of a config
    built in code (a dict in the hosts file's shape). Bad input raises ConfigError naming the file and key.

    `dry`: mutating commands are described through `progress` instead of run. `keep`: SSH hosts through
    their kept connection (as the command line does), so the next process connects at once."""
    from . import config as cfg

    if isinstance(source, Mapping):
        config = cfg.parse(dict(source), "<dict>")
    else:
        config = cfg.load(os.fspath(source) if source is not None else None)
    return Fleet(config, dry=dry, progress=progress, keep=keep)


class Fleet:
    """The hosts and containers of one config, over one connection per host (closed with the fleet)."""

    config: Config
    dry: bool

    def __init__(self, config: Config, *, dry: bool = False, progress: Progress | None = None, keep: bool = True):
        self.config = config
        self.dry = dry
        self._emit = _emitter(progress)
        self._keep = keep
        self._made: Session | None = None  # made on first use: a fleet that only reads its config connects nothing
        self._shared: dict = {}
        self._groups = 0
        self._lock = threading.Lock()

    # context manager
    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
            self._made = None

    @property
    def _session(self) -> Session:
        with self._lock:
            if self._made is None:
                from .transport.session import Session

                self._made = Session(self.config, dry=self.dry, echo=self._emit, agent=True, keep=self._keep)
            return self._made

    @property
    def file(self) -> str:
        return self.config.file

    @property
    def ids(self) -> list[int]:
        """Every configured container id, in the file's order."""
        return list(self.config.containers)

    def container(self, ctid: int | str | None = None) -> Container:
        """The container `ctid` (None: default_container, $REMOTE_CONTAINER or the only one). An id the
        hosts file does not list raises ConfigError, naming the ones it does."""
        spec = self.config.container(ctid)
        return Container(self, spec)

    def select(self, which: int | str | Sequence[int | str] | None = ALL) -> list[int]:
        """The container ids `which` names: an id, a comma list, a group from `groups:`, `all`, or a list."""
        from .ops import fleet as fleetmod

        if isinstance(which, (list, tuple)):
            which = ",".join(str(w) for w in which)
        return fleetmod.select(self.config, which)

    def containers(self, which: int | str | Sequence[int | str] = ALL) -> Group:
        """Several containers at once, as `-c all` (a group, a comma list or a list of ids)."""
        return Group(self, [self.container(i) for i in self.select(which)])

    @contextlib.contextmanager
    def _grouped(self) -> Iterator[None]:
        """While a Group's calls run: values shared by them (the one lock their deploys resolve)."""
        with self._lock:
            self._groups += 1
        try:
            yield
        finally:
            with self._lock:
                self._groups -= 1
                if not self._groups:
                    self._shared.clear()

    def _shared_value(self, key: str, factory: Callable[[], Any]) -> Any:
        """One object per group call in progress (None outside one)."""
        with self._lock:
            if not self._groups:
                return None
            if key not in self._shared:
                self._shared[key] = factory()
            return self._shared[key]

    # -- the fleet at a glance ------------------------------------------------------------------
    def status(self, which: int | str | Sequence[int | str] | None = None) -> FleetStatus:
        """Each host reachable or not, each container's state and its latest run (the data of `remote status`)."""
        from .ops import fleet as fleetmod
        from .ops.jobs import container_jobs, lock_outliers

        s = self._session
        hosts_ = fleetmod.inventory(s)
        if which is not None:
            chosen = set(self.select(which))
            hosts_ = [type(h)(h.host, h.reachable, h.error, {k: v for k, v in h.containers.items() if k in chosen})
                      for h in hosts_ if any(k in chosen for k in h.containers)]
        jobs = container_jobs(s, hosts_)
        outliers = lock_outliers(jobs, s.config)
        hosts_by_name = s.config.hosts
        jobs = [dataclasses.replace(e, venv_lock_differs=outliers.get(e.container),
                                    node=hosts_by_name[e.host].node_name if e.host in hosts_by_name else None)
                for e in jobs]
        return FleetStatus(tuple(HostStatus(h.host, h.reachable, h.error, s.kept_note(h.host), dict(h.containers),
                                            hosts_by_name[h.host].node_name, hosts_by_name[h.host].cluster)
                                 for h in hosts_), tuple(jobs))

    def doctor(self, which: int | str | Sequence[int | str] | None = None, *, fresh: bool = False) -> list[Diagnosis]:
        """doctor on these containers at once (default: every one): one Diagnosis each."""
        from . import doctor as dr
        from .transport.session import Session

        ids = self.select(ALL if which is None else which)
        # One probe per container: plain pct exec is one round trip, an agent would add its own start-up.
        with Session(self.config, agent=False, keep=True, echo=self._emit) as s:
            return [_diagnosis(r) for r in dr.diagnose(s, ids, fresh=fresh)]

    def doctor_gpu(self, which: int | str | Sequence[int | str] | None = None) -> GpuReport:
        """The GPU part of doctor on these containers (default: every one) and their hosts: one probe per
        host, one per container, all at once."""
        from . import gpudoctor
        from .transport.session import Session

        with Session(self.config, agent=False, keep=True, echo=self._emit) as s:
            hosts, cts = gpudoctor.diagnose(s, self.select(which) if which else list(self.config.containers))
        return GpuReport(tuple(hosts), tuple(cts))

    # -- compile caches ---------------------------------------------------------------------------
    def caches(self, which: int | str | Sequence[int | str] | None = None) -> list[CacheHolding]:
        """What each container's compile cache holds (default: every container), all at once."""
        from .ops import cachecopy

        ids = self.select(ALL if which is None else which)
        out = []
        for ctid, h in zip(ids, cachecopy.inventory(self._session, ids), strict=True):
            if isinstance(h, RemoteError):
                out.append(CacheHolding(ctid, error=str(h)))
                continue
            out.append(CacheHolding(h.ctid, h.folder, len(h.files), h.bytes, h.passport, h.serves_itself,
                                    "" if h.serves_itself or not h.files else cachecopy.pp.describe(h.passport, h.want)))
        return out

    def copy_cache(self, src: int | str, which: int | str | Sequence[int | str] | None = None, *,
                   fail_fast: bool = False, prefix_output: bool = False) -> GroupResult[CacheCopy]:
        """src's compile cache into each of these containers (src itself left out) whose passport matches:
        a GroupResult of CacheCopy (a mismatch fails that container with a WarmupError naming the fields)."""
        ctid = self.config.container(src).ctid
        ids = [i for i in self.select(which) if i != ctid]
        group = Group(self, [self.container(i) for i in ids])
        self._session.transport(self.config.containers[ctid].host)
        return group.map(lambda ct: ct.copy_cache(ctid), fail_fast=fail_fast, prefix_output=prefix_output)

    def warm_groups(self, which: int | str | Sequence[int | str] = ALL, *, fail_fast: bool = False,
                    parallel: bool = False, prefix_output: bool = False) -> GroupResult[None]:
        """Warm several containers as `remote warmup -c LIST` does: one warmup per group of containers whose
        cache passports would match, its cache copied to the rest; the others warmed on their own. A
        GroupResult per container (values None; a failure's error is a WarmupError with its message)."""
        from .errors import WarmupError
        from .ops import cachecopy
        from .ops import fleet as fleetmod

        ids = self.select(which)
        s = self._session
        for i in ids:  # every host's transport made here, in one thread: Session's map is not locked
            s.transport(self.config.containers[i].host)
        with self._grouped():
            outcomes = cachecopy.warm_fleet(s, ids, fail_fast=fail_fast, parallel=parallel, echo=self._emit,
                                            runner=fleetmod.run_each if prefix_output else _run_quiet)
        result: GroupResult[None] = GroupResult()
        for o in outcomes:
            result[o.ctid] = Outcome(o.ctid, o.host, None, WarmupError(o.message) if o.result == "failed" else None,
                                     o.seconds, o.result == "skipped", o.code, o.message)
        return result

    def train_nodes(self, which: int | str | Sequence[int | str], *, force: bool = False, warmup: bool = False,
                    follow: bool = True) -> int:
        """One multi-node run across these containers (train.command formatted per node); with follow,
        until it ends: its exit status (0 when detached)."""
        from .ops import multinode

        result = multinode.train(self._session, self.select(which), force=force, warmup=warmup, follow=follow)
        return multinode.final_status(result) if result else 0

    def follow_nodes(self, ctid: int, run: str | None = None) -> int | None:
        """Follow a multi-node run's logs merged (progress: each line); its exit status, or None when the
        run is on one node only (then Run.follow is the way)."""
        from .ops import multinode

        run_id, nodes = multinode.nodes_of(self._session, ctid, run)
        if len(nodes) < 2 or run_id is None:
            return None
        return multinode.final_status(multinode.follow_run(self._session, nodes, run_id))

    def disconnect(self, host: str | None = None) -> list[int]:
        """End this hosts file's kept connections now (one host's, or every one): the pids ended."""
        from .transport import keeper

        if host is not None and host not in self.config.hosts:
            raise ConfigError(self.file, "--host", f"unknown host {host!r}")
        return keeper.disconnect(self.file, host)

    def settings(self, which: int | str | Sequence[int | str] | None = None) -> list[dict]:
        """The settings each container resolves to (the hosts file's sections with its overrides), as data."""
        from . import configview

        ids = self.select(ALL if which is None else which)
        return [configview.resolved(self.config, self.config.containers[i]) for i in ids]

    def render_settings(self, ids: list[int], why: str) -> str:
        from . import configview

        return configview.render(self.config, [self.config.containers[i] for i in ids], why)


def _diagnosis(report: Any) -> Diagnosis:
    return Diagnosis(report.ctid, report.host, tuple(report.findings), report.error, report.healthy, report)


class Group:
    """Several containers of a fleet: each call runs per container (at most `max_parallel` per host at
    once) and returns a GroupResult; one failing does not stop the others unless fail_fast."""

    def __init__(self, fleet: Fleet, members: list[Container]):
        self.fleet, self.members = fleet, members

    @property
    def ids(self) -> list[int]:
        return [c.id for c in self.members]

    def __iter__(self) -> Iterator[Container]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def map(self, fn: Callable[[Container], T], *, fail_fast: bool = False,
            prefix_output: bool = False) -> GroupResult[T]:
        """fn(container) for each member at once: a GroupResult of their values and errors. With fail_fast,
        containers not started yet are skipped after the first failure. prefix_output (for a command
        line): what fn prints goes out line by line with `[id] ` in front, a progress line every 15 s on
        stderr; without it nothing is printed."""
        from .ops import fleet as fleetmod

        by_id = {c.id: c for c in self.members}
        for c in self.members:  # every host's transport made here, in one thread: Session's map is not locked
            self.fleet._session.transport(c.spec.host)
        values: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}

        def one(ctid: int) -> None:
            try:
                values[ctid] = fn(by_id[ctid])
            except BaseException as exc:  # noqa: BLE001 -- recorded as this container's outcome
                errors[ctid] = exc
                raise

        runner = fleetmod.run_each if prefix_output else _run_quiet
        with self.fleet._grouped():
            outcomes = runner(self.fleet.config, self.ids, one, fail_fast=fail_fast, progress=prefix_output)
        result: GroupResult[T] = GroupResult()
        for o in outcomes:
            result[o.ctid] = Outcome(o.ctid, o.host, values.get(o.ctid), errors.get(o.ctid), o.seconds,
                                     o.result == "skipped", o.code, o.message)
        return result

    def exec(self, argv: Sequence[str] | str, **kwargs: Any) -> GroupResult[Result]:
        return self.map(lambda c: c.exec(argv, **kwargs))

    def deploy(self, **kwargs: Any) -> GroupResult[DeployPlan]:
        return self.map(lambda c: c.deploy(**kwargs))

    def warmup(self, **kwargs: Any) -> GroupResult[Warmup]:
        return self.map(lambda c: c.warmup(**kwargs))

    def doctor(self, **kwargs: Any) -> GroupResult[list[Finding]]:
        return self.map(lambda c: c.doctor(**kwargs))

    def push(self, src: str | os.PathLike, dest: str, **kwargs: Any) -> GroupResult[Transfer]:
        return self.map(lambda c: c.push(src, dest, **kwargs))

    def pull(self, src: str, dest: str | os.PathLike, **kwargs: Any) -> GroupResult[Transfer]:
        """Each container's files into dest/<id>/: never two containers' files in one place."""
        return self.map(lambda c: c.pull(src, os.path.join(os.fspath(dest), str(c.id)), **kwargs))


def _run_quiet(config: Config, ids: list[int], fn: Callable[[int], None], *, fail_fast: bool,
               progress: bool) -> list:
    """ops.fleet.run_each without its output routing (for scripts: nothing printed)."""
    from .ops.fleet import Outcome as FleetOutcome
    from .ops.fleet import _failure as failure

    limits = {name: threading.BoundedSemaphore(h.max_parallel) for name, h in config.hosts.items()}
    outcomes = {i: FleetOutcome(i, config.containers[i].host.name, "skipped") for i in ids}
    stop = threading.Event()

    def worker(ctid: int) -> None:
        out = outcomes[ctid]
        with limits[out.host]:
            if stop.is_set():
                return
            start = time.monotonic()
            try:
                fn(ctid)
                out.result = "ok"
            except BaseException as exc:  # noqa: BLE001 -- kept in the GroupResult
                out.result = "failed"
                out.code, out.message = (130, "interrupted") if isinstance(exc, KeyboardInterrupt) else failure(exc)
                if fail_fast:
                    stop.set()
            finally:
                out.seconds = time.monotonic() - start

    threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"remote-{i}") for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    return [outcomes[i] for i in ids]


# -- one container ---------------------------------------------------------------------------------------

class Container:
    """One container of a fleet (`fleet.container(200)`)."""

    fleet: Fleet
    spec: ContainerSpec  # its settings, as the hosts file resolves them (remote.config)

    def __init__(self, fleet: Fleet, spec: ContainerSpec):
        self.fleet, self.spec = fleet, spec

    def __repr__(self) -> str:
        return f"<remote.Container {self.id} on {self.host}>"

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close its fleet's connections (a container made on its own, as remote.fabric makes one)."""
        self.fleet.close()

    @property
    def id(self) -> int:
        return self.spec.ctid

    @property
    def host(self) -> str:
        """The host entry it is reached through: in a cluster, the node holding it (its guest list read once)."""
        return self._s.config.containers[self.id].host.name if self.spec.cluster else self.spec.host.name

    @property
    def _s(self) -> Session:
        return self.fleet._session

    def _ct(self, venv_on_path: bool = True) -> _PctContainer:
        return self._s.container(self.id, venv_on_path=venv_on_path)

    # -- commands ------------------------------------------------------------------------------------
    def exec(self, argv: Sequence[str] | str, *, timeout: float | None = None, check: bool = False,
             on_output: OutputCallback | None = None, job_env: bool = True) -> Result:
        """Run argv (a list: as it is, no shell; a str: a bash command line) in the container; once deployed,
        in the checkout with the job's environment (venv, compile cache, train.env), else (or with
        job_env=False) from /root with the venv first on PATH, as `pct exec` would.

        Returns the command's own exit status and output; with check, a non-zero one raises CommandError.
        `on_output(kind, chunk)` gets its output as it comes (then Result holds what was not streamed)."""
        from .ops import jobenv

        ct = self._ct()
        args = ["bash", "-c", argv] if isinstance(argv, str) else list(argv)
        kwargs: dict[str, Any] = dict(timeout=float(timeout) if timeout else None, check=check, on_output=on_output)
        # Deployed or not, and the job's environment, are decided in the container: one command, no probe first.
        r = jobenv.run_as_deployed(ct, self.spec, args, **kwargs) if job_env else ct.run(args, **kwargs)
        return dataclasses.replace(r, argv=tuple(args))  # the user's argv, not the wrapper that ran it

    def shell(self) -> int:
        """An interactive shell in the container (needs a terminal): its exit status."""
        from .ops.interactive import open_shell
        from .transport.session import Session

        with Session(self.fleet.config) as s:  # a pty session of its own; no agent to start for one shell
            return open_shell(s, self.id, echo=self.fleet._emit)

    # -- files ---------------------------------------------------------------------------------------
    def push(self, src: str | os.PathLike, dest: str, *, attempts: int = 3,
             on_bytes: Callable[[int, int], None] | None = None) -> Transfer:
        """Copy a local file or folder into the container: streamed, verified by sha256, resumed after a
        lost connection. `on_bytes(done, total)` reports progress."""
        from .errors import TransferError
        from .ops import files

        if not (os.path.isfile(src) or os.path.isdir(src)):
            raise TransferError(f"cannot push {os.fspath(src)}: no such file or folder on this machine")
        return _transfer(files.push(self._ct(), src, dest, attempts=attempts, progress=on_bytes))

    def pull(self, src: str, dest: str | os.PathLike, *, attempts: int = 3,
             on_bytes: Callable[[int, int], None] | None = None) -> Transfer:
        """Copy a file or folder out of the container: streamed, verified by sha256, resumed after a lost
        connection; tar members that would land outside `dest` are refused (Transfer.refused)."""
        from .ops import files

        return _transfer(files.pull(self._ct(), src, dest, attempts=attempts, progress=on_bytes))

    # -- deploy and warmup ---------------------------------------------------------------------------
    def deploy(self, *, check: bool = False, allow_dirty: bool = False, rollback: bool = False,
               force: bool = False) -> DeployPlan:
        """Make the venv and checkout exactly what the hosts file pins (a no-op when they are). check=True:
        change nothing, return what would change (and any drift). Refused (BusyError) while a job runs
        there, unless force."""
        from .ops.deploy import LockOnce, deploy

        lock = self.fleet._shared_value("deploy-lock", LockOnce)  # one resolved lock for the fleet's deploys
        s = deploy(self._s, self.id, allow_dirty=allow_dirty, check=check, rollback=rollback, force=force,
                   echo=self.fleet._emit, lock=lock)
        return DeployPlan(s.ctid, not (check or s.dry), tuple(s.changed), tuple(s.kept), tuple(s.saved), tuple(s.drift),
                          s.torch, s.seconds, s)

    def warmup(self, *, devices: Sequence[str] | None = None, parallel: bool = False) -> Warmup:
        """Compile the training into the persistent compile cache, one device at a time (or in parallel).
        Without devices, outside a Group call, and with no warmup for what it runs now: where another
        container of the hosts file holds a cache made for exactly that, it is copied instead (.copied)."""
        from .ops import cachecopy
        from .ops import warmup as wm

        if devices or self.fleet._groups:
            results = wm.warmup(self._s, self.id, parallel=parallel, devices=list(devices) if devices else None,
                                echo=self.fleet._emit)
        else:
            got = cachecopy.warmup_or_copy(self._s, self.id, parallel=parallel, echo=self.fleet._emit)
            if isinstance(got, CacheCopy):
                return Warmup(self.id, (), got.seconds, got.files, got.bytes, 0, 0, False, got)
            results = got
        return Warmup(self.id, tuple(r.device for r in results), sum(r.end - r.start for r in results),
                      sum(r.new_files for r in results), sum(r.new_bytes for r in results),
                      sum(r.hits for r in results), sum(r.misses for r in results), any(r.report for r in results))

    def copy_cache(self, src: int | str) -> CacheCopy:
        """Copy container src's compile cache into this one: only the files it lacks, sha256-verified;
        refused (WarmupError, naming each field) unless src's passport is what this container needs."""
        from .ops import cachecopy

        return cachecopy.copy(self._s, self.fleet.config.container(src).ctid, self.id, echo=self.fleet._emit)

    def export_cache(self, path: str | os.PathLike) -> Path:
        """Write the container's compile cache folder to a local bundle (tar.gz)."""
        from .ops import warmup as wm

        wm.export_cache(self._s, self.id, os.fspath(path), echo=self.fleet._emit)
        return Path(path)

    def import_cache(self, path: str | os.PathLike) -> ImportedCache:
        """Load a bundle made by export_cache into the container's cache (refused if versions differ);
        .refused: the members not imported, with why."""
        from .ops import warmup as wm

        return wm.import_cache(self._s, self.id, os.fspath(path), echo=self.fleet._emit)

    # -- runs ----------------------------------------------------------------------------------------
    def train(self, *, detach: bool = True, force: bool = False, warmup: bool = False) -> Run:
        """Preflight, then start the training job detached: the Run. detach=False: follow its log (lines to
        the progress callback) until it ends, record a known-good where it meets the baseline, then return.
        Refused (BusyError) while a job runs there, unless force; JobError when the preflight fails."""
        from .ops import jobs

        ct, spec, emit = self._ct(), self.spec, self.fleet._emit
        run_id, _ = jobs.start(self._s, self.id, force=force, warmup=warmup, echo=emit)
        if self.fleet.dry:
            return Run(self, run_id)
        run = Run(self, run_id)
        if not detach:
            try:
                final = jobs.show_log(ct, spec, run_id, follow=True, echo=emit)
            except KeyboardInterrupt:
                emit(f"-- stopped following; run {run_id} keeps running. `remote logs --follow` resumes, "
                     "`remote stop` ends it")
                raise
            from .runs.knowngood import after_run

            after_run(self._s, ct, spec, final, echo=emit)
            run._state = jobs.run_status(final)
        return run

    def run(self, run_id: str | None = None) -> Run:
        """A run of this container by id (None or "latest": the latest). UnknownRun when it has no such run."""
        from .ops import jobs

        st = jobs.run_status(jobs.state(self._ct(), self.spec, run_id))
        if st.run is None:
            raise JobError(f"container {self.id} has no runs in {self.spec.train.run_dir}: start one with train()")
        r = Run(self, st.run)
        r._state = st
        return r

    def runs(self, limit: int = 20) -> list[RunSummary]:
        """The latest runs: id, start, state, exit status, throughput, command (newest first)."""
        from .runs.listing import list_runs

        return list_runs(self._ct(), self.spec, limit=limit)

    def render_runs(self, found: list[RunSummary]) -> str:
        from .runs.listing import render

        return render(found, self.spec)

    def log(self, run_id: str | None = None, *, follow: bool = False) -> RunStatus:
        """A run's log to the progress callback (what is there now; with follow, until the job ends): the
        run's state at the end."""
        from .ops import jobs

        return jobs.run_status(jobs.show_log(self._ct(), self.spec, run_id, follow=follow, echo=self.fleet._emit))

    def stop(self, run_id: str | None = None, *, grace: int = 10, nodes: bool = True) -> Stopped:
        """Stop a run (None: every live run, and the latest's leftovers) and verify nothing of it is left;
        a multi-node run is stopped on its other nodes too (unless nodes=False)."""
        from .ops.jobs import stop as stop_job

        got = stop_job(self._ct(), self.spec, run_id, grace=int(grace))
        others = [n for n in got.nodes or () if n != self.id and n in self.fleet.config.containers]
        if others and nodes and not self.fleet.dry:
            from .ops.multinode import stop_nodes

            for ctid, one in stop_nodes(self._s, others, got.run, grace=int(grace)).items():
                if isinstance(one, BaseException):
                    raise one
                assert isinstance(one, Stopped)
                self.fleet._emit(f"node {ctid}: " + ("stopped" if one.was_alive else "was not running")
                                 + ", verified: no process of it is left")
        return got

    def known_good(self, run_id: str | None = None) -> KnownGood:
        """Record a finished run and the container's facts as its known-good (for doctor): the record."""
        from .runs.knowngood import record_run

        return record_run(self._s, self.id, run_id)

    def known_good_path(self) -> str:
        from .runs.knowngood import path_of

        return path_of(self.spec)

    def report(self, run_id: str | None = None, out: str | os.PathLike | None = None) -> Path:
        """Write one self-contained HTML file of a run: its path."""
        from .runs.report import write

        return write(self._s, self.id, run_id, os.fspath(out) if out is not None else None)

    def pull_run(self, dest: str | os.PathLike, run_id: str | None = None, *,
                 on_bytes: bool = False) -> PulledRun:
        """A run's outputs, log, manifest and watch files into dest/<run id>/."""
        from .ops.jobs import pull_run

        return pull_run(self._s, self.id, run_id, os.fspath(dest), progress=on_bytes, echo=self.fleet._emit)

    # -- Proxmox snapshots ---------------------------------------------------------------------------
    def snapshots(self) -> list[Snapshot]:
        """The container's Proxmox snapshots (`pct listsnapshot`), oldest first."""
        from .ops import snapshots as snaps

        return snaps.list_snapshots(self._s, self.id)

    def rollback(self, snapshot: str | None = None, *, force: bool = False) -> RolledBack:
        """Roll the whole container back to a snapshot (default: the newest of remote's own), then start it
        again. BusyError while a run is live unless force; an unknown snapshot is a bad input (exit 2)."""
        from .ops import snapshots as snaps

        return snaps.rollback(self._s, self.id, snapshot=snapshot, force=force, echo=self.fleet._emit)

    # -- health --------------------------------------------------------------------------------------
    def doctor(self, *, fresh: bool = False) -> list[Finding]:
        """What differs from what deploy made and from the last known-good run (empty: healthy). A container
        that cannot be probed raises (ContainerNotRunning, TransportError, ...)."""
        from . import doctor as dr

        facts = dr.gather(self._s.container(self.id, venv_on_path=False), self.spec, fresh=fresh)
        report = dr.Report(self.id, self.host, dr.findings(facts, self.spec), facts)
        return list(_diagnosis(report).findings)


def _transfer(stats: Any) -> Transfer:
    return Transfer(stats.direction, stats.src, stats.dest, stats.files, stats.total, stats.seconds,
                    stats.attempts, stats.sha256, tuple(stats.refused), True, stats)


# -- a run -------------------------------------------------------------------------------------------

class Run:
    """A training run of a container: `.id`, `.state`, `.exit_code`; follow, wait, metrics, stop."""

    POLL = 1.0  # seconds between state reads in wait()
    id: str  # the run id (its folder under train.run_dir)
    container: Container

    def __init__(self, container: Container, run_id: str):
        self.container, self.id = container, run_id
        self._state: RunStatus | None = None

    def __repr__(self) -> str:
        return f"<remote.Run {self.id} in {self.container.id}>"

    def refresh(self) -> RunStatus:
        """Read the run's state again (one round trip) and return it."""
        from .ops import jobs

        self._state = jobs.run_status(jobs.state(self.container._ct(), self.container.spec, self.id))
        return self._state

    def _st(self) -> RunStatus:
        return self._state if self._state is not None else self.refresh()

    @property
    def state(self) -> State:
        """"running", "exited", "stopped" (by stop()) or "lost" (ended without an exit record), read now:
        what runs() says of it."""
        return self.refresh().state

    @property
    def exit_code(self) -> int | None:
        """The job's exit status once it has ended (None while it runs; 1 when it was lost)."""
        st = self._st()
        if st.alive:
            st = self.refresh()
        return st.exit_code

    def follow(self, *, offset: int = 0) -> Iterator[str]:
        """The log's lines from `offset` until the job ends, as they come; a dropped connection is
        re-established and the log resumes at the byte where it stopped. Breaking out stops following
        (the job runs on)."""
        from .ops import logs

        ct = self.container._ct()
        st = self._st()
        lines: queue.Queue = queue.Queue()
        done = threading.Event()
        splitter = logs.LineSplitter()

        class Closed(Exception):
            pass

        def on_bytes(chunk: bytes) -> None:
            if done.is_set():
                raise Closed()
            for line in splitter.feed(chunk):
                lines.put(line)

        def pump() -> None:
            try:
                logs.follow(ct, st.path, self.id, offset=offset, on_bytes=on_bytes, follow_=True,
                            reconnect=ct.transport.close, echo=self.container.fleet._emit)
                for line in splitter.flush():
                    lines.put(line)
                lines.put(None)
            except BaseException as exc:  # noqa: BLE001 -- raised in the reader's thread
                lines.put(exc)

        t = threading.Thread(target=pump, daemon=True, name=f"remote-follow-{self.id}")
        t.start()
        try:
            while True:
                item = lines.get()
                if item is None:
                    break
                if isinstance(item, Closed):
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            done.set()
        self._state = None

    def wait(self, timeout: float | None = None) -> int:
        """Block until the job ends: its exit status (1 when it was lost). JobError after `timeout` seconds."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.exit_code
            if code is not None:
                return code
            if end is not None and time.monotonic() >= end:
                raise JobError(f"run {self.id} in container {self.container.id} still running after {timeout:g}s")
            time.sleep(self.POLL)

    def metrics(self) -> list[Metric]:
        """The values of the run's metrics.jsonl, in order; [] before the first. Lines that are not JSON
        objects are skipped (the container's file is untrusted)."""
        from .ops.logs import read_metrics

        return read_metrics(self.container._ct(), self._st().path)

    def stop(self, *, grace: int = 10) -> Stopped:
        """TERM the job, KILL after `grace` s, and verify that nothing of it is left."""
        got = self.container.stop(self.id, grace=grace)
        self._state = None
        return got


# -- without a fleet: a hosts file to start from, kept connections, terminal progress -----------------------

@dataclass(frozen=True)
class HostsFile:
    """What write_hosts_file wrote: the file, the host's name, the containers found (id, name, state)."""

    path: str
    host: str
    containers: tuple[tuple[int, str, str], ...]


def write_hosts_file(address: str, *, out: str | os.PathLike | None = None, port: int | None = None,
                     user: str | None = None, key_file: str | None = None, known_hosts: str | None = None,
                     pct: str | None = None, force: bool = False, sudo: bool = False) -> HostsFile:
    """Connect to a Proxmox host, read `pct list` and each container's hostname, and write a commented
    hosts file listing them (never over an existing file without force). ConfigError for a missing
    key or known_hosts file; RemoteError when the host shows no containers. sudo: log in as a non-root user
    whose sudo rule allows pct (the file says `sudo: true`; sudoers_dropin() prints that rule)."""
    from . import config as cfg
    from . import sudo as sudomod
    from .ops import hostsinit

    target = os.fspath(out) if out is not None else cfg.find_file(None)
    hostsinit.check_target(target, force)
    for flag, path in (("--key-file", key_file), ("--known-hosts", known_hosts)):
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise ConfigError(flag, "", f"{path}: no such file")
    key = os.path.abspath(os.path.expanduser(key_file)) if key_file else None
    known = os.path.abspath(os.path.expanduser(known_hosts)) if known_hosts else None
    given = {"port": port, "user": user, "pct": pct, "sudo": True if sudo else None, "key_file": key,
             "known_hosts": known}
    # Port and user not given: ~/.ssh/config's for the address, else 22 and root (as the hosts file will).
    host = cfg.Host(name=hostsinit.host_name(address), address=address, port=port, user=user,
                    key_file=key, known_hosts=known, pct=sudomod.pct_command(pct or "pct", sudo), sudo=sudo,
                    pct_path=pct or "pct")
    found = hostsinit.read_host(host)
    cluster = hostsinit.read_cluster(host)
    if cluster is not None:  # a cluster node: every container of the cluster, the others' from its guest list
        mine = {c[0] for c in found}
        found += [(ctid, cluster.states.get(ctid, ""), "", []) for ctid in sorted(cluster.node_of) if ctid not in mine]
    if not found:
        raise RemoteError(f"`pct list` on {address} shows no containers: create one first (pct create), "
                          "then run remote init again")
    hostsinit.write(target, hostsinit.render(host, given, found, cluster), force)
    return HostsFile(target, host.name, tuple((c[0], c[1], c[2]) for c in found))


def sudoers_dropin(user: str, hosts: str | os.PathLike | None = None) -> str:
    """The sudoers drop-in (for /etc/sudoers.d/) that lets `user` run what remote needs on a `sudo: true`
    host: the host programs at their exact paths, each with only the arguments remote gives it (pct's path
    from the hosts file's hosts, and only its containers, when one is given)."""
    from . import config as cfg
    from . import sudo as sudomod

    if not hosts:
        return sudomod.sudoers(user)
    config = cfg.load(os.fspath(hosts))
    return sudomod.sudoers(user, [sudomod.pct_path(h.pct_path or "pct") for h in config.hosts.values()],
                           sorted(config.containers))


def disconnect(hosts: str | os.PathLike | None = None, host: str | None = None) -> list[int]:
    """End the kept connections of a hosts file (one host's, or every one) now: the pids ended. Without
    `host` the file is not read (a broken file's connections can still be ended)."""
    from . import config as cfg
    from .transport import keeper

    config_file = cfg.find_file(os.fspath(hosts) if hosts is not None else None)
    if host is not None and host not in cfg.load(config_file).hosts:
        raise ConfigError(config_file, "--host", f"unknown host {host!r}")
    return keeper.disconnect(config_file, host)


def progress_printer(label: str) -> Callable[[int, int], None]:
    """An on_bytes callback for push/pull that draws progress on stderr (for a command line, not a library)."""
    from .ops import files

    return files.ProgressPrinter(label)


# -- text the command line shows: one definition each, shared with the library's own messages ------------

def known_good_label(record: Mapping[str, Any] | None) -> str:
    """A known-good record as doctor names it: `known-good run ID, VALUE UNIT` ("" for none)."""
    from .doctor import known_good_label as label

    return label(dict(record) if record else None)


def passport_line(passport: Mapping[str, Any]) -> str:
    """A compile cache's passport in one line (escaped), as `remote cache` and doctor show it."""
    from .doctor import passport_line as line

    return line(dict(passport))


def doctor_document(diagnoses: Sequence[Diagnosis]) -> dict[str, Any]:
    """`remote doctor --json` (docs/guide/doctor.md): the schema's version, whether all are healthy, each container's."""
    from .doctor import SCHEMA_VERSION

    return {"schema": SCHEMA_VERSION, "healthy": all(d.healthy for d in diagnoses),
            "containers": [d.to_dict() for d in diagnoses]}
