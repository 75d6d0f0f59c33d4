"""The compile watch's cost and what it names, side by side (issue 33).

Runs in a Python that has torch and the watch installed the way deploy installs it (remote_compilewatch.py
and remote_compile_watch.pth in site-packages; `--install` puts them into this interpreter's venv):

  python bench/compile_watch.py --install --device cpu --out result.json

- start-up: `python -c pass` with REMOTE_COMPILE_WATCH set and unset, interleaved (the .pth's cost);
- step time: a steady compiled model with the watch and without, interleaved rounds, median step time
  after the first steady step (goal: the watch costs <= 1% of step time);
- planted: a Python float that changes each step (recompiles: named with its guard within 10 steps, then
  the recompile limit: eager fallback), an explicit graph break (named with its reason), a steady run
  (names nothing but its first compile);
- visibility: how long after torch finished a compile its line can be read from compile.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WATCH = HERE.parent / "remote" / "sh" / "compilewatch.py"
PTH = 'import os; os.environ.get("REMOTE_COMPILE_WATCH") and __import__("remote_compilewatch").install()\n'


def install() -> str:
    site = sysconfig.get_paths()["purelib"]
    shutil.copy(WATCH, os.path.join(site, "remote_compilewatch.py"))
    Path(site, "remote_compile_watch.pth").write_text(PTH)
    return site


CHILD = r'''
import json, os, sys, time
import torch
scenario, device, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
dim = 1024 if device == "cuda" else 256
model = torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(4)]).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
SCALE = 1.0

def loss_fn(model, x):
    h = model(x)
    if scenario == "graph-break":
        torch._dynamo.graph_break()
    return (h * SCALE).square().mean()

step_fn = torch.compile(loss_fn, dynamic=False)
x = torch.randn(64 if device == "cpu" else 4096, dim, device=device)
times = []
for i in range(steps):
    if scenario == "recompile":
        SCALE = 1.0 + i / 100  # a Python float that changes each step
    t0 = time.time()
    loss = step_fn(model, x)
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    t1 = time.time()
    times.append((t0, t1))
    print(f"step {i} {1000 * (t1 - t0):.2f} ms", flush=True)
json.dump({"torch": torch.__version__, "times": times}, open(out, "w"))
'''


def child(scenario: str, device: str, steps: int, watch: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "REMOTE_COMPILE_WATCH"}
    if watch:
        env["REMOTE_COMPILE_WATCH"] = watch
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        subprocess.run([sys.executable, "-c", CHILD, scenario, device, str(steps), out.name], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out.name))


def events(path: str) -> list[dict]:
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


PER_CALL = r'''
import json, sys, time
import torch
import torch.fx._symbolic_trace as st
wrapped = st.is_fx_symbolic_tracing
assert getattr(wrapped, "_remote_watch", False), "the watch is not installed"
with_watch = torch.compile(lambda x: x + 1, backend="eager")  # takes the wrapped function, as Dynamo does
original = wrapped.__closure__[0].cell_contents if wrapped.__closure__ else None
st.is_fx_symbolic_tracing = original
without = torch.compile(lambda x: x + 1, backend="eager")  # takes torch's own
st.is_fx_symbolic_tracing = wrapped
x = torch.ones(1)
with_watch(x); without(x)
on, off = [], []
for r in range(int(sys.argv[1])):
    for f, into in ((with_watch, on), (without, off)) if r % 2 == 0 else ((without, off), (with_watch, on)):
        t0 = time.perf_counter()
        for _ in range(2000):
            f(x)
        into.append((time.perf_counter() - t0) / 2000)
on.sort(); off.sort()
print(json.dumps({"with_us": on[len(on) // 2] * 1e6, "without_us": off[len(off) // 2] * 1e6}))
'''


def per_call(rounds: int) -> dict:
    """What the watch adds to each call of a compiled function in steady state (its is_fx_symbolic_tracing
    wrapper), in one process, interleaved: the figure that holds whatever the machine's load."""
    env = {**os.environ, "REMOTE_COMPILE_WATCH": os.path.join(tempfile.gettempdir(), "bench-per-call.jsonl")}
    r = subprocess.run([sys.executable, "-c", PER_CALL, str(rounds)], env=env, check=True, capture_output=True,
                       text=True)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return {"with_us": round(got["with_us"], 3), "without_us": round(got["without_us"], 3),
            "added_us": round(got["with_us"] - got["without_us"], 3), "rounds": rounds, "calls_per_round": 2000}


