"""One executor for work on many containers (fabric's Group shape): `each` runs fn(ctid) per container in
threads, at most `hosts.<name>.max_parallel` at a time per host, and returns a GroupResult: each
container's value, or its error with the exit status and message a command line shows. One failing never
stops the others unless fail_fast (then those not started are skipped). `values` is the same for reads
that want a plain list, raising the first error; `per_host` a call per host, `together` calls of different
kinds side by side, `bounded` a call per key at most `limit` at a time, `later` one call in the background
(a Pending). `serial=True` runs them one after another instead (each still in a thread of its own, with its
own context: work that shares something, a host's uvm nodes, takes its turn). Nothing is printed: each worker thread carries its
container in remote.events.CONTAINER, so what it reports is marked with it. The caller's on_done and on_tick
are the caller's code: what they raise is caught (never a worker's death, never a stop of the work), logged
to `remote` with its traceback and returned in GroupResult.callback_errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from .config import Config
from .events import CONTAINER
from .results import GroupResult, Outcome
from .threads import ContextThread

T = TypeVar("T")
K = TypeVar("K", int, str)
TICK_S = 0.2
log = logging.getLogger("remote.executor")


def failure(exc: BaseException) -> tuple[int, str]:
    """The exit status and message of a failed container: invoke's Exit (code, message), our errors
    (exit_code, str), anything else 1 and its type."""
    if isinstance(exc, KeyboardInterrupt):
        return 130, "interrupted"
    code = getattr(exc, "code", None)
    if code is None:
        code = getattr(exc, "exit_code", None)
    code = code if isinstance(code, int) and code else 1
    message = getattr(exc, "message", None)
    if message is None and (hasattr(exc, "exit_code") or str(exc)):
        message = str(exc) if hasattr(exc, "exit_code") else f"{type(exc).__name__}: {exc}"
    # invoke's Exit(code=N) after a command that failed (its output, if any, was shown above)
    return code, message or f"exited with status {code}"


def each(config: Config, ids: list[int], fn: Callable[[int], T], *, fail_fast: bool = False,
         on_done: Callable[[Outcome[T]], None] | None = None,
         on_tick: Callable[[dict[int, float]], None] | None = None, serial: bool = False) -> GroupResult[T]:
    """fn(ctid) for every id at once (bounded per host), or one after another in the order of ids (`serial`):
    a GroupResult in the order of ids. on_done(outcome) is called in the container's own thread as it ends;
    on_tick(running: {ctid: since}) every TICK_S from the caller's thread while any runs."""
    limits = {name: threading.BoundedSemaphore(h.max_parallel) for name, h in config.hosts.items()}
    hosts = {ctid: config.containers[ctid].host.name for ctid in ids}
    result: GroupResult[T] = GroupResult()
    done = _do_all(ids, hosts, limits, fn, fail_fast=fail_fast, on_done=on_done, on_tick=on_tick, mark=True,
                   callback_errors=result.callback_errors, serial=serial)
    for ctid in ids:
        result[ctid] = done.get(ctid) or Outcome(ctid, hosts[ctid], skipped=True)
    return result


def values(config: Config, ids: list[int], fn: Callable[[int], T]) -> list[T]:
    """fn(ctid) for every id at once (bounded per host), the values in order; the first error (in the order
    of ids) is raised once all have ended."""
    return _values(each(config, ids, fn).values())


def per_host(names: list[str], fn: Callable[[str], T]) -> list[T]:
    """fn(host name) for every host at once, each over its own connection: the values in order; the first
    error raised once all have ended."""
    done = _do_all(names, {n: n for n in names}, {n: threading.BoundedSemaphore(1) for n in names}, fn)
    return _values(done[n] for n in names)


