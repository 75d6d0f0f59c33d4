"""`remote disconnect --all` (issue 46): every kept connection of this user, whatever hosts file made it; without
it, only the hosts file's own (as before)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import remote
from remote import api
from remote.config import Host
from remote.transport import keepwire

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "hosts:\n  pve: {address: 10.0.0.5}\ncontainers:\n  200: {host: pve}\n"


@pytest.fixture
def sockets(tmp_path, monkeypatch):
    """Two hosts files' keeper sockets (files nobody serves: disconnect removes what it asks) in a runtime folder
    of this test's own."""
    run = tmp_path / "rt"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    files = [tmp_path / "a" / "hosts.yaml", tmp_path / "b" / "hosts.yaml"]
    made = []
    for f in files:
        f.parent.mkdir()
        f.write_text(HOSTS)
        made.append(keepwire.socket_path(Host(name="pve", address="10.0.0.5"), str(f), where=keepwire.runtime_dir()))
    for path in made:
        path.write_text("")
    return files, made


@pytest.mark.fault("`remote disconnect` ends only the current hosts file's kept connection", promise="`remote "
                   "disconnect --all` (library: remote.api.disconnect(every=True)) asks every kept connection of this "
                   "user to end, whatever hosts file made it; without it, only the file's own")
def test_disconnect_all_reaches_every_hosts_files_keepers(sockets):
    files, made = sockets
    api.disconnect(files[0])
    assert [p.exists() for p in made] == [False, True]  # the other file's is left
    made[0].write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "disconnect", "--all",
                        "--hosts", str(files[0])], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "ended 0 kept connection(s)" in r.stdout, r.stdout + r.stderr
    assert [p.exists() for p in made] == [False, False]
    with pytest.raises(remote.ConfigError, match="not both"):
        api.disconnect(files[0], "pve", every=True)

