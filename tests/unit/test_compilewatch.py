"""Unit tier: the compile watch (remote/sh/compilewatch.py) as a module, with CompilationMetrics-like objects:
its import hook beside other threads' imports, a fork, the FX wrapper, torch's texts (parsed outside the lock,
bounded) and what a graph break is. tests/local/test_compilewatch_local.py runs it under the real CPU torch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types

import pytest
from support import ROOT  # noqa: E402

WATCH = ROOT / "remote" / "sh" / "compilewatch.py"


def load(name: str = "watch_under_test"):
    spec = importlib.util.spec_from_file_location(name, WATCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics(**kw):
    base = dict(is_forward=True, is_runtime=False, compile_id="0/0", co_name="forward", co_filename="/r/model.py",
                co_firstlineno=52, duration_us=1000, fail_type=None, fail_reason=None, recompile_reason=None,
                restart_reasons=set(), config_suppress_errors=False, has_guarded_code=True)
    return types.SimpleNamespace(**{**base, **kw})


def events_of(w, m) -> list[dict]:
    return [e for e in w._events(w._parse(m)) if e.get("kind")]


@pytest.fixture
def w(tmp_path):
    w = load()
    w._state.update(path=str(tmp_path / "compile.jsonl"), counts={}, totals={k: 0 for k in w.KINDS}, seconds=0.0,
                    lines=0, unwritten=0, frames={}, last_reason={})
    return w


@pytest.mark.fault("Compile watch beside another thread's import", promise="its import hook never leaves or "
                   "re-enters sys.meta_path once installed: no import of another thread skips a finder")
def test_the_import_hook_never_takes_itself_out_of_meta_path(tmp_path, monkeypatch):
    w = load()
    (tmp_path / "watched_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[list] = []
    wrapped: list = []

    class Spy:  # the next finder: what another thread's import would walk past meanwhile
        def find_spec(self, name, path=None, target=None):
            if name == "watched_mod":
                seen.append(list(sys.meta_path))
            return None

    finder = w._Finder({"watched_mod": wrapped.append})
    monkeypatch.setattr(sys, "meta_path", [finder, Spy(), *sys.meta_path])
    before = list(sys.meta_path)
    sys.modules.pop("watched_mod", None)
    try:
        import watched_mod  # noqa: F401
    finally:
        sys.modules.pop("watched_mod", None)
    assert [m.__name__ for m in wrapped] == ["watched_mod"]
    assert seen and all(s == before for s in seen), "the finder left sys.meta_path during a lookup"
    assert sys.meta_path == before
    assert finder.find_spec("watched_mod") is None  # done: inert, and still in place


FORK = r'''
import importlib.util, json, os, sys, threading, types
spec = importlib.util.spec_from_file_location("w", sys.argv[1]); w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
w.install(sys.argv[2])
m = types.SimpleNamespace(is_forward=True, compile_id="0/0", co_name="f", co_filename="t.py", co_firstlineno=1,
                          duration_us=5, recompile_reason=None, restart_reasons=set())
w._on_metrics(m, None); w._on_metrics(m, None)
held = threading.Event(); release = threading.Event()
def hold():
    with w._lock:
        held.set(); release.wait()
t = threading.Thread(target=hold); t.start(); held.wait()
pid = os.fork()  # while another thread holds the watch's lock
if pid == 0:
    locked = w._lock.locked()
    print(json.dumps({"locked": locked}), flush=True)
    if not locked:  # a held lock here would never be released: the child would hang at its first event
        w._on_metrics(m, None)
    os._exit(0)
release.set(); t.join()
os.waitpid(pid, 0)
'''


@pytest.mark.fault("Compile watch in a forked child", promise="a child forked while another thread held the "
                   "watch's lock gets a fresh lock and counts of its own: its first compile event is written")
def test_a_child_forked_while_the_lock_is_held_records_its_own_events(tmp_path):
    out = tmp_path / "compile.jsonl"
    r = subprocess.run([sys.executable, "-c", FORK, str(WATCH), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"locked": False}
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    pids = sorted({d["pid"] for d in lines})
    assert len(pids) == 2
    child = [d for d in lines if d["pid"] != lines[0]["pid"]]
    assert [d["totals"]["compile"] for d in child] == [1]  # its own count, not its parent's 2 plus one


def test_the_fx_wrapper_passes_on_what_torch_passes(w):
    st = types.SimpleNamespace(is_fx_symbolic_tracing=lambda *args, **kwargs: (args, kwargs) if args or kwargs
                               else False)
    w._wrap_fx(st)
    assert st.is_fx_symbolic_tracing() is False
    assert st.is_fx_symbolic_tracing(print) == ((print,), {})  # torch's takes the function where it wraps one
    assert st.is_fx_symbolic_tracing(fn=print) == ((), {"fn": print})


@pytest.mark.fault("Compile watch given a huge torch text", promise="torch's reason is bounded before it is parsed, "
                   "without a backtracking regular expression, and outside the watch's lock")
def test_torchs_text_is_parsed_bounded_and_outside_the_lock(w):
    assert w.guard_text("0/3: G['K'] == 3.0   # x * K  # train.py:11 in f") == ("G['K'] == 3.0", "train.py:11")
    assert w.guard_text("G['_TEMP'] == 0.5  # (_dynamo/output_graph.py:3375 in remove_tensorify_specialized_graphargs)"
                        ) == ("G['_TEMP'] == 0.5", None)
    assert w.guard_text("tensor 'x' size mismatch at index 0") == ("tensor 'x' size mismatch at index 0", None)
    assert w.guard_text("") == ("", None)
    huge = "G['K'] == 1.0" + " " * 16000 + "#" + " " * 16000 + "x"  # quadratic for the old regular expression
    guard, where = w.guard_text(huge)
    assert guard == "G['K'] == 1.0" and where is None
    assert len(w.guard_text("y" * 16000)[0]) == w.PARSE_MAX
    locked_while_read: list[bool] = []

    class M(types.SimpleNamespace):
        @property
        def recompile_reason(self):
            locked_while_read.append(w._lock.locked())
            return "0/1: G['K'] == 2.0  # x * K  # train.py:11 in f"

    m = M(**{k: v for k, v in vars(metrics()).items() if k != "recompile_reason"})
    w._on_metrics(m, None)
    assert locked_while_read == [False]
    written = [json.loads(x) for x in open(w._state["path"])]
    assert [(d["kind"], d["reason"], d["where"]) for d in written] == [
        ("recompile", "guard failed: G['K'] == 2.0", "train.py:11")]


@pytest.mark.fault("Dynamo restarting its analysis (TensorifyScalarRestartAnalysis)", promise="not counted or "
                   "shown as a graph break: only breaks of the job's code are")
def test_dynamos_internal_restarts_are_no_graph_break(w):
    m = metrics(restart_reasons={"<class 'torch._dynamo.exc.TensorifyScalarRestartAnalysis'>",
                                 "autograd.grad consumed grad_fns of returned tensors"})
    assert [e["kind"] for e in events_of(w, m)] == ["compile"]
    m = metrics(restart_reasons={"Unsupported Tensor.item() call with capture_scalar_outputs=False"})
    assert [e["kind"] for e in events_of(w, m)] == ["compile", "graph-break"]


@pytest.mark.fault("A graph break in a function's body", promise="named at the line that broke (as torch's own "
                   "trace names it) and at the function's def line, both")
def test_a_graph_break_names_the_line_that_broke_and_the_def_line(w):
    sc = types.ModuleType("sc")

    class InstructionTranslatorBase:
        def log_graph_break(self, code_options, reason, exc):
            exc.logged = True

    sc.InstructionTranslatorBase = InstructionTranslatorBase
    w._wrap_breaks(sc)
    frame = types.SimpleNamespace(filename="/root/nanoGPT/model.py", lineno=53)
    exc = types.SimpleNamespace(logged=False, real_stack=[types.SimpleNamespace(filename="/x/train.py", lineno=9),
                                                          frame])
    InstructionTranslatorBase().log_graph_break({}, "Encountered graph break when attempting to trace CALL\n\n"
                                                "Unsupported Tensor.item() call with capture_scalar_outputs=False",
                                                exc)
    InstructionTranslatorBase().log_graph_break({}, "again", exc)  # torch's "already logged": not a second break
    m = metrics(restart_reasons={"Unsupported Tensor.item() call with capture_scalar_outputs=False"})
    (brk,) = [e for e in events_of(w, m) if e["kind"] == "graph-break"]
    assert (brk["fn"], brk["line"], brk["where"]) == ("forward", 52, "nanoGPT/model.py:53")
    assert w._pending() == []  # paired with its frame's metrics, not carried to the next frame