def together(calls: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Each call at once, in a thread of its own (work of different kinds side by side: the host probes beside
    the container probes): the values by key; the first error raised once all have ended."""
    keys = list(calls)
    done = _do_all(keys, {k: k for k in keys}, {k: threading.BoundedSemaphore(1) for k in keys}, lambda k: calls[k]())
    return dict(zip(keys, _values(done[k] for k in keys), strict=True))


def bounded(keys: list[K], fn: Callable[[K], T], limit: int) -> list[T]:
    """fn(key) for every key, at most `limit` at a time (reads of one host over one connection): the values
    in order; the first error raised once all have ended."""
    gate = threading.BoundedSemaphore(limit)
    done = _do_all(keys, {k: "all" for k in keys}, {"all": gate}, fn)
    return _values(done[k] for k in keys)


class Pending(Generic[T]):
    """A call running in the background (`later`): `result(timeout)` waits for its value or raises its error,
    or TimeoutError where it has not ended in time (it is left to end on its own: a daemon thread)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._ended = threading.Event()
        self._outcome: tuple[T | None, BaseException | None] = (None, None)

        def run() -> None:
            try:
                self._outcome = (fn(), None)
            except BaseException as exc:  # noqa: BLE001 -- handed to whoever asks for the result
                self._outcome = (None, exc)
            finally:
                self._ended.set()

        ContextThread(target=run, daemon=True, name="remote-later").start()

    def result(self, timeout: float | None = None) -> T:
        if not self._ended.wait(timeout):
            raise TimeoutError(f"not done in {timeout}s")
        value, error = self._outcome
        if error is not None:
            raise error
        return value  # type: ignore[return-value]  # no error: fn's value


def later(fn: Callable[[], T]) -> Pending[T]:
    """fn() started now in a thread of its own (in the caller's context), its value asked for later: the work
    beside which the caller does its own (preflight's host read beside its probe)."""
    return Pending(fn)


def _values(outcomes: Iterable[Outcome[T]]) -> list[T]:
    got = list(outcomes)
    for o in got:
        if o.error is not None:
            raise o.error
    return [o.value for o in got]  # type: ignore[misc]  # no error: every value is fn's


def _do_all(keys: list[K], group: dict[K, str], limits: dict[str, threading.BoundedSemaphore],
            fn: Callable[[K], T], *, fail_fast: bool = False, on_done: Callable[[Outcome[T]], None] | None = None,
            on_tick: Callable[[dict[K, float]], None] | None = None, mark: bool = False,
            callback_errors: dict | None = None, serial: bool = False) -> dict[K, Outcome[T]]:
    """The one `_do`: each key's call in a thread of its own under its group's limit (`serial`: each thread
    started when the one before has ended). What on_done or on_tick raises goes to `callback_errors`
    ({key: error}, None for on_tick) and the log; an on_tick that raised is not called again."""
    done: dict[K, Outcome[T]] = {}
    errors: dict = {} if callback_errors is None else callback_errors
    ticking = [on_tick]

    def called_back(key, name: str, callback, arg) -> bool:
        try:
            callback(arg)
            return True
        except Exception as exc:  # the caller's code: reported, never the end of the work or of a worker
            log.warning("remote: the %s callback raised (%s: %s); the work goes on", name, type(exc).__name__, exc,
                        exc_info=True)
            errors.setdefault(key, exc)
            return False

    running: dict[K, float] = {}
    stop = threading.Event()

    def _do(key: K) -> None:
        with limits[group[key]]:
            if stop.is_set():
                return
            if mark:
                CONTAINER.set(key)  # type: ignore[arg-type]  # mark: the keys are container ids
            start = running[key] = time.monotonic()
            try:
                out: Outcome[T] = Outcome(key, group[key], fn(key), None, time.monotonic() - start)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 -- one container's failure is a result, never a crash
                code, message = failure(exc)
                out = Outcome(key, group[key], None, exc, time.monotonic() - start, False, code, message)  # type: ignore[arg-type]
                if fail_fast:
                    stop.set()
            done[key] = out
            running.pop(key, None)
            if on_done is not None:
                called_back(key, "on_done", on_done, out)

    threads = [ContextThread(target=_do, args=(key,), daemon=True, name=f"remote-{key}") for key in keys]
    for t in ([] if serial else threads):
        t.start()
    for t in threads:
        if serial:
            t.start()
        while t.is_alive():
            t.join(TICK_S)
            if ticking[0] is not None and running and not called_back(None, "on_tick", ticking[0], dict(running)):
                ticking[0] = None
    return done
