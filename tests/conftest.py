"""Test guards, the tier markers and the lab fixture.

Tiers: every test gets the marker of its folder (tests/unit, tests/local, tests/lab, tests/newcomer; see
support.TIERS); tests/unit/test_tiers.py checks that no file names another tier's marker.

Guards: no test reads the real ~/.ssh/config or the user's hosts file ($HOME points at a temporary
folder and $REMOTE_HOSTS_FILE is unset unless a test sets it). The `lab` fixture is the module's lab:
a private lab (its own folder, port and containers) brought up once per session and torn down after
(the session lab, own_lab for support.OWN_LAB_MODULES or third_lab for THIRD_LAB_MODULES); it fails loudly, never skips, when the
machine cannot run it: .ci/run installs what it needs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's remote before an installed one

from support import (LAB_CONTAINERS, LAB_SECTIONS, LONG_FILES, OWN_LAB_CONTAINERS, OWN_LAB_MODULES,  # noqa: E402
                     THIRD_LAB_CONTAINERS, THIRD_LAB_MODULES, new_lab, tier_of, work_unit)

from remote.cli.format import deploy_text  # noqa: E402
from remote.target import resolve as target_of  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(tier)
    items.sort(key=run_order)


def run_order(item) -> int:
    """The longest work first (the scheduler hands out units in collection order): the lab, then the newcomer
    tier and support.LONG_FILES (minutes each), then the other local files and the unit files, so that no long
    unit starts last and runs alone while the other workers wait. A stable sort: a tier's files keep their order."""
    tier = tier_of(item.path)
    if tier == "lab":
        return 0
    if tier == "newcomer" or item.path.name in LONG_FILES:
        return 1
    return 2 if tier == "local" else 3


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `-n N` (the README's command): the session lab's modules run on one worker, in order (its LXC
    ids are machine-wide, and they share its deploys), support.OWN_LAB_MODULES on another (own_lab),
    THIRD_LAB_MODULES on a third (third_lab), the newcomer tier on one, and every other file whole on any
    worker (its module fixtures once), beside them."""
    from xdist.scheduler import LoadScopeScheduling

    # Units in collection order (tests/lab first), not by their number of tests: the long ones, the three labs'
    # and the modules that make their own, start first, and the quick unit and local files fill the workers
    # at the end instead of a lab module starting last and running alone.
    config.option.loadscopereorder = False

    class ByTier(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid.split("::", 1)[0])

    return ByTier(config, log)


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


# Three labs, each brought up once per session where a test needs it: the session lab (containers LAB_CONTAINERS),
# own_lab (OWN_LAB_CONTAINERS) for the modules of support.OWN_LAB_MODULES and third_lab (THIRD_LAB_CONTAINERS) for
# support.THIRD_LAB_MODULES, whose xdist workers run them beside the session lab's modules. The fixtures below are the module's lab's; what they make is made once per
# lab and session (a hosts file, a connection, the deploy of its first container).
@pytest.fixture(scope="session")
def session_lab(tmp_path_factory):
    lab = new_lab(tmp_path_factory.mktemp("lab"), LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


@pytest.fixture(scope="session")
def own_lab(tmp_path_factory):
    lab = new_lab(tmp_path_factory.mktemp("own-lab"), OWN_LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


@pytest.fixture(scope="session")
def third_lab(tmp_path_factory):
    lab = new_lab(tmp_path_factory.mktemp("third-lab"), THIRD_LAB_CONTAINERS)
    yield lab
    lab.down(purge=True)


@pytest.fixture(scope="session")
def _per_lab():
    """What each lab's fixtures made, by (lab folder, name); the connections are closed at the end."""
    made: dict = {}
    yield made
    for (_, name), value in made.items():
        if name == "session":
            value.close()


def once(made: dict, lab, name: str, make):
    key = (str(lab.dir), name)
    if key not in made:
        made[key] = make()
    return made[key]


def ids_of(lab) -> tuple[int, ...]:
    return (OWN_LAB_CONTAINERS if lab.dir.name.startswith("own-lab") else THIRD_LAB_CONTAINERS
            if lab.dir.name.startswith("third-lab") else LAB_CONTAINERS)


@pytest.fixture(scope="module")
def lab(request):
    """This module's lab: own_lab for support.OWN_LAB_MODULES, third_lab for THIRD_LAB_MODULES, else the
    session lab."""
    name = request.path.name
    return request.getfixturevalue("own_lab" if name in OWN_LAB_MODULES else "third_lab" if name in THIRD_LAB_MODULES
                                   else "session_lab")


@pytest.fixture(scope="module")
def demo_repo(lab, _per_lab) -> Path:
    """The demo drafter repository of the test lab (made from examples/, like the real lab's)."""
    return once(_per_lab, lab, "repo", lab.demo_repo)


@pytest.fixture(scope="module")
def lab_hosts(lab, demo_repo, tmp_path_factory, _per_lab) -> Path:
    """A hosts file for the test lab; container 999 is configured but does not exist."""
    def make() -> Path:
        path = tmp_path_factory.mktemp("cfg") / "hosts.yaml"
        path.write_text(lab.hosts_yaml((*ids_of(lab), 999)) + LAB_SECTIONS.format(repo=demo_repo))
        return path

    return once(_per_lab, lab, "hosts", make)


@pytest.fixture(scope="module")
def lab_session(lab, lab_hosts, _per_lab):
    from remote import config
    from remote.transport.session import Session

    # As the tasks do: container commands through the in-container agent.
    return once(_per_lab, lab, "session", lambda: Session(config.load(str(lab_hosts)), agent=True))


@pytest.fixture
def ct(lab, lab_session):
    return lab_session.container(ids_of(lab)[0])


@pytest.fixture(scope="module")
def deployed(lab, lab_session, _per_lab):
    """The lab's first container (200 on the session lab) deployed with the demo drafter and the pinned CPU
    torch, once per lab and session."""
    from remote.ops.deploy import deploy

    def make():
        summary = deploy(target_of(lab_session, ids_of(lab)[0]))
        assert summary.torch["torch"] == "2.13.0+cpu", deploy_text(summary)
        return summary

    first = once(_per_lab, lab, "deployed", make)
    # A module before this one may have committed to the demo repository and dropped the commit again (HEAD
    # moved, the container still at the dropped one): train's preflight refuses a checkout the hosts file no
    # longer pins (issue 40), so the pin is deployed again here; a no-op, one round trip, when it is.
    from remote.errors import BusyError

    try:
        deploy(target_of(lab_session, ids_of(lab)[0]))
    except BusyError:  # a run left going by a module before: its tests say what they need
        pass
    return first
