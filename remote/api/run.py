"""A training run of a container (`ct.train()`, `ct.run(id)`): its state, its log followed, waited for,
its metrics and compile health, stopped."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from ..results import Checkpoint, CompileEvent, CompileHealth, Metric, RunStatus, State, Stopped
from ..threads import ContextThread
from . import checks

if TYPE_CHECKING:
    from ..config import ContainerSpec
    from ..ops.session import PctContainer
    from ..target import Target
    from .base import FleetBase


class Owner(Protocol):
    """What a Run needs of the container it belongs to (a remote.api.Container: named so, not imported, so
    that container.py, which makes Runs, and this module import each other in no circle)."""

    fleet: FleetBase
    spec: ContainerSpec

    @property
    def id(self) -> int: ...

    def _ct(self, venv_on_path: bool = True) -> PctContainer: ...

    @property
    def _target(self) -> Target: ...

    def stop(self, run_id: str | None = None, *, grace: int = 10, nodes: bool = True,
             save: bool = False) -> Stopped: ...

FOLLOW_SLICE_S = 5  # Run.follow: seconds a log slice waits in the container, so a follower left ends soon after


class Run:
    """A training run of a container: `.id`, `.state`, `.exit_code`; follow, wait, metrics, stop."""

    POLL = 1.0  # seconds between state reads in wait()
    id: str  # the run id (its folder under train.run_dir)
    offset: int  # the log's byte just past the last line follow() gave (0 before it gave any)
    container: Owner  # its remote.api.Container

    def __init__(self, container: Owner, run_id: str):
        self.container, self.id = container, run_id
        self._state: RunStatus | None = None
        self.offset = 0  # the log's byte just past the last line follow() gave

    def __repr__(self) -> str:
        return f"<remote.Run {self.id} in {self.container.id}>"

    def refresh(self) -> RunStatus:
        """Read the run's state again (one round trip) and return it."""
        from ..ops import jobs

        self._state = jobs.run_status(jobs.state(self.container._target, self.id))
        return self._state

    def _st(self) -> RunStatus:
        return self._state if self._state is not None else self.refresh()

    @property
    def state(self) -> State:
        """"running", "exited", "stopped" (by stop()) or "lost" (ended without an exit record), read now:
        what runs() says of it."""
        return self.refresh().state

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint this run started from (a resume: path and step as its manifest records them; None
        for a run that started fresh)."""
        return self._st().checkpoint

    @property
    def parent(self) -> str | None:
        """The id of the run this one continues (a resume; None otherwise)."""
        return self._st().parent

    @property
    def exit_code(self) -> int | None:
        """The job's exit status once it has ended (None while it runs; 1 when it was lost)."""
        st = self._st()
        if st.alive:
            st = self.refresh()
        return st.exit_code

    def follow(self, *, offset: int = 0) -> Iterator[str]:
        """The log's lines from byte `offset` until the job ends, as they come; a dropped connection is
        re-established and the log resumes at the byte where it stopped. Breaking out stops following
        (the job runs on). `run.offset` is then the byte just past the last line given: follow(offset=
        run.offset), in this process or another, resumes with the next line."""
        from ..ops import logs

        offset = checks.count("offset", offset, minimum=0)
        ct = self.container._ct()
        st = self._st()
        lines: queue.Queue = queue.Queue()
        done = threading.Event()
        splitter = logs.LineSplitter()
        fed = [offset]  # bytes of the log read so far

        class Closed(Exception):
            pass

        def on_bytes(chunk: bytes) -> None:
            if done.is_set():
                raise Closed()
            ends = [fed[0] + i + 1 for i, byte in enumerate(chunk) if byte == 0x0A]  # each line's end
            fed[0] += len(chunk)
            for line, end in zip(splitter.feed(chunk), ends, strict=True):
                lines.put((line, end))

        def pump() -> None:
            try:
                logs.follow(ct, st.path, self.id, offset=offset, on_bytes=on_bytes, follow_=True,
                            slice_seconds=FOLLOW_SLICE_S, reconnect=ct.transport.close,
                            on_resume=self.container._target.resumed, stop=done.is_set)
                for line in splitter.flush():
                    lines.put((line, fed[0]))
                lines.put(None)
            except BaseException as exc:  # noqa: BLE001 -- raised in the reader's thread
                lines.put(exc)

        t = ContextThread(target=pump, daemon=True, name=f"remote-follow-{self.id}")
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
                line, self.offset = item
                yield line
        finally:
            done.set()
        self._state = None

    def text(self) -> str:
        """The run's log as it is now, whole (while the job runs: what it has written so far)."""
        from ..ops.logs import read_text
        return read_text(self.container._ct(), self._st().path, self.id)

    def lines(self) -> list[str]:
        """text() as lines, a progress bar's redraws collapsed to the last, as follow() gives them."""
        from ..ops.logs import as_lines
        return as_lines(self.text())

    def wait(self, timeout: float | None = None) -> int:
        """Block until the job ends: its exit status (1 when it was lost). JobTimeout (a JobError and a
        TimeoutError) after `timeout` seconds."""
        from ..errors import JobTimeout

        timeout = checks.seconds("timeout", timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.exit_code
            if code is not None:
                return code
            if end is not None and time.monotonic() >= end:
                raise JobTimeout(f"run {self.id} in container {self.container.id} still running after {timeout:g}s")
            time.sleep(self.POLL)

    def metrics(self) -> list[Metric]:
        """The values of the run's metrics.jsonl, in order; [] before the first. Lines that are not JSON
        objects are skipped (the container's file is untrusted)."""
        from ..ops.logs import read_metrics

        return read_metrics(self.container._ct(), self._st().path)

    COMPILE_READ = 16 << 20  # bytes of compile.jsonl read (the watch bounds what it writes)

    def compile(self) -> CompileHealth:
        """The run's compile health from its compile.jsonl (the compile watch, docs/guide/compile-health.md):
        counts of compiles, recompiles, graph breaks and eager fallbacks, seconds compiling after the first
        steady step, and `.events`, each a CompileEvent (time, process, function, kind, torch's reason)."""
        from ..ops import compilelog

        path = self._st().path
        ct = self.container._ct()
        text = {name: ct.run(["head", "-c", str(self.COMPILE_READ), f"{path}/{name}"], check=False,
                             mutates=False, timeout=120).out for name in ("compile.jsonl", "metrics.jsonl")}
        return compilelog.summarize(text["compile.jsonl"].splitlines(), compilelog.steady_at(text["metrics.jsonl"]))

    def compile_events(self) -> list[CompileEvent]:
        """The run's compile events, oldest first (Run.compile().events)."""
        return list(self.compile().events)

    def stop(self, *, grace: int = 10, save: bool = False) -> Stopped:
        """TERM the job, KILL after `grace` s, and verify that nothing of it is left; save=True: a checkpoint
        first (Container.stop)."""
        got = self.container.stop(self.id, grace=grace, save=save)
        self._state = None
        return got
