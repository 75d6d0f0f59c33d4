"""Fleet benchmarks on a lab of its own (8 containers on 2 look-alike hosts), side by side in one run:

1. deploy of the same lock to 8 containers: all at once (`remote deploy -c all`) vs one after another
   (`remote deploy -c ID` for each); each into its own venv and checkout folders, so both are real builds,
   after one untimed deploy that warms uv's cache;
2. `remote status` of the 8 containers, the whole command;
3. `remote exec -c all true` against `remote exec -c ID true`, whole commands.

    python bench/fleet.py [--repeat 3] [--ids 220-227]   # as root; brings its lab up in a temporary folder
                                                         # and down after; --ids: 8 container ids, 4 per host
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote.lab import Lab  # noqa: E402

IDS = "220-227"  # LXC ids are system-wide: another lab on this machine needs other ids (--ids)
SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
  path: /root/venv-{tag}
code:
  repo: {repo}
  path: /root/code-{tag}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_ids(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`220-227` or `220,221,...`: 8 ids, the first 4 on the first host, the others on the second."""
    ids: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        ids += range(int(low), int(high or low) + 1)
    if len(ids) != 8 or len(set(ids)) != 8:
        raise SystemExit(f"--ids: 8 different container ids, got {ids}")
    return tuple(ids[:4]), tuple(ids[4:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ids", default=IDS, help=f"8 container ids, a range or a comma list (default {IDS})")
    args = ap.parse_args()
    first, second = parse_ids(args.ids)
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as d:
        lab = Lab(dir=Path(d) / "lab", port=free_port())
        lab.up(first, second=second)
        try:
            run(lab, Path(d), args.repeat, first, second)
        finally:
            lab.down(purge=True)


def run(lab: Lab, d: Path, repeat: int, first: tuple[int, ...], second: tuple[int, ...]) -> None:
    def hosts(tag: str) -> Path:
        p = d / f"hosts-{tag}.yaml"
        p.write_text(lab.hosts_yaml(first, second=second) + SECTIONS.format(repo=lab.plain_repo(), tag=tag, wheels=lab.wheels))
        return p

    def cmd(tag: str, *argv: str) -> float:
        env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts(tag)), "PYTHONPATH": str(ROOT)}
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *argv], env=env,
                           capture_output=True, text=True)
        took = time.perf_counter() - start
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return took

    cmd("warm", "deploy", "-c", str(first[0]))  # uv's cache and the controller's uv binary, warm for both
    serial = sum(cmd("serial", "deploy", "-c", str(c)) for c in (*first, *second))
    parallel = cmd("parallel", "deploy", "-c", "all")
    print(f"deploy of one lock to 8 containers on 2 hosts: one after another {serial:.1f} s, all at once "
          f"{parallel:.1f} s: {serial / parallel:.1f}x  [goal >= 3x]")
    status = [cmd("parallel", "status") for _ in range(repeat)]
    print(f"`remote status` of 8 containers, median of {repeat}: {statistics.median(status):.2f} s "
          f"(min {min(status):.2f})  [goal <= 1.5 s]")
    one = [cmd("parallel", "exec", "-c", str(first[0]), "true") for _ in range(repeat)]
    eight = [cmd("parallel", "exec", "-c", "all", "true") for _ in range(repeat)]
    print(f"`remote exec true`, median of {repeat}: 1 container {statistics.median(one):.2f} s, 8 containers "
          f"{statistics.median(eight):.2f} s: {statistics.median(eight) / statistics.median(one):.2f}x  [goal <= 2x]")


if __name__ == "__main__":
    main()
