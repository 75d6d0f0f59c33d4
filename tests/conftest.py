"""Test guards and the lab fixture.

Guards: no test reads the real ~/.ssh/config or the user's hosts file ($HOME points at a temporary
folder and $REMOTE_HOSTS_FILE is unset unless a test sets it). The `lab` fixture brings up a
private lab (its own folder, port and containers) once per session and tears it down after; it
fails loudly, never skips, when the machine cannot run it: .ci/run installs what it needs.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("REMOTE_HOSTS_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAB_CONTAINERS = (200, 201)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    from remote.lab import Lab

    lab = Lab(dir=tmp_path_factory.mktemp("lab"), port=free_port())
    lab.up(LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


@pytest.fixture(scope="session")
def lab_hosts(lab, tmp_path_factory) -> Path:
    """A hosts file for the test lab; container 999 is configured but does not exist."""
    path = tmp_path_factory.mktemp("cfg") / "hosts.yaml"
    path.write_text(lab.hosts_yaml((*LAB_CONTAINERS, 999)))
    return path


@pytest.fixture(scope="session")
def lab_session(lab_hosts):
    from remote import config
    from remote.session import Session

    with Session(config.load(str(lab_hosts))) as s:
        yield s


@pytest.fixture
def ct(lab_session):
    return lab_session.container(200)
