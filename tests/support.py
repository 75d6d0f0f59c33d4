"""What the tests share: paths, the lab's settings, and helpers (imported as `from support import ...`;
conftest.py holds only fixtures and hooks)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import socket
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# The tiers, one folder each, whose name is also the marker every test in it gets (conftest.py applies it):
# unit: no lab and no process but python; local: real processes on this machine (sshd on loopback, bash,
# uv, a pty, mounts), no LXC; lab: a real sshd and LXC containers (the `lab` fixture); newcomer: a fresh
# clone set up as a new user would. `pytest -m "not lab and not newcomer"` runs unit and local.
TIERS = ("unit", "local", "lab", "newcomer")


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the tier folder it lies in directly under tests/ (None elsewhere)."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# LXC ids are system-wide: two labs on one machine need other ids (REMOTE_TEST_LAB_IDS=230,231). Tests that
# take theirs from here run with either; the others still name 200 and 201.
LAB_CONTAINERS = tuple(int(i) for i in os.environ.get("REMOTE_TEST_LAB_IDS", "200,201").split(","))


# The lab modules that run on conftest's own_lab (containers OWN_LAB_CONTAINERS, and ids of their own that no
# other module uses), not on the session lab: under xdist, one worker runs them beside the session lab's
# modules (conftest.group_of). A module here takes its container ids from lab_ids(__file__).
OWN_LAB_MODULES = ("test_agent_lab.py", "test_any_code_lab.py", "test_doctor_lab.py", "test_fleet_lab.py",
                   "test_sudo_lab.py", "test_transfer_faults_lab.py", "test_watch_lab.py")
OWN_LAB_CONTAINERS = (232, 233)


def work_unit(path: str) -> str:
    """The xdist work unit of a test file (its path from the repository's root; conftest's scheduler): the
    session lab's modules one unit, run in order on one worker; OWN_LAB_MODULES another; the newcomer tier
    one; every other file its own."""
    tier = tier_of(ROOT / path)
    if tier == "lab":
        return "lab-own" if Path(path).name in OWN_LAB_MODULES else "lab"
    return "newcomer" if tier == "newcomer" else path


def lab_ids(test_file: str) -> tuple[int, ...]:
    """The container ids of the lab a test module runs on (conftest's `lab` fixture gives it that lab)."""
    return OWN_LAB_CONTAINERS if Path(test_file).name in OWN_LAB_MODULES else LAB_CONTAINERS


def new_lab(folder: Path, containers, **kw):
    """A lab in `folder` on a free port, up with `containers`; the torch wheel is placed under a lock, as two
    test processes (xdist workers) may bring up labs at once."""
    from remote.lab import Lab

    lab = Lab(dir=folder, port=free_port(), wheels_dir=LAB_WHEELS, **kw)
    provide_wheels(lab)
    lab.up(containers, wheels=False)
    return lab


def provide_wheels(lab) -> None:
    LAB_WHEELS.parent.mkdir(parents=True, exist_ok=True)
    with open(LAB_WHEELS.with_name(LAB_WHEELS.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lab.provide_wheels()


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


# -- a terminal: `remote` on a pty of its own ---------------------------------------------------------------

FAKE_PCT = """#!/bin/bash
# pct exec CT --keep-env 0 -- ARGV: ARGV on this machine (there is no container here).
[ "$1" = exec ] || { echo "pct: only exec here" >&2; exit 255; }
shift 2
[ "$1" = --keep-env ] && shift 2
[ "$1" = -- ] && shift
exec "$@"
"""


def on_a_terminal(args: list[str], hosts: Path) -> tuple[subprocess.Popen, int]:
    """`remote ARGS` on a new pty as its controlling terminal, as a user's terminal is; (process, master fd)."""
    master, slave = pty.openpty()

    def take_the_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-c", "from remote.cli import main; main()", *args],
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=take_the_terminal,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts),
                                 "TERM": "xterm"})
    os.close(slave)
    return proc, master


def wait_for_the_shell(proc, master, timeout=120.0) -> None:
    """As a user does: wait until the shell answers (what is typed before it starts may be flushed on the way)."""
    seen, end = b"", time.monotonic() + timeout
    while b"READY-42" not in seen and time.monotonic() < end and proc.poll() is None:
        os.write(master, b"echo READY-$((40+2))\n")
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            seen += os.read(master, 65536)
    assert b"READY-42" in seen, seen.decode("utf-8", "replace")


def read_until_exit(proc, fd, timeout=180.0) -> str:
    out, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode("utf-8", "replace")
