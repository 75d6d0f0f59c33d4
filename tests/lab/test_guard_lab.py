"""Lab tier: the compile guard with the real torch 2.13 (CPU) inside the container.

On torch <= 2.13 the FX-tracing flag is a module global. The first test makes the leak
deterministic (one thread holds FX tracing open while another calls a compiled function) and
shows that the guard's serialized first steps remove it; the others check what the guard
promises: non-overlapping first steps, a seal that makes later compiles fail loudly, a refusal
to continue with the flag stuck, no hang when one device's first step fails, and two threads on
one device that each walk their own dynamo cache list (docs/evidence/gpu-race.md: sharing one list is
what made 3 threads over 2 GPUs recompile in steady state).
"""

import json

import pytest

pytestmark = pytest.mark.lab

PRELUDE = r'''
import json, threading, time, torch, remote_guard
import torch.fx
torch.set_num_threads(1)

def compiled():
    f = torch.compile(lambda x: torch.sin(x) * 2, backend="aot_eager")
    return f

def slow_traced(x):
    time.sleep(0.8)  # FX symbolic tracing stays open this long, flag set, like a long make_fx
    return x + 1
'''

RACE = PRELUDE + r'''
use_guard = __import__("sys").argv[1] == "1"
guard = remote_guard.CompileGuard(["a", "b"], enabled=use_guard)
f = compiled()
tracing = threading.Event()
errors = []

def a():
    def traced(x):
        tracing.set()
        return slow_traced(x)
    with guard.first_step("a"):
        torch.fx.symbolic_trace(traced)

def b():
    tracing.wait()
    try:
        with guard.first_step("b"):
            f(torch.ones(4))
    except RuntimeError as e:
        errors.append(str(e)[:90])

ts = [threading.Thread(target=a), threading.Thread(target=b)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"global_flag": remote_guard.fx_flag_is_global(), "errors": errors, "sealed": guard.sealed}))
'''


def run_py(ct, code, *args, check=True):
    return ct.run(["python", "-c", code, *args], cwd="/root", env={"REMOTE_COMPILE_CACHE": "/root/.cache/guard-test"},
                  timeout=600, check=check)


def test_fx_flag_leaks_across_threads_without_the_guard_and_not_with_it(deployed, ct):
    without = json.loads(run_py(ct, RACE, "0").out)
    assert without["global_flag"] is True  # torch 2.13: the flag is shared by all threads
    assert without["errors"] and "Detected that you are using FX to symbolically trace" in without["errors"][0]
    guarded = json.loads(run_py(ct, RACE, "1").out)
    assert guarded == {"global_flag": True, "errors": [], "sealed": True}


SERIAL = PRELUDE + r'''
guard = remote_guard.CompileGuard(["d0", "d1", "d2"])
f = compiled()
def worker(i):
    with guard.first_step(f"d{i}"):
        f(torch.ones(8))
        time.sleep(0.2)
    f(torch.ones(8))  # steady state: same shapes, no compile
ts = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
try:
    f(torch.ones(3, 3))  # a new shape after the seal must fail loudly, not compile in a race
    late = None
except RuntimeError as e:
    late = str(e)[:80]
print(json.dumps({"steps": guard.steps, "late": late, "report": guard.report()}))
'''


def test_first_steps_never_overlap_and_a_later_compile_raises(deployed, ct):
    out = json.loads(run_py(ct, SERIAL).out)
    steps = sorted(out["steps"], key=lambda s: s[1])
    assert len(steps) == 3
    assert all(prev[2] <= nxt[1] for prev, nxt in zip(steps, steps[1:])), steps
    assert out["late"] and "fail_on_recompile" in out["late"]
    assert out["report"]["sealed"] and out["report"]["settings"]["static"] == [
        "assume_static_by_default", "automatic_dynamic_shapes"]


STUCK = PRELUDE + r'''
guard = remote_guard.CompileGuard(["d0"])
try:
    with guard.first_step("d0"):
        torch.fx._symbolic_trace._is_fx_tracing_flag = True  # what a leaked compile leaves behind
    print("continued")
except RuntimeError as e:
    print("refused:", str(e)[:100])
'''

FAILING = PRELUDE + r'''
guard = remote_guard.CompileGuard(["d0", "d1"], timeout=60)
out = {}
def worker(i):
    try:
        with guard.first_step(f"d{i}"):
            if i == 0:
                raise ValueError("boom on d0")
            time.sleep(0.2)
    except Exception as e:
        out[i] = f"{type(e).__name__}: {e}"
ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
t0 = time.time(); [t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"out": out, "seconds": time.time() - t0}))
'''


def test_seal_refuses_a_stuck_fx_flag(deployed, ct):
    assert run_py(ct, STUCK).out.startswith("refused: remote_guard: the FX-tracing flag is still set")


