"""Fleets: one task on many containers at once, each line of output marked with its container.

`select` turns a --container value (an id, `200,201,305`, a group name from `groups:`, or `all`) into
container ids. `run_each` calls a function once per container in threads, at most
`hosts.<name>.max_parallel` at a time per host, while whatever those threads print goes out line by
line with `[200] ` in front (`routed`). Each container's result, time and error are collected: one
failing does not stop the others unless fail_fast, and `render` draws the summary table.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..config import Config
from ..errors import ConfigError
from ..naming import printable

ALL = "all"
PROGRESS_EVERY = 15.0  # seconds between progress lines (each container's current step) on stderr


def is_selection(value) -> bool:
    """True when a --container value names several containers (a list, a group, `all`), not one id."""
    if value is None or isinstance(value, int):
        return False
    return not str(value).strip().isdigit()


def select(config: Config, value) -> list[int]:
    """The container ids a --container value names, in the order given (groups and `all` in file order)."""
    if value is None:
        return [config.container(None).ctid]
    ids: list[int] = []
    for part in (p.strip() for p in str(value).split(",")):
        if not part:
            continue
        if part == ALL:
            found = list(config.containers)
        elif part in config.groups:
            found = list(config.groups[part])
        elif part.isdigit():
            found = [config.container(part).ctid]  # unknown ids are refused there, with the known ones
        else:
            known = ", ".join(["all", *config.groups])
            raise ConfigError(config.file, "--container",
                              f"{part!r} is neither a container id nor a group (groups: {known})")
        ids += [i for i in found if i not in ids]
    if not ids:
        raise ConfigError(config.file, "--container", f"no container selected by {value!r}")
    return ids


# -- output: every line a container's thread prints, prefixed with its container ---------------------------

_local = threading.local()
_steps: dict[str, tuple[str, float]] = {}  # prefix -> (current step, since)
_write_lock = threading.Lock()


class _Router(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: threads with a prefix get whole lines, prefixed; others pass through."""

    def __init__(self, real):
        self.real = real
        self.buffer = _BytesRouter(self)

    def write(self, text: str) -> int:
        prefix = getattr(_local, "prefix", None)
        if prefix is None:
            with _write_lock:
                return self.real.write(text)
        pending = _local.pending.get(id(self), "") + text.replace("\r\n", "\n").replace("\r", "\n")
        *lines, rest = pending.split("\n")
        _local.pending[id(self)] = rest
        if lines:
            self._emit(prefix, lines)
        return len(text)

    def _emit(self, prefix: str, lines: list[str]) -> None:
        for line in lines:
            if line.startswith("==> "):
                _steps[prefix] = (line[4:], time.monotonic())
        with _write_lock:
            self.real.write("".join(f"{prefix}{line}\n" for line in lines))
            self.real.flush()

    def flush_pending(self) -> None:
        rest = _local.pending.pop(id(self), "")
        if rest:
            self._emit(_local.prefix, [rest])

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return False  # progress redraws (\r) would garble lines of other containers

    def fileno(self) -> int:
        return self.real.fileno()

    @property
    def encoding(self):  # type: ignore[override]  # read-only in io.TextIOBase too; typeshed declares an attribute
        return getattr(self.real, "encoding", "utf-8")


