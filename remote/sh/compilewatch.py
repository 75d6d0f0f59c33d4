"""remote_compilewatch: every compile, recompile, graph break and eager fallback of a job, as it happens.

Installed into the container's venv as `remote_compilewatch` by `deploy`, with a .pth line that calls
`install()` at start-up only where REMOTE_COMPILE_WATCH is set (a train run sets it to
<run>/compile.jsonl); elsewhere nothing is imported. Standard library only; it imports nothing from
`remote` and never imports torch itself: `install()` adds an import hook that waits until the job
imports torch's compiler (`torch._dynamo.utils`), then wraps `log_compilation_event`, the hook torch
calls with each frame's CompilationMetrics (torch 2.11 to 2.14 all call it, from
`record_compilation_metrics`). Each record says what happened to one frame:

  - `compile`: the first compile of a function (`recompile_reason` empty);
  - `recompile`: a further compile of it, with torch's reason (the guard that failed, `recompile_reason`);
  - `graph-break`: the frame was split (`restart_reasons`: torch's break reason text);
  - `eager-fallback`: the function runs its Python code from now on: the recompile limit was reached,
    or a compile error was swallowed by `suppress_errors`; or a call ran it uncompiled because FX tracing
    was in progress with `error_on_nested_fx_trace = False` (torch.fx's is_fx_symbolic_tracing, wrapped).

Each event is one JSON line, appended with one write and flushed:
    {"t", "rank", "pid", "thread", "kind", "why", "fn", "file", "line", "reason", "where", "seconds",
     "n", "compile_id", "cache": {fxgraph_hit, fxgraph_miss, autograd_hit, autograd_miss},
     "totals": {compile, recompile, graph-break, eager-fallback, seconds}}
`n` counts this kind of event for this function (recompile #3). The file is bounded: per function and
kind the first FULL events are written, then only the 2^k-th; every line carries the process's totals,
and a last `totals` line at exit counts what was not written. Nothing here may fail the job: every
error inside the hook is swallowed.
"""

from __future__ import annotations

import _thread
import os
import sys
import time

# json, re and threading are imported when the first event comes (torch has imported them by then): a
# process that never compiles pays only for this file.

ENV = "REMOTE_COMPILE_WATCH"
KINDS = ("compile", "recompile", "graph-break", "eager-fallback")
FULL = 16  # events written in full per (function, kind); then only the 2^k-th
MAX_LINES = 2000  # per process; then only totals at exit
REASON_MAX = 600  # characters of torch's text kept per event

_lock = _thread.allocate_lock()
_state: dict = {}


def install(path: str | None = None) -> bool:
    """Watch this process's compiles into `path` ($REMOTE_COMPILE_WATCH). Cheap: adds an import hook."""
    path = path or os.environ.get(ENV)
    if not path or _state:
        return False
    _state.update(path=path, counts={}, totals={k: 0 for k in KINDS}, seconds=0.0, lines=0, unwritten=0,
                  frames={}, last_reason={})
    wanted = {}
    for name, wrap in (("torch._dynamo.utils", _wrap), ("torch.fx._symbolic_trace", _wrap_fx)):
        module = sys.modules.get(name)
        if module is not None:
            wrap(module)
        else:
            wanted[name] = wrap
    if wanted:
        sys.meta_path.insert(0, _Finder(wanted))
    import atexit

    atexit.register(_at_exit)
    return True


class _Finder:
    """Waits for the modules it wraps to be imported, then wraps them; a finder that finds nothing itself."""

    def __init__(self, wanted: dict):
        self.wanted = dict(wanted)  # module name -> what wraps it once it ran

    def find_spec(self, name, path=None, target=None):
        wrap = self.wanted.pop(name, None)
        if wrap is None:
            return None
        import importlib.util

        if self in sys.meta_path:  # not asked again about this name, nor about anything find_spec imports
            sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.wanted:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        inner = loader.exec_module

        def exec_module(module, inner=inner, wrap=wrap):
            inner(module)
            try:
                wrap(module)
            except Exception:  # noqa: BLE001 -- the watch never fails an import
                pass

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]
        except AttributeError:
            return spec
        return spec


