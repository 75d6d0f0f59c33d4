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
  - `graph-break`: the frame was split (`restart_reasons`: torch's break reason text), with the line that
    broke (`where`, read from torch's own graph-break log call, InstructionTranslatorBase.log_graph_break)
    beside the function's `def` line (`line`); dynamo's internal restarts (`<class '...RestartAnalysis'>`,
    e.g. TensorifyScalarRestartAnalysis) are no graph break and are not written;
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

Threads and forks: the import hook never takes itself out of sys.meta_path once in (another thread may be
walking that list), torch's text is parsed outside the lock and bounded before it is (a 16,000-character
reason costs what 1,000 do), and a forked child starts with a fresh lock and counts of its own.
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

PARSE_MAX = 1000  # characters of one line of torch's text parsed (the guard and its source line)
PENDING_MAX = 64  # graph-break locations kept per thread until their frame's metrics come

_lock = _thread.allocate_lock()
_state: dict = {}
_local = None  # threading.local(), made with the first event (threading is not imported before)


def install(path: str | None = None) -> bool:
    """Watch this process's compiles into `path` ($REMOTE_COMPILE_WATCH). Cheap: adds an import hook."""
    path = path or os.environ.get(ENV)
    if not path or _state:
        return False
    _state.update(path=path, counts={}, totals={k: 0 for k in KINDS}, seconds=0.0, lines=0, unwritten=0,
                  frames={}, last_reason={})
    wanted = {}
    for name, wrap in (("torch._dynamo.utils", _wrap), ("torch.fx._symbolic_trace", _wrap_fx),
                       ("torch._dynamo.symbolic_convert", _wrap_breaks)):
        module = sys.modules.get(name)
        if module is not None:
            wrap(module)
        else:
            wanted[name] = wrap
    if wanted:
        sys.meta_path.insert(0, _Finder(wanted))
    import atexit

    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork)
    return True


def _after_fork() -> None:
    """A forked child (a DataLoader worker, a subprocess started by fork) may have been forked while another
    thread held the lock: it gets a new one, and counts of its own (its lines carry its own pid)."""
    global _lock, _local
    _lock = _thread.allocate_lock()
    _local = None
    if _state:
        _state.update(counts={}, totals={k: 0 for k in KINDS}, seconds=0.0, lines=0, unwritten=0)


class _Finder:
    """Waits for the modules it wraps to be imported, then wraps them; a finder that finds nothing itself.
    It stays in sys.meta_path once installed: taking it out (or putting it back) while another thread's
    import walks that list makes that import skip the next finder (a ModuleNotFoundError for a module that
    is there). Its own lookup of a name is kept from asking it again by a per-thread flag instead."""

    def __init__(self, wanted: dict):
        self.wanted = dict(wanted)  # module name -> what wraps it once it ran
        self.owner: int | None = None  # the thread inside our own lookup (the import system calls finders under its lock)

    def find_spec(self, name, path=None, target=None):
        if name not in self.wanted or self.owner == _thread.get_ident():
            return None  # nothing to wrap, or asked again from inside our own lookup below
        wrap = self.wanted.pop(name, None)
        if wrap is None:
            return None
        import importlib.util

        self.owner = _thread.get_ident()
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.owner = None
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


