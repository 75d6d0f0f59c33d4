"""Local tier: the compile watch (remote/sh/compilewatch.py) in a real process with the real CPU torch.

A venv of the lab's pinned CPU torch is made once per session, with the watch installed the way deploy's
venv-build.sh installs it (the same .pth line, read from that script). Each test runs a tiny compiled
function (backend "eager": Dynamo's events without inductor's compile time) in a subprocess and reads the
compile.jsonl it wrote with the controller's reader (remote.ops.compilelog)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remote.lab import wheels
from remote.ops import compilelog

from support import ROOT  # noqa: E402
WATCH = ROOT / "remote" / "sh" / "compilewatch.py"


def pth_line() -> str:
    """The .pth line venv-build.sh writes (so the test runs what deploy installs, not a copy of it)."""
    text = (ROOT / "remote" / "sh" / "venv-build.sh").read_text()
    m = re.search(r"echo '(import os; os.environ.get\(\"REMOTE_COMPILE_WATCH\"\)[^']*)'", text)
    assert m, "venv-build.sh writes no remote_compile_watch.pth line"
    return m.group(1) + "\n"


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory) -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    wheel = wheels.provide(Path(tmp_path_factory.mktemp("wheels")), sys.executable)
    venv = tmp_path_factory.mktemp("torch-venv") / "v"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "-p", py, str(wheel), "numpy"], check=True)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shutil.copy(WATCH, os.path.join(site, "remote_compilewatch.py"))
    Path(site, "remote_compile_watch.pth").write_text(pth_line())
    return py


PRELUDE = r'''
import json, sys, threading
import torch
torch.set_num_threads(1)
'''


def run(py: str, code: str, out: Path | None, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "REMOTE_COMPILE_WATCH"}
    if out is not None:
        e["REMOTE_COMPILE_WATCH"] = str(out)
    e.update(env)
    r = subprocess.run([py, "-c", PRELUDE + code], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_nothing_is_imported_where_a_run_did_not_ask(torch_python, tmp_path):
    r = subprocess.run([torch_python, "-c", "import sys, json; print(json.dumps(["
                        "'remote_compilewatch' in sys.modules, 'torch' in sys.modules]))"],
                       capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                            if k != "REMOTE_COMPILE_WATCH"})
    assert json.loads(r.stdout) == [False, False]
    r = subprocess.run([torch_python, "-c", "import sys, json; print(json.dumps(["
                        "'remote_compilewatch' in sys.modules, 'torch' in sys.modules]))"],
                       capture_output=True, text=True, env={**os.environ, "REMOTE_COMPILE_WATCH": str(tmp_path / "c")})
    assert json.loads(r.stdout) == [True, False]  # installed, and torch still not imported by it


def test_a_changing_python_float_is_named_with_its_guard_then_the_limit_makes_it_eager(torch_python, tmp_path):
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
torch._dynamo.config.recompile_limit = 4
K = 1.0
@torch.compile(backend="eager", dynamic=False)
def f(x):
    return x * K + 1
x = torch.ones(4)
for i in range(8):
    K = float(i)
    f(x)
''', out)
    h = compilelog.summarize(lines(out))
    kinds = [e.kind for e in h.events]
    assert kinds == ["compile", "recompile", "recompile", "recompile", "eager-fallback"], kinds
    first = h.events[1]
    assert first.fn == "f" and first.line == 8 and first.reason == "guard failed: G['K'] == 0.0"
    assert compilelog.describe(first).startswith("recompile #1 of f (<string>:8): guard failed: G['K'] == 0.0")
    eager = h.events[-1]
    assert eager.fn == "f" and eager.why == "recompile-limit" and "G['K'] == 2.0" in (eager.reason or "")
    assert (h.compiles, h.recompiles, h.eager_fallbacks, h.graph_breaks) == (1, 3, 1, 0)
    assert all(e.pid and e.thread == "MainThread" and e.seconds >= 0 for e in h.events)
    assert set(h.events[0].cache) == {"fxgraph_hit", "fxgraph_miss", "autograd_hit", "autograd_miss"}


def test_an_explicit_graph_break_is_named_with_its_reason(torch_python, tmp_path):
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
@torch.compile(backend="eager")
def g(x):
    x = x * 2
    torch._dynamo.graph_break()
    return x + 1
for _ in range(3):
    g(torch.ones(4))
''', out)
    h = compilelog.summarize(lines(out))
    breaks = [e for e in h.events if e.kind == "graph-break"]
    assert len(breaks) == 1 and breaks[0].fn == "g" and "torch._dynamo.graph_break()" in (breaks[0].reason or "")
    assert h.graph_breaks == 1 and h.recompiles == 0 and h.eager_fallbacks == 0


def test_a_compile_error_swallowed_by_suppress_errors_is_an_eager_fallback(torch_python, tmp_path):
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
torch._dynamo.config.suppress_errors = True
def broken_backend(gm, example_inputs):
    raise RuntimeError("planted backend failure")
h = torch.compile(lambda x: x + 1, backend=broken_backend)
for _ in range(3):
    h(torch.ones(4))
''', out)
    h = compilelog.summarize(lines(out))
    assert [e.kind for e in h.events] == ["eager-fallback"]
    ev = h.events[0]
    assert ev.why == "suppressed-error" and ev.reason.startswith("BackendCompilerFailed")


def test_a_call_during_fx_tracing_that_runs_uncompiled_is_an_eager_fallback(torch_python, tmp_path):
    """The compile race's silent form: with error_on_nested_fx_trace = False, a compiled function called while
    FX tracing is in progress runs its Python code, and torch records no compile (docs/internals/compile-race.md)."""
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
import torch.fx
torch._dynamo.config.error_on_nested_fx_trace = False
f = torch.compile(lambda x: torch.sin(x) * 2, backend="eager")
def traced(x):
    return f(x) + 1
torch.fx.symbolic_trace(traced)
''', out)
    h = compilelog.summarize(lines(out))
    assert [(e.kind, e.why, e.fn) for e in h.events] == [("eager-fallback", "nested-fx-trace", "<lambda>")]
    out2 = tmp_path / "loud.jsonl"  # torch's default: the error is raised, nothing runs eagerly
    r = subprocess.run([torch_python, "-c", PRELUDE + "import torch.fx\nf = torch.compile(lambda x: x * 2, "
                        "backend='eager')\ntry:\n    torch.fx.symbolic_trace(lambda x: f(x))\nexcept RuntimeError:\n"
                        "    pass\n"], env={**os.environ, "REMOTE_COMPILE_WATCH": str(out2)}, capture_output=True)
    assert r.returncode == 0 and lines(out2) == []


def test_a_steady_run_names_only_its_first_compiles(torch_python, tmp_path):
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
m = torch.nn.Linear(4, 4)
step = torch.compile(lambda x: m(x).square().mean(), backend="eager")
for i in range(20):
    step(torch.ones(2, 4)).backward()
''', out)
    h = compilelog.summarize(lines(out))
    assert {e.kind for e in h.events} == {"compile"} and h.recompiles == h.graph_breaks == h.eager_fallbacks == 0


def test_a_million_recompiles_keep_counts_not_lines(torch_python, tmp_path):
    """Bounded: per function and kind the first FULL events, then only the 2^k-th; the totals count all."""
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
import remote_compilewatch as w
w.FULL = 2
torch._dynamo.config.recompile_limit = 40
torch._dynamo.config.accumulated_recompile_limit = 400
K = 0.0
@torch.compile(backend="eager", dynamic=False)
def f(x):
    return x * K
x = torch.ones(2)
for i in range(30):
    K = float(i)
    f(x)
''', out)
    written = [json.loads(line) for line in lines(out)]
    ns = [d["n"] for d in written if d["kind"] == "recompile"]
    assert ns == [1, 2, 4, 8, 16]  # 29 recompiles, 5 lines
    assert written[-1]["kind"] == "totals" and written[-1]["totals"]["recompile"] == 29
    h = compilelog.summarize(lines(out))
    assert h.recompiles == 29 and h.compiles == 1


def test_threads_and_ranks_are_named(torch_python, tmp_path):
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
def work():
    f = torch.compile(lambda x: x * 3, backend="eager")
    f(torch.ones(2))
t = threading.Thread(target=work, name="device-1")
t.start(); t.join()
''', out, RANK="3")
    h = compilelog.summarize(lines(out))
    assert [(e.thread, e.rank) for e in h.events] == [("device-1", 3)]


def test_the_bench_installs_what_deploy_installs():
    """bench/compile_watch.py puts the same .pth line into a venv as venv-build.sh does."""
    assert pth_line().strip() in (ROOT / "bench" / "compile_watch.py").read_text()


def test_a_graph_break_names_the_line_that_broke_beside_the_def_line(torch_python, tmp_path):
    """nanoGPT's planted `.item()` in CausalSelfAttention.forward: torch's own trace names the line that broke,
    the metrics only the function; the event names both (issue 39)."""
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
    def forward(self, x):
        y = self.proj(x)
        s = y.sum().item()
        return y * s
m = torch.compile(Attention(), backend="eager")
for _ in range(3):
    m(torch.ones(2, 8))
''', out)
    h = compilelog.summarize(lines(out))
    [brk] = [e for e in h.events if e.kind == "graph-break"]
    assert (brk.fn, brk.line, brk.where) == ("forward", 10, "<string>:12"), brk  # PRELUDE is 4 lines
    assert "Tensor.item()" in (brk.reason or "")
    assert compilelog.describe(brk).startswith("graph break in forward (<string>:10) at <string>:12: ")


def test_dynamos_internal_restart_is_no_graph_break(torch_python, tmp_path):
    """A Python float that becomes dynamic is specialised by restarting the analysis: torch records
    `<class 'torch._dynamo.exc.TensorifyScalarRestartAnalysis'>` among the frame's restart reasons. No graph
    break: nothing to remove from the code (issue 39)."""
    out = tmp_path / "compile.jsonl"
    run(torch_python, r'''
_TEMP = 1.0
def f(x, s):
    global _TEMP
    _TEMP = _TEMP * 0.5
    return x * s * 2.0
g = torch.compile(f, backend="aot_eager")
for i in range(4):
    g(torch.ones(3), 1.0 + i)
''', out)
    h = compilelog.summarize(lines(out))
    assert h.recompiles >= 2 and h.graph_breaks == 0, [(e.kind, e.reason) for e in h.events]
    assert compilelog.findings(h) == [] or "graph-breaks" not in {f.code for f in compilelog.findings(h)}
    recompiles = [e for e in h.events if e.kind == "recompile"]
    assert any(e.reason == "guard failed: G['_TEMP'] == 0.5" and e.where is None for e in recompiles)


def test_an_import_in_another_thread_never_misses_a_finder(torch_python, tmp_path):
    """The watch's import hook stays where it is while torch's compiler is imported: a thread importing
    modules meanwhile finds each (issue 39; the hook used to leave sys.meta_path during its own lookup)."""
    out = tmp_path / "compile.jsonl"
    r = run(torch_python, r'''
import importlib, sys
names = [m for m in ("json.decoder", "email.parser", "http.client", "xml.dom.minidom", "csv", "decimal",
                     "fractions", "statistics", "difflib", "textwrap", "calendar", "zipfile")]
seen = []
def importer():
    for n in names * 20:
        sys.modules.pop(n, None)
        importlib.import_module(n)
        seen.append(n)
t = threading.Thread(target=importer)
t.start()
import torch._dynamo.utils  # the watch's hook wraps it now, in this thread
t.join()
print(len(seen))
''', out)
    assert r.stdout.strip().splitlines()[-1] == str(12 * 20)
