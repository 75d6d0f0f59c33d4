"""Compile-cache fleet benchmarks on a lab of its own (4 containers, the demo drafter, CPU torch), in one run:

1. `remote warmup -c A` of one cold container, against `remote warmup -c A,B,C` of three identical cold
   containers (one warmup, its cache copied to the other two)  [goal <= 1.3x];
2. the north star: a fresh container (no venv, no checkout, no cache) to its first steady training step
   with `remote deploy warmup train -c D` while A is warm: seconds from the command's start to the drafter's
   "first steady step of every thread" line (or its first throughput line, whichever comes first)  [goal <= 30 s].

    python bench/cache_fleet.py [--ids 250-253]   # as root; brings its lab up in a temporary folder and down
                                                  # after (LXC ids are system-wide: pick free ones)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchlab import ROOT, WHEELS, hosts_file, parse_ids, private_lab

IDS = "250-253"
SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
  requirements: requirements.txt
code:
  repo: {repo}
  path: /root/dflash
warmup:
  command: python -m drafter.warmup --device {{device}}
  devices: [0, 1]
  cache_dir: /root/.cache/torch-compile
train:
  command: python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 60 --log-interval 0.5
  run_dir: /root/runs
"""
ASIDE = 'cd /root/.cache/torch-compile 2>/dev/null || exit 0; for d in torch-*; do [ -e "$d" ] && mv "$d" "aside-$d-$$"; done; ' \
        '[ -e warmups.jsonl ] && mv warmups.jsonl "aside-warmups-$$.jsonl"; true'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default=IDS, help=f"4 container ids, a range or a comma list (default {IDS})")
    args = ap.parse_args()
    ids = parse_ids(args.ids, 4)
    with private_lab(ids) as lab:
        run(lab, lab.dir.parent, ids)


def run(lab, d: Path, ids: tuple[int, ...]) -> None:
    a, b, c, fresh = ids
    hosts = hosts_file(lab, d / "hosts.yaml", ids, SECTIONS, repo=lab.demo_repo(), wheels=WHEELS)
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

    def cmd(*argv: str, until: str | None = None) -> tuple[float, float | None, str]:
        """Run `remote ARGV`: (seconds in all, seconds to the first output line matching `until`, output)."""
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", "from remote.cli import main; main()", *argv], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            if seen is None and until and re.search(until, line):
                seen = time.perf_counter() - start
        proc.wait()
        took = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{''.join(lines)[-4000:]}")
        return took, seen, "".join(lines)

    cmd("deploy", "-c", f"{a},{b},{c}")
    one, _, _ = cmd("warmup", "-c", str(a))
    for ct in (a, b, c):
        cmd("exec", "-c", str(ct), "--command", ASIDE)  # cold again, all three: nothing deleted, set aside
    three, _, out = cmd("warmup", "-c", f"{a},{b},{c}")
    copied = len(re.findall(r"copied \d+ cache file", out))
    print(f"warmup of 1 cold container {one:.1f} s; of 3 identical cold containers {three:.1f} s "
          f"({copied} by copy): {three / one:.2f}x  [goal <= 1.3x]")
    # the drafter's own line, printed once every thread has done a steady step (a short run may end before
    # its first throughput line)
    total, first, out = cmd("deploy", "warmup", "train", "-c", str(fresh), until=r"first steady step of every thread|Ktok/s")
    if first is None:
        raise SystemExit(f"no first steady step in the output of `remote deploy warmup train`:\n{out[-3000:]}")
    via = "by copy" if "copying it instead of compiling" in out else "by its own warmup"
    print(f"a fresh container to its first steady step (`remote deploy warmup train -c {fresh}`, {a} warm, cache "
          f"{via}): {first:.1f} s (the whole command {total:.1f} s)  [goal <= 30 s]")
    for line in out.splitlines():
        if re.match(r"(\[\d+\] )?(==> |warmup done|  copied|deploy|.*built in)", line):
            print("   ", line[:160])


if __name__ == "__main__":
    main()