def startup(rounds: int) -> dict:
    on, off = [], []
    for _ in range(rounds):
        for watch, into in ((True, on), (False, off)):
            env = {k: v for k, v in os.environ.items() if k != "REMOTE_COMPILE_WATCH"}
            if watch:
                env["REMOTE_COMPILE_WATCH"] = os.path.join(tempfile.gettempdir(), "bench-start.jsonl")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            into.append(time.perf_counter() - t0)
    return {"with_ms": round(1000 * statistics.median(on), 2), "without_ms": round(1000 * statistics.median(off), 2),
            "cost_ms": round(1000 * (statistics.median(on) - statistics.median(off)), 2), "rounds": rounds}


def step_cost(device: str, rounds: int, steps: int) -> dict:
    on, off = [], []
    folder = tempfile.mkdtemp()
    for r in range(rounds):
        for watch, into in ((True, on), (False, off)) if r % 2 == 0 else ((False, off), (True, on)):
            res = child("steady", device, steps, os.path.join(folder, f"{r}.jsonl") if watch else None)
            dts = [b - a for a, b in res["times"][2:]]  # after the first steady step
            into.append(statistics.median(dts))
    shutil.rmtree(folder, ignore_errors=True)
    w, wo = statistics.median(on), statistics.median(off)
    return {"with_ms": round(1000 * w, 4), "without_ms": round(1000 * wo, 4), "ratio": round(w / wo, 4),
            "rounds": rounds, "steps": steps, "per_round_with_ms": [round(1000 * v, 4) for v in on],
            "per_round_without_ms": [round(1000 * v, 4) for v in off]}


def planted(device: str, steps: int) -> dict:
    out = {}
    folder = tempfile.mkdtemp()
    for scenario in ("steady", "recompile", "graph-break"):
        path = os.path.join(folder, f"{scenario}.jsonl")
        res = child(scenario, device, steps, path)
        evs = events(path)
        ends = [b for _, b in res["times"]]

        def step_of(t: float, ends: list = ends) -> int:
            return next((i for i, end in enumerate(ends) if t <= end), len(ends))

        named = [{"kind": e["kind"], "fn": e.get("fn"), "line": e.get("line"), "n": e.get("n"), "why": e.get("why"),
                  "reason": e.get("reason"), "step": step_of(e["t"]), "seconds": e.get("seconds")}
                 for e in evs if e.get("kind") != "compile"]
        out[scenario] = {"torch": res["torch"], "lines": len(evs),
                         "compiles": sum(e["kind"] == "compile" for e in evs), "named": named[:12],
                         "first_named_step": min((n["step"] for n in named), default=None)}
    shutil.rmtree(folder, ignore_errors=True)
    return out


def visibility(device: str) -> dict:
    """Seconds from torch's record of a compile (the event's t) to a reader seeing its line."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "c.jsonl")
    env = {**os.environ, "REMOTE_COMPILE_WATCH": path}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "recompile", device, "6", os.path.join(folder, "o.json")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lags, seen = [], 0
    while proc.poll() is None:
        evs = events(path)
        now = time.time()
        for e in evs[seen:]:
            lags.append(now - e["t"])
        seen = len(evs)
        time.sleep(0.01)
    shutil.rmtree(folder, ignore_errors=True)
    return {"events": len(lags), "max_s": round(max(lags), 4) if lags else None,
            "median_s": round(statistics.median(lags), 4) if lags else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--install", action="store_true", help="put the watch into this interpreter's site-packages")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--planted-steps", type=int, default=12)
    ap.add_argument("--only", help="comma-separated parts to run (per_call, startup, planted, visibility, step)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.install:
        install()
    import torch  # noqa: F401 -- fail here, not in a child, where torch is missing

    result: dict = {"python": sys.version.split()[0], "device": args.device, "torch": torch.__version__}
    if args.device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
        result["capability"] = "sm_{}{}".format(*torch.cuda.get_device_capability(0))
    parts = [("per_call", lambda: per_call(40)),
             ("startup", lambda: startup(max(10, args.rounds * 2))),
             ("planted", lambda: planted(args.device, args.planted_steps)),
             ("visibility", lambda: visibility(args.device)),
             ("step", lambda: step_cost(args.device, args.rounds, args.steps))]
    only = set(args.only.split(",")) if args.only else None
    for name, part in parts:  # each part saved as it ends: a run cut short keeps what it measured
        if only is not None and name not in only:
            continue
        result[name] = part()
        text = json.dumps(result, indent=1)
        if args.out:
            Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
