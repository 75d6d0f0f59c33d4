"""The stall watch and the restarts, measured in a real container (the lab's, or a GPU container):

  - detection latency against train.stall: a job prints a line with its time, then waits forever; latency =
    when the watch declared it stalled - when the job printed its last line (goal: <= stall + 5 s);
  - the watch's own CPU cost while a job prints 50 lines a second (each with a metric value), the
    watch's CPU time (and its nvidia-smi's, where there is one) over the wall time, as a fraction of one
    core (goal: < 1%); the job's own CPU over the same time beside it;
  - restart latency: a job fails at once with train.restarts: 1; latency = attempt 2's start - attempt 1's
    end - the backoff (1 s) (goal: <= 5 s).

    python bench/watchdog.py [--container ID] [--stalls 5,10] [--cpu-seconds 30]

Uses the hosts file as the tasks do ($REMOTE_HOSTS_FILE or ./hosts.yaml); runs land in /root/runs-bench.
The lab's containers share this machine's clock; on another host the container's own clock is used for
both ends of each latency.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote import config  # noqa: E402
from remote.ops.jobs import Preflight, launch, state, stop  # noqa: E402
from remote.target import Target, resolve  # noqa: E402
from remote.transport.session import Session  # noqa: E402

PRE = Preflight("bench", {"verify": {}}, None, [])
STALLER = ("python3 -c 'import time\nfor i in range(3): print(\"step\", i, time.time(), flush=True); time.sleep(0.2)\n"
           "def waits_forever():\n    time.sleep(86400)\nwaits_forever()'")
CHATTY = ("python3 -c 'import time\nt = time.time()\nwhile time.time() - t < {s}:\n"
          "    print(\"step 12.5 it/s\", flush=True); time.sleep(0.02)'")
CPU = (Path(__file__).resolve().parent / "watchdog_cpu.sh").read_text()  # the CPU ticks of the watch and of the job


def cat(ct, path: str) -> str:
    return ct.run(["cat", path], check=False, mutates=False).out


def wait(pred, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.2)


def with_train(t: Target, **train) -> Target:
    """t with these train settings (the bench's own run folder, stall watch, restarts)."""
    return dataclasses.replace(t, spec=dataclasses.replace(t.spec, train=dataclasses.replace(t.spec.train, **train)))


def detection(t: Target, stall: float) -> dict:
    t = with_train(t, stall=stall, on_stall="warn")
    ct = t.ct
    run_id, _ = launch(t, PRE, command=STALLER)
    try:
        wait(lambda: state(t, run_id).stalled, stall + 60)
        path = state(t, run_id).path
        last = float([line for line in cat(ct, f"{path}/log").splitlines() if line.startswith("step")][-1].split()[2])
        event = json.loads(cat(ct, f"{path}/events.jsonl").splitlines()[0])
        stacks = cat(ct, f"{path}/stacks-1.txt")
    finally:
        stop(t, run_id, grace=2)
    latency = event["at"] - last
    return {"stall_s": stall, "detected_after_s": round(latency, 2), "goal_s": stall + 5, "ok": latency <= stall + 5,
            "stacks_name_the_function": "waits_forever" in stacks}


def cpu(t: Target, seconds: float) -> dict:
    t = with_train(t, stall=600.0)
    ct = t.ct
    run_id, _ = launch(t, PRE, command=CHATTY.format(s=seconds + 10))
    try:
        time.sleep(3)  # past the start
        a = ct.run(["bash", "-c", CPU, "cpu", run_id], mutates=False).out.split()
        time.sleep(seconds)
        b = ct.run(["bash", "-c", CPU, "cpu", run_id], mutates=False).out.split()
    finally:
        stop(t, run_id, grace=2)
    wall, tick = float(b[3]) - float(a[3]), int(a[2])
    watch = (int(b[0]) - int(a[0])) / tick / wall
    job = (int(b[1]) - int(a[1])) / tick / wall
    return {"seconds": round(wall, 1), "watch_core_fraction": round(watch, 5), "job_core_fraction": round(job, 4),
            "goal": 0.01, "ok": watch < 0.01, "lines_per_s": 50}


def restart(t: Target) -> dict:
    t = with_train(t, restarts=1)
    run_id, _ = launch(t, PRE, command="exit 3")
    wait(lambda: not state(t, run_id).alive, 60)
    a = state(t, run_id).attempts
    latency = a[1].started - (a[0].ended or a[1].started) - 1.0
    return {"restart_latency_s_beyond_backoff": round(latency, 3), "backoff_s": 1, "goal_s": 5, "ok": latency <= 5}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", default=None)
    ap.add_argument("--stalls", default="5,10")
    ap.add_argument("--cpu-seconds", type=float, default=30.0)
    args = ap.parse_args()
    cfg = config.load()
    with Session(cfg, agent=True) as sess:
        t = with_train(resolve(sess, args.container), run_dir="/root/runs-bench", baseline=None)
        t = dataclasses.replace(t, spec=dataclasses.replace(t.spec, code=dataclasses.replace(t.spec.code, path="/root")))
        results = [detection(t, float(x)) for x in args.stalls.split(",")]
        results.append(cpu(t, args.cpu_seconds))
        results.append(restart(t))
    for r in results:
        print(json.dumps(r))
    print("all goals met" if all(r["ok"] for r in results) else "GOAL MISSED")


if __name__ == "__main__":
    main()
