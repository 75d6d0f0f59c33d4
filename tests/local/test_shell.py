"""Every script that runs in the container is a real file that shellcheck passes (scripts/setup installs it)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from remote import shell

SCRIPTS = sorted((Path(shell.__file__).parent / "sh").glob("*.sh"))


def test_scripts_exist_and_load():
    assert SCRIPTS, "remote/sh holds no scripts"
    for path in SCRIPTS:
        assert shell.load(path.stem) == path.read_text()


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(path):
    checker = shutil.which("shellcheck")
    assert checker, "shellcheck is missing: run scripts/setup"
    r = subprocess.run([checker, "--shell=bash", "--severity=warning", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
