"""FakeFleet: a fleet whose containers answer the operations a training script exists for (deploy, warmup, train,
a run's wait/state/log/metrics/compile, runs, log, stop, doctor, the fleet's status and doctor) with the typed
results of remote.results that the test sets up, recording each call; no host, no command, nothing read from the
machine (no code.repo working tree, no key_file).

Subclasses, not a Protocol: FakeFleet is a remote.Fleet, FakeContainer a remote.Container, FakeRun a remote.Run,
so a function annotated `fleet: remote.Fleet` takes the fake under `mypy --strict` with nothing to change, and
mypy checks each override against the real method (a keyword the real one gains and the fake lacks is an error;
tests/unit/test_testing_fake.py compares the signatures too). A method that is not faked here runs remote's own
code, whose first connection raises NotFaked: use remote.testing.MockTransport for commands (exec, push).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api.base import ALL, Progress
from ..api.container import Container
from ..api.fleet import Fleet
from ..api.run import Run
from ..errors import ConnectError, JobError, JobRunning, JobTimeout, UnknownRun
from ..events import Output, Sink
from ..results import (
    Checkpoint,
    CompileHealth,
    ContainerStatus,
    DeployPlan,
    Diagnosis,
    Finding,
    FleetStatus,
    HostStatus,
    JobStatus,
    Metric,
    RunStatus,
    RunSummary,
    Saved,
    State,
    Stopped,
    Warmup,
)

if TYPE_CHECKING:
    from ..config import Config, ContainerSpec, Host

__all__ = ["Call", "FakeContainer", "FakeFleet", "FakeRun", "NotFaked", "RunScript", "busy", "connection_lost",
           "CONTAINER_METHODS", "RUN_METHODS", "FLEET_METHODS"]

# What each fake answers (and what fail() accepts): the methods a training script calls.
CONTAINER_METHODS = ("deploy", "warmup", "train", "run", "runs", "log", "stream_log", "stop", "doctor", "checkpoints")
RUN_METHODS = ("refresh", "wait", "follow", "text", "metrics", "compile")
FLEET_METHODS = ("status", "doctor")

DEFAULT_HOSTS: dict[str, Any] = {"hosts": {"pve1": {"address": "pve1.invalid"}},
                                 "train": {"command": "python train.py"}}


class NotFaked(NotImplementedError):
    """A FakeFleet method that is not faked tried to reach a host."""


def _refuse(host: Host) -> Any:
    """The transport factory of a FakeFleet: a method that is not faked reaches it and is told so."""
    raise NotFaked(f"FakeFleet fakes {', '.join(CONTAINER_METHODS)} (a Run's {', '.join(RUN_METHODS)}) and the "
                   f"fleet's {', '.join(FLEET_METHODS)}; this call would connect to host {host.name}: test it with "
                   "remote.testing.MockTransport (remote.open(hosts, transport=MockTransport(handler)))")


@dataclass(frozen=True)
class Call:
    """One call a script made on a FakeFleet: the container (None: the fleet's own), the method, the run it was
    about (a Run's methods, or a run id given), and its arguments by name."""

    container: int | None
    method: str
    run: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunScript:
    """How the next run train() starts behaves: its exit status (None: it never ends, a live run that makes the
    next train or deploy busy), how many state reads say running before it ends (wait() skips them), its log
    lines, its metrics, its compile health, and the throughput runs()/status show."""

    exit_code: int | None = 0
    polls: int = 0
    log: Sequence[str] = ()
    metrics: Sequence[Metric] = ()
    compile: CompileHealth = field(default_factory=CompileHealth)
    throughput: float | None = None
    unit: str | None = None


def busy(ctid: int, run: str = "run-1") -> JobRunning:
    """The error train()/deploy() raise while a run is live there (exit status 3), as remote words it."""
    return JobRunning(ctid, f"container {ctid}: run {run} is running: wait for it, stop it (remote stop -c {ctid}), "
                            "or force=True", {"run": run, "pid": None, "live": [{"run": run, "pid": None}]})


def connection_lost(host: str = "pve1") -> ConnectError:
    """The error a dropped or refused SSH connection raises (remote.ConnectError, a TransportError)."""
    return ConnectError(host, f"{host}: connection lost (the host did not answer; check that it is up and reachable)")


def _metric(value: float, t: float | None = None, unit: str | None = None, **fields: Any) -> Metric:
    return Metric(t, value, unit, {"value": value, **fields})


class _Recorder:
    """The calls and the errors set up for one fake container (or the fleet): fail(method, error) makes the
    next `times` calls of `method` raise it."""

    def __init__(self, ctid: int | None, calls: list[Call], lock: threading.Lock, known: tuple[str, ...]):
        self.ctid, self.calls, self.lock, self.known = ctid, calls, lock, known
        self.errors: dict[str, list[BaseException]] = {}

    def fail(self, method: str, error: BaseException, times: int = 1) -> None:
        if method not in self.known:
            raise ValueError(f"fail: {method!r} is not a faked method (faked: {', '.join(self.known)})")
        if not isinstance(error, BaseException):
            raise TypeError(f"fail: expected an exception to raise, got {type(error).__name__}")
        self.errors.setdefault(method, []).extend([error] * times)

    def answer(self, method: str, run: str | None = None, **args: Any) -> None:
        with self.lock:
            self.calls.append(Call(self.ctid, method, run, args))
            queued = self.errors.get(method)
            error = queued.pop(0) if queued else None
        if error is not None:
            raise error


class FakeRun(Run):
    """A run of a FakeContainer, following its RunScript: state, exit status, wait (no sleeping), log,
    metrics, compile health, stop."""

    POLL = 0.0

    def __init__(self, container: FakeContainer, run_id: str, script: RunScript, command: str, number: int):
        super().__init__(container, run_id)
        self.fake, self.script, self.command, self.number = container, script, command, number
        self.reads = 0
        self.stopped = False

    def _status(self) -> RunStatus:
        alive = not self.stopped and (self.script.exit_code is None or self.reads <= self.script.polls)
        code = None if alive else 143 if self.stopped else self.script.exit_code
        return RunStatus(run=self.id, path=self.path, alive=alive, exit=code, stopped=self.stopped,
                         log_size=len(self.text_now().encode()))

    @property
    def path(self) -> str:
        return f"{self.fake.spec.train.run_dir}/{self.id}"

    @property
    def alive(self) -> bool:
        return self._status().alive

    def text_now(self) -> str:
        return "".join(line + "\n" for line in self.script.log)

    def refresh(self) -> RunStatus:
        self.fake._rec.answer("refresh", self.id)
        self.reads += 1
        self._state = self._status()
        return self._state

    def wait(self, timeout: float | None = None) -> int:
        self.fake._rec.answer("wait", self.id, timeout=timeout)
        if self.script.exit_code is None and not self.stopped:
            raise JobTimeout(f"run {self.id} in container {self.fake.id} still running after "
                             + (f"{timeout:g}s" if timeout is not None else "forever (its RunScript has exit_code=None: "
                                "a real wait() would block; give wait a timeout, or stop the run)"))
        self.reads = max(self.reads, self.script.polls + 1)
        self._state = self._status()
        assert self._state.exit is not None
        return self._state.exit

    def follow(self, *, offset: int = 0) -> Iterator[str]:
        self.fake._rec.answer("follow", self.id, offset=offset)
        at = 0
        for line in self.script.log:
            at += len(line.encode()) + 1
            if at > offset:
                self.offset = at
                yield line
        self.reads = max(self.reads, self.script.polls + 1)
        self._state = None

    def text(self) -> str:
        self.fake._rec.answer("text", self.id)
        return self.text_now()

    def metrics(self) -> list[Metric]:
        self.fake._rec.answer("metrics", self.id)
        return list(self.script.metrics)

    def compile(self) -> CompileHealth:
        self.fake._rec.answer("compile", self.id)
        return self.script.compile

    def summary(self) -> RunSummary:
        st = self._status()
        state: State = "running" if st.alive else "stopped" if self.stopped else "exited"
        return RunSummary(self.id, f"2026-01-01T00:00:{self.number:02d}Z", 1767225600.0 + self.number, state, st.exit,
                          self.script.throughput, self.script.unit, self.command, None, self.path)


class FakeContainer(Container):
    """A container of a FakeFleet. Set up what it answers: `plan` (what deploy returns; None: a no-op),
    `scripts` (the runs train starts, in order; empty: each run exits 0 at once), `findings` (doctor),
    `warmed` (warmup), `state` (pct's state in status), `checkpoints_found` (checkpoints(), and what stop(save=True)
    says it left: the first complete one); `fail(method, error)` for a failure path."""

    def __init__(self, fleet: FakeFleet, spec: ContainerSpec):
        super().__init__(fleet, spec)
        self.fake_fleet = fleet  # `fleet` stays typed FleetBase, as a Run's Owner protocol reads it
        self._rec = _Recorder(spec.ctid, fleet.calls, fleet._calls_lock, CONTAINER_METHODS + RUN_METHODS)
        self.plan: DeployPlan | None = None
        self.scripts: list[RunScript] = []
        self.findings: list[Finding] = []
        self.warmed: Warmup | None = None
        self.checkpoints_found: list[Checkpoint] = []
        self.state = "running"
        self.started: list[FakeRun] = []  # every run train() started, oldest first

    def __repr__(self) -> str:
        return f"<remote.testing.FakeContainer {self.id}>"

    @property
    def host(self) -> str:
        return self.spec.host.name

    def fail(self, method: str, error: BaseException, times: int = 1) -> None:
        """The next `times` calls of `method` (a container's or one of its runs': CONTAINER_METHODS, RUN_METHODS)
        raise `error` (busy(ctid), connection_lost(host), any exception): after it is recorded, before it acts."""
        self._rec.fail(method, error, times)

    def _live(self) -> FakeRun | None:
        return next((r for r in reversed(self.started) if r.alive), None)

    def deploy(self, *, check: bool = False, allow_dirty: bool = False, rollback: bool = False,
               force: bool = False) -> DeployPlan:
        self._rec.answer("deploy", check=check, allow_dirty=allow_dirty, rollback=rollback, force=force)
        live = self._live()
        if live is not None and not force and not check:
            raise busy(self.id, live.id)
        plan = self.plan or DeployPlan(self.id, False, (), ("venv", "checkout"), (), (), None, 0.0)
        return DeployPlan(self.id, bool(plan.changed) and not check, plan.changed, plan.kept, plan.saved, plan.drift,
                          plan.torch, plan.seconds)

    def warmup(self, *, devices: Sequence[str] | None = None, parallel: bool = False) -> Warmup:
        self._rec.answer("warmup", devices=devices, parallel=parallel)
        return self.warmed or Warmup(self.id, tuple(devices or ()), 0.0, 0, 0, 0, 0, False)

    def train(self, *, detach: bool = True, force: bool = False, warmup: bool = False, command: str | None = None,
              env: Mapping[str, str] | None = None, args: Sequence[str] = (), resume: bool = False,
              fresh: bool = False) -> Run:
        import shlex

        from ..config import unset

        flags: dict[str, Any] = {k: v for k, v in (("resume", resume), ("fresh", fresh)) if v}  # only those given
        self._rec.answer("train", detach=detach, force=force, warmup=warmup, command=command, env=env, args=args,
                         **flags)
        base = command if command is not None else self.spec.train.command
        if not base:
            raise unset(self.fleet.config.file, "train.command", "set the training command to run (or give command=)")
        live = self._live()
        if live is not None and not force:
            raise busy(self.id, live.id)
        script = self.scripts.pop(0) if self.scripts else RunScript()
        number = len(self.started) + 1
        run = FakeRun(self, f"run-{number}", script, f"{base} {shlex.join(args)}" if args else base, number)
        self.started.append(run)
        if not detach:
            for line in script.log:
                self.fake_fleet._emit.event(Output(self.id, line))
            if script.exit_code is not None:
                run.reads = script.polls + 1
        return run

    def run(self, run_id: str | None = None) -> Run:
        self._rec.answer("run", run_id)
        return self._find(run_id)

    def _find(self, run_id: str | None) -> FakeRun:
        if not self.started:
            raise JobError(f"container {self.id} has no runs in {self.spec.train.run_dir}: start one with train()")
        if run_id in (None, "latest"):
            return self.started[-1]
        for r in self.started:
            if r.id == run_id:
                return r
        raise UnknownRun(f"container {self.id} has no run {run_id!r} (its runs: "
                         f"{', '.join(r.id for r in self.started)})")

    def runs(self, limit: int = 20) -> list[RunSummary]:
        self._rec.answer("runs", limit=limit)
        return [r.summary() for r in reversed(self.started)][:limit]

    def log(self, run_id: str | None = None, *, follow: bool = False) -> str:
        self._rec.answer("log", run_id, follow=follow)
        return self._find(run_id).text_now()

    def stream_log(self, run_id: str | None = None, *, follow: bool = False) -> RunStatus:
        self._rec.answer("stream_log", run_id, follow=follow)
        run = self._find(run_id)
        for line in run.script.log:
            self.fake_fleet._emit.event(Output(self.id, line))
        if follow and run.script.exit_code is not None:
            run.reads = max(run.reads, run.script.polls + 1)
        return run._status()

    def checkpoints(self) -> list[Checkpoint]:
        self._rec.answer("checkpoints")
        return list(self.checkpoints_found)

    def stop(self, run_id: str | None = None, *, grace: int = 10, nodes: bool = True, save: bool = False) -> Stopped:
        self._rec.answer("stop", run_id, grace=grace, nodes=nodes, **({"save": save} if save else {}))
        chosen = [self._find(run_id)] if run_id is not None else [r for r in self.started if r.alive] \
            or [self._find(None)]
        results = []
        for r in chosen:
            was_alive = r.alive
            r.stopped = r.stopped or was_alive
            st = r._status()
            left = next((c for c in self.checkpoints_found if c.complete), None)
            saved = None if not save else Saved("not-running", left) if not was_alive else \
                Saved("no-new" if left else "none-yet", left)
            results.append(Stopped(r.id, was_alive, "TERM" if was_alive else None, st.exit, (), saved=saved))
        return Stopped(results[0].run, results[0].was_alive, results[0].signal, results[0].exit_code, (),
                       tuple(results[1:]), saved=results[0].saved)

    def doctor(self, *, fresh: bool = False) -> list[Finding]:
        self._rec.answer("doctor", fresh=fresh)
        return list(self.findings)


class FakeFleet(Fleet):
    """A remote.Fleet of fake containers (remote.testing.FakeContainer): `hosts` a hosts file's path or a dict in
    its shape (read, never checked against this machine), or None: host pve1 with `containers`, and
    train.command `python train.py`. `calls`: every Call in order; `fail(method, error)`: the fleet's own."""

    def __init__(self, hosts: str | os.PathLike[str] | Mapping[str, Any] | None = None, *,
                 containers: Sequence[int] = (200,), progress: Progress | None = None, events: Sink | None = None):
        super().__init__(_config(hosts, containers), progress=progress, events=events, keep=False, transport=_refuse)
        self.calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self._rec = _Recorder(None, self.calls, self._calls_lock, FLEET_METHODS)
        self._fakes: dict[int, FakeContainer] = {}
        self.unreachable: set[str] = set()  # hosts that status() shows unreachable

    def __repr__(self) -> str:
        return f"<remote.testing.FakeFleet {self.file}>"

    def __enter__(self) -> FakeFleet:
        return self

    def fail(self, method: str, error: BaseException, times: int = 1) -> None:
        """The next `times` calls of the fleet's own `method` (FLEET_METHODS) raise `error`."""
        self._rec.fail(method, error, times)

    def container(self, ctid: int | str | None = None) -> FakeContainer:
        """The fake container `ctid` (one object per id, so what a test sets up on it is what the script gets);
        an id the hosts file does not list raises ConfigError, as the real fleet does."""
        spec = self.config.container(ctid)
        with self._calls_lock:
            return self._fakes.setdefault(spec.ctid, FakeContainer(self, spec))

    def status(self, which: int | str | Sequence[int | str] | None = None) -> FleetStatus:
        self._rec.answer("status", which=which)
        ids = self.select(ALL if which is None else which)
        hosts = []
        for name in dict.fromkeys(self.config.containers[i].host.name for i in ids):
            reachable = name not in self.unreachable
            hosts.append(HostStatus(name, reachable, None if reachable else f"{name}: connection refused", None,
                                    {i: self.container(i).state for i in ids
                                     if self.config.containers[i].host.name == name}))
        return FleetStatus(tuple(hosts), tuple(self._status_of(self.container(i)) for i in ids))

    def _status_of(self, ct: FakeContainer) -> ContainerStatus:
        if ct.host in self.unreachable:
            return ContainerStatus(ct.id, ct.host, "unknown", error=f"{ct.host}: connection refused")
        latest = ct.started[-1] if ct.started else None
        job = None
        if latest is not None:
            st = latest._status()
            job = JobStatus(latest.id, st.alive, False, (), st.exit, None, st.stopped, None, latest.script.throughput,
                            latest.script.throughput, latest.script.unit, ct.spec.train.metric.higher_is_better if ct.spec.train.metric else True,
                            ct.spec.train.baseline, False, (), "", None, None, None, None)
        return ContainerStatus(ct.id, ct.host, ct.state, job, probed=True)

    def doctor(self, which: int | str | Sequence[int | str] | None = None, *, fresh: bool = False) -> list[Diagnosis]:
        self._rec.answer("doctor", which=which, fresh=fresh)
        return [Diagnosis(i, self.container(i).host, tuple(self.container(i).findings))
                for i in self.select(ALL if which is None else which)]


def _config(hosts: str | os.PathLike[str] | Mapping[str, Any] | None, containers: Sequence[int]) -> Config:
    """The fake's config: the hosts file parsed as remote.open parses it, without the checks that read this
    machine (key_file, known_hosts; code.repo is never read before a deploy)."""
    from .. import config as cfg
    from ..config.yamlfile import _read_yaml

    if hosts is None:
        return cfg.parse({**DEFAULT_HOSTS, "containers": {int(c): {"host": "pve1"} for c in containers}}, "<fake>")
    if isinstance(hosts, Mapping):
        return cfg.parse(dict(hosts), "<dict>")
    file = os.fspath(hosts)
    return cfg.parse(_read_yaml(file, Path(file).read_text()), file)
