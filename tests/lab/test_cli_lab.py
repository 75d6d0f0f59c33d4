"""Lab tier: the ways in (init, runs, shell) and exec's argv, run as a user runs `remote`, in its own process.

`remote init` against the lab's sshd and pct double; `remote runs` over run folders as jobs leave them
(finished, failed, lost, running); `logs --run` with an id that is not there; `exec -- ARGV` through
the host's shell and pct exactly once; `remote shell` driven through a real pty.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import lab_ids, load_config
from support import on_a_terminal, read_until_exit, wait_for_the_shell

from remote import config as cfg

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
IDS = lab_ids(__file__)  # this module's lab's containers (support.lab_ids)
CT = IDS[0]
SECRET = "s3cret-for-the-shell"
RUN_DIR = "/root/cli-runs"


@pytest.fixture(scope="module")
def hosts(lab_hosts) -> Path:
    """The lab's hosts file with a run folder of this module's own, a train.env secret, and CT as the
    default container (so no task below needs -c)."""
    path = load_config(lab_hosts, **{"  run_dir: /root/runs": f"  run_dir: {RUN_DIR}\n  env: {{SHELL_TOKEN: {SECRET}}}"})
    path.write_text(path.read_text() + f"default_container: {CT}\n")
    return path


def remote(*args, hosts=None, timeout=600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if hosts:
        env["REMOTE_HOSTS_FILE"] = str(hosts)
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    return r


# -- init --------------------------------------------------------------------------------------------------

def test_init_writes_a_hosts_file_of_the_hosts_containers_that_loads_and_reaches_them(lab, tmp_path):
    out = tmp_path / "hosts.yaml"
    args = ["init", "--address", "127.0.0.1", "--port", str(lab.port), "--key-file", str(lab.key_file),
            "--known-hosts", str(lab.known_hosts), "--out", str(out)]
    r = remote(*args)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    config = cfg.load(str(out))
    # Every container of the host, as `pct list` has them now (earlier tests of the session may have added some).
    assert set(config.containers) == set(lab.containers()) >= set(IDS)
    assert config.hosts["pve"].port == lab.port and config.hosts["pve"].key_file == str(lab.key_file)
    for ctid in IDS:
        assert f"  {ctid}:  # lab{ctid}, running\n    host: \"pve\"\n" in text  # its hostname, from `pct config`
    assert text.startswith(f"# Hosts file for `remote`, written by `remote init` from 127.0.0.1:{lab.port} on ")

    status = remote("status", "--hosts", str(out))
    assert status.returncode == 0 and "pve: reachable" in status.stdout and f"{CT}: running" in status.stdout

    again = remote(*args)  # never overwritten unasked, and nothing connected to find that out
    assert again.returncode == 2 and f"{out}: exists already" in again.stderr and out.read_text() == text
    out.write_text("# mine\n")
    assert remote(*args, "--force").returncode == 0 and out.read_text() == text


def test_init_refuses_an_unknown_host_key_and_writes_nothing(lab, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    out = tmp_path / "hosts.yaml"
    r = remote("init", "--address", "127.0.0.1", "--port", str(lab.port), "--key-file", str(lab.key_file),
               "--known-hosts", str(empty), "--out", str(out))
    assert r.returncode == 1 and "unknown host keys are never accepted" in r.stderr, r.stderr
    assert not out.exists() and empty.read_text() == ""


# -- exec: an argv through the host's shell and pct, quoted exactly once -------------------------------------

def test_exec_runs_the_argv_after_the_double_dash_as_it_is(lab, hosts):
    argv = ["printf", "%s|", "a b", "$HOME", "it's", "*", ";", '"q"', "\\", "--help", "$(id)"]
    r = remote("exec", "--", *argv, hosts=hosts)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "|".join(argv[2:]) + "|"
    r = remote("exec", "--", "sh", "-c", "exit 5", hosts=hosts)  # its own status
    assert r.returncode == 5


# -- runs, and logs --run with an id that is not there ------------------------------------------------------

RUNS = """set -e
mkdir -p {d}/.torchrun
mk() {{  # id, epoch, exit ('' for none), log
  mkdir -p {d}/$1
  printf '{{"id": "%s", "command": "python -m drafter.train --steps %s", "started_at": "x", "started_epoch": %s}}' \
    "$1" "$2" "$2" > {d}/$1/manifest.json
  echo 999999 > {d}/$1/pid
  [ -z "$3" ] || echo "$3" > {d}/$1/exit
  printf "$4" > {d}/$1/log
}}
mk 20261201-090000-dddd 1764579600 '' 'step 1 19.0 Ktok/s\\n'
mk 20261201-100000-aaaa 1764583200 0 'step 1 20.5 Ktok/s\\nstep 2 21.5 Ktok/s\\n'
mk 20261201-110000-bbbb 1764586800 3 'Traceback: boom\\n'
mk 20261201-120000-cccc 1764590400 '' 'step 1 22.0 Ktok/s\\n'
setsid -f bash -c 'echo $$ > {d}/20261201-120000-cccc/pid; exec env REMOTE_RUN_ID=20261201-120000-cccc sleep 300' \
  </dev/null >/dev/null 2>&1
