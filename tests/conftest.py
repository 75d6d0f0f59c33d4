"""Test guards, the tier markers and the lab fixture.

Tiers: every test gets the marker of its folder (tests/unit, tests/local, tests/lab, tests/newcomer; see
support.TIERS); tests/unit/test_tiers.py checks that no file names another tier's marker.

Guards: no test reads the real ~/.ssh/config or the user's hosts file ($HOME points at a temporary
folder and $REMOTE_HOSTS_FILE is unset unless a test sets it). The `lab` fixture brings up a
private lab (its own folder, port and containers) once per session and tears it down after; it
fails loudly, never skips, when the machine cannot run it: .ci/run installs what it needs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's remote before an installed one

from support import LAB_CONTAINERS, LAB_SECTIONS, LAB_WHEELS, free_port, tier_of  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(tier)


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


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    from remote.lab import Lab

    lab = Lab(dir=tmp_path_factory.mktemp("lab"), port=free_port(), wheels_dir=LAB_WHEELS)
    lab.up(LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


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


@pytest.fixture(scope="session")
def deployed(lab_session):
    """Container 200 deployed with the demo drafter and the pinned CPU torch."""
    from remote.ops.deploy import deploy

    summary = deploy(lab_session, 200, echo=lambda s: None)
    assert summary.torch["torch"] == "2.13.0+cpu", summary.render()
    return summary
