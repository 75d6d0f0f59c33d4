"""The compile race on real GPUs: the example drafter, 3 threads over 2 GPUs, an empty cache each run.

    python bench/gpu_race.py run --mode noguard --runs 10 --parallel 4 --limit 170 --out DIR
    python bench/gpu_race.py run --mode guard --runs 10 ...
    python bench/gpu_race.py run --mode eager --runs 3 ...
    python bench/gpu_race.py table DIR/*.jsonl          # the markdown table for docs/

Each run is `python -m drafter.train --drafter-gpus 0,1,0` in its own process group with its own
empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, killed at --limit seconds (a hang). Runs of one
mode may go several at a time (--parallel): the race is between the threads inside one process,
and separate processes share no FX-tracing flag (they do share CPU cores, which slows compiling).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = re.compile(r"([\d.]+) Ktok/s")
FX = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


def one_run(mode: str, index: int, args, libdir: str) -> dict:
    cache = Path(tempfile.mkdtemp(prefix=f"race-{mode}-{index}-"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton"),
           "PYTHONPATH": f"{libdir}:{ROOT / 'examples'}", "PYTHONUNBUFFERED": "1",
           # NVLink multicast stays off on shared hosts.
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    env.pop("REMOTE_COMPILE_CACHE", None)
    cmd = [sys.executable, "-m", "drafter.train", "--target-gpus", args.target, "--drafter-gpus", args.drafters,
           "--steps", str(args.steps), "--log-interval", "0.5", "--stagger", str(args.stagger)]
    cmd += {"noguard": ["--no-guard"], "guard": [], "eager": ["--eager"]}[mode]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.limit)
        outcome = "ok" if proc.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        outcome = "hang"
    seconds = time.monotonic() - start
    shutil.rmtree(cache, ignore_errors=True)
    rates = [float(m.group(1)) for m in RATE.finditer(out)]
    steady = rates[1:] or rates  # the first full interval can still include stragglers
    error = None
    if outcome == "error":
        if FX in out:
            error = "FX-tracing error"
        elif "fail_on_recompile" in out:
            error = "recompile after seal"
        else:
            tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
            error = tail[0][:160]
    return {"mode": mode, "stagger": args.stagger, "run": index, "outcome": outcome, "error": error, "seconds": round(seconds, 1),
            "ktok_s": round(statistics.median(steady), 2) if steady else None,
            "uncompiled_warning": "flex_attention called without torch.compile" in out,
            "exit": proc.returncode, "tail": out.strip().splitlines()[-3:]}


def cmd_run(args) -> None:
    libdir = tempfile.mkdtemp(prefix="remote-guard-")
    shutil.copy(ROOT / "remote" / "guard.py", Path(libdir) / "remote_guard.py")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with ThreadPoolExecutor(args.parallel) as pool, open(out / f"{args.mode}.jsonl", "a") as f:
        for r in pool.map(lambda i: one_run(args.mode, i, args, libdir), range(args.runs)):
            results.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"{r['mode']:8} run {r['run']:2}: {r['outcome']:5} {r['seconds']:6.1f}s  "
                  f"{r['ktok_s'] if r['ktok_s'] is not None else '-':>8} Ktok/s  {r['error'] or ''}", flush=True)
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("ok", "error", "hang")}
    print(f"{args.mode}: {counts}")


def cmd_table(args) -> None:
    rows = [json.loads(line) for p in args.files for line in Path(p).read_text().splitlines() if line.strip()]
    print("| mode | runs | clean | errors | hangs | median time to finish (clean runs) | median throughput |")
    print("|---|---|---|---|---|---|---|")
    by_mode = {}
    for r in rows:
        by_mode.setdefault((r["mode"], r.get("stagger", 0.0)), []).append(r)
    for (mode, stagger), rs in sorted(by_mode.items(), key=lambda kv: (["noguard", "guard", "eager"].index(kv[0][0]),
                                                                      kv[0][1])):
        ok = [r for r in rs if r["outcome"] == "ok"]
        errs = sorted({r["error"] for r in rs if r["outcome"] == "error"})
        t = f"{statistics.median(r['seconds'] for r in ok):.1f} s" if ok else "-"
        tp_ok = [r["ktok_s"] for r in ok if r["ktok_s"]]
        tp_any = [r["ktok_s"] for r in rs if r["ktok_s"]]
        if tp_ok:
            tp = f"{statistics.median(tp_ok):.1f} Ktok/s"
        elif tp_any:
            tp = f"{statistics.median(tp_any):.1f} Ktok/s (measured before the runs failed)"
        else:
            tp = "-"
        err_text = f" ({'; '.join(errs)})" if errs else ""
        print(f"| {mode}{f', stagger {stagger:g} s' if stagger else ''} | {len(rs)} | {len(ok)} | "
              f"{sum(r['outcome'] == 'error' for r in rs)}{err_text} | {sum(r['outcome'] == 'hang' for r in rs)} | "
              f"{t} | {tp} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--mode", choices=["noguard", "guard", "eager"], required=True)
    run.add_argument("--runs", type=int, default=10)
    run.add_argument("--parallel", type=int, default=1)
    run.add_argument("--limit", type=float, default=180, help="seconds before a run counts as hung")
    run.add_argument("--steps", type=int, default=400)
    run.add_argument("--target", default="0")
    run.add_argument("--drafters", default="0,1,0", help="one thread per entry")
    run.add_argument("--stagger", type=float, default=0.0, help="passed to drafter.train")
    run.add_argument("--out", required=True)
    table = sub.add_parser("table")
    table.add_argument("files", nargs="+")
    args = ap.parse_args()
    (cmd_run if args.cmd == "run" else cmd_table)(args)


if __name__ == "__main__":
    main()
