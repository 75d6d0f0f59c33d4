"""remote_guard: keep torch.compile from racing when one process drives several devices from threads.

Installed into the container's venv as `remote_guard` by `deploy`; it imports nothing from
`remote` and only the training process imports it (never the controller). Why it exists:

1. On torch <= 2.13, `torch.fx._symbolic_trace._is_fx_tracing_flag` is a module global. While one
   thread compiles (AOTAutograd's make_fx, flex_attention's internals, inductor's pattern matcher
   set it), another thread's compiled function sees it and raises "Detected that you are using FX
   to symbolically trace a dynamo-optimized function" -- or, with error_on_nested_fx_trace=False,
   silently runs eager. A warm cache hides the race; any miss reopens it. Hence: first steps run
   one at a time, then compiling is sealed.
2. Dynamo keeps one list of cache entries per code object. Its lookup (`lookup` in
   torch/csrc/dynamo/extra_state.cpp) walks that list, and a hit moves the entry found to the
   front (`ExtraState::move_to_front`); checking each entry releases the GIL to take the entry's
   mutex (`RootGuardManager::check_nopybind`). When two threads match the SAME entry (two threads
   on one device), one can hit it and move it to the front while the other's walk is behind it:
   that walk ends without seeing it, a miss, and dynamo recompiles in steady state (torch 2.11
   labels this BACKEND_MATCH). Hence: each thread compiles its own copy of the function (its own
   code object, its own entry list), so no two threads ever walk one list. docs/evidence/gpu-race.md has
   the measurements.

Use:
    guard = remote_guard.CompileGuard(devices=[5, 6, 7])     # before worker threads start
    forward = guard.compile(forward_fn)   # a plain function; pass each device's module in
    # in each worker thread, around its first full step (forward, backward, optimizer, eval):
    with guard.first_step(device):
        train_step()
    # steady state: any further compile raises instead of racing or going silently eager
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import types

CACHE_ENV = "REMOTE_COMPILE_CACHE"  # base folder; the guard adds a per-version subfolder
EXPORT_ENV = "REMOTE_EXPORT_CACHE"  # where a warmup writes this process's cache artifacts, when set


def versions() -> dict:
    """torch, its CUDA build, triton and the GPU name: what compile caches depend on."""
    import importlib.metadata as md

    import torch  # type: ignore[import-not-found]  # in the container only: the controller has no torch

    triton = None
    for name in ("triton", "pytorch-triton"):
        try:
            triton = md.version(name)
            break
        except md.PackageNotFoundError:
            pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton, "gpu": gpu}


def cache_subdir(base: str, v: dict | None = None) -> str:
    """A cache folder per torch/CUDA/triton version, so a new venv never reads a stale cache."""
    v = v or versions()
    name = f"torch-{v['torch']}-cuda-{v['cuda'] or 'none'}-triton-{v['triton'] or 'none'}"
    return os.path.join(base, re.sub(r"[^A-Za-z0-9.+_-]", "_", name))


def fx_flag_is_global() -> bool:
    """True where the FX-tracing flag is a module global shared by all threads (torch <= 2.13)."""
    import torch.fx._symbolic_trace as st  # type: ignore[import-not-found]  # in the container only

    return isinstance(getattr(st, "_is_fx_tracing_flag", None), bool)


def fx_tracing_now() -> bool:
    """Whether FX tracing is in progress (in any thread where the flag is global)."""
    import torch.fx._symbolic_trace as st

    if fx_flag_is_global():
        return st._is_fx_tracing_flag
    flag = getattr(st, "_is_fx_tracing_flag", None)
    return bool(getattr(flag, "value", False)) if flag is not None else False


def _in_tmp(path: str) -> bool:
    import tempfile

    return any(os.path.realpath(path).startswith(os.path.realpath(t).rstrip("/") + "/")
               for t in {"/tmp", tempfile.gettempdir()})


def _set(config, names, value, combine=lambda old, new: new) -> str | None:
    """Set the first config name this torch has; returns the name used (torch renames these)."""
    for name in names:
        if hasattr(config, name):
            setattr(config, name, combine(getattr(config, name), value))
            return name
    return None


def configure(devices: int = 1, variants: int = 1, cache_dir: str | None = None) -> dict:
    """Process-wide compile settings; call before any worker thread starts. Returns what was set."""
    import torch

    dyn = torch._dynamo.config
    settings: dict = {}
    base = cache_dir or os.environ.get(CACHE_ENV)
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    if chosen and not cache_dir and not _in_tmp(chosen):
        # The tools already chose the per-version folder for every process they start (or train.env
        # overrode it): adopt it, so guarded and unguarded processes share one cache. A folder under
        # /tmp is torch's own default (importing inductor sets it), never adopted: that is the cache
        # that tmp cleaners delete.
        ind = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(os.path.dirname(ind), "triton"))
        os.makedirs(ind, exist_ok=True)
        settings["cache_dir"] = os.path.dirname(ind.rstrip("/"))
    elif base:
        sub = cache_subdir(base)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(sub, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(sub, "triton")
        os.makedirs(os.environ["TORCHINDUCTOR_CACHE_DIR"], exist_ok=True)
        settings["cache_dir"] = sub
    # Static shapes: no automatic dynamic recompiles, and no per-call dynamic= patching global config.
    settings["static"] = [_set(dyn, ["assume_static_by_default"], True),
                          _set(dyn, ["automatic_dynamic_shapes"], False)]
    # One graph per device (the device index is part of the guards) and per variant (train/eval).
    need = max(8, devices * variants)
    settings["recompile_limit"] = _set(dyn, ["recompile_limit", "cache_size_limit"], need, max)
    _set(dyn, ["accumulated_recompile_limit", "accumulated_cache_size_limit"], need * 8, max)
    # Loud failures: never fall back to eager when nested tracing is detected.
    _set(dyn, ["error_on_nested_fx_trace"], True)
    _set(torch._inductor.config, ["fx_graph_cache"], True)
    _set(torch._functorch.config, ["enable_autograd_cache"], True)
    settings["fx_flag_global"] = fx_flag_is_global()
    return settings


def cache_counters() -> dict:
    """Compile-cache hits and misses so far in this process (inductor FX graphs and AOTAutograd)."""
    from torch._dynamo.utils import counters  # type: ignore[import-not-found]  # in the container only

    ind, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    return {"fxgraph_hit": ind.get("fxgraph_cache_hit", 0), "fxgraph_miss": ind.get("fxgraph_cache_miss", 0),
            "autograd_hit": aot.get("autograd_cache_hit", 0), "autograd_miss": aot.get("autograd_cache_miss", 0)}


STATS_ENV = "REMOTE_CACHE_STATS"  # a folder: each process that used torch.compile writes its counters there


def stats_at_exit() -> None:
    """At exit, write this process's compile-cache counters to $REMOTE_CACHE_STATS/<pid>.json, where
    torch's compiler was imported at all. The venv's remote_cache_stats.pth calls this at start-up
    when the variable is set (a train run sets it to its run folder): any code's hits and misses are
    seen, not only code that imports this module. Imports nothing heavy itself."""
    import atexit

    folder = os.environ.get(STATS_ENV)
    if folder:
        atexit.register(_write_stats, folder)


def _write_stats(folder: str) -> None:
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return
    try:
        counters = utils.counters
        ind, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
        stats = {**cache_counters(), "fxgraph_bypass": ind.get("fxgraph_cache_bypass", 0),
                 "autograd_bypass": aot.get("autograd_cache_bypass", 0),
                 "graphs_compiled": counters.get("stats", {}).get("unique_graphs", 0)}
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.getpid()}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(stats, f)
            f.write("\n")
        os.replace(tmp, os.path.join(folder, f"{os.getpid()}.json"))
    except Exception:  # noqa: BLE001 -- never fail a job at its exit over a statistic
        pass


def _fail_on_recompile() -> str:
    import torch

    if hasattr(torch.compiler, "set_stance"):
        torch.compiler.set_stance("fail_on_recompile")
        return "set_stance(fail_on_recompile)"
    torch._dynamo.config.error_on_recompile = True
    return "error_on_recompile"


def _synchronize(device) -> None:
    import torch

    if torch.cuda.is_available() and str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def _fresh_copy(fn: types.FunctionType) -> types.FunctionType:
    """`fn` with a code object of its own: dynamo keeps one cache-entry list per code object."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    copy.__dict__.update(fn.__dict__)
    return copy


