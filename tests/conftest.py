"""Test guards and the lab fixture.

Guards: no test reads the real ~/.ssh/config or the user's hosts file ($HOME points at a temporary
folder and $REMOTE_HOSTS_FILE is unset unless a test sets it). The `lab` fixture brings up a
private lab (its own folder, port and containers) once per session and tears it down after; it
fails loudly, never skips, when the machine cannot run it: .ci/run installs what it needs.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def _no_keeper_left():
    """Every kept connection a test starts (the CLI keeps one per host: remote.transport.keeper) lives in a
    runtime folder of this test run, and is ended with it: a test run leaves no keeper behind."""
    import shutil
    import tempfile

    run = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: a socket's path holds at most 107 bytes
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = run
    yield run
    from remote.transport import keeper

    if (Path(run) / "remote").is_dir():
        keeper.disconnect(where=Path(run) / "remote")
    shutil.rmtree(run, ignore_errors=True)
    if old is None:
        os.environ.pop("XDG_RUNTIME_DIR", None)
    else:
        os.environ["XDG_RUNTIME_DIR"] = old


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("REMOTE_HOSTS_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# LXC ids are system-wide: two labs on one machine need other ids (REMOTE_TEST_LAB_IDS=230,231). Tests that
# take theirs from here run with either; the others still name 200 and 201.
LAB_CONTAINERS = tuple(int(i) for i in os.environ.get("REMOTE_TEST_LAB_IDS", "200,201").split(","))


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    from remote.lab import Lab

    lab = Lab(dir=tmp_path_factory.mktemp("lab"), port=free_port(), wheels_dir=LAB_WHEELS)
    lab.up(LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


# The test labs' wheel folder: one for every session (a hard link to a configured wheel, or one download).
LAB_WHEELS = Path(tempfile.gettempdir()) / "remote-test-wheels"

LAB_SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [""" + str(LAB_WHEELS) + """]
  requirements: requirements.txt
code:
  repo: {repo}
  path: /root/dflash
warmup:
  command: python -m drafter.warmup --device {{device}}
  devices: [0, 1]
  cache_dir: /root/.cache/torch-compile
train:
  command: python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 --log-interval 0.5
  run_dir: /root/runs
  baseline: 21.5
  tolerance: 0.2
"""


@pytest.fixture(scope="session")
def demo_repo(lab) -> Path:
    """The demo drafter repository of the test lab (made from examples/, like the real lab's)."""
    return lab.demo_repo()


@pytest.fixture(scope="session")
def lab_hosts(lab, demo_repo, tmp_path_factory) -> Path:
    """A hosts file for the test lab; container 999 is configured but does not exist."""
    path = tmp_path_factory.mktemp("cfg") / "hosts.yaml"
    path.write_text(lab.hosts_yaml((*LAB_CONTAINERS, 999)) + LAB_SECTIONS.format(repo=demo_repo))
    return path


@pytest.fixture(scope="session")
def lab_session(lab_hosts):
    from remote import config
    from remote.transport.session import Session

    # As the tasks do: container commands through the in-container agent.
    with Session(config.load(str(lab_hosts)), agent=True) as s:
        yield s


@pytest.fixture
def ct(lab_session):
    return lab_session.container(200)


class CountingTransport:
    """Wraps a transport and records every command, to assert how many round trips a step takes."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name = inner.name

    def run(self, argv, **kw):
        self.calls.append(list(argv))
        return self.inner.run(argv, **kw)

    def describe(self, argv):
        return self.inner.describe(argv)

    def close(self):
        self.inner.close()


@pytest.fixture(scope="session")
def deployed(lab_session):
    """Container 200 deployed with the demo drafter and the pinned CPU torch."""
    from remote.ops.deploy import deploy

    summary = deploy(lab_session, 200, echo=lambda s: None)
    assert summary.torch["torch"] == "2.13.0+cpu", summary.render()
    return summary


def load_config(path, **edits):
    """The lab's hosts file with `edits` applied as YAML text replacements, saved beside it."""
    text = Path(path).read_text()
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    out = Path(path).with_name(f"hosts-{abs(hash(text))}.yaml")
    out.write_text(text)
    return out


def wait_until(predicate, timeout=30.0) -> bool:
    """Poll predicate every 0.1 s; whether it came true within timeout (a hang guard, not a speed check)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def sshd_serving(session, lab) -> list[int]:
    """The lab sshd processes that hold this session's connection (found by its client port)."""
    t = session.transport(session.config.hosts["lab"])
    port = t._conn.client.get_transport().sock.getsockname()[1]
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"( sport = :{lab.port} and dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    pids = sorted({int(p) for p in re.findall(r"pid=(\d+)", out)})
    assert pids, f"no sshd found for port {port}: {out!r}"
    return pids
