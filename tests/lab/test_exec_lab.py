"""Lab tier: `remote exec` is ONE container command, cold or warm: whether the container is deployed, and
the job's environment (the per-version compile cache folder from the venv deploy built), are read in
the container by remote/sh/jobexec.sh, not by a probe first (docs/kept-connection.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import LAB_CONTAINERS, load_config, wait_until

import remote
from remote import config
from remote.ops import jobenv
from remote.ops.warmup import deployed as deploy_records
from remote.target import resolve as target_of
from remote.transport import keeper
from remote.transport.pct import Container

pytestmark = pytest.mark.lab
A = LAB_CONTAINERS[0]
SHOW = ["python3", "-c", "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"]


@pytest.fixture
def commands(monkeypatch):
    """Every container command the library runs (Container.run: pct exec or an agent's)."""
    seen: list[list[str]] = []
    real = Container.run

    def run(self, argv, **kw):
        seen.append(list(argv))
        return real(self, argv, **kw)

    monkeypatch.setattr(Container, "run", run)
    return seen


@pytest.mark.fault("A one-off `remote exec` with no kept connection",
                   "one container command, no probe first: in the checkout with the job's environment once "
                   "deployed, plainly from /root before (bench/oneoff.py: cold vs by hand)")
def test_exec_in_a_deployed_container_is_one_command_with_the_job_environment(deployed, lab_hosts, lab_session,
                                                                                commands):
    spec = lab_session.config.container(A)
    want = jobenv.tool_env(spec, deploy_records(target_of(lab_session, A)).verify.as_record())
    commands.clear()
    with remote.Fleet(config.load(str(lab_hosts)), keep=False) as fleet:
        r = fleet.container(A).exec(SHOW)
    assert r.exit_code == 0, r.stderr
    assert len(commands) == 1, commands  # no probe before the command
    got = json.loads(r.stdout)
    assert got["cwd"] == spec.code.path
    assert {k: got["env"].get(k) for k in want} == want
    assert "REMOTE_JOB_VARS" not in got["env"]


@pytest.mark.fault("A one-off `remote exec` with no kept connection",
                   "one container command, no probe first: in the checkout with the job's environment once "
                   "deployed, plainly from /root before (bench/oneoff.py: cold vs by hand)")
def test_exec_before_a_deploy_is_one_plain_command_from_root(lab_hosts, commands):
    other = load_config(lab_hosts, **{"venv:\n": "venv:\n  path: /root/not-deployed-venv\n"})
    with remote.Fleet(config.load(str(other)), keep=False) as fleet:
        r = fleet.container(A).exec(SHOW)
        assert r.exit_code == 0 and len(commands) == 1, (r.stderr, commands)
        got = json.loads(r.stdout)
        assert got["cwd"] == "/root" and not {"VIRTUAL_ENV", "TORCHINDUCTOR_CACHE_DIR"} & set(got["env"])
        # a program that is not there is remote's error naming it, as a plain `pct exec` gives it
        with pytest.raises(remote.ContainerCommandNotFound, match="no-such-program-here"):
            fleet.container(A).exec(["no-such-program-here"])


# -- a cold one-off `remote exec`: its command over OpenSSH's ssh, the keeper started behind it --------------------

ROOT = Path(__file__).resolve().parent.parent.parent
MAIN = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from remote.cli import main; main()"


@pytest.fixture
def rundir(monkeypatch):
    """A runtime folder of this test's own (its keepers' sockets), whose keepers are ended after it."""
    run = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    yield Path(run)
    if (Path(run) / "remote").is_dir():
        keeper.disconnect(where=Path(run) / "remote")
    shutil.rmtree(run, ignore_errors=True)


def cli(hosts: Path, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-c", MAIN, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def run_cli(hosts: Path, *args: str, env: dict | None = None) -> tuple[int, str, str]:
    proc = cli(hosts, *args, env=env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def accepted(lab) -> int:
    """Connections the lab's sshd has accepted so far."""
    return (lab.dir / "sshd.log").read_text().count("Accepted publickey")


def kept(hosts: Path) -> dict | None:
    cfg = config.load(str(hosts))
    return keeper.KeptTransport(cfg.containers[A].host, str(hosts)).info()


def in_ct(lab_session, text: str) -> bool:
    return text in lab_session.container(A).run(["ps", "-eo", "args"]).out


@pytest.mark.fault("A cold one-off `remote exec` (no kept connection)",
                   "its one command over OpenSSH's ssh (what the command by hand pays), its output and exit status "
                   "exactly; the keeper starts behind it and the next exec is warm through it (bench/oneoff.py)")
def test_a_cold_exec_goes_over_ssh_and_the_next_one_through_the_keeper_it_left(lab, lab_hosts, rundir):
    before = accepted(lab)
    code, out, err = run_cli(lab_hosts, "exec", "-c", str(A), "--", "bash", "-c",
                             "echo 'it said \"so\"'; echo oops >&2; exit 3")
    assert (code, out) == (3, 'it said "so"\n') and "oops" in err, err
    assert wait_until(lambda: kept(lab_hosts) is not None, 60), "no keeper started behind the cold exec"
    pid = kept(lab_hosts)["pid"]
    assert accepted(lab) - before == 2  # the command's own connection, then the keeper's
    assert run_cli(lab_hosts, "exec", "-c", str(A), "--", "echo", "warm")[:2] == (0, "warm\n")
    assert accepted(lab) - before == 2 and kept(lab_hosts)["pid"] == pid  # warm: through that keeper


@pytest.mark.fault("Ctrl-C on a cold one-off `remote exec`",
                   "the command ends in the container too (remote/sh/linkguard.py: the link's end kills its process "
                   "group), exit 130")
def test_ctrl_c_on_a_cold_exec_ends_the_command_in_the_container(lab_hosts, lab_session, rundir):
    proc = cli(lab_hosts, "exec", "-c", str(A), "--", "sleep", "311.5")
    try:
        assert wait_until(lambda: in_ct(lab_session, "sleep 311.5"), 60)
    finally:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert wait_until(lambda: not in_ct(lab_session, "sleep 311.5"), 30)


@pytest.mark.fault("The ssh link of a cold one-off `remote exec` dropped mid-command",
                   "the command ends in the container (the guard sees its link go); remote says the connection "
                   "was lost, exit 1")
def test_a_dropped_link_ends_a_cold_exec_in_the_container(lab_hosts, lab_session, rundir):
    proc = cli(lab_hosts, "exec", "-c", str(A), "--", "sleep", "312.5")
    try:
        assert wait_until(lambda: in_ct(lab_session, "sleep 312.5"), 60)
        ssh = [p for p in Path("/proc").glob("[0-9]*") if _parent(p) == proc.pid
               and (p / "cmdline").read_bytes().split(b"\0")[0].endswith(b"ssh")]
        assert len(ssh) == 1
        os.kill(int(ssh[0].name), signal.SIGKILL)  # the link, gone
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "ssh link ended" in err, out + err
    assert wait_until(lambda: not in_ct(lab_session, "sleep 312.5"), 30)


def _parent(p: Path) -> int:
    try:
        return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


@pytest.mark.fault("A cold one-off `remote exec` to a host whose key changed",
                   "refused before anything runs, with remote's words and the ssh-keygen -R fix; known_hosts "
                   "unchanged (never added or updated), no keeper left")
def test_a_cold_exec_refuses_a_changed_host_key_and_adds_nothing(lab, lab_hosts, lab_session, rundir, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    known = tmp_path / "known_hosts"
    line = f"[127.0.0.1]:{lab.port} {(tmp_path / 'other.pub').read_text().split(' ')[0]} " \
           f"{(tmp_path / 'other.pub').read_text().split(' ')[1]}\n"
    known.write_text(line)
    hosts = load_config(lab_hosts, **{f"known_hosts: {lab.known_hosts}": f"known_hosts: {known}"})
    code, out, err = run_cli(hosts, "exec", "-c", str(A), "--", "touch", "/root/hostkey-ran")
    assert code != 0 and "CHANGED" in err and "ssh-keygen -R" in err, err
    assert "REMOTE HOST IDENTIFICATION" not in err  # ssh's own banner held back: remote's words only
    assert known.read_text() == line
    assert not lab_session.container(A).run(["test", "-e", "/root/hostkey-ran"], check=False).ok
    assert not list((rundir / "remote").glob("*.sock")) if (rundir / "remote").is_dir() else True


@pytest.mark.fault("A cold one-off `remote exec` where it cannot go over OpenSSH's ssh",
                   "no `ssh` on PATH: through a new keeper as before; pct's errors (a missing container) in the "
                   "same class and words cold (over ssh) as warm (through the keeper)")
def test_a_cold_exec_without_ssh_and_pct_errors_as_through_the_keeper(lab, lab_hosts, rundir):
    no_ssh = {"PATH": "/nonexistent"}
    before = accepted(lab)
    assert run_cli(lab_hosts, "exec", "-c", str(A), "--", "/bin/echo", "kept", env=no_ssh)[:2] == (0, "kept\n")
    assert accepted(lab) - before == 1 and kept(lab_hosts) is not None  # the keeper's connection only
    warm = run_cli(lab_hosts, "exec", "-c", "999", "--", "true")
    keeper.disconnect(where=rundir / "remote")
    cold = run_cli(lab_hosts, "exec", "-c", "999", "--", "true")
    assert cold[0] == warm[0] != 0 and "container 999 does not exist" in cold[2], cold
    assert cold[2].splitlines()[-1] == warm[2].splitlines()[-1]
