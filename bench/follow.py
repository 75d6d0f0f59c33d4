"""Follow latency and completeness: a job prints 100,000 timestamped lines while the server side of
the SSH connection is killed 3 times; the follower must show every line once, soon after it is written.

    python bench/follow.py [--lines 100000] [--seconds 25] [--disconnects 3]

Against the lab (`remote lab up`, `remote deploy`): the lab's container and this machine share a
clock, so latency = time shown here - time the job wrote the line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote import config  # noqa: E402
from remote.facts.deployed import VenvRecord  # noqa: E402
from remote.ops.jobs import Preflight, launch, show_log, stop  # noqa: E402
from remote.lab import Lab  # noqa: E402
from remote.target import resolve  # noqa: E402
from remote.transport.session import Session  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--disconnects", type=int, default=3)
    args = ap.parse_args()
    batches = 250
    per = args.lines // batches
    job = (f"python3 -c 'import time, sys\n"
           f"for b in range({batches}):\n"
           f"    t = time.time()\n"
           f"    sys.stdout.write(\"\".join(f\"{{b * {per} + i}} {{t:.6f}}\\n\" for i in range({per})))\n"
           f"    sys.stdout.flush()\n"
           f"    time.sleep({args.seconds / batches})'")
    cfg = config.load()
    received: list[tuple[int, float, float]] = []  # (seq, written, shown)
    notes: list[str] = []

    def echo(line: str) -> None:  # each reported line (the session's events' lines), as it is shown
        now = time.time()
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            received.append((int(parts[0]), float(parts[1]), now))
        else:
            notes.append(line)

    with Session(cfg, agent=True, events=lambda e: echo(e.line)) as s:  # as the tasks run
        base = resolve(s, args.container)
        t = dataclasses.replace(base, spec=dataclasses.replace(base.spec, train=dataclasses.replace(
            base.spec.train, run_dir="/root/runs-bench")))
        pre = Preflight("bench", VenvRecord(), None, [])
        run_id, _ = launch(t, pre, command=job, force=True)
        follower = threading.Thread(target=show_log, args=(t, run_id), kwargs={"follow": True}, daemon=True)
        follower.start()
        sshd = int((Lab().dir / "sshd.pid").read_text())
        cuts = []
        for k in range(1, args.disconnects + 1):
            while len(received) < args.lines * k // (args.disconnects + 1):
                time.sleep(0.01)
            subprocess.run(["pkill", "-KILL", "-P", str(sshd)])  # the server side of every SSH session
            cuts.append(time.time())
        follower.join(timeout=args.seconds * 4 + 60)
        stop(t, run_id, grace=2)
    seqs = [r[0] for r in received]
    lost = len(set(range(args.lines)) - set(seqs))
    dup = len(seqs) - len(set(seqs))
    lat = sorted(r[2] - r[1] for r in received)
    calm = sorted(r[2] - r[1] for r in received if all(not (c - 0.5 <= r[1] <= c + 3) for c in cuts))
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
    print(f"{args.lines} lines over {args.seconds:g} s, {len(cuts)} forced disconnects: "
          f"shown {len(seqs)}, lost {lost}, duplicated {dup}, out of order "
          f"{sum(1 for a, b in zip(seqs, seqs[1:]) if b != a + 1)}")
    print(f"latency written -> shown: median {statistics.median(lat):.3f} s, p95 {q(lat, .95):.3f} s, "
          f"max {lat[-1]:.3f} s (max includes catching up after each reconnect)")
    print(f"latency away from disconnects: median {statistics.median(calm):.3f} s, p99 {q(calm, .99):.3f} s, "
          f"max {calm[-1]:.3f} s  [goal <= 1 s]")
    print(f"reconnects noticed: {sum('connection lost' in n for n in notes)}")


if __name__ == "__main__":
    main()