def test_a_failing_first_step_fails_the_others_instead_of_hanging(deployed, ct):
    out = json.loads(run_py(ct, FAILING).out)
    assert out["out"]["0"] == "ValueError: boom on d0"
    assert "another device's first step failed" in out["out"]["1"]
    assert out["seconds"] < 30  # well before the barrier's 60 s timeout: nobody waited for it


def test_cache_folder_is_per_version_and_outside_tmp(deployed, ct):
    out = run_py(ct, "import remote_guard, os; s = remote_guard.configure(); print(s['cache_dir']); "
                     "print(os.environ['TORCHINDUCTOR_CACHE_DIR']); print(os.environ['TRITON_CACHE_DIR'])").out.split()
    assert out[0] == "/root/.cache/guard-test/torch-2.13.0+cpu-cuda-none-triton-none"
    assert out[1] == out[0] + "/inductor" and out[2] == out[0] + "/triton"


COMPILE_API = PRELUDE + r'''
guard = remote_guard.CompileGuard(["d0"])
def fn(x):
    return x * 2
same = guard.compile(fn) is guard.compile(fn)
refused = []
for bad in (dict(dynamic=True), dict(fn=torch.nn.Linear(2, 2))):
    try:
        guard.compile(**{"fn": fn, **bad})
    except (ValueError, TypeError) as e:
        refused.append(type(e).__name__)
f = guard.compile(fn, backend="eager")
with guard.first_step("d0"):
    f(torch.ones(2))
late = []
def latecomer():  # a thread that ran no first step: after the seal it must not compile
    try:
        f(torch.ones(2))
    except RuntimeError as e:
        late.append(str(e)[:200])
t = threading.Thread(target=latecomer, name="latecomer"); t.start(); t.join()
print(json.dumps({"same": same, "refused": refused, "late": late}))
'''


def test_guard_compile_is_one_callable_per_function_refuses_dynamic_and_modules_and_latecomers(deployed, ct):
    out = json.loads(run_py(ct, COMPILE_API).out)
    assert out["same"] is True and out["refused"] == ["ValueError", "TypeError"]
    assert len(out["late"]) == 1 and "'latecomer' calls fn for the first time after the seal" in out["late"][0]


TWO_ON_ONE = PRELUDE + r'''
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.utils import counters

guard = remote_guard.CompileGuard(["cpu", "cpu"])
def step_fn(w, x):
    return torch.sin(x @ w).sum()
f = guard.compile(step_fn, backend="aot_eager")
frames = {}
sealed = threading.Barrier(2, action=lambda: frames.update(at_seal=dict(counters["frames"])))
out = {"errors": [], "codes": {}, "steady": [0, 0]}
def worker(i):
    w = torch.randn(4, 4, requires_grad=True)
    try:
        with guard.first_step("cpu"):
            f(w, torch.ones(3, 4)).backward()
        sealed.wait()  # both first steps ran and the guard sealed: from here on, steady state only
        for _ in range(200):
            f(w, torch.ones(3, 4)).backward()
            out["steady"][i] += 1
        out["codes"][i] = f.code()
    except Exception as e:
        out["errors"].append(f"{type(e).__name__}: {str(e)[:160]}")
ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
codes = [out["codes"].get(i) for i in range(2)]
print(json.dumps({
    "errors": out["errors"], "steady": out["steady"], "sealed": guard.sealed,
    "own_code_each": None not in codes and codes[0] is not codes[1]
                     and all(c is not step_fn.__code__ for c in codes),
    "entries": [len(_debug_get_cache_entry_list(c)) for c in codes if c is not None],
    "shared_entries": len(_debug_get_cache_entry_list(step_fn.__code__)),
    "frames_at_seal": frames.get("at_seal"), "frames_at_end": dict(counters["frames"]),
    "copies": guard.report()["compiled_copies"]}))
'''


def test_two_threads_on_one_device_each_walk_their_own_cache_list_and_compile_nothing_after_the_seal(deployed, ct):
    out = json.loads(run_py(ct, TWO_ON_ONE).out)
    assert out["errors"] == [] and out["steady"] == [200, 200] and out["sealed"]
    # The mechanism: one code object per thread, one cache entry on each, none on the shared function,
    # so no dynamo lookup ever walks a list that another thread's hit reorders.
    assert out["own_code_each"] and out["entries"] == [1, 1] and out["shared_entries"] == 0
    assert out["copies"] == {"step_fn": 2}
    # The second thread's steady steps compiled nothing: dynamo saw no new frame after the seal.
    assert out["frames_at_seal"] == out["frames_at_end"] and out["frames_at_end"]["ok"] == 2
