"""A user's project tested with remote.testing.MockTransport: docs/guide/testing.md's two files (a module that
uses remote, its test) written into a project of their own, run with pytest and checked by `mypy --strict`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "testing.md"


def project(tmp_path: Path) -> dict[str, str]:
    """The guide's files: each python block after the paragraph naming it (`mytool.py`, `test_mytool.py`)."""
    text = GUIDE.read_text()
    files = {}
    for name in ("mytool.py", "test_mytool.py"):
        found = re.search(rf"`{re.escape(name)}`.*?```python\n(.*?)```", text, re.S)
        assert found, f"{GUIDE}: no python block after `{name}`"
        files[name] = found.group(1)
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    return files


def run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}  # this checkout's remote
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=tmp_path)


def pytest_on(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "test_mytool.py")


def mypy_on(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # remote's own modules as an installed package's are: followed for their types, their errors not the user's
    return run(tmp_path, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"),
               "--follow-imports=silent", "mytool.py", "test_mytool.py")


def test_the_guides_user_project_passes_its_tests_and_mypy_strict(tmp_path):
    project(tmp_path)
    r = pytest_on(tmp_path)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
    r = mypy_on(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_users_test_catches_a_wrong_command_and_mypy_a_wrong_handler(tmp_path):
    """The mock checks the user's code: the tool running another command fails its test; a handler that
    returns text instead of a Reply fails mypy --strict."""
    files = project(tmp_path)
    (tmp_path / "mytool.py").write_text(files["mytool.py"].replace('["nvidia-smi", "-L"]', '["nvidia-smi", "-q"]'))
    r = pytest_on(tmp_path)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    (tmp_path / "mytool.py").write_text(files["mytool.py"])
    (tmp_path / "test_mytool.py").write_text(files["test_mytool.py"].replace(
        'return Reply(stderr=f"not mocked: {command.inner}", status=127)', 'return "not mocked"'))
    r = mypy_on(tmp_path)
    assert r.returncode == 1 and "test_mytool.py" in r.stdout and "Reply" in r.stdout, r.stdout + r.stderr
