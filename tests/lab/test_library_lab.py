"""Lab tier: the public Python API driven from plain scripts (a subprocess each), a Fabric Connection to
the lab's sshd, and a user's tasks.py composing remote's invoke collection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAB_CONTAINERS, load_config

from remote.cli.format import deploy_text

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT, OTHER = LAB_CONTAINERS[0], LAB_CONTAINERS[1]
BIN = Path(sys.executable).parent

# A quick warmup and a quick job: this file tests the API's plumbing, test_warmup_lab and test_jobs_lab the rest.
QUICK = {"  command: python -m drafter.warmup --device {device}\n  devices: [0, 1]\n":
         "  command: python -c \"print('warm {device}')\"\n  devices: [0]\n",
         "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 --log-interval 0.5":
         "for i in 1 2 3 4 5; do echo step $i 21.$i Ktok/s; sleep 0.2; done; "
         "if [ -e /root/apitest/hold ]; then sleep 600; fi"}


def env_for(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "home")}


@pytest.fixture(scope="module")
def quick_hosts(lab_hosts):
    return load_config(lab_hosts, **QUICK)


def test_the_whole_api_from_a_script_prints_nothing_of_its_own(quick_hosts, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "library" / "whole_api.py"), str(quick_hosts),
                        str(CT), str(work)], capture_output=True, text=True, env=env_for(tmp_path), timeout=480)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout[-3000:]  # the script's one line: nothing printed by the library
    seen = json.loads(lines[0])
    assert seen["deploy"] == {"applied": True, "torch": "2.13.0+cpu"}
    assert seen["check"] == {"applied": False, "changed": []}
    assert seen["warmup"] == {"devices": ["0"]}
    assert seen["exec"] == {"exit_code": 3, "stdout": "out", "stderr": "ff00"}
    assert seen["push"] == {"files": 2, "bytes": 6 + 2560, "verified": True}
    assert seen["pull"] == {"files": 2, "bytes": 6 + 2560, "same": True}
    assert seen["follow"] == [f"step {i} 21.{i} Ktok/s" for i in range(1, 6)]
    assert seen["wait"] == 0 and seen["state"] == "exited"
    assert seen["metrics"] == [21.1, 21.2, 21.3, 21.4, 21.5]
    assert seen["stop"]["first"] == "step 1 21.1 Ktok/s" and seen["stop"]["was_alive"] is True
    assert seen["stop"]["state"] == "stopped" and seen["stop"]["run"] != seen["run"]["id"]
    assert all(len(f) == 3 for f in seen["doctor"])
    assert str(CT) in map(str, seen["group"]["ok"]) and seen["group"]["failed"].get("999")
    assert seen["unknown"] == "ConfigError" and seen["stopped"] in ("ContainerNotFound", "ContainerNotRunning")
    assert seen["bad_hosts"] == "ConfigError"
    assert seen["progress_lines"] > 0  # the progress went to the script's callback, not to a terminal


TRAIN = "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 --log-interval 0.5"


@pytest.mark.fault("Run.follow across dropped connections", "Run.follow() resumes at the byte where a dropped "
                   "connection stopped: every line once, in order, through the kept connection")
def test_follow_resumes_across_dropped_connections(lab, lab_hosts):
    import remote

    hosts = load_config(lab_hosts, **{next(iter(QUICK)): QUICK[next(iter(QUICK))],
                                      TRAIN: "for i in $(seq 0 1999); do echo $i; sleep 0.002; done"})
    sshd = int((lab.dir / "sshd.pid").read_text())
    lines: list[str] = []
    progress: list[str] = []
    with remote.open(hosts, progress=progress.append, keep=True) as fleet:  # as the command line does
        run = fleet.container(CT).train(detach=True, force=True, warmup=True)
        for line in run.follow():
            lines.append(line)
            if len(lines) in (300, 900, 1500):  # the job still prints: every SSH connection to the lab dropped
                subprocess.run(["pkill", "-KILL", "-P", str(sshd)])
        assert run.wait(timeout=120) == 0
    assert lines == [str(i) for i in range(2000)]  # nothing lost, nothing repeated


SCRIPT_STOPPED = """
import sys, remote
with remote.open(sys.argv[1]) as fleet:
    try:
        fleet.container(int(sys.argv[2])).exec(["true"])
    except remote.ContainerNotRunning as exc:
        print("ContainerNotRunning", exc.ctid)