def _before(owner, name: str, hook) -> None:
    """owner.name replaced (once) by a wrapper that calls hook(*args, **kwargs) first, never failing the call
    for it, then the original with the same arguments."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_remote_watch", False):
        return

    def wrapper(*args, **kwargs):
        try:
            hook(*args, **kwargs)
        except Exception:  # noqa: BLE001 -- the watch never fails a compile
            pass
        return original(*args, **kwargs)

    wrapper.__name__ = name
    wrapper._remote_watch = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def _wrap(utils) -> None:
    _before(utils, "log_compilation_event", lambda metrics, *args, **kwargs: _on_metrics(metrics, utils))


def _wrap_fx(st) -> None:
    """A compiled function called while FX tracing is in progress runs its Python code when torch's
    error_on_nested_fx_trace is False (the compile race, docs/internals/compile-race.md): no compile record
    says so. Dynamo asks torch.fx._symbolic_trace.is_fx_symbolic_tracing() first (it takes the function when
    torch.compile wraps one); the wrapper answers the same and, when the answer sends the call to eager, names
    the function (once per function; then counts)."""
    original = getattr(st, "is_fx_symbolic_tracing", None)
    if original is None or getattr(original, "_remote_watch", False):
        return

    def is_fx_symbolic_tracing(*args, **kwargs):  # whatever torch's takes, passed on; one Python call per compiled call
        tracing = original(*args, **kwargs)
        if tracing:
            try:
                _nested(sys._getframe(1))
            except Exception:  # noqa: BLE001 -- the watch never fails a call
                pass
        return tracing

    is_fx_symbolic_tracing._remote_watch = True  # type: ignore[attr-defined]
    st.is_fx_symbolic_tracing = is_fx_symbolic_tracing


def _wrap_breaks(sc) -> None:
    """Where a graph break happened: torch's CompilationMetrics names the function (its `def` line) and the
    break's reason, not the line that broke. Dynamo logs each break once, with the user's stack, through
    InstructionTranslatorBase.log_graph_break(code_options, reason, exc): the wrapper keeps the stack's last
    frame (the line that broke, as torch's own trace names it) for this thread until the frame's metrics come."""
    cls = getattr(sc, "InstructionTranslatorBase", None)
    if cls is not None:
        _before(cls, "log_graph_break", lambda self, *args, **kwargs: _break_at(args, kwargs))


def _break_at(args, kwargs) -> None:
    exc = kwargs.get("exc", args[2] if len(args) > 2 else None)
    reason = kwargs.get("reason", args[1] if len(args) > 1 else "")
    if exc is None or getattr(exc, "logged", False):
        return
    stack = getattr(exc, "real_stack", None)
    if not stack:
        guards = sys.modules.get("torch._guards")
        stack = guards.TracingContext.extract_stack() if guards is not None else None
    if not stack:
        return
    last = stack[-1]
    pending = _pending()
    if len(pending) < PENDING_MAX:
        pending.append((str(getattr(last, "filename", "") or ""), getattr(last, "lineno", None),
                        str(reason or "")[:PARSE_MAX]))


def _pending() -> list:
    """This thread's graph-break locations not yet paired with their frame's metrics."""
    global _local
    if _local is None:
        import threading

        _local = threading.local()
    if not hasattr(_local, "breaks"):
        _local.breaks = []
    return _local.breaks


def _short(filename: str, line) -> str | None:
    """`model.py:53` as torch names a source line (its last two path parts)."""
    if not filename or not isinstance(line, int):
        return None
    return "/".join(filename.replace("\\", "/").split("/")[-2:]) + f":{line}"


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


def guard_text(reason: str) -> tuple[str, str | None]:
    """torch's recompile reason -> (the failed guard, the source line it names): `0/3: G['K'] == 3.0   # x * K
    # train.py:11 in f` -> ("G['K'] == 3.0", "train.py:11"). A guard torch made itself names one of its own
    files in parentheses (`# (_dynamo/output_graph.py:3375 in remove_tensorify_specialized_graphargs)`): no
    source line of the job's. Linear in the text, which is bounded first (PARSE_MAX): no regular expression
    that backtracks runs on torch's text."""
    first = _first_line(reason)[:PARSE_MAX]
    head, sep, rest = first.partition(":")  # `0/3: ` -- the frame and its cache entry
    if sep and head.replace("/", "", 1).isdigit() and head.count("/") == 1:
        first = rest.strip()
    parts = first.split("#")
    if len(parts) < 2:
        return first.strip(), None
    guard = parts[0].strip()
    tail = parts[-1].strip()
    if len(parts) >= 3 and not tail.startswith("("):
        place = tail.split(" in ", 1)[0].strip()
        file_, colon, line = place.rpartition(":")
        if colon and file_ and line.isdigit() and " " not in file_:
            return guard, place
    return guard, None


def _first_line(text: str) -> str:
    text = text or ""
    for line in text[:PARSE_MAX * 4].splitlines():  # bounded: torch's first line is what is kept
        if line.strip():
            return line.strip()
    return ""


def internal_restart(reason: str) -> bool:
    """Dynamo restarting its analysis for a reason of its own (it records `str(type(exc))` when the restart
    has no reason: `<class 'torch._dynamo.exc.TensorifyScalarRestartAnalysis'>`), not a graph break."""
    text = (reason or "").strip()
    return text.startswith("<class '") and text.endswith("'>") or text in INTERNAL_RESTARTS


INTERNAL_RESTARTS = ("autograd.grad consumed grad_fns of returned tensors",
                     "source-less requires_grad_() intermediate leaked as output")


def _parse(m) -> dict:
    """What one CompilationMetrics record says, read and parsed without the lock (torch's texts bounded)."""
    forward = getattr(m, "is_forward", True) is not False and not getattr(m, "is_runtime", False)
    restarts = [str(r) for r in sorted(str(x) for x in (getattr(m, "restart_reasons", None) or ()))]
    pending = _pending()
    located: list = []
    if forward:  # a backward compile or runtime autotuning has no break of its own: the next frame keeps them
        located, pending[:] = list(pending), []
    breaks = []
    for r in restarts:
        if internal_restart(r):
            continue
        first = _first_line(r)
        # The location logged with the same reason (its text contains the restart's first line), else the
        # one logged location left when one break is left.
        match = next((x for x in located if first and first in x[2]), None)
        if match is None and len(located) == 1:
            match = located[0]
        if match is not None:
            located.remove(match)
        breaks.append({"reason": first, "where": _short(*match[:2]) if match else None})
    recompile = getattr(m, "recompile_reason", None)
    return {"forward": forward,
            "cid": str(getattr(m, "compile_id", None) or ""), "name": getattr(m, "co_name", None),
            "file": getattr(m, "co_filename", None), "line": getattr(m, "co_firstlineno", None),
            "seconds": _seconds(m), "fail_type": getattr(m, "fail_type", None),
            "fail_reason": _first_line(str(getattr(m, "fail_reason", None) or "")),
            "limit_hit": "recompile limit" in str(getattr(m, "fail_reason", None) or "")[:PARSE_MAX * 4],
            "suppress": getattr(m, "config_suppress_errors", False), "guarded": getattr(m, "has_guarded_code", False),
            "recompile": guard_text(recompile) if recompile else None, "breaks": breaks}


def _events(p: dict) -> list[dict]:
    """The events one parsed CompilationMetrics record stands for (under the lock: it reads and keeps state)."""
    if not p["forward"]:
        return [{"kind": None, "seconds": p["seconds"]}]  # a backward compile or runtime autotuning: time only
    cid = p["cid"]
    frame = cid.split("/")[0] if cid else ""
    name, filename, line = p["name"], p["file"], p["line"]
    if name:
        _state["frames"][frame] = (name, filename, line)
    else:  # the recompile limit is hit before torch names the frame: the same frame id named it before
        name, filename, line = _state["frames"].get(frame, (None, None, None))
    base = {"fn": name, "file": filename, "line": line, "compile_id": cid or None, "seconds": p["seconds"]}
    fail_type, fail_reason = p["fail_type"], p["fail_reason"]
    out = []
    if fail_type:
        if p["limit_hit"] or "RecompileLimit" in fail_type or "CacheLimit" in fail_type:
            guard, where = _state["last_reason"].get(frame, ("", None))
            reason = f"recompile limit reached; last guard failed: {guard}" if guard else fail_reason
            out.append({**base, "kind": "eager-fallback", "why": "recompile-limit", "reason": reason, "where": where})
        elif p["suppress"] and not p["guarded"]:
            out.append({**base, "kind": "eager-fallback", "why": "suppressed-error",
                        "reason": f"{fail_type}: {fail_reason}"})
        return out or [{"kind": None, "seconds": base["seconds"]}]
    if p["recompile"]:
        _state["last_reason"][frame] = p["recompile"]
        guard, where = p["recompile"]
        out.append({**base, "kind": "recompile", "reason": f"guard failed: {guard}", "where": where})
    else:
        out.append({**base, "kind": "compile"})
    for b in p["breaks"]:
        out.append({**base, "kind": "graph-break", "reason": b["reason"], "where": b["where"], "seconds": 0.0})
    return out


def _seconds(m) -> float:
    us = getattr(m, "duration_us", None)
    if isinstance(us, (int, float)):
        return round(us / 1e6, 6)
    s = getattr(m, "entire_frame_compile_time_s", None)
    return round(s, 6) if isinstance(s, (int, float)) else 0.0


def _on_metrics(m, utils) -> None:
    import threading

    parsed = _parse(m)  # torch's texts parsed before the lock: other threads' events do not wait on it
    with _lock:
        for ev in _events(parsed):
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
