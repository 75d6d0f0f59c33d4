"""The compile race on real GPUs: the example drafter, 3 threads over 2 GPUs, an empty cache each run.

    python bench/gpu_race.py run --mode noguard --runs 10 --parallel 4 --limit 170 --out DIR
    python bench/gpu_race.py run --mode guard --runs 10 ...
    python bench/gpu_race.py run --mode eager --runs 3 ...
    python bench/gpu_race.py warmup --cache DIR           # what `remote warmup` runs, per device
    python bench/gpu_race.py run --mode guard --cache DIR ...   # warm: runs share that cache
    python bench/gpu_race.py table DIR/*.jsonl          # the markdown table for docs/

Each run is `python -m drafter.train --drafter-gpus 0,1,0` in its own process group, killed at
--limit seconds (a hang), with its own empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR unless
--cache names a persistent one. Runs of one mode may go several at a time (--parallel): the race
is between the threads inside one process, and separate processes share no FX-tracing flag (they
do share CPU cores, which slows compiling). Every JSON line records the layout (`drafters`).
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
FIRST_STEP = re.compile(r"first step begins ([\d.]+)s after process start")
FIRST_STEADY = re.compile(r"first steady step of every thread ([\d.]+)s after process start")
FX = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


# Runs drafter.train with a GIL switch interval of $RACE_SWITCH_INTERVAL seconds (--switch-interval).
PRELUDE = ("import os, runpy, sys; sys.setswitchinterval(float(os.environ['RACE_SWITCH_INTERVAL'])); "
           "sys.argv[0] = 'drafter.train'; runpy.run_module('drafter.train', run_name='__main__')")


def child_env(args, libdir: str, cache: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{libdir}:{ROOT / 'examples'}", "PYTHONUNBUFFERED": "1",
           # NVLink multicast stays off on shared hosts.
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    for name in ("REMOTE_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(name, None)
    if cache is None:  # warm: the persistent cache, as `remote warmup` and the training job see it
        env["REMOTE_COMPILE_CACHE"] = str(Path(args.cache).resolve())
    else:
        env.update(TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TRITON_CACHE_DIR=str(cache / "triton"))
    for item in args.env or []:
        name, _, value = item.partition("=")
        env[name] = value
    return env


def one_run(mode: str, index: int, args, libdir: str) -> dict:
    cache = None if args.cache else Path(tempfile.mkdtemp(prefix=f"race-{mode}-{index}-"))
    env = child_env(args, libdir, cache)
    train = ["--target-gpus", args.target, "--drafter-gpus", args.drafters,
             "--steps", str(args.steps), "--log-interval", "0.5", "--stagger", str(args.stagger)]
    train += {"noguard": ["--no-guard"], "guard": [], "eager": ["--eager"]}[mode]
    if args.switch_interval:
        env["RACE_SWITCH_INTERVAL"] = str(args.switch_interval)
        cmd = [sys.executable, "-c", PRELUDE, *train]
    else:
        cmd = [sys.executable, "-m", "drafter.train", *train]
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
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.log_dir) / f"{args.label or mode}-{index}.log".replace(" ", "_")).write_text(out)
    rates = [float(m.group(1)) for m in RATE.finditer(out)]
    steady = rates[1:] or rates  # the first full interval can still include stragglers
    first = FIRST_STEADY.search(out)
    begins = FIRST_STEP.search(out)
    threads = len([d for d in args.drafters.split(",") if d])
    error = None
    if outcome == "error":
        if FX in out:
            error = "FX-tracing error"
        elif "fail_on_recompile" in out:
            error = "recompile after seal"
        else:
            tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
            error = tail[0][:160]
    ktok = round(statistics.median(steady), 2) if steady else None
    return {"mode": mode, "drafters": args.drafters, "target": args.target, "stagger": args.stagger,
            "label": args.label, "guard": args.guard_name, "cache": "warm" if args.cache else "cold",
            "switch_interval": args.switch_interval, "run": index, "outcome": outcome, "error": error,
            "seconds": round(seconds, 1), "first_step_begins_s": float(begins.group(1)) if begins else None,
            "first_steady_s": float(first.group(1)) if first else None,
            "ktok_s": ktok, "ktok_s_per_thread": round(ktok / threads, 2) if ktok else None,
            "uncompiled_warning": "flex_attention called without torch.compile" in out,
            "exit": proc.returncode, "tail": out.strip().splitlines()[-3:]}


def install_guard(args) -> str:
    """A folder holding the guard as `remote_guard` (the repository's, or --guard FILE)."""
    libdir = tempfile.mkdtemp(prefix="remote-guard-")
    source = Path(args.guard) if args.guard else ROOT / "remote" / "guard.py"
    shutil.copy(source, Path(libdir) / "remote_guard.py")
    args.guard_name = args.guard or "remote/guard.py"
    return libdir


def cmd_run(args) -> None:
    libdir = install_guard(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    name = args.name or args.mode
    with ThreadPoolExecutor(args.parallel) as pool, open(out / f"{name}.jsonl", "a") as f:
        for r in pool.map(lambda i: one_run(args.mode, i, args, libdir), range(args.runs)):
            results.append(r)
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"{name:12} run {r['run']:2}: {r['outcome']:5} {r['seconds']:6.1f}s  "
                  f"{r['ktok_s'] if r['ktok_s'] is not None else '-':>8} Ktok/s  {r['error'] or ''}", flush=True)
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("ok", "error", "hang")}
    print(f"{name}: {counts}")


