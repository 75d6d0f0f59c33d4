"""The public API's own numbers, side by side in one run (docs/evidence/benchmarks.md):

- `python -c 'import remote'` and `python -c 'import remote; remote.open'` against `python -c pass`
  (whole processes, interleaved, medians). Goal: `import remote` ≤ 0.1 s. Needs no lab.
- With --hosts (a lab that is up): 50 × `ct.exec(["true"], job_env=False)` through one remote.Container
  against `ssh host 'pct exec ID -- true'` each time (goal ≥ 40x; also with the job's environment), and a no-op `ct.deploy()` in a warm
  process (the fleet already open and connected; goal ≤ 0.2 s), medians of --repeat.

    python bench/library.py [--repeat 15]
    python bench/library.py --hosts LAB_HOSTS.yaml --container 200 [--n 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def whole(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def imports(repeat: int) -> None:
    py = sys.executable
    commands = {"python -c pass (floor)": [py, "-c", "pass"], "import remote": [py, "-c", "import remote"],
                "import remote; remote.open": [py, "-c", "import remote; remote.open"]}
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(repeat):
        for name, argv in commands.items():
            times[name].append(whole(argv))
    floor = statistics.median(times["python -c pass (floor)"])
    print(f"{py}, {repeat} interleaved runs each, whole process")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<28} median {med:.3f} s (+{med - floor:.3f} s over the floor)"
              + ("" if "floor" in name else f"  goal ≤ 0.1 s: {'met' if med <= 0.1 else 'NOT met'}"))


def lab(hosts: str, ctid: int, n: int, repeat: int) -> None:
    import remote

    def fifty(ct, **kw) -> float:
        start = time.perf_counter()
        for _ in range(n):
            assert ct.exec(["true"], **kw).exit_code == 0
        return time.perf_counter() - start

    for keep in (False, True):  # a connection of the script's own, then through the kept connection (a keeper)
        with remote.open(hosts, keep=keep) as fleet:
            ct = fleet.container(ctid)
            h = ct.spec.host
            cold = fifty(ct, job_env=False)  # connecting and starting the agent included
            warm = fifty(ct, job_env=False)
            job = fifty(ct)  # in the checkout with the job's environment (withenv.sh each time)
            ssh = ["ssh", "-p", str(h.port), "-i", str(h.key_file), "-o", f"UserKnownHostsFile={h.known_hosts}",
                   "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{h.user}@{h.address}",
                   f"{h.pct} exec {ctid} -- true"]
            start = time.perf_counter()
            for _ in range(n):
                subprocess.run(ssh, check=True, capture_output=True)
            hand = time.perf_counter() - start
            print(f"{n} x true in container {ctid}, keep={keep}: ssh + pct exec each {hand:.2f} s; one Container: "
                  f"{cold:.2f} s connecting included ({hand / cold:.1f}x, goal ≥ 40x), {warm:.2f} s connected "
                  f"({hand / warm:.1f}x), {job:.2f} s with the job's environment ({hand / job:.1f}x)")
        if keep:
            with remote.open(hosts, keep=keep) as fleet:
                ct = fleet.container(ctid)
                ct.deploy()  # the first may build; then every deploy is a no-op
                noop = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    plan = ct.deploy()
                    noop.append(time.perf_counter() - start)
                    assert plan.noop, plan
                med = statistics.median(noop)
                print(f"no-op ct.deploy() in a warm process: median {med:.3f} s of {repeat} (min {min(noop):.3f}, "
                      f"max {max(noop):.3f})  goal ≤ 0.2 s: {'met' if med <= 0.2 else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", help="a lab's hosts file: also the container numbers")
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    imports(args.repeat)
    if args.hosts:
        lab(args.hosts, args.container, args.n, max(3, args.repeat // 3))


if __name__ == "__main__":
    main()
