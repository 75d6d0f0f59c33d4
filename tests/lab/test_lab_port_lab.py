"""Lab tier (a lab of its own, no containers): `remote lab up` says which hosts file targets the lab it brought
up, and a lab brought up in a folder of its own on a port of its own stays on that port at the next `lab up`
without --port (issue 46)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_port

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
# One container (lab up needs one): an id no other lab module uses; REMOTE_TEST_PORT_LAB_ID picks another
CT = os.environ.get("REMOTE_TEST_PORT_LAB_ID", "268")


def lab(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_LAB_DIR": str(folder)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "lab", *args], env=env,
                       capture_output=True, text=True, timeout=600)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.fault("a second `lab up` moves a custom lab back to 2222", promise="`remote lab up` prints the hosts "
                   "file that targets the lab it brought up; a lab in a folder of its own keeps its port at the next "
                   "`lab up` without --port, its hosts files naming that port")
def test_lab_up_names_its_hosts_file_and_keeps_its_port(tmp_path):
    folder, port = tmp_path / "mylab", free_port()
    try:
        r = lab(folder, "up", "--containers", CT, "--backend", "lxc", "--port", str(port))
        assert r.returncode == 0, r.stdout + r.stderr
        hosts = folder / "hosts.yaml"
        said = r.stdout + r.stderr
        assert f"hosts file: {hosts}" in said and f"REMOTE_HOSTS_FILE={hosts}" in said, said
        assert "targets the default lab" in said
        assert f"port: {port}" in hosts.read_text() and listening(port)
        r = lab(folder, "up", "--containers", CT, "--backend", "lxc")
        assert r.returncode == 0 and f"127.0.0.1:{port}" in r.stdout + r.stderr, r.stdout + r.stderr
        assert f"port: {port}" in hosts.read_text() and "port: 2222" not in hosts.read_text()
        assert lab(folder, "down").returncode == 0 and not listening(port)
        r = lab(folder, "up", "--containers", CT, "--backend", "lxc")  # after a down: back on its own port
        assert r.returncode == 0 and listening(port), r.stdout + r.stderr
    finally:
        lab(folder, "down", "--purge")