def cmd_warmup(args) -> None:
    """What `remote warmup` runs: the warmup entry point once per device, one after another, same env."""
    libdir = install_guard(args)
    env = child_env(args, libdir, None)
    for device in dict.fromkeys(d for d in args.drafters.split(",") if d):
        start = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "drafter.warmup", "--device", device], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.limit)
        report = [l for l in r.stdout.splitlines() if l.startswith("REMOTE_WARMUP ")]
        print(f"warmup device {device}: exit {r.returncode} in {time.monotonic() - start:.1f}s "
              f"{report[-1] if report else r.stdout[-400:]}", flush=True)
        if r.returncode:
            sys.exit(r.returncode)


def cmd_table(args) -> None:
    # A file named N-....jsonl belongs to batch N (runs that shared the machine at the same time).
    rows = [(Path(p).name.split("-")[0] if Path(p).name[0].isdigit() else "", json.loads(line))
            for p in args.files for line in Path(p).read_text().splitlines() if line.strip()]
    print("| batch | mode | layout | runs | clean | errors | hangs | median time to finish (clean) "
          "| median first steady step | median throughput (per thread) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups: dict = {}
    for batch, r in rows:
        key = (batch, r["mode"], r.get("drafters", "0,1,0"), r.get("stagger", 0.0), r.get("cache", "cold"),
               r.get("label"))
        groups.setdefault(key, []).append(r)
    order = ["noguard", "guard", "eager"]
    for (batch, mode, drafters, stagger, cache, label), rs in sorted(
            groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]), kv[0][2], kv[0][3], kv[0][4],
                                            kv[0][5] or "")):
        ok = [r for r in rs if r["outcome"] == "ok"]
        errs = sorted({r["error"] for r in rs if r["outcome"] == "error"})
        t = f"{statistics.median(r['seconds'] for r in ok):.1f} s" if ok else "-"
        firsts = [r["first_steady_s"] for r in ok if r.get("first_steady_s")]
        first = f"{statistics.median(firsts):.1f} s" if firsts else "-"
        threads = len([d for d in drafters.split(",") if d])
        tp_ok = [r["ktok_s"] for r in ok if r["ktok_s"]]
        tp_any = [r["ktok_s"] for r in rs if r["ktok_s"]]
        tp_rows = tp_ok or tp_any
        if tp_rows:
            med = statistics.median(tp_rows)
            tp = f"{med:.1f} Ktok/s ({med / threads:.1f})" + ("" if tp_ok else " before the runs failed")
        else:
            tp = "-"
        err_text = f" ({'; '.join(errs)})" if errs else ""
        what = ", ".join(x for x in (mode, f"stagger {stagger:g} s" if stagger else "", cache, label or "") if x)
        print(f"| {batch} | {what} | `{drafters}` | {len(rs)} | {len(ok)} | "
              f"{sum(r['outcome'] == 'error' for r in rs)}{err_text} | {sum(r['outcome'] == 'hang' for r in rs)} | "
              f"{t} | {first} | {tp} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    warm = sub.add_parser("warmup", help="fill --cache the way `remote warmup` does, one device at a time")
    for p in (run, warm):
        p.add_argument("--drafters", default="0,1,0", help="one thread per entry (warmup: each device once)")
        p.add_argument("--guard", help="a guard.py to install as remote_guard (default: this repository's)")
        p.add_argument("--cache", help="a persistent REMOTE_COMPILE_CACHE shared by the runs (default: cold runs)")
        p.add_argument("--env", action="append", help="NAME=VALUE for the training process (repeatable)")
        p.add_argument("--limit", type=float, default=180, help="seconds before a run counts as hung")
    run.add_argument("--mode", choices=["noguard", "guard", "eager"], required=True)
    run.add_argument("--runs", type=int, default=10)
    run.add_argument("--parallel", type=int, default=1)
    run.add_argument("--steps", type=int, default=400)
    run.add_argument("--target", default="0")
    run.add_argument("--stagger", type=float, default=0.0, help="passed to drafter.train")
    run.add_argument("--switch-interval", type=float, help="the GIL switch interval of the training process")
    run.add_argument("--label", help="what else sets this batch apart, recorded in every line")
    run.add_argument("--name", help="the JSONL file's name (default: the mode)")
    run.add_argument("--log-dir", help="save each run's whole output here")
    run.add_argument("--out", required=True)
    table = sub.add_parser("table")
    table.add_argument("files", nargs="+")
    args = ap.parse_args()
    {"run": cmd_run, "warmup": cmd_warmup, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
