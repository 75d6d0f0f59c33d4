"""A fleet's core: its config, its session, where its progress goes (the `_Emitter`), and what it does on
many containers at once (status, doctor, caches, warm_groups, multi-node runs). Containers and groups
hold this; remote.api.fleet.Fleet adds the handles (container, containers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..events import Event, Sink
from ..results import CacheHolding, Diagnosis, FleetStatus, GpuReport, GroupResult, HostStatus, Outcome

if TYPE_CHECKING:  # imported where used: `import remote` loads no transport, no yaml
    from ..config import Config
    from ..gpudoctor import MoveReport
    from ..ops.session import Session, TransportFactory

log = logging.getLogger("remote.api")

Progress = Callable[[str], None]
ALL = "all"
PROGRESS_EVERY = 15.0  # seconds between a group's progress lines (prefix_output)


class _Emitter:
    """Where a fleet's operations report: each typed event (remote.events) to `logging` and to `progress` as
    its line, itself to `events`; and the step each container is at, for a group's progress line."""

    def __init__(self, progress: Progress | None, events: Sink | None):
        self.progress, self.events = progress, events
        self.steps: dict[int, str] = {}
        self.errors: list[Exception] = []  # what the callbacks raised (caught: see _call)

    def event(self, event: Event) -> None:
        """An event typed at its source (remote.target): logged, its line to `progress`, itself to `events`."""
        from ..events import StepStarted

        log.info("%s", event.line)
        if isinstance(event, StepStarted) and event.container is not None:
            self.steps[event.container] = event.step
        if self.progress is not None:
            self._call(self.progress, event.line)
        if self.events is not None:
            self._call(self.events, event)

    def _call(self, callback, arg) -> None:
        """The caller's progress/events callback: what it raises is logged and kept in `errors`, never the end of
        the operation that reported (a deploy between its snapshot and its swap)."""
        try:
            callback(arg)
        except Exception as exc:
            log.warning("remote: the progress/events callback raised (%s: %s); the operation goes on",
                        type(exc).__name__, exc, exc_info=True)
            self.errors.append(exc)

    def ended(self, o: Outcome[Any]) -> None:
        """A container's part of a group call ended: Done or Failed to the events callback (text has its
        summary table instead)."""
        from ..events import Done, Failed

        if self.events is None or o.skipped:
            return
        if o.error is None:
            self._call(self.events, Done(o.container, f"container {o.container}: done in {o.seconds:.1f}s", o.seconds))
        else:
            self._call(self.events, Failed(o.container, o.message, o.exit_code, o.seconds))


