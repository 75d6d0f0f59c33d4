"""A user's script that imports remote is typed under `mypy --strict`: what runs(), log(), metrics() and
status() return are typed values a type checker sees through (they were dicts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''
import remote

def main() -> None:
    with remote.open("hosts.yaml") as fleet:
        ct = fleet.container(200)
        for r in ct.runs(limit=5):
            state: remote.State = r.state
            started: float | None = r.started_epoch
            print(r.id, state, r.exit, started)
        end = ct.stream_log()
        code: int | None = end.exit_code
        text: str = ct.log()
        run = ct.run()
        lines: list[str] = run.lines()
        print(len(text), len(lines), run.text()[:10])
        for m in run.metrics():
            value: float | None = m.value
            print(m.t, value, m.unit)
        now: remote.RunStatus = run.refresh()
        status = fleet.status()
        for h in status.hosts:
            reachable: bool = h.reachable
            print(h.host, reachable, dict(h.containers))
        for c in status.containers:
            if c.run is not None:
                tp: float | None = c.run.throughput
                print(c.container, tp, c.run.state)
        print(code, now.state, run.state)
'''

WRONG = SCRIPT.replace("value: float | None = m.value", "value: str = m.value")


def mypy(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "script.py").write_text(text)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "c"),
                           "--follow-imports=silent", str(tmp_path / "script.py")], capture_output=True, text=True,
                          env=env, cwd=tmp_path)


def test_a_script_using_runs_log_metrics_and_status_is_typed_under_mypy_strict(tmp_path):
    r = mypy(tmp_path, SCRIPT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_catches_a_wrong_use_of_a_returned_value(tmp_path):
    r = mypy(tmp_path, WRONG)
    assert r.returncode == 1 and "Incompatible types in assignment" in r.stdout, r.stdout + r.stderr