for _ in $(seq 50); do [ "$(cat {d}/20261201-120000-cccc/pid)" != 999999 ] && break; sleep 0.1; done
ln -sfn 20261201-120000-cccc {d}/current
"""


@pytest.mark.fault("`current` link and a run ended by `remote stop` in `runs`",
                   promise="the link is no run of its own; a stopped run shows as stopped, not as exited 143")
def test_runs_lists_every_run_with_its_state_and_throughput(lab, hosts):
    r = remote("exec", "--", "bash", "-c", RUNS.format(d=RUN_DIR), hosts=hosts)
    assert r.returncode == 0, r.stderr
    try:
        r = remote("runs", hosts=hosts)
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines()]
        assert rows[0][:6] == ["RUN", "STARTED", "STATE", "EXIT", "THROUGHPUT", "COMMAND"]
        got = {row[0]: row for row in rows[1:]}
        assert list(got) == ["20261201-090000-dddd", "20261201-100000-aaaa", "20261201-110000-bbbb",
                             "20261201-120000-cccc"]  # oldest first; .torchrun and the `current` link are no runs
        assert got["20261201-090000-dddd"][3:5] == ["LOST", "-"]
        assert got["20261201-100000-aaaa"][3:7] == ["exited", "0", "21.5", "Ktok/s"]
        assert got["20261201-110000-bbbb"][3:6] == ["exited", "3", "-"]
        assert got["20261201-120000-cccc"][3:7] == ["running", "-", "22", "Ktok/s"]

        r = remote("runs", "--json", "--limit", "2", hosts=hosts)
        found = json.loads(r.stdout)
        assert [(x["id"], x["state"], x["exit"]) for x in found] == [
            ("20261201-110000-bbbb", "exited", 3), ("20261201-120000-cccc", "running", None)]
        assert found[1]["command"] == "python -m drafter.train --steps 1764590400" and found[1]["unit"] == "Ktok/s"

        r = remote("logs", "--run", "20261201-000000-zzzz", hosts=hosts)
        assert r.returncode == 2  # an unknown run is bad input
        assert (f"container {CT} has no run '20261201-000000-zzzz' in {RUN_DIR}; the latest: 20261201-090000-dddd, "
                "20261201-100000-aaaa, 20261201-110000-bbbb, 20261201-120000-cccc") in r.stderr, r.stderr
        assert f"`remote runs -c {CT}` lists them" in r.stderr
    finally:
        stop = remote("stop", "--run", "20261201-120000-cccc", "--grace", "1", hosts=hosts)
    assert stop.returncode == 0 and "no process of it is left" in stop.stdout, stop.stdout + stop.stderr
    found = json.loads(remote("runs", "--json", hosts=hosts).stdout)
    assert [(x["id"], x["state"], x["exit"]) for x in found][-2:] == [
        ("20261201-110000-bbbb", "exited", 3), ("20261201-120000-cccc", "stopped", 137)]  # not "exited 137"
    assert "stopped by `remote stop` (exit 137)" in remote("status", hosts=hosts).stdout


# -- shell, through a real terminal ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deployed_ct(hosts):
    r = remote("deploy", hosts=hosts)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def local_hosts(lab, hosts, tmp_path) -> Path:
    """CT on a host that is this machine (`local: true`, no address: pct runs here, no SSH)."""
    text = hosts.read_text()
    path = tmp_path / "hosts.yaml"
    path.write_text(f"hosts:\n  here:\n    local: true\n    pct: {lab.dir / 'bin' / 'pct'}\n"
                    f"containers:\n  {CT}:\n    host: here\n" + text[text.index("\nvenv:"):])
    return path


@pytest.mark.parametrize("where", ["ssh", "local"])
def test_shell_opens_bash_on_a_pty_in_the_checkout_with_the_jobs_environment(lab, hosts, local_hosts, deployed_ct,
                                                                             where):
    hosts = hosts if where == "ssh" else local_hosts
    proc, master = on_a_terminal(["shell"], hosts)
    wait_for_the_shell(proc, master)
    os.write(master, b'echo "MARK[$VIRTUAL_ENV|$PWD|$SHELL_TOKEN|$(tty)|$(ls /root/.remote-shell-env.* 2>/dev/null'
                     b' | wc -l)|$(hostname)]"; exit 7\n')
    out = read_until_exit(proc, master, timeout=60)
    os.close(master)
    if proc.poll() is None:
        proc.kill()
    assert proc.wait(timeout=30) == 7, out
    m = re.search(r"MARK\[(/[^|\]]*)\|([^|\]]*)\|([^|\]]*)\|([^|\]]*)\|\s*(\d+)\|([^\]]*)\]", out)
    assert m, out
    venv, cwd, token, tty, leftover, hostname = m.groups()
    assert (venv, cwd, token, leftover, hostname) == ("/root/venv", "/root/dflash", SECRET, "0", f"lab{CT}"), out
    assert tty.startswith("/dev/pts/"), out  # a real terminal inside the container
    assert "Traceback" not in out


def test_shell_without_a_terminal_says_to_use_exec(lab, hosts):
    r = remote("shell", hosts=hosts)
    assert r.returncode == 2 and "remote shell needs a terminal" in r.stderr and "remote exec" in r.stderr


# -- issue 40: a stale checkout, and a dry chain a person can read --------------------------------------

@pytest.mark.fault("A new commit in code.repo since the deploy (ref: HEAD)",
                   promise="train's preflight compares the deployed checkout with what the hosts file pins now and "
                           "refuses, naming `remote deploy` or force; with force it trains the deployed commit "
                           "and says so")
def test_a_new_commit_since_the_deploy_is_refused_by_train_warned_by_doctor_and_planned_by_a_dry_chain(
        deployed, hosts, demo_repo):
    """The new user's story: `ref: HEAD`, a commit made after the deploy. `remote train` refuses (it said `checkout
    clean`), doctor warns (it said `healthy`), and `remote deploy warmup train --dry` plans the warmup and the
    train at the commit the deploy would check out, one line per remote command."""
    def git(*args):
        return subprocess.run(["git", "-C", str(demo_repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("commit", "-q", "--allow-empty", "-m", "issue 40: a commit made after the deploy")
    new = git("rev-parse", "HEAD")
    try:
        r = remote("train", "-c", str(CT), "--detach", hosts=hosts)
        assert r.returncode == 1 and f"but the hosts file pins {new[:12]} (code.ref HEAD of " in r.stderr, r.stderr
        assert "`remote deploy` ships it, or pass --force to train the deployed commit" in r.stderr, r.stderr
        d = remote("doctor", "-c", str(CT), hosts=hosts)
        assert d.returncode == 1 and "[warning] the checkout is at " in d.stdout and new[:12] in d.stdout, d.stdout
        dry = remote("deploy", "warmup", "train", "-c", str(CT), "--dry", hosts=hosts)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        lines = dry.stdout.splitlines()
        assert any(line.startswith("==> warmup of ") and f" at {new[:12]}," in line for line in lines), dry.stdout
        assert f"planned from the dry steps before: checkout at {new[:12]}" in dry.stdout, dry.stdout
        assert "bash -c <code-sync.sh, " in dry.stdout and "bash -c <warmup.sh, " in dry.stdout, dry.stdout
        assert len(lines) < 60 and "set -euo pipefail" not in dry.stdout, dry.stdout  # 996 lines, scripts in full
        full = remote("deploy", "-c", str(CT), "--dry", "--verbose", hosts=hosts)
        assert "  full: " in full.stdout and "set -euo pipefail" in full.stdout
        assert remote("exec", "-c", str(CT), "--", "git", "-C", "/root/dflash", "rev-parse", "HEAD",
                      hosts=hosts).stdout.strip() != new  # nothing of the dry chain ran
    finally:
        git("reset", "-q", "--hard", "HEAD~1")