class FleetBase:
    """What a fleet is without its containers' handles: its config, its session (one connection per host),
    where progress goes, and what it does on many containers at once. remote.api.Fleet adds container()
    and containers()."""

    config: Config
    dry: bool

    def __init__(self, config: Config, *, dry: bool = False, progress: Progress | None = None, keep: bool = True,
                 events: Sink | None = None, transport: TransportFactory | None = None):
        self.config = config
        self.dry = dry
        self._emit = _Emitter(progress, events)
        self._keep = keep
        self._transport = transport  # each host's transport (a test's MockTransport); None: SSH, or local
        self._made: Session | None = None  # made on first use: a fleet that only reads its config connects nothing
        self._shared: dict = {}
        self._groups = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
            self._made = None

    @property
    def _session(self) -> Session:
        with self._lock:
            if self._made is None:
                from ..ops.session import open_session

                self._made = open_session(self.config, dry=self.dry, agent=True, keep=self._keep,
                                          events=self._emit.event, transport=self._transport)
            return self._made

    @property
    def file(self) -> str:
        return self.config.file

    @property
    def ids(self) -> list[int]:
        """Every configured container id, in the file's order."""
        return list(self.config.containers)

    def select(self, which: int | str | Sequence[int | str] | None = ALL) -> list[int]:
        """The container ids `which` names: an id, a comma list, a group from `groups:`, `all`, or a list."""
        from ..ops import fleet as fleetmod

        if isinstance(which, (list, tuple)):
            which = ",".join(str(w) for w in which)
        return fleetmod.select(self.config, which)

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

    def _watching(self, prefix_output: bool) -> dict[str, Any]:
        """What a group call does as its containers end and while they run, for a command line
        (prefix_output): a failure's message as an Output event of its container, and every PROGRESS_EVERY
        seconds a Progress event of what each container is doing. Without it: only each container's Done
        or Failed event, to the events callback."""
        if not prefix_output:
            return {"on_done": self._emit.ended}
        from ..events import Output, Progress
        from ..naming import printable

        last = [time.monotonic()]

        def on_done(o: Outcome[Any]) -> None:
            self._emit.ended(o)
            if o.error is not None and o.message:
                self._emit.event(Output(o.container, printable(o.message, lines=True)))

        def on_tick(running: dict[int, float]) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY:
                return
            last[0] = now
            doing = tuple((c, self._emit.steps.get(c, "started"), now - since) for c, since in sorted(running.items()))
            self._emit.event(Progress(None, "-- in progress: " + "; ".join(
                f"{c}: {step[:60]} ({seconds:.0f}s)" for c, step, seconds in doing), doing))

        return {"on_done": on_done, "on_tick": on_tick}

    # -- the fleet at a glance ------------------------------------------------------------------
    def status(self, which: int | str | Sequence[int | str] | None = None) -> FleetStatus:
        """Each host reachable or not, each container's state and its latest run (the data of `remote status`)."""
        from ..cluster import lookup_of
        from ..ops import fleet as fleetmod
        from ..ops.jobs import container_jobs, lock_outliers

        s = self._session
        hosts_ = fleetmod.inventory(s)
        if which is not None:
            chosen = set(self.select(which))
            hosts_ = [type(h)(h.host, h.reachable, h.error, {k: v for k, v in h.containers.items() if k in chosen})
                      for h in hosts_ if any(k in chosen for k in h.containers)]
        jobs = container_jobs(s, hosts_)
        outliers = lock_outliers(jobs, s.config)
        hosts_by_name = s.config.hosts  # each container under the node holding it (a cluster's: remote.cluster)
        lookup = lookup_of(s.config)
        node = lookup.node_of if lookup else (lambda host: host.node_name)  # the name a host gave, where asked
        jobs = [dataclasses.replace(e, venv_lock_differs=outliers.get(e.container),
                                    node=node(hosts_by_name[e.host]) if e.host in hosts_by_name else None)
                for e in jobs]
        return FleetStatus(tuple(HostStatus(h.host, h.reachable, h.error, s.kept_note(h.host), dict(h.containers),
                                            node(hosts_by_name[h.host]), hosts_by_name[h.host].cluster)
                                 for h in hosts_), tuple(jobs))

    def doctor(self, which: int | str | Sequence[int | str] | None = None, *, fresh: bool = False) -> list[Diagnosis]:
        """doctor on these containers at once (default: every one): one Diagnosis each."""
        from .. import doctor as dr
        from ..ops.session import open_session

        ids = self.select(ALL if which is None else which)
        # One probe per container: plain pct exec is one round trip, an agent would add its own start-up.
        with open_session(self.config, agent=False, keep=self._keep, events=self._emit.event,
                          transport=self._transport) as s:
            return dr.diagnose(s, ids, fresh=fresh)

    def doctor_gpu(self, which: int | str | Sequence[int | str] | None = None) -> GpuReport:
        """The GPU part of doctor on these containers (default: every one) and their hosts: one probe per
        host, one per container, all at once."""
        from .. import gpudoctor
        from ..ops.session import open_session

        with open_session(self.config, agent=False, keep=self._keep, events=self._emit.event,
                          transport=self._transport) as s:
            return gpudoctor.diagnose(s, self.select(which) if which else list(self.config.containers))

    def doctor_gpu_move(self, ctid: int | str, node: str) -> MoveReport:
        """Before moving container `ctid` to cluster node `node` (a host of the hosts file): the device nodes
        its devN lines name that the node lacks, a node without the module, another driver version where the
        container's libraries are its own (`remote doctor --gpu -c ID --node N`). Two host probes, at once."""
        from .. import gpudoctor
        from ..ops.session import open_session

        ct = self.config.container(ctid).ctid
        with open_session(self.config, agent=False, keep=self._keep, events=self._emit.event,
                          transport=self._transport) as s:
            return gpudoctor.before_move(s, ct, node)

    # -- compile caches ---------------------------------------------------------------------------
    def caches(self, which: int | str | Sequence[int | str] | None = None) -> list[CacheHolding]:
        """What each container's compile cache holds (default: every container), all at once."""
        from ..ops import cachecopy

        return cachecopy.holdings(self._session, self.select(ALL if which is None else which))

    def warm_groups(self, which: int | str | Sequence[int | str] = ALL, *, fail_fast: bool = False,
                    parallel: bool = False, prefix_output: bool = False) -> GroupResult[None]:
        """Warm several containers as `remote warmup -c LIST` does: one warmup per group of containers whose
        cache passports would match, its cache copied to the rest; the others warmed on their own. A
        GroupResult per container (values None; a failure's error is a WarmupError with its message)."""
        from ..errors import WarmupError
        from ..ops import cachecopy

        ids = self.select(which)
        s = self._session
        with self._grouped():
            got = cachecopy.warm_fleet(s, ids, fail_fast=fail_fast, parallel=parallel,
                                       **self._watching(prefix_output))
        # a failure's error is a WarmupError with its message (the exception of a warmup or a copy, worded)
        return GroupResult({c: dataclasses.replace(o, error=WarmupError(o.message)) if o.error is not None else o
                            for c, o in got.items()})

    def train_nodes(self, which: int | str | Sequence[int | str], *, force: bool = False, warmup: bool = False,
                    follow: bool = True, resume: bool = False, fresh: bool = False) -> int:
        """One multi-node run across these containers (train.command formatted per node); with follow,
        until it ends: its exit status (0 when detached). With train.checkpoint: resume=True starts every rank
        at the run's common step (the master's checkpoint given to nodes that lack it), fresh=True moves every
        node's checkpoints aside; neither, where a node holds a complete one: CheckpointRefused."""
        from ..ops import multinode
        from . import checks

        checks.flag("resume", resume)
        checks.flag("fresh", fresh)
        if resume and fresh:
            raise ValueError("resume=True and fresh=True exclude each other: continue from the latest checkpoint, "
                             "or start over")
        result = multinode.train(self._session, self.select(which), force=force, warmup=warmup, follow=follow,
                                 resume=resume, fresh=fresh)
        return multinode.final_status(result) if result else 0

    def run_nodes(self, ctid: int, run: str | None = None) -> list[int]:
        """The containers of container ctid's run (its latest, or `run`), master first: [] for a one-node run."""
        from ..ops import multinode

        return multinode.nodes_of(self._session, ctid, run)[1]

    def follow_nodes(self, ctid: int, run: str | None = None) -> int | None:
        """Follow a multi-node run's logs merged (progress: each line); its exit status, or None when the
        run is on one node only (then Run.follow is the way)."""
        from ..ops import multinode

        run_id, nodes = multinode.nodes_of(self._session, ctid, run)
        if len(nodes) < 2 or run_id is None:
            return None
        return multinode.final_status(multinode.follow_whole(self._session, nodes, run_id))

    def disconnect(self, host: str | None = None) -> list[int]:
        """End this hosts file's kept connections now (one host's, or every one): the pids ended."""
        from ..ops.session import disconnect

        if host is not None and host not in self.config.hosts:
            raise ConfigError(self.file, "--host", f"unknown host {host!r}")
        return disconnect(self.file, host)

    def settings(self, which: int | str | Sequence[int | str] | None = None) -> list[dict]:
        """The settings each container resolves to (the hosts file's sections with its overrides), as data."""
        from .. import configview

        ids = self.select(ALL if which is None else which)
        return [configview.resolved(self.config, self.config.containers[i]) for i in ids]

    def render_settings(self, ids: list[int], why: str) -> str:
        from .. import configview

        return configview.render(self.config, [self.config.containers[i] for i in ids], why)
