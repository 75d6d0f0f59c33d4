"""Lab tier: `remote create` through the real sshd and the pct double (create, set, start, destroy, pveam,
pvesm with Proxmox's words), then deploy and train in the container it made; the same create again a no-op;
`--gpu` refused on this machine (no NVIDIA driver) with nothing made; a failure part-way (a package step
that fails, in the real container) leaving nothing behind. Containers 290-292 (no other module uses them), or
the three of $REMOTE_TEST_CREATE_IDS, so two checkouts can run it at once (LXC ids are machine-wide)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.transport.pct import pct_argv

pytestmark = pytest.mark.lab
MADE, NO_DRIVER, HALF = (int(i) for i in os.environ.get("REMOTE_TEST_CREATE_IDS", "290,291,292").split(","))
TRAIN = "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 --log-interval 0.5"


@pytest.fixture(scope="module")
def hosts(lab, lab_hosts, lab_session, tmp_path_factory):
    """The lab's hosts file (its own copy: create adds to it), a short train; what create made, destroyed after."""
    path = tmp_path_factory.mktemp("create") / "hosts.yaml"
    path.write_text("# the lab, and what create adds\n" + Path(lab_hosts).read_text()
                    .replace(TRAIN, TRAIN.replace("--steps 200", "--steps 20")))
    yield path
    for ctid in (MADE, NO_DRIVER, HALF):
        pct(lab_session, "stop", str(ctid))
        pct(lab_session, "destroy", str(ctid), "--purge", "1")


def pct(lab_session, *args):
    return lab_session.transport(lab_session.config.hosts["lab"]).run(pct_argv("pct", *args))


def cli(*args, hosts) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from remote.cli.tasks import program; "
                           "program.run(sys.argv[1:])", *args, "--hosts", str(hosts)],
                          capture_output=True, text=True, timeout=900)


def test_create_then_deploy_and_train(lab, lab_session, hosts):
    import remote

    r = cli("create", str(MADE), "--host", "lab", "--template", lab.template, "--cores", "2", "--memory", "2048",
            "--disk", "4", "--storage", "local", hosts=hosts)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"made container {MADE} on lab from {lab.template}, no GPU" in r.stdout
    for step in ("preflight", "create", "start", "packages", "hosts file"):
        assert f"  {step}" in r.stdout
    text = hosts.read_text()
    assert text.startswith("# the lab, and what create adds\n") and f"  {MADE}: {{host: \"lab\"}}" in text
    conf = pct(lab_session, "config", str(MADE)).out
    assert "cores: 2" in conf and "unprivileged: 1" in conf and "description: remote create%3A" in conf
    assert not any(line.startswith(("dev", "lxc.cgroup")) for line in conf.splitlines())
    with remote.open(str(hosts)) as fleet:
        ct = fleet.container(MADE)
        ct.deploy()
        run = ct.train(detach=True, warmup=True)
        assert run.wait(timeout=600) == 0
    again = cli("create", str(MADE), "--host", "lab", "--template", lab.template, "--cores", "2", "--memory", "2048",
                "--disk", "4", "--storage", "local", hosts=hosts)
    assert again.returncode == 0 and "already made as asked" in again.stdout, again.stdout + again.stderr
    other = cli("create", str(MADE), "--host", "lab", "--template", lab.template, "--cores", "3", "--memory", "2048",
                "--disk", "4", "--storage", "local", hosts=hosts)
    assert other.returncode == 2 and "cores 2 (asked: 3)" in other.stderr
    assert hosts.read_text() == text


@pytest.mark.fault("remote create --gpu on a host without the NVIDIA module", "refused in one line naming the "
                   "module and `--gpu none`, exit 2; no container made, the hosts file unchanged")
def test_gpu_on_a_host_without_a_driver_is_refused_and_nothing_is_made(lab, lab_session, hosts):
    before = hosts.read_text()
    r = cli("create", str(NO_DRIVER), "--host", "lab", "--template", lab.template, "--gpu", "all", hosts=hosts)
    assert r.returncode == 2 and "no NVIDIA kernel module loaded" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "does not exist" in pct(lab_session, "config", str(NO_DRIVER)).err
    r = cli("create", str(NO_DRIVER), "--host", "lab", "--template", "local:vztmpl/nope-1_amd64.tar.zst", hosts=hosts)
    assert r.returncode == 2 and "volume 'local:vztmpl/nope-1_amd64.tar.zst' does not exist on lab" in r.stderr
    assert hosts.read_text() == before


@pytest.mark.fault("remote create failing part-way in a real container", "the container pct made is stopped and "
                   "destroyed, the error says nothing is left; the hosts file unchanged")
def test_a_failure_part_way_leaves_nothing(lab, lab_session, hosts, monkeypatch):
    import remote
    from remote import shell

    real = shell.load
    monkeypatch.setattr(shell, "load", lambda name: "echo 'E: Unable to locate package git' >&2; exit 100"
                        if name == "ct-needs" else real(name))
    before = hosts.read_text()
    with remote.open(str(hosts)) as fleet:
        with pytest.raises(remote.CreateError, match="failed at packages: .*Unable to locate package git.*"
                                                     "the half-made container was destroyed: nothing is left"):
            fleet.create(HALF, host="lab", template=lab.template, storage="local", disk=4)
    assert "does not exist" in pct(lab_session, "config", str(HALF)).err
    assert not (lab.lxc / str(HALF)).exists()
    assert hosts.read_text() == before
