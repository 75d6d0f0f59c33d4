"""Deploy benchmarks against the lab (after `remote lab up` and one `remote deploy`):

1. no-op deploy wall time: the library call, and the whole `remote deploy` command;
2. rebuilding the same venv from its lock, warm caches, uv vs pip, side by side in one run.

    python bench/deploy.py [--container 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import remote  # noqa: E402
from remote.facts import uv_path  # noqa: E402
from remote.ops.deploy import UV_ENV  # noqa: E402  (a constant: how deploy runs uv)

# In the container: time one fresh venv built from the deployed lock, by uv and by pip. Each tool
# runs once untimed first, so both caches are warm, as on a second deploy.
REBUILD = r'''
lock=/root/venv/remote-lock.txt uv=$1 py=$2; shift 2
t() { local s=$(date +%s.%N); "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", e - s }'; }
uv_build() { rm -rf /root/bench-uv && "$uv" venv -q --python "$py" /root/bench-uv && \
             "$uv" pip sync -q --python /root/bench-uv/bin/python "$@" "$lock"; }
pip_build() { rm -rf /root/bench-pip && "$uv" venv -q --seed --python "$py" /root/bench-pip && \
              /root/bench-pip/bin/python -m pip install -q --disable-pip-version-check --no-deps "$@" -r "$lock"; }
uv_build "$@"; pip_build "$@"
echo "uv $(t uv_build "$@")"
echo "pip $(t pip_build "$@")"
rm -rf /root/bench-uv /root/bench-pip
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    lib = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        with remote.open() as fleet:  # a new fleet (connection and agent) each time, as `remote deploy` has
            plan = fleet.container(args.container).deploy()
        lib.append(time.perf_counter() - start)
        assert plan.noop, "deploy was not a no-op: run `remote deploy` once first\n" + str(plan)
    cli = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "deploy", "--container", str(args.container)], check=True,
                       capture_output=True)
        cli.append(time.perf_counter() - start)
    print(f"no-op deploy, median of {args.repeat}: library {statistics.median(lib):.2f} s "
          f"(min {min(lib):.2f}), `remote deploy` {statistics.median(cli):.2f} s (min {min(cli):.2f})  [goal <= 1 s]")

    with remote.open() as fleet:
        ct = fleet.container(args.container)
        spec = ct.spec
        system = ["env", "PATH=/usr/bin:/bin"]  # the container's own python3 and tools, not the venv's
        py = ct.exec([*system, "python3", "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                     check=True, job_env=False).stdout.decode().strip()
        links = [a for link in spec.venv.find_links for a in ("--find-links", link)]
        out = ct.exec([*system, *(f"{k}={v}" for k, v in UV_ENV.items()), "bash", "-c", REBUILD, "rebuild",
                       uv_path(spec.venv.uv_version), py, *links], check=True, job_env=False,
                      timeout=3600).stdout.decode()
    times = dict(line.split() for line in out.splitlines())
    uv_s, pip_s = float(times["uv"]), float(times["pip"])
    print(f"rebuild of the same locked venv, warm caches: uv {uv_s:.2f} s, pip {pip_s:.2f} s, "
          f"uv is {pip_s / uv_s:.1f}x faster  [goal >= 5x]")


if __name__ == "__main__":
    main()
