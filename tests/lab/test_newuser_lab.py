"""Lab tier, issue 46 (what a new user met): a deploy with the venv section `remote init` leaves unfilled is
refused before it empties a working venv; code.repo as a URL is cloned and shipped; through the library and
the command line against the lab's first container (deployed with the pinned CPU torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAB_CONTAINERS, load_config

import remote
from remote.ops import hostsinit

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = LAB_CONTAINERS[0]
PACKAGES = "packages: [torch==2.13.0+cpu, numpy==2.2.6]"


def cli(*args: str, hosts: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def torch_there(ct) -> str:
    return ct.run(["/root/venv/bin/python", "-c", "import torch; print(torch.__version__)"], check=False).out.strip()


def test_init_marks_the_sections_still_to_fill():
    text = hostsinit.render(remote.config.Host(name="pve1", address="pve1"), {}, [(200, "running", "gpu", [])])
    marked = [line.split(":", 1)[0] for line in text.splitlines() if "# TO FILL" in line and not line.startswith("#")]
    assert marked == ["venv", "code", "train"]


@pytest.mark.fault("a deploy of the hosts file remote init wrote, unfilled", promise="a deploy that would swap a "
                   "venv with torch for one without torch, or for one with no packages at all, is refused before "
                   "anything changes, naming venv.packages (and code.repo when unset) and --force; the venv keeps "
                   "torch")
def test_a_deploy_of_an_unfilled_venv_section_is_refused_and_the_venv_keeps_torch(deployed, ct, lab_hosts):
    empty = load_config(lab_hosts, **{PACKAGES: "packages: []", "  requirements: requirements.txt\n": ""})
    with remote.open(empty) as fleet, pytest.raises(remote.ConfigError) as caught:
        fleet.container(CT).deploy()
    message = str(caught.value)
    assert "venv.packages" in message and "no packages at all" in message and "force=True" in message, message
    no_torch = load_config(lab_hosts, **{PACKAGES: "packages: [numpy==2.2.6]"})
    r = cli("deploy", "-c", str(CT), hosts=no_torch)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "venv.packages" in r.stderr and "without torch" in r.stderr and "--force" in r.stderr, r.stderr
    assert "force=True" not in r.stderr
    with remote.open(no_torch) as fleet:  # check=True changes nothing, so it is not refused: it says what would
        assert fleet.container(CT).deploy(check=True).changed
    assert torch_there(ct) == "2.13.0+cpu"


@pytest.mark.fault("code.repo given as a URL", promise="a deploy whose code.repo is a URL (file:// here) clones it "
                   "on the controller, fetches it at each deploy and ships the pinned commit; an ssh-style URL that "
                   "cannot be reached is a clear error, nothing changed")
def test_a_deploy_from_a_url_ships_its_latest_commit_then_a_bad_url_is_named(deployed, ct, lab_hosts, demo_repo,
                                                                              tmp_path):
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(demo_repo), str(bare)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True)
    (work / "FROM_URL.txt").write_text("shipped from a URL\n")
    git(work, "add", "FROM_URL.txt")
    git(work, "commit", "-qm", "a commit only the URL has")
    git(work, "push", "-q", "origin", "HEAD")
    by_url = load_config(lab_hosts, **{f"repo: {demo_repo}": f"repo: file://{bare}"})
    try:
        with remote.open(by_url) as fleet:
            plan = fleet.container(CT).deploy()
        assert any("code" in c for c in plan.changed), plan
        assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip() == git(work, "rev-parse", "HEAD")
        (work / "FROM_URL.txt").write_text("fetched again\n")
        git(work, "commit", "-qam", "a second commit")
        git(work, "push", "-q", "origin", "HEAD")
        r = cli("deploy", "-c", str(CT), hosts=by_url)
        assert r.returncode == 0, r.stdout + r.stderr
        assert ct.run(["cat", "/root/dflash/FROM_URL.txt"]).out == "fetched again\n"
        head = ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip()
        ssh_style = load_config(lab_hosts, **{f"repo: {demo_repo}": "repo: git@nonexistent.invalid:org/trainer.git"})
        r = cli("deploy", "-c", str(CT), hosts=ssh_style, timeout=120)
        assert r.returncode == 1 and "cannot clone git@nonexistent.invalid:org/trainer.git" in r.stderr, r.stderr
        assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip() == head
    finally:
        with remote.open(lab_hosts) as fleet:  # the lab's own commit again, for the modules after this one
            fleet.container(CT).deploy()
    assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip() == git(demo_repo, "rev-parse", "HEAD")
