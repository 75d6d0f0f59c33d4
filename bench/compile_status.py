"""How soon a recompile or an eager fallback shows in `remote status` (issue 33's goal: within 5 s).

In a lab container (brought up here, `remote lab up`'s machinery) with the CPU torch deployed, a run of
tests/data/compile_health/train.py with a Python float that changes each step (a recompile per step, then
the recompile limit's eager fallback); meanwhile `status` is asked again and again through the library
(each call one probe round trip, as `remote status` does). For each event, latency = the first status
call that returned it counted - the event's time in compile.jsonl (the lab's containers share this
machine's clock). Also each status call's own duration.

    python bench/compile_status.py [--container 234] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchlab import ROOT, hosts_file, private_lab

import remote

HOSTS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/plant
train:
  command: python train.py recompile 14
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", type=int, default=234)
    ap.add_argument("--out")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-compile-status-"))
    with private_lab([args.container]) as lab:
        repo = lab._example_repo("plant", {"train.py": ROOT / "tests" / "data" / "compile_health" / "train.py"})
        hosts = hosts_file(lab, d / "hosts.yaml", [args.container], HOSTS, wheels=lab.wheels, repo=repo)
        with remote.open(hosts) as fleet:
            ct = fleet.container(args.container)
            ct.deploy()
            run = ct.train(detach=True)
            seen: dict[tuple[str, int], float] = {}  # (kind, count) -> when status first showed it
            calls = []
            while True:
                t0 = time.time()
                st = fleet.status(args.container)
                t1 = time.time()
                calls.append(t1 - t0)
                job = next(c for c in st.containers if c.container == args.container).run
                health = job.compile if job is not None else None
                for kind, count in (("recompile", health.recompiles if health else 0),
                                    ("eager-fallback", health.eager_fallbacks if health else 0)):
                    for n in range(1, count + 1):
                        seen.setdefault((kind, n), t1)
                if job is not None and not job.alive:
                    break
            events = [e for e in run.compile().events if e.kind in ("recompile", "eager-fallback")]
            counts: dict[str, int] = {}
            lags = []
            for e in events:
                counts[e.kind] = counts.get(e.kind, 0) + 1
                shown = seen.get((e.kind, counts[e.kind]))
                if shown is not None:
                    lags.append({"kind": e.kind, "n": counts[e.kind], "latency_s": round(shown - e.t, 3)})
    result = {"events": len(events), "measured": lags,
              "max_latency_s": max((x["latency_s"] for x in lags), default=None),
              "median_latency_s": statistics.median([x["latency_s"] for x in lags]) if lags else None,
              "status_call_s": {"median": round(statistics.median(calls), 3), "max": round(max(calls), 3),
                                "calls": len(calls)}}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
