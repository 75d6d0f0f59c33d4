"""Command-line start-up: whole-process wall time of `remote --help` and `remote config` (which reads the
hosts file and connects nowhere), side by side with the interpreter's own start (`python -c pass`, the
floor), interleaved, medians. Goal: each remote command ≤ 0.3 s.

    python bench/cli.py [--remote PATH] [--repeat 15]

`--remote` defaults to the `remote` console script beside this interpreter (the venv scripts/setup
made: /opt/remote/venv/bin/remote), else the one on PATH. Nothing connects: the hosts file names a
documentation address (192.0.2.10), HOME is a temporary folder (no ~/.ssh/config is read).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL = 0.3
HOSTS = """\
hosts:
  pve1:
    address: 192.0.2.10
    key_file: {d}/id_ed25519
    known_hosts: {d}/known_hosts
venv:
  packages: [torch==2.11.0+cu128]
  index_url: https://download.pytorch.org/whl/cu128
train:
  command: python train.py
containers:
  200:
    host: pve1
"""


def find_remote() -> str:
    beside = Path(sys.executable).parent / "remote"
    found = str(beside) if beside.exists() else shutil.which("remote")
    if not found:
        raise SystemExit("no `remote` command beside this python or on PATH: run `bash scripts/setup`, or pass --remote")
    return found


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - start, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--remote", help="the remote command to time (default: beside this python, else on PATH)")
    ap.add_argument("--repeat", type=int, default=15, help="runs of each command (interleaved)")
    args = ap.parse_args()
    remote = args.remote or find_remote()
    if not os.access(remote, os.X_OK):
        raise SystemExit(f"--remote {remote}: no such program")
    python = str(Path(remote).resolve().parent / "python")  # the interpreter the console script runs
    if not os.path.exists(python):
        python = sys.executable

    with tempfile.TemporaryDirectory(prefix="bench-cli-") as d:
        (Path(d) / "home").mkdir()
        (Path(d) / "id_ed25519").write_text("")
        (Path(d) / "known_hosts").write_text("")
        hosts = Path(d) / "hosts.yaml"
        hosts.write_text(HOSTS.format(d=d))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": f"{d}/home", "REMOTE_HOSTS_FILE": str(hosts)}
        commands = {
            "python -c pass (floor)": [python, "-c", "pass"],
            "remote --help": [remote, "--help"],
            "remote config -c 200": [remote, "config", "-c", "200"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        failed: dict[str, str] = {}
        for _ in range(args.repeat):
            for name, argv in commands.items():
                if name in failed:
                    continue
                took, r = timed(argv, env, "/")
                if r.returncode != 0:
                    failed[name] = f"exit status {r.returncode}: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
                    continue
                times[name].append(took)

    print(f"{remote} (python {python}), {args.repeat} interleaved runs each, whole process, from /")
    floor = statistics.median(times["python -c pass (floor)"])
    print(f"{'command':<26} {'median':>8} {'min':>8} {'max':>8} {'vs floor':>9}  goal ≤ {GOAL} s")
    for name, ts in times.items():
        if name in failed:
            print(f"{name:<26} {'-':>8}  not measured: {failed[name]}")
            continue
        med = statistics.median(ts)
        verdict = "" if "floor" in name else ("met" if med <= GOAL else "NOT met")
        print(f"{name:<26} {med:8.3f} {min(ts):8.3f} {max(ts):8.3f} {med / floor:8.1f}x  {verdict}")


if __name__ == "__main__":
    main()
