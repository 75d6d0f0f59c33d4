"""50 `true` commands in a lab container: the library vs. `ssh ... 'pct exec 200 -- true'` by hand.

Run against a lab that is up (`remote lab up`), from the repository root:
    python bench/exec_overhead.py [--n 50] [--container 200]
Prints each way's total and per-command time and the ratio, measured side by side in one run,
plus a breakdown of where a by-hand command's time goes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote import config  # noqa: E402
from remote.transport.session import Session  # noqa: E402


def timed(fn, n):
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--hosts", default=None)
    args = ap.parse_args()
    cfg = config.load(args.hosts)
    spec = cfg.container(args.container)
    h = spec.host
    ssh = ["ssh", "-p", str(h.port), "-i", h.key_file, "-o", f"UserKnownHostsFile={h.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{h.user}@{h.address}"]

    def by_hand(remote_cmd):
        return lambda: subprocess.run([*ssh, remote_cmd], check=True, capture_output=True)

    with Session(cfg, agent=True) as s:  # the default of every task
        ct = s.container(args.container)
        t_agent = timed(lambda: ct.run(["true"]), args.n)  # includes connecting and starting the agent
    with Session(cfg) as s:
        ct = s.container(args.container)
        transport = s.transport(h)
        t_lib = timed(lambda: ct.run(["true"]), args.n)  # includes the one connection setup
        t_hand = timed(by_hand(f"pct exec {args.container} -- true"), args.n)
        # Where a by-hand command's time goes, each part measured the same way:
        k = max(5, args.n // 5)
        t_ssh_only = timed(by_hand("true"), k) / k  # connection + session + login shell rc files
        t_chan = timed(lambda: transport.run(["true"]), k) / k  # reused connection: session + rc files
        t_pct = timed(lambda: transport.run(["pct", "status", str(args.container)]), k) / k - t_chan
        t_attach = timed(lambda: transport.run(shlex.split(h.pct) + ["exec", str(args.container), "--", "true"]),
                         k) / k - t_chan
    n = args.n
    print(f"{n} x `true` in container {args.container}")
    print(f"  library, in-container agent:         {t_agent:7.2f} s  {1000 * t_agent / n:7.1f} ms/command"
          "  (connecting and starting the agent included)")
    print(f"  library, a pct exec per command:     {t_lib:7.2f} s  {1000 * t_lib / n:7.1f} ms/command")
    print(f"  by hand (ssh + pct exec each time):  {t_hand:7.2f} s  {1000 * t_hand / n:7.1f} ms/command")
    print(f"  speed-up over by hand: agent {t_hand / t_agent:.1f}x, pct exec per command {t_hand / t_lib:.2f}x")
    print("where a by-hand command's time goes (ms):")
    print(f"  new SSH connection + auth:           {1000 * (t_ssh_only - t_chan):7.1f}")
    print(f"  session + login shell rc files:      {1000 * t_chan:7.1f}")
    print(f"  pct start-up (pct status):           {1000 * t_pct:7.1f}")
    print(f"  pct exec -> lxc-attach -> true:      {1000 * t_attach:7.1f}")


if __name__ == "__main__":
    main()