def _wrap(utils) -> None:
    original = getattr(utils, "log_compilation_event", None)
    if original is None or getattr(original, "_remote_watch", False):
        return

    def log_compilation_event(metrics, *args, **kwargs):
        try:
            _on_metrics(metrics, utils)
        except Exception:  # noqa: BLE001 -- the watch never fails a compile
            pass
        return original(metrics, *args, **kwargs)

    log_compilation_event._remote_watch = True  # type: ignore[attr-defined]
    utils.log_compilation_event = log_compilation_event


def _wrap_fx(st) -> None:
    """A compiled function called while FX tracing is in progress runs its Python code when torch's
    error_on_nested_fx_trace is False (the compile race, docs/internals/compile-race.md): no compile record
    says so. Dynamo asks torch.fx._symbolic_trace.is_fx_symbolic_tracing() first (it takes the function when
    torch.compile wraps one); the wrapper answers the same and, when the answer sends the call to eager, names
    the function (once per function; then counts)."""
    original = getattr(st, "is_fx_symbolic_tracing", None)
    if original is None or getattr(original, "_remote_watch", False):
        return

    def is_fx_symbolic_tracing():  # torch's takes no argument; each compiled call pays one Python call here
        tracing = original()
        if tracing:
            try:
                _nested(sys._getframe(1))
            except Exception:  # noqa: BLE001 -- the watch never fails a call
                pass
        return tracing

    is_fx_symbolic_tracing._remote_watch = True  # type: ignore[attr-defined]
    st.is_fx_symbolic_tracing = is_fx_symbolic_tracing


def _nested(frame) -> None:
    if not frame.f_code.co_filename.endswith("eval_frame.py"):
        return
    config = sys.modules.get("torch._dynamo.config")
    if config is None or getattr(config, "error_on_nested_fx_trace", True) or \
            getattr(config, "force_compile_during_fx_trace", False):
        return
    fn = frame.f_locals.get("fn")
    code = getattr(fn, "__code__", None)
    import threading

    with _lock:
        _record("eager-fallback", {"fn": getattr(fn, "__name__", None), "file": getattr(code, "co_filename", None),
                                   "line": getattr(code, "co_firstlineno", None), "why": "nested-fx-trace",
                                   "reason": "called while FX tracing was in progress, with "
                                             "error_on_nested_fx_trace=False: ran uncompiled", "seconds": 0.0},
                threading, sys.modules.get("torch._dynamo.utils"))


def _rank():
    for name in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(name)
        if v is not None and v.isdigit():
            return int(v)
    return None


def _cache(utils) -> dict:
    counters = getattr(utils, "counters", {})
    ind, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    return {"fxgraph_hit": ind.get("fxgraph_cache_hit", 0), "fxgraph_miss": ind.get("fxgraph_cache_miss", 0),
            "autograd_hit": aot.get("autograd_cache_hit", 0), "autograd_miss": aot.get("autograd_cache_miss", 0)}


_SOURCE = r"\s+#\s*(.*?)\s+#\s*(\S+:\d+)(?: in \S+)?\s*$"


