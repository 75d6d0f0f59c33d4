"""A user's deploy-train-wait-metrics script tested with remote.testing.FakeFleet: docs/guide/testing.md's two
files (trainer.py, test_trainer.py) written into a project of their own, run with pytest (no host, under 2 s)
and checked by `mypy --strict`; its failure paths (busy, a failed run, a connection lost) are among its tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "testing.md"
NAMES = ("trainer.py", "test_trainer.py")


def project(tmp_path: Path) -> dict[str, str]:
    """The guide's files: each python block after the paragraph naming it."""
    text = GUIDE.read_text()
    files = {}
    for name in NAMES:
        found = re.search(rf"`{re.escape(name)}`.*?```python\n(.*?)```", text, re.S)
        assert found, f"{GUIDE}: no python block after `{name}`"
        files[name] = found.group(1)
        (tmp_path / name).write_text(files[name])
    return files


def run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # this checkout's remote; no hosts file, no ssh config of this machine reachable: HOME is an empty folder
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT), "HOME": str(tmp_path / "home")}
    env.pop("REMOTE_HOSTS_FILE", None)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=tmp_path)


def pytest_on(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
               "--junitxml", str(tmp_path / "report.xml"), "test_trainer.py")


def own_seconds(tmp_path: Path) -> float:
    """The user's tests' own time (setup, call, teardown of each, from pytest's report): what the fake costs,
    without pytest's start-up, which the machine's load decides."""
    import xml.etree.ElementTree as ET

    return sum(float(case.get("time", "0")) for case in ET.parse(tmp_path / "report.xml").iter("testcase"))


def mypy_on(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"),
               "--follow-imports=silent", *NAMES)


@pytest.mark.fault("a user's training script untestable without a host", promise="remote.testing.FakeFleet answers "
                   "deploy, train, wait and metrics with typed results: a user's pytest of a deploy-train-wait-metrics "
                   "script, its busy, failed-run and lost-connection paths included, passes with no host in under 2 s "
                   "and under mypy --strict")
def test_the_guides_training_script_passes_its_tests_fast_and_mypy_strict(tmp_path):
    project(tmp_path)
    (tmp_path / "home").mkdir(exist_ok=True)
    r = pytest_on(tmp_path)
    assert r.returncode == 0 and "6 passed" in r.stdout, r.stdout + r.stderr
    assert own_seconds(tmp_path) < 2.0, r.stdout
    r = mypy_on(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_fake_catches_a_script_that_skips_the_wait_and_mypy_a_wrong_type(tmp_path):
    """The fake checks the user's code: reading metrics without waiting changes the calls its test asserts; a
    script that treats wait()'s int as a str fails mypy --strict."""
    files = project(tmp_path)
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "trainer.py").write_text(files["trainer.py"].replace(
        "        code = run.wait(timeout=timeout)\n", "        code = 0\n"))
    r = pytest_on(tmp_path)
    assert r.returncode == 1 and "test_deploy_train_wait_metrics" in r.stdout, r.stdout + r.stderr
    (tmp_path / "trainer.py").write_text(files["trainer.py"].replace("if code != 0:", "if code.strip():"))
    r = mypy_on(tmp_path)
    assert r.returncode == 1 and "trainer.py" in r.stdout, r.stdout + r.stderr
