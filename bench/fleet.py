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
import statistics
from pathlib import Path

from benchlab import hosts_file, parse_ids, private_lab, remote_cli

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ids", default=IDS, help=f"8 container ids, a range or a comma list (default {IDS})")
    args = ap.parse_args()
    ids = parse_ids(args.ids, 8)
    first, second = ids[:4], ids[4:]  # the first 4 on the first host, the others on the second
    with private_lab(first, second=second, wheels=None) as lab:
        run(lab, lab.dir.parent, args.repeat, first, second)


def run(lab, d: Path, repeat: int, first: tuple[int, ...], second: tuple[int, ...]) -> None:
    def cmd(tag: str, *argv: str) -> float:
        hosts = hosts_file(lab, d / f"hosts-{tag}.yaml", first, SECTIONS, second=second, repo=lab.plain_repo(),
                           tag=tag, wheels=lab.wheels)
        return remote_cli(hosts, *argv)[0]

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