class _BytesRouter:
    """`sys.stdout.buffer` of a _Router: bytes decoded (per thread, incrementally) and routed as text."""

    def __init__(self, text: _Router):
        self.text = text

    def write(self, data: bytes) -> int:
        if getattr(_local, "prefix", None) is None:
            with _write_lock:
                return self.text.real.buffer.write(data)
        import codecs

        decoders = _local.__dict__.setdefault("decoders", {})
        dec = decoders.setdefault(id(self), codecs.getincrementaldecoder("utf-8")("replace"))
        self.text.write(dec.decode(data))
        return len(data)

    def flush(self) -> None:
        self.text.flush()


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """While inside: sys.stdout and sys.stderr route each container thread's lines with its prefix."""
    if isinstance(sys.stdout, _Router):
        yield
        return
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Router(old[0]), _Router(old[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old


# -- running ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    ctid: int
    host: str
    result: str  # ok | failed | skipped
    code: int = 0
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.result == "ok"


def _failure(exc: BaseException) -> tuple[int, str]:
    """The exit status and message of a failed container: invoke's Exit (code, message), our errors
    (exit_code, str), anything else 1 and its type."""
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(exc, "exit_code", None)
    code = code if isinstance(code, int) and code else 1
    message = getattr(exc, "message", None)
    if message is None and (hasattr(exc, "exit_code") or str(exc)):
        message = str(exc) if hasattr(exc, "exit_code") else f"{type(exc).__name__}: {exc}"
    # invoke's Exit(code=N) after a command that failed (its output, if any, was shown above)
    return code, message or f"exited with status {code}"


def run_each(config: Config, ids: list[int], fn: Callable[[int], object], *, fail_fast: bool = False,
             progress: bool = True) -> list[Outcome]:
    """fn(ctid) for every id in threads, at most max_parallel per host at once; output routed with
    `[ctid] ` in front. Failures are collected; with fail_fast, containers not yet started are skipped."""
    limits = {name: threading.BoundedSemaphore(h.max_parallel) for name, h in config.hosts.items()}
    outcomes = {ctid: Outcome(ctid, config.containers[ctid].host.name, "skipped") for ctid in ids}
    stop = threading.Event()
    running: dict[int, float] = {}

    def worker(ctid: int) -> None:
        out = outcomes[ctid]
        with limits[out.host]:
            if stop.is_set():
                return
            _local.prefix, _local.pending = f"[{ctid}] ", {}
            start = running[ctid] = time.monotonic()
            try:
                fn(ctid)
                out.result = "ok"
            except KeyboardInterrupt:
                out.result, out.code, out.message = "failed", 130, "interrupted"
            except BaseException as exc:  # noqa: BLE001 -- one container's failure is a result, never a crash
                out.result = "failed"
                out.code, out.message = _failure(exc)
                if fail_fast:
                    stop.set()
            finally:
                out.seconds = time.monotonic() - start
                for stream in (sys.stdout, sys.stderr):
                    if isinstance(stream, _Router):
                        stream.flush_pending()
                if out.message and not out.ok:
                    print(printable(out.message, lines=True))
                _steps.pop(_local.prefix, None)
                running.pop(ctid, None)
                _local.prefix = None

    with routed():
        threads = [threading.Thread(target=worker, args=(ctid,), daemon=True, name=f"fleet-{ctid}") for ctid in ids]
        for t in threads:
            t.start()
        last = time.monotonic()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
                if progress and time.monotonic() - last >= PROGRESS_EVERY:
                    last = time.monotonic()
                    _progress_line(running)
    return [outcomes[i] for i in ids]


def _progress_line(running: dict[int, float]) -> None:
    now = time.monotonic()
    parts = []
    for ctid, since in sorted(running.items()):
        step = _steps.get(f"[{ctid}] ", ("started",))[0]
        parts.append(f"{ctid}: {step[:60]} ({now - since:.0f}s)")
    if parts:
        print("-- in progress: " + "; ".join(parts), file=sys.stderr, flush=True)


def render(outcomes: list[Outcome]) -> str:
    """The summary table: container, host, result, time (and the first line of each failure)."""
    rows = [("container", "host", "result", "time", "")]
    for o in outcomes:
        result = {"ok": "ok", "skipped": "skipped"}.get(o.result, f"FAILED ({o.code})")
        first = o.message.strip().splitlines()[0] if o.message.strip() else ""
        rows.append((str(o.ctid), o.host, result, f"{o.seconds:.1f}s" if o.result != "skipped" else "-",
                     printable(first[:100])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + (f"  {r[4]}" if r[4] else "") for r in rows]
    failed = sum(1 for o in outcomes if o.result == "failed")
    skipped = sum(1 for o in outcomes if o.result == "skipped")
    lines.append(f"{len(outcomes) - failed - skipped} ok, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return "\n".join(line.rstrip() for line in lines)


def exit_code(outcomes: list[Outcome]) -> int:
    """0 when every container succeeded; else the status they failed with when they agree, otherwise 1."""
    codes = {o.code for o in outcomes if o.result == "failed"}
    if not codes and all(o.ok for o in outcomes):
        return 0
    return codes.pop() if len(codes) == 1 else 1


# -- sharing one session (one transport per host) between the containers' threads ------------------------

_shared: list = []


@contextlib.contextmanager
def sharing(session, ids=None) -> Iterator[None]:
    """While inside, `shared()` is this session: the tasks' bodies use it instead of opening their own.
    The hosts' transports are made here, before any thread asks for one (Session's map is not locked)."""
    for ctid in ids if ids is not None else session.config.containers:
        session.transport(session.config.containers[ctid].host)
    _shared.append(session)
    try:
        yield
    finally:
        _shared.remove(session)
        with _values_lock:
            for key in [k for k in _values if k[0] == id(session)]:
                del _values[key]


def shared():
    """The session of the fleet task in progress, or None."""
    return _shared[-1] if _shared else None


_values: dict = {}
_values_lock = threading.Lock()


def shared_value(key: str, factory: Callable[[], object]):
    """One object per fleet task in progress for `key` (e.g. the lock a deploy resolves once), made on first use."""
    with _values_lock:
        return _values.setdefault((id(shared()), key), factory())


def map_each(config: Config, ids: list[int], fn: Callable[[int], object]) -> list:
    """fn(ctid) for every id in threads (at most max_parallel per host at once), results in order; output
    is not routed (for quiet reads such as status). The first exception is raised after all are done."""
    limits = {name: threading.BoundedSemaphore(h.max_parallel) for name, h in config.hosts.items()}
    results: dict[int, tuple[bool, object]] = {}

    def worker(ctid: int) -> None:
        with limits[config.containers[ctid].host.name]:
            try:
                results[ctid] = (True, fn(ctid))
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
                results[ctid] = (False, exc)

    threads = [threading.Thread(target=worker, args=(ctid,), daemon=True) for ctid in ids]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    for ctid in ids:
        ok, value = results[ctid]
        if not ok:
            assert isinstance(value, BaseException)  # worker stores (False, exc) only
            raise value
    return [results[ctid][1] for ctid in ids]


def inventory(session) -> list:
    """session.inventory (each host's `pct list`) for all hosts at once, each over its own connection."""
    import copy
    import dataclasses

    from ..errors import RemoteError
    from ..transport.session import HostState
    from ..transport.session import inventory as one_host_at_a_time

    names = list(session.config.hosts)
    for name in names:  # the transports made here, in one thread: Session's map is not locked
        session.transport(session.config.hosts[name])

    def one(name: str):
        view = copy.copy(session)  # shares the transports; never closed itself
        view.config = dataclasses.replace(session.config, hosts={name: session.config.hosts[name]})
        try:
            return one_host_at_a_time(view)
        except ConfigError as exc:  # bad input (a ~/.ssh/config ssh would refuse): exit 2, not an unreachable host
            return exc
        except RemoteError as exc:  # `pct list` past its deadline (CommandTimeout), ...: that host is unknown
            wanted = [c.ctid for c in session.config.containers.values() if c.host.name == name]
            return [HostState(name, False, f"`pct list` on {name}: {exc}", {c: "unknown" for c in wanted})]
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread below
            return exc

    results: dict[str, list | BaseException] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, one(n)), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    states = []
    for n in names:
        got = results[n]
        if isinstance(got, BaseException):
            raise got
        states.extend(got)
    return states
