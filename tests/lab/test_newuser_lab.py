"""Lab tier, issue 46 (what a new user met): a deploy with the venv section `remote init` leaves unfilled is
refused before it empties a working venv; code.repo as a URL is cloned and shipped; through the library and
the command line against the lab's first container (deployed with the pinned CPU torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import lab_ids, load_config

import remote
from remote.ops import hostsinit

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = lab_ids(__file__)[0]  # this module's lab's first container (support.lab_ids)
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
    text = hostsinit.render(remote.config.Host(name="pve1", address="pve1"), {}, [(300, "running", "gpu", [])])
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


# -- remote destroy ------------------------------------------------------------------------------------------
# A container of its own, made with the pct double and destroyed: an id no other module uses (290-293 are
# test_create_lab's); REMOTE_TEST_DESTROY_ID picks another.
GONE = int(os.environ.get("REMOTE_TEST_DESTROY_ID", "294"))


def pct(lab_session, *args: str):
    from remote.transport.pct import pct_argv

    return lab_session.transport(lab_session.config.hosts["lab"]).run(pct_argv("pct", *args))


@pytest.fixture
def made(lab, lab_session, lab_hosts, tmp_path):
    """Container GONE made and started on the lab; a hosts file of its own that lists it (with comments) and
    the missing 999."""
    pct(lab_session, "destroy", str(GONE), "--force", "1", "--purge", "1")
    r = pct(lab_session, "create", str(GONE), lab.template, "--storage", "local", "--hostname", "gone")
    assert r.exit_code == 0, r.err
    assert pct(lab_session, "start", str(GONE)).exit_code == 0
    text = Path(lab_hosts).read_text().replace("containers:\n", f"containers:\n  # made to be destroyed\n  {GONE}:"
                                               f"  # ct{GONE}\n    host: lab\n    # its notes\n", 1)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text.replace("  999:", "  # gone by hand\n  999:", 1))
    yield hosts
    pct(lab_session, "destroy", str(GONE), "--force", "1", "--purge", "1")


@pytest.mark.fault("no `remote destroy`", promise="remote destroy CTID removes the container from its host (pct "
                   "destroy) and its hosts-file entry with its comments; it asks first (no terminal: refused, exit 2, "
                   "unless --yes), --dry changes nothing, a container the host lacks only loses its entry, a live "
                   "run refuses it")
def test_destroy_asks_dry_runs_then_removes_the_container_and_its_entry(deployed, lab, lab_session, made):
    hosts = made
    r = cli("destroy", str(GONE), hosts=hosts)  # stdin is not a terminal: nobody to ask
    assert r.returncode == 2 and "--yes" in r.stderr and f"{GONE} on lab (running) would be destroyed" in r.stderr, \
        r.stdout + r.stderr
    r = cli("destroy", str(GONE), "--dry", hosts=hosts)
    assert r.returncode == 0 and f"would run: pct destroy {GONE} --force 1 --purge 1" in r.stdout, r.stdout + r.stderr
    assert pct(lab_session, "status", str(GONE)).out.strip() == "status: running"
    assert f"  {GONE}:" in hosts.read_text()
    r = cli("destroy", str(GONE), "--yes", hosts=hosts)
    assert r.returncode == 0 and f"destroyed container {GONE} on lab (running before)" in r.stdout, r.stdout + r.stderr
    assert "does not exist" in pct(lab_session, "status", str(GONE)).err
    text = hosts.read_text()
    assert f"{GONE}" not in text and "made to be destroyed" not in text and "its notes" not in text
    assert f"  {CT}:" in text and "  999:" in text and text.startswith("hosts:")
    with remote.open(hosts) as fleet:  # the container the host no longer has: only its entry goes
        got = fleet.destroy(999)
    assert (got.destroyed, got.state, got.hosts_file) == (False, "missing", str(hosts))
    assert got.removed[:3] == ("  # gone by hand", "  999:", "    host: lab"), got.removed
    assert "999" not in hosts.read_text() and "gone by hand" not in hosts.read_text()


def test_destroy_is_refused_while_a_run_is_live(deployed, ct, lab_session, lab_hosts, tmp_path):
    from remote.facts.deployed import VenvRecord, Verify
    from remote.ops.jobs import Preflight, launch
    from remote.target import resolve

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(Path(lab_hosts).read_text())
    pre = Preflight(commit="0" * 40, venv=VenvRecord(lock_sha256="x", verify=Verify(torch="2.13.0+cpu")), gpus=None, notes=[])
    run_id, _ = launch(resolve(lab_session, CT), pre, command="sleep 120")  # a live run, no warmup needed
    with remote.open(hosts) as fleet:
        run = fleet.container(CT).run(run_id)
        try:
            with pytest.raises(remote.BusyError, match="still running"):
                fleet.destroy(CT, dry=True)
            with pytest.raises(remote.BusyError):
                fleet.destroy(CT)
        finally:
            run.stop()
    assert ct.run(["true"]).ok and f"  {CT}:" in hosts.read_text()


# -- a deploy that fails before changing anything; a deploy whose reader left ------------------------------------

def snapshot_names(lab_session) -> list[str]:
    out = pct(lab_session, "listsnapshot", str(CT)).out
    return [line.split()[1] for line in out.splitlines() if "->" in line and "current" not in line]


@pytest.mark.fault("a deploy that fails before changing anything takes a snapshot", promise="the deploy's Proxmox "
                   "snapshot is taken after the venv is built and verified, just before the first change: a failed "
                   "build takes none (keep_snapshots unspent); a deploy that changes something still takes one")
@pytest.mark.fault("`remote deploy | head` killed mid-deploy", promise="a deploy whose stdout reader has gone "
                   "(SIGPIPE) goes on to the end and exits 0; its output goes nowhere")
def test_a_failed_build_takes_no_snapshot_and_a_closed_stdout_never_aborts_a_deploy(deployed, lab, lab_session, ct,
                                                                                      lab_hosts, demo_repo, tmp_path):
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(demo_repo), str(bare)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True)
    (work / "PIPE.txt").write_text("deployed with nobody reading\n")
    git(work, "add", "PIPE.txt")
    git(work, "commit", "-qm", "a commit to ship")
    git(work, "push", "-q", "origin", "HEAD")
    lab.set_storage(CT, "local-lvm")  # a storage that snapshots (the double copies the layer)
    before = snapshot_names(lab_session)
    try:
        bad = load_config(lab_hosts, **{PACKAGES: "packages: [torch==2.13.0+cpu, numpy==2.2.6, no-such-dist-remote==1.0]"})
        with remote.open(bad) as fleet, pytest.raises(remote.RemoteError):
            fleet.container(CT).deploy()
        assert snapshot_names(lab_session) == before  # the build failed: nothing changed, no snapshot
        assert torch_there(ct) == "2.13.0+cpu"

        by_url = load_config(lab_hosts, **{f"repo: {demo_repo}": f"repo: file://{bare}"})
        read, write = os.pipe()
        os.close(read)  # the reader has gone before the first line (`remote deploy | head -0`)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(by_url)}
        proc = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "deploy", "-c", str(CT)],
                              stdout=write, stderr=write, env=env, timeout=600)
        os.close(write)
        assert proc.returncode == 0  # not -13 (SIGPIPE)
        assert ct.run(["cat", "/root/dflash/PIPE.txt"]).out == "deployed with nobody reading\n"
        assert len(snapshot_names(lab_session)) == len(before) + 1  # a deploy that changed something: one taken
    finally:
        for name in set(snapshot_names(lab_session)) - set(before):
            pct(lab_session, "delsnapshot", str(CT), name)
        lab.set_storage(CT, "local")
        with remote.open(lab_hosts) as fleet:
            fleet.container(CT).deploy()


@pytest.mark.fault("A destroy while another controller holds the container's lease",
                   "refused (BusyError, exit 3) naming the holder, before `pct destroy`: the live-run check and the "
                   "destroy run under the operation lease, so no launch of another controller starts between them")
def test_destroy_is_refused_while_another_controller_holds_the_lease(ct, lab_session, monkeypatch):
    from remote.ops import destroy as destroying
    from remote.ops import oplock
    from remote.target import resolve

    t = resolve(lab_session, CT)
    real = t.ct.run_pct

    def no_destroy(*argv, **kw):  # without the lease the lab's own container would go: stop short of it
        if argv[:1] == ("destroy",):
            raise AssertionError(f"pct {' '.join(argv)} ran under another controller's lease")
        return real(*argv, **kw)

    monkeypatch.setattr(t.ct, "run_pct", no_destroy)
    with oplock.hold(ct, "train", holder="another-controller pid 7"):
        with pytest.raises(remote.BusyError, match="another-controller pid 7") as e:
            destroying.destroy(t, hosts_file=None, remove_entry=lambda *a: ())
    assert e.value.exit_code == 3
    assert ct.run(["true"]).ok
