"""Lab tier: every task with `local: true` (the controller is the Proxmox host: pct runs here, no SSH).

Each task runs as the `remote` command does, in its own process; what is checked is what a user sees:
exit statuses and key output, never a traceback.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAB_SECTIONS

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def local_hosts(lab, demo_repo, deployed, tmp_path_factory) -> Path:
    """The lab's container 200 on a host that is this machine: `local: true`, pct the lab's double."""
    path = tmp_path_factory.mktemp("local") / "hosts.yaml"
    path.write_text("hosts:\n  here:\n    address: 127.0.0.1\n    local: true\n"
                    f"    pct: {lab.dir / 'bin' / 'pct'}\n"
                    "containers:\n  200:\n    host: here\n" + LAB_SECTIONS.format(repo=demo_repo))
    return path


def task(hosts: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=hosts.parent)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_every_task_runs_with_a_local_host(local_hosts, tmp_path):
    r = task(local_hosts, "status")
    assert r.returncode == 0 and "here: reachable" in r.stdout and "200: running" in r.stdout, r.stdout + r.stderr

    r = task(local_hosts, "exec", "--container", "200", "--command", "echo \"in $(hostname) as $(id -un)\"; exit 3")
    assert r.returncode == 3 and r.stdout == "in lab200 as root\n", r.stdout + r.stderr

    r = task(local_hosts, "deploy", "-c", "200")
    assert r.returncode == 0, r.stdout + r.stderr

    r = task(local_hosts, "warmup", "-c", "200")
    assert r.returncode == 0 and "warmup done: 2 device(s)" in r.stdout, r.stdout + r.stderr

    r = task(local_hosts, "train", "-c", "200", "--detach")
    assert r.returncode == 0, r.stdout + r.stderr

    r = task(local_hosts, "logs", "-c", "200", "--follow")
    assert r.returncode == 0 and "Ktok/s" in r.stdout, r.stdout + r.stderr

    r = task(local_hosts, "stop", "-c", "200")
    assert r.returncode == 0 and "no process of it is left" in r.stdout, r.stdout + r.stderr

    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("α\n")
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    r = task(local_hosts, "push", "-c", "200", "--src", str(src), "--dest", "/root/local-in")
    assert r.returncode == 0 and "verified by sha256" in r.stdout, r.stdout + r.stderr
    r = task(local_hosts, "pull", "-c", "200", "--src", "/root/local-in", "--dest", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "out" / "sub" / "a.txt").read_text() == "α\n"
    assert (tmp_path / "out" / "big.bin").read_bytes() == (src / "big.bin").read_bytes()


def test_a_missing_container_is_a_clean_error_locally(local_hosts):
    text = local_hosts.read_text().replace("  200:\n    host: here\n", "  200:\n    host: here\n  999:\n    host: here\n")
    other = local_hosts.with_name("hosts-999.yaml")
    other.write_text(text)
    r = task(other, "exec", "--container", "999", "--command", "true")
    assert r.returncode == 1 and "container 999 does not exist" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("agent", [False, True], ids=["pct-exec", "agent"])
def test_both_exec_paths_serve_a_local_host(local_hosts, agent):
    """The one container-exec interface, both ways, over the local transport: same bytes, same environment."""
    from remote import config
    from remote.transport.agent import Agent
    from remote.transport.pct import PctExec
    from remote.transport.session import Session

    with Session(config.load(str(local_hosts)), agent=agent) as s:
        ct = s.container(200)
        runner = ct.agent() if ct.agent else PctExec(ct.transport, ct.pct, ct.ctid)
        assert isinstance(runner, Agent if agent else PctExec)
        args = ["a b", "$HOME", "'\"`x`", "", "-la", "ünï ✓"]
        assert ct.run(["printf", "%s\\0", *args]).stdout.split(b"\0")[:-1] == [a.encode() for a in args]
        r = ct.run(["bash", "-c", 'echo "$HOME|$PWD|$X"; cat; exit 4'], cwd="/tmp", env={"X": "y z"},
                   stdin=b"in\n", check=False)
        assert (r.exit_code, r.out) == (4, "/root|/tmp|y z\nin\n")


@pytest.mark.fault("--dry or --container once on an invoke line",
                   promise="applies to every task of the line, as with `remote`; a line a task of which has no --dry, or "
                   "that names two containers for a task given none, is refused naming the flag, nothing run")
def test_a_dry_invoke_line_changes_nothing_in_the_container(lab, local_hosts):
    """`invoke deploy warmup train --container 200 --dry` in the checkout: invoke binds --dry and --container to
    train only; remote's collection gives them to deploy and warmup too, so nothing is deployed, warmed or run."""
    pct = str(lab.dir / "bin" / "pct")

    def in_ct(*argv: str) -> str:
        return subprocess.run([pct, "exec", "200", "--", *argv], capture_output=True, text=True, check=True).stdout

    in_ct("touch", "/root/before-dry-line")
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(local_hosts), "PYTHONPATH": str(ROOT)}
    env.pop("REMOTE_CONTAINER", None)
    r = subprocess.run([sys.executable, "-m", "invoke", "deploy", "warmup", "train", "--container", "200", "--dry"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "deploy 200 (dry run, nothing changed)" in r.stdout, r.stdout
    assert "(dry run) run " in r.stdout and "would start in container 200" in r.stdout, r.stdout
    assert "warmup done" not in r.stdout, r.stdout  # the warmup was not run
    # (git's index: `git status`, which every deploy's probe runs, refreshes its stat cache: a read, not a change)
    # (/root/.pyenv: the lab container's root is this machine's, as a read-only lower layer, so the machine's own
    # pyenv rehashing its shims there shows through; remote runs nothing through a login shell in a container)
    changed = in_ct("find", "/root", "-newer", "/root/before-dry-line", "-not", "-type", "d",
                    "-not", "-path", "/root/dflash/.git/index", "-not", "-path", "/root/.pyenv/*")
    assert changed == "", changed  # nothing written in the container: no deploy, no warmup, no run
