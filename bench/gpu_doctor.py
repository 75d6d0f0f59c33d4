"""`remote doctor --gpu` and train's preflight with its GPU part, measured side by side on one lab run.

1. The whole `remote doctor --gpu -c IDS --json` command (process start included), `--repeat` times: its
   median against the goal of 2 s for one host and its containers.
2. Round trips: the commands doctor --gpu's library call sends, counted at the transport (goal: at most 2
   per host and 1 per container).
3. Train's preflight (remote.ops.jobs.preflight, library call, the agent session train uses) with the GPU
   part (the container probe inside the facts probe, the host probe beside it) and without it, interleaved
   A/B `--repeat` times: the median difference against the goal of 0.3 s. The container should be
   deployed (a preflight that finds problems is timed all the same: it reads the same facts).

    python bench/gpu_doctor.py [--hosts hosts.yaml] [--containers 200,201] [--preflight 200] [--repeat 7]

Prints one JSON object (the figures docs/evidence/benchmarks.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote import config, facts, gpudoctor  # noqa: E402
from remote.errors import RemoteError  # noqa: E402
from remote.lab.testing import Recording as Counting  # noqa: E402
from remote.ops import jobs  # noqa: E402
from remote.target import resolve  # noqa: E402
from remote.transport import for_host  # noqa: E402
from remote.transport.session import Session  # noqa: E402


def doctor_cli(args) -> tuple[float, int, dict]:
    env = {**os.environ, **({"REMOTE_HOSTS_FILE": args.hosts} if args.hosts else {})}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "doctor", "--gpu",
                        "-c", args.containers, "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"doctor --gpu failed ({r.returncode}): {r.stderr[-2000:]}")
    return seconds, r.returncode, json.loads(r.stdout)


def round_trips(cfg, ids) -> dict:
    made = []

    def factory(host):
        made.append(Counting(for_host(host)))
        return made[-1]

    with Session(cfg, agent=False, transport_factory=factory) as s:
        gpudoctor.diagnose(s, ids)
    calls = [c for t in made for c in t.calls]
    hosts = {c.host.name for c in (cfg.container(i) for i in ids)}
    return {"total": len(calls), "hosts": len(hosts), "containers": len(ids),
            "host_probes": sum("gpu-host" in c for c in calls)}


def preflight_once(s: Session, ctid: int, with_gpu: bool) -> float:
    t = resolve(s, ctid)
    saved = facts.PREFLIGHT
    if not with_gpu:
        facts.PREFLIGHT = tuple(p for p in saved if p != "gpu")
    t0 = time.perf_counter()
    try:
        jobs.preflight(t, host_gpu=jobs.host_gpu(s, t.spec) if with_gpu else None)
    except RemoteError:
        pass  # an undeployed container: the same reads, timed all the same
    finally:
        facts.PREFLIGHT = saved
    return time.perf_counter() - t0


def kinds_of(report: dict) -> dict:
    return {"hosts": {h["host"]: [f["kind"] for f in h["findings"]] for h in report["hosts"]},
            "containers": {str(c["container"]): [f["kind"] for f in c["findings"]] for c in report["containers"]}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hosts")
    p.add_argument("--containers", default="200,201")
    p.add_argument("--preflight", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--once", action="store_true", help="one doctor --gpu command and its round trips, no preflight "
                   "(what bench/gpu_doctor.sh records at each step)")
    args = p.parse_args()
    cfg = config.load(args.hosts)
    ids = [cfg.container(c).ctid for c in args.containers.split(",")]
    runs = [doctor_cli(args) for _ in range(1 if args.once else args.repeat)]
    report = runs[-1][2]
    if args.once:
        print(json.dumps({"exit": runs[0][1], "seconds": round(runs[0][0], 3), "kinds": kinds_of(report),
                          "round_trips": round_trips(cfg, ids), "report": report}))
        raise SystemExit(runs[0][1])  # doctor's own exit status: 1 when it found something
    with Session(cfg, agent=True, keep=True) as s:
        preflight_once(s, args.preflight, True)  # the agent and the kept connection start here, not in a sample
        a, b = [], []
        for i in range(args.repeat):
            for with_gpu in ((True, False) if i % 2 == 0 else (False, True)):
                (a if with_gpu else b).append(preflight_once(s, args.preflight, with_gpu))
    out = {
        "doctor_gpu_s": {"median": round(statistics.median(r[0] for r in runs), 3),
                         "all": [round(r[0], 3) for r in runs], "exit": runs[-1][1]},
        "kinds": kinds_of(report),
        "round_trips": round_trips(cfg, ids),
        "preflight_s": {"with_gpu": round(statistics.median(a), 3), "without": round(statistics.median(b), 3),
                        "added": round(statistics.median(a) - statistics.median(b), 3),
                        "with_all": [round(x, 3) for x in a], "without_all": [round(x, 3) for x in b]},
        "goals": {"doctor_gpu_s": 2.0, "preflight_added_s": 0.3, "round_trips_per_host": 2,
                  "round_trips_per_container": 1},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