"""


@pytest.mark.fault("API on a stopped container", "the library raises ContainerNotRunning (remote.errors), "
                   "prints nothing and never exits")
def test_a_stopped_container_raises_container_not_running(lab_session, quick_hosts, tmp_path):
    other = lab_session.container(OTHER)
    other.stop()
    try:
        r = subprocess.run([sys.executable, "-c", SCRIPT_STOPPED, str(quick_hosts), str(OTHER)], capture_output=True,
                           text=True, env=env_for(tmp_path), timeout=120)
    finally:
        other.start()
        other.wait_running()
    assert (r.returncode, r.stdout, r.stderr) == (0, f"ContainerNotRunning {OTHER}\n", "")


# -- Fabric: a user's Connection, remote's transport ----------------------------------------------------

def _fab(tmp_path, *args, known_hosts, lab):
    fab = shutil.which("fab", path=str(BIN))
    assert fab, "fabric's `fab` is installed with remote"
    shutil.copy(ROOT / "examples" / "fabfile" / "fabfile.py", tmp_path / "fabfile.py")
    return subprocess.run([fab, "-H", f"root@127.0.0.1:{lab.port}", "-i", str(lab.key_file), *args,
                           f"--known-hosts={known_hosts}"] if "gpu-check" in args else
                          [fab, "-H", f"root@127.0.0.1:{lab.port}", "-i", str(lab.key_file), *args],
                          cwd=tmp_path, capture_output=True, text=True, env=env_for(tmp_path), timeout=300)


def test_a_fabric_connection_drives_exec_and_deploy(lab, quick_hosts, tmp_path):
    import fabric

    import remote.fabric

    c = fabric.Connection("127.0.0.1", port=lab.port, user="root", connect_kwargs={"key_filename": str(lab.key_file)})
    r = remote.fabric.exec(c, CT, ["sh", "-c", "echo $((6*7))"], known_hosts=lab.known_hosts)
    assert (r.exit_code, r.text) == (0, "42\n")
    plan = remote.fabric.deploy(c, CT, hosts=quick_hosts)
    assert plan.applied and plan.noop, deploy_text(plan)  # deployed by the script test, or now: then again a no-op
    with remote.fabric.container(c, CT, hosts=quick_hosts) as ct:
        assert ct.spec.host.address == "127.0.0.1" and ct.spec.host.port == lab.port
    # The example fabfile, run by `fab` as a user would.
    got = _fab(tmp_path, "gpu-check", "--ctid", str(CT), known_hosts=lab.known_hosts, lab=lab)
    assert got.returncode == 0 and f"container {CT}: exit 0:" in got.stdout, got.stdout + got.stderr
    got = _fab(tmp_path, "gpu-deploy", "--ctid", str(CT), "--hosts", str(quick_hosts), known_hosts=None, lab=lab)
    assert got.returncode == 0 and f"container {CT}: nothing to do" in got.stdout, got.stdout + got.stderr


@pytest.mark.fault("Fabric Connection to an unknown host key", "remote.fabric connects with remote's transport: "
                   "a host key not in known_hosts is refused (HostKeyError), though Fabric would add it")
def test_a_fabric_connection_to_a_host_whose_key_is_unknown_is_refused(lab, tmp_path):
    import fabric

    import remote
    import remote.fabric

    empty = tmp_path / "known_hosts"
    empty.write_text("")
    c = fabric.Connection("127.0.0.1", port=lab.port, user="root", connect_kwargs={"key_filename": str(lab.key_file)})
    with pytest.raises(remote.HostKeyError):
        remote.fabric.exec(c, CT, ["true"], known_hosts=empty)
    assert empty.read_text() == ""  # nothing added
    got = _fab(tmp_path, "gpu-check", "--ctid", str(CT), known_hosts=empty, lab=lab)
    assert got.returncode != 0 and "HostKeyError" in got.stderr + got.stdout and empty.read_text() == ""


# -- invoke: a user's tasks.py composing remote's collection --------------------------------------------

def test_a_users_tasks_py_composes_the_collection(lab, quick_hosts, tmp_path):
    for name in ("tasks.py", "invoke.yaml"):
        shutil.copy(ROOT / "examples" / "tasks-compose" / name, tmp_path / name)
    shutil.copy(quick_hosts, tmp_path / "hosts.yaml")  # invoke.yaml: remote: {hosts: hosts.yaml}
    invoke = str(BIN / "invoke")

    def run(*args):
        return subprocess.run([invoke, *args], cwd=tmp_path, capture_output=True, text=True, env=env_for(tmp_path),
                              timeout=300)

    listed = run("--list")
    assert listed.returncode == 0 and "gpu.deploy" in listed.stdout and "smoke" in listed.stdout, listed.stderr
    ok = run("gpu.exec", "-c", str(OTHER), "--command", "true")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("gpu.exec", "-c", str(OTHER), "--command", "exit 7")
    assert bad.returncode == 7
    smoke = run("smoke", "--container", str(OTHER))
    assert smoke.returncode == 0 and "smoke: exit 0, said 'ok'" in smoke.stdout, smoke.stdout + smoke.stderr