def guard_text(reason: str) -> tuple[str, str | None]:
    """torch's recompile reason -> (the failed guard, the source line it names): `0/3: G['K'] == 3.0   # x * K
    # train.py:11 in f` -> ("G['K'] == 3.0", "train.py:11")."""
    import re

    first = (reason or "").strip().splitlines()[0] if (reason or "").strip() else ""
    first = re.sub(r"^\d+/\d+:\s*", "", first)
    m = re.search(_SOURCE, first)
    if m:
        return first[:m.start()].strip(), m.group(2)
    return first.strip(), None


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _events(m, utils) -> list[dict]:
    """The events one CompilationMetrics record stands for."""
    if getattr(m, "is_forward", True) is False or getattr(m, "is_runtime", False):
        return [{"kind": None, "seconds": _seconds(m)}]  # a backward compile or runtime autotuning: time only
    cid = str(getattr(m, "compile_id", None) or "")
    frame = cid.split("/")[0] if cid else ""
    name, filename, line = getattr(m, "co_name", None), getattr(m, "co_filename", None), \
        getattr(m, "co_firstlineno", None)
    if name:
        _state["frames"][frame] = (name, filename, line)
    else:  # the recompile limit is hit before torch names the frame: the same frame id named it before
        name, filename, line = _state["frames"].get(frame, (None, None, None))
    base = {"fn": name, "file": filename, "line": line, "compile_id": cid or None, "seconds": _seconds(m)}
    fail_type, fail_reason = getattr(m, "fail_type", None), getattr(m, "fail_reason", None) or ""
    out = []
    if fail_type:
        if "recompile limit" in fail_reason or "RecompileLimit" in fail_type or "CacheLimit" in fail_type:
            guard, where = guard_text(_state["last_reason"].get(frame, ""))
            reason = (f"recompile limit reached; last guard failed: {guard}" if guard
                      else _first_line(fail_reason))
            out.append({**base, "kind": "eager-fallback", "why": "recompile-limit", "reason": reason, "where": where})
        elif getattr(m, "config_suppress_errors", False) and not getattr(m, "has_guarded_code", False):
            out.append({**base, "kind": "eager-fallback", "why": "suppressed-error",
                        "reason": f"{fail_type}: {_first_line(fail_reason)}"})
        return out or [{"kind": None, "seconds": base["seconds"]}]
    recompile = getattr(m, "recompile_reason", None)
    if recompile:
        _state["last_reason"][frame] = recompile
        guard, where = guard_text(recompile)
        out.append({**base, "kind": "recompile", "reason": f"guard failed: {guard}", "where": where})
    else:
        out.append({**base, "kind": "compile"})
    for r in sorted(getattr(m, "restart_reasons", None) or ()):
        out.append({**base, "kind": "graph-break", "reason": _first_line(str(r)), "seconds": 0.0})
    return out


def _seconds(m) -> float:
    us = getattr(m, "duration_us", None)
    if isinstance(us, (int, float)):
        return round(us / 1e6, 6)
    s = getattr(m, "entire_frame_compile_time_s", None)
    return round(s, 6) if isinstance(s, (int, float)) else 0.0


def _on_metrics(m, utils) -> None:
    import threading

    with _lock:
        for ev in _events(m, utils):
            _state["seconds"] += ev.get("seconds") or 0.0
            kind = ev.pop("kind")
            if kind is not None:
                _record(kind, ev, threading, utils)


def _record(kind: str, ev: dict, threading, utils) -> None:
    """Count one event (under _lock) and write it unless the bound says only its count."""
    key = (kind, ev.get("fn"), ev.get("file"), ev.get("line"))
    n = _state["counts"][key] = _state["counts"].get(key, 0) + 1
    _state["totals"][kind] += 1
    if (n > FULL and n & (n - 1)) or _state["lines"] >= MAX_LINES:
        _state["unwritten"] += 1
        return
    ev["reason"] = str(ev.get("reason") or "")[:REASON_MAX] or None
    _write({"t": round(time.time(), 3), "rank": _rank(), "pid": os.getpid(),
            "thread": threading.current_thread().name, "kind": kind, "n": n, **ev,
            "cache": _cache(utils) if utils is not None else None, "totals": _totals()})


def _totals() -> dict:
    return {**_state["totals"], "seconds": round(_state["seconds"], 3)}


def _write(record: dict) -> None:
    import json

    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(_state["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write per line: processes of one run append to one file
    finally:
        os.close(fd)
    _state["lines"] += 1
    _state["unwritten"] = 0


def _at_exit() -> None:
    import threading

    try:
        with _lock:
            if _state.get("unwritten"):
                utils = sys.modules.get("torch._dynamo.utils")
                _write({"t": round(time.time(), 3), "rank": _rank(), "pid": os.getpid(),
                        "thread": threading.current_thread().name, "kind": "totals",
                        "cache": _cache(utils) if utils else None, "totals": _totals()})
    except Exception:  # noqa: BLE001 -- never fail a job at its exit over a statistic
        pass
