"""One executor for work on many containers (fabric's Group shape): `each` runs fn(ctid) per container in
threads, at most `hosts.<name>.max_parallel` at a time per host, and returns a GroupResult: each
container's value, or its error with the exit status and message a command line shows. One failing never
stops the others unless fail_fast (then those not started are skipped). `values` is the same for reads
that want a plain list, raising the first error. Nothing is printed: each worker thread carries its
container in remote.events.CONTAINER, so what it reports is marked with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from .config import Config
from .events import CONTAINER
from .results import GroupResult, Outcome
from .threads import ContextThread

T = TypeVar("T")
K = TypeVar("K", int, str)
TICK_S = 0.2


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
         on_tick: Callable[[dict[int, float]], None] | None = None) -> GroupResult[T]:
    """fn(ctid) for every id at once (bounded per host): a GroupResult in the order of ids. on_done(outcome)
    is called in the container's own thread as it ends; on_tick(running: {ctid: since}) every TICK_S from
    the caller's thread while any runs."""
    limits = {name: threading.BoundedSemaphore(h.max_parallel) for name, h in config.hosts.items()}
    hosts = {ctid: config.containers[ctid].host.name for ctid in ids}
    done = _do_all(ids, hosts, limits, fn, fail_fast=fail_fast, on_done=on_done, on_tick=on_tick, mark=True)
    result: GroupResult[T] = GroupResult()
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


def _values(outcomes: Iterable[Outcome[T]]) -> list[T]:
    got = list(outcomes)
    for o in got:
        if o.error is not None:
            raise o.error
    return [o.value for o in got]  # type: ignore[misc]  # no error: every value is fn's


def _do_all(keys: list[K], group: dict[K, str], limits: dict[str, threading.BoundedSemaphore],
            fn: Callable[[K], T], *, fail_fast: bool = False, on_done: Callable[[Outcome[T]], None] | None = None,
            on_tick: Callable[[dict[K, float]], None] | None = None, mark: bool = False) -> dict[K, Outcome[T]]:
    """The one `_do`: each key's call in a thread of its own under its group's limit."""
    done: dict[K, Outcome[T]] = {}
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
                on_done(out)

    threads = [ContextThread(target=_do, args=(key,), daemon=True, name=f"remote-{key}") for key in keys]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(TICK_S)
            if on_tick is not None and running:
                on_tick(dict(running))
    return done
