"""Move benchmark (issue 44's goal: fault to the first step after resume <= 90 s after a move): on a two-node lab
cluster of its own (remote/lab/cluster.py, container 366), unmodified nanoGPT (tests/lab/test_move_lab.py's
repository, command and hosts file: examples/nanogpt with the offline data, a checkpoint every 20 iterations,
`signal: none`) moved back and forth between the nodes with `remote move`, each time from the move's start (the
fault: the run is told to go) to the first `iter N` line of the resumed run's log, and the move's own steps
(check, save-stop, migrate, wait, resume) as `remote move --json` times them.

    python bench/move.py [--moves 3]      (needs root and the lab's tools; container id 366)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lab"))
sys.path.insert(0, str(ROOT / "tests"))

from support import LAB_WHEELS, free_port  # noqa: E402
from test_move_lab import NANOGPT, SECTIONS, first_iter, nanogpt_repo, saved_at  # noqa: E402

from remote.lab.cluster import ClusterLab  # noqa: E402

CT = 366


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=3)
    a = ap.parse_args()
    lab = ClusterLab(dir=Path(tempfile.mkdtemp(prefix="remote-move-bench-", dir="/var/tmp")), port=free_port(),
                     wheels_dir=LAB_WHEELS, name="movebench", subnet="127.0.37.")
    state = {"hosts": lab.dir / "hosts.yaml", "xdg": lab.dir / "state"}

    def task(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "REMOTE_HOSTS_FILE": str(state["hosts"]), "PYTHONPATH": str(ROOT),
               "XDG_STATE_HOME": str(state["xdg"])}
        return subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                              capture_output=True, text=True, timeout=900)

    def log(run_id: str) -> str:
        return task("exec", "-c", str(CT), f"cat /root/runs/{run_id}/log 2>/dev/null || true").stdout

    def wait(pred, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.2)
        return False

    rows = []
    try:
        lab.up({CT: "pve1"}, wheels=False)
        state["hosts"].write_text(lab.hosts_yaml({CT: None}) + SECTIONS.format(
            wheels=LAB_WHEELS, repo=nanogpt_repo(lab.dir), command=NANOGPT))
        for step in (("deploy", "-c", str(CT)), ("exec", "-c", str(CT), "cd /root/mv && python prepare_offline.py"),
                     ("train", "-c", str(CT), "--detach", "--fresh")):
            r = task(*step)
            assert r.returncode == 0, r.stdout + r.stderr
        for i in range(a.moves):
            status = json.loads(task("status", "-c", str(CT), "--json").stdout)
            run = status["containers"][0]["run"]["id"]
            assert wait(lambda run=run: saved_at(log(run)), 240)
            node = "pve2" if lab.owner(CT) == "pve1" else "pve1"
            t0 = time.monotonic()
            r = task("move", "-c", str(CT), "--node", node, "--json")
            assert r.returncode == 0, r.stdout + r.stderr
            moved = json.loads(r.stdout)
            assert wait(lambda new=moved["resumed"]: first_iter(log(new)) is not None, 300)
            total = time.monotonic() - t0
            rows.append({"move": i + 1, "to": node, "fault_to_first_step_s": round(total, 2),
                         "first_step": first_iter(log(moved["resumed"])),
                         **{s["name"]: s["seconds"] for s in moved["steps"]}})
            print(json.dumps(rows[-1]), flush=True)
        task("stop", "-c", str(CT))
    finally:
        task("disconnect")  # the kept connections of this hosts file end with the lab
        lab.down(purge=True)
    totals = [r["fault_to_first_step_s"] for r in rows]
    print(json.dumps({"moves": len(rows), "median_s": statistics.median(totals), "max_s": max(totals),
                      "goal_s": 90, "met": max(totals) <= 90}, indent=1))


if __name__ == "__main__":
    main()