class PerThreadCompiled:
    """What CompileGuard.compile returns: each calling thread runs its own compiled copy of `fn`."""

    def __init__(self, guard: CompileGuard, fn: types.FunctionType, kwargs: dict):
        self.guard, self.fn, self.kwargs = guard, fn, kwargs
        self._local = threading.local()
        self.copies = 0  # how many threads compiled a copy (one code object, one entry list each)

    def __call__(self, *args, **kwargs):
        compiled = getattr(self._local, "compiled", None)
        if compiled is None:
            copy, compiled = self.guard._compile_copy(self.fn, self.kwargs)
            self._local.code, self._local.compiled = copy.__code__, compiled
            self.copies += 1
        return compiled(*args, **kwargs)

    def code(self):
        """This thread's code object (its dynamo cache entries hang off it), or None before its first call."""
        return getattr(self._local, "code", None)


class CompileGuard:
    """Serializes each device's first step, then seals compilation for the steady state."""

    def __init__(self, devices, *, variants: int = 1, cache_dir: str | None = None, enabled: bool = True,
                 timeout: float = 3600.0):
        self.devices = list(devices)
        self.enabled = enabled
        self.settings = configure(len(self.devices), variants, cache_dir) if enabled else {}
        self.sealed = False
        self.sealed_with: str | None = None
        self.steps: list[tuple[str, float, float]] = []  # (device, start, end) of each first step
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(len(self.devices), action=self._seal, timeout=timeout)
        self._compiled: dict = {}
        self._compile_lock = threading.Lock()

    def compile(self, fn, **kwargs):
        """A callable that runs `fn` compiled, with one torch.compile of its own copy of `fn` per thread.

        Dynamo keys its cache on the code object, and its lookup is not safe when two threads hit
        the same entry (the module docstring says why): on 2 H200s, 3 threads over 2 GPUs sharing one
        compiled function missed in steady state in 13 of 40 cold runs (docs/evidence/gpu-race.md). So each thread that calls the
        result gets a copy of `fn` with a code object of its own, compiled on its first call (inside
        its first step, under the lock); the inductor and AOTAutograd caches make the second copy on
        a device cheap. `fn` must be a plain function (pass each device's module in as an argument).
        After the seal, a thread that has no copy yet fails loudly instead of compiling.
        `dynamic=` is refused: per call it patches global config, which races between threads."""
        if "dynamic" in kwargs:
            raise ValueError("remote_guard.compile: pass no dynamic=; the guard sets static shapes globally")
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"remote_guard.compile: pass a plain function, not {type(fn).__name__}: a module's or "
                            "method's code is shared by every instance, so threads would share its cache entries")
        with self._compile_lock:
            if fn not in self._compiled:
                if self.enabled:
                    self._compiled[fn] = PerThreadCompiled(self, fn, kwargs)
                else:  # what unguarded code does: one compiled callable that every thread shares
                    import torch

                    self._compiled[fn] = torch.compile(fn, **kwargs)
            return self._compiled[fn]

    def _compile_copy(self, fn, kwargs):
        import torch

        if self.sealed:
            raise RuntimeError(f"remote_guard: thread {threading.current_thread().name!r} calls {fn.__name__} for "
                               "the first time after the seal; every compiling thread must run guard.first_step")
        copy = _fresh_copy(fn)
        with self._compile_lock:
            return copy, torch.compile(copy, **kwargs)

    @contextlib.contextmanager
    def first_step(self, device):
        """Run the body (one full step on `device`) alone, then wait until every device has done so."""
        if not self.enabled:
            yield
            return
        try:
            with self._lock:
                start = time.time()
                yield
                _synchronize(device)
                self.steps.append((str(device), start, time.time()))
        except BaseException:
            self._barrier.abort()  # the other threads fail loudly instead of waiting forever
            raise
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError("remote_guard: another device's first step failed (see its error above)") from None

    def _seal(self) -> None:
        if fx_tracing_now():
            raise RuntimeError("remote_guard: the FX-tracing flag is still set after every first step: a compile "
                               "leaked it, and compiled code would now fail or run eager; not continuing")
        self.sealed_with = _fail_on_recompile()
        self.sealed = True

    def report(self) -> dict:
        copies = {f.__name__: c.copies for f, c in self._compiled.items() if isinstance(c, PerThreadCompiled)}
        return {"sealed": self.sealed, "sealed_with": self.sealed_with, "settings": self.settings,
                "first_steps": self.steps, "compiled_copies": copies, **cache_counters()}

    def report_line(self) -> str:
        return "REMOTE_GUARD " + json.dumps(self.report())


def export_if_asked() -> str | None:
    """Write this process's compile artifacts (torch.compiler.save_cache_artifacts) and a sidecar of
    versions to $REMOTE_EXPORT_CACHE, if set. Called by warmup entry points after their first step."""
    path = os.environ.get(EXPORT_ENV)
    if not path:
        return None
    import torch

    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        raise RuntimeError("remote_guard: nothing was compiled or loaded in this process: no artifacts to export")
    data, _info = saved
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    with open(path + ".json", "w") as f:
        json.dump(versions(), f)
    return path


def import_artifacts(path: str) -> dict:
    """Load artifacts written by export_if_asked into this version's cache; refuse a version mismatch."""
    import torch

    with open(path + ".json") as f:
        theirs = json.load(f)
    ours = versions()
    diff = {k: (theirs.get(k), ours[k]) for k in ours if theirs.get(k) != ours[k]}
    if diff:
        raise RuntimeError("remote_guard: refusing to import a compile cache made for another setup: " + ", ".join(
            f"{k} {a} (bundle) != {b} (here)" for k, (a, b) in sorted(diff.items())))
    configure()
    with open(path, "rb") as f:
        info = torch.compiler.load_cache_artifacts(f.read())
    return {"loaded": path, "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"), "info": str(info)}
