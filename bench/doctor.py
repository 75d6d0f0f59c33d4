"""doctor benchmark against the lab (after `remote lab up`, `remote deploy` and `remote warmup`):

1. the whole `remote doctor --container N --json` command (process start included), on the healthy
   container and on a polluted one (an extra package installed by hand into its venv);
2. round trips per container: the commands doctor's library call sends, counted at the transport.

The pollution is undone at the end with `remote deploy`.

    python bench/doctor.py [--container 200] [--repeat 5] [--hosts hosts.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote import config  # noqa: E402
from remote.ops.deploy import UV_ENV  # noqa: E402
from remote.transport import Capabilities  # noqa: E402
from remote.facts import uv_path  # noqa: E402
from remote.doctor import diagnose  # noqa: E402
from remote.transport.session import Session  # noqa: E402


class Counting(Capabilities):
    """Wraps a transport and counts the commands sent through it (each one a round trip); it declares what
    the one it wraps does, but streams (run only: a stream is no counted round trip)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0
        self.name = inner.name
        self.host = inner.host

    def run(self, argv, **kw):
        self.calls += 1
        return self.inner.run(argv, **kw)

    def describe(self, argv):
        return self.inner.describe(argv)

    def close(self):
        self.inner.close()


def cli(args, *extra) -> tuple[float, int, dict]:
    env = {**os.environ, **({"REMOTE_HOSTS_FILE": args.hosts} if args.hosts else {})}
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "doctor", "--container", str(args.container), "--json",
                        *extra], capture_output=True, text=True, env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    seconds = time.perf_counter() - start
    if r.returncode not in (0, 1):
        raise SystemExit(f"doctor failed ({r.returncode}): {r.stderr}")
    return seconds, r.returncode, json.loads(r.stdout)


def measure(args, cfg, label: str) -> dict:
    times, code, report = [], None, None
    for _ in range(args.repeat):
        seconds, code, report = cli(args)
        times.append(seconds)
    counting = {}

    def factory(host):
        from remote.transport import for_host

        counting[host.name] = Counting(for_host(host))
        return counting[host.name]

    with Session(cfg, agent=False, transport_factory=factory) as s:
        diagnose(s, [args.container])
    trips = sum(c.calls for c in counting.values())
    raw = {}

    def keep(host):
        from remote.transport import for_host

        return for_host(host)

    with Session(cfg, agent=False, transport_factory=keep) as s:  # where the probe's time goes
        from remote.facts import read_raw
        from remote.target import resolve

        raw, window = read_raw(resolve(s, args.container))
    inside = raw["time_end"] - raw["time"]
    torch = raw.get("torch") or {}
    torch_s = "kept from an earlier probe, 0" if torch.get("cached") else torch.get("seconds")
    codes = sorted(f["code"] for f in report["containers"][0]["findings"] if f["severity"] != "info")
    print(f"{label:9s} exit {code}  whole command median {statistics.median(times):.2f}s "
          f"(min {min(times):.2f}, max {max(times):.2f}, first {times[0]:.2f}, n={len(times)}); round trips per container: {trips}; "
          f"findings: {', '.join(codes) or 'none'}\n          one probe: {window[1] - window[0]:.2f}s round trip, "
          f"{inside:.2f}s inside the container, of which the venv's python (import torch) {torch_s}s")
    return {"median": statistics.median(times), "trips": trips, "exit": code}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hosts", default=None)
    args = ap.parse_args()
    cfg = config.load(args.hosts)
    spec = cfg.container(args.container)
    healthy = measure(args, cfg, "healthy")
    if healthy["exit"] != 0:
        raise SystemExit("the container is not healthy: run `remote deploy && remote warmup` first")
    uv = uv_path(spec.venv.uv_version)
    with Session(cfg, agent=False) as s:
        ct = s.container(spec.ctid)
        # An extra package, by hand: uv's cache in the container, else the index it was told about.
        ct.run(["bash", "-c", f"{uv} pip install -q --python {spec.venv.path}/bin/python six"], env=UV_ENV,
               timeout=300)
    try:
        polluted = measure(args, cfg, "polluted")
        assert polluted["exit"] == 1
    finally:
        env = {**os.environ, **({"REMOTE_HOSTS_FILE": args.hosts} if args.hosts else {})}
        subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "deploy", "--container", str(args.container)], check=True,
                       capture_output=True, env=env)
    print("goal: <= 1.5 s per command, <= 2 round trips per container")


if __name__ == "__main__":
    main()
