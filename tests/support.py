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


def needs(ok: bool, what: str, install: str) -> None:
    """Skip a test that needs `what` where this machine lacks it; under CI=true (.ci/run sets it) fail instead,
    naming what to install: a CI machine without it is broken, and a skip there would hide the tests."""
    import pytest

    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and this machine lacks {what}: {install}", pytrace=False)
    pytest.skip(f"needs {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# LXC ids are system-wide: two labs on one machine need other ids (REMOTE_TEST_LAB_IDS=230,231). Tests that
# take theirs from here run with either; the others still name 200 and 201. The other two labs likewise:
# REMOTE_TEST_OWN_LAB_IDS (232,233) and REMOTE_TEST_THIRD_LAB_IDS (236,237), so two checkouts can test at once.
LAB_CONTAINERS = tuple(int(i) for i in os.environ.get("REMOTE_TEST_LAB_IDS", "200,201").split(","))


# The lab modules that run on conftest's own_lab (containers OWN_LAB_CONTAINERS, and ids of their own that no
# other module uses), not on the session lab: under xdist, one worker runs them beside the session lab's
# modules (conftest.group_of). A module here takes its container ids from lab_ids(__file__).
OWN_LAB_MODULES = ("test_agent_lab.py", "test_any_code_lab.py", "test_cli_lab.py", "test_fleet_lab.py",
                   "test_liveness_lab.py", "test_newuser_lab.py", "test_sudo_lab.py", "test_terminal_lab.py",
                   "test_transfer_faults_lab.py", "test_warmup_lab.py", "test_watch_lab.py")
OWN_LAB_CONTAINERS = tuple(int(i) for i in os.environ.get("REMOTE_TEST_OWN_LAB_IDS", "232,233").split(","))
# A third lab (conftest's third_lab), the same way: its modules on a third worker, so that the longest of the
# three lab units, which run one module after another, bounds the suite's time rather than their sum.
THIRD_LAB_MODULES = ("test_cache_lab.py", "test_compile_health_lab.py", "test_create_lab.py", "test_doctor_lab.py",
                     "test_faults_lab.py")
THIRD_LAB_CONTAINERS = tuple(int(i) for i in os.environ.get("REMOTE_TEST_THIRD_LAB_IDS", "236,237").split(","))
# The lab modules that make a lab of their own (its own folder, port and container ids) and use none of
# conftest's: each is a work unit of its own, on whichever worker is free.
SELF_MADE_LAB_MODULES = ("test_cluster_lab.py", "test_create_gpu_lab.py", "test_gpufix_lab.py", "test_lab_port_lab.py",
                         "test_make_lab.py", "test_move_lab.py", "test_nanogpt_resume_lab.py", "test_ns_lab.py")


# The files outside the labs' units that take minutes each (tests/local with the real CPU torch; measured with
# scripts/suite-units, docs/evidence/benchmarks.md): conftest hands them out right after the lab's modules, beside
# the newcomer tier, so that none of them starts last and runs alone while the other workers wait.
LONG_FILES = ("test_compilewatch_local.py", "test_stop_save_local.py", "test_checkpoint_helper_local.py")


def work_unit(path: str) -> str:
    """The xdist work unit of a test file (its path from the repository's root; conftest's scheduler): the
    session lab's modules one unit, run in order on one worker; OWN_LAB_MODULES another, THIRD_LAB_MODULES a
    third; the newcomer tier one; every other file (SELF_MADE_LAB_MODULES too) its own."""
    tier = tier_of(ROOT / path)
    name = Path(path).name
    if tier == "lab" and name not in SELF_MADE_LAB_MODULES:
        return "lab-own" if name in OWN_LAB_MODULES else "lab-third" if name in THIRD_LAB_MODULES else "lab"
    return "newcomer" if tier == "newcomer" else path


def lab_ids(test_file: str) -> tuple[int, ...]:
    """The container ids of the lab a test module runs on (conftest's `lab` fixture gives it that lab)."""
    name = Path(test_file).name
    return (OWN_LAB_CONTAINERS if name in OWN_LAB_MODULES else THIRD_LAB_CONTAINERS if name in THIRD_LAB_MODULES
            else LAB_CONTAINERS)


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


# Wraps a real transport and records every command (remote/lab/testing.py)
from remote.lab.testing import Recording as CountingTransport  # noqa: E402, F401  (the lab tests' name for it)


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


# -- GPU probe samples (tests/data/gpu): a healthy Proxmox host's gpu-host.sh output, any section replaced --------

GPU_DATA = TESTS / "data" / "gpu"
GPU_MARK = "@@gpu-test"


def gpu_sample(name: str) -> str:
    return (GPU_DATA / name).read_text()


def gpu_host_text(*, proc=None, sys_version="580.95.05", modinfo="580.95.05", modules="nvidia_uvm\nnvidia_drm\nnvidia_modeset\nnvidia",
              devices=None, nodes=None, lspci=None, persistenced="running", smi=None, configs=None, end=True) -> str:
    """What remote/sh/gpu-host.sh prints on a healthy Proxmox host, with any section replaced."""
    proc = gpu_sample("proc-driver-nvidia-version-open.txt") if proc is None else proc
    smi = "0, 00000000:01:00.0, Enabled, [N/A], 580.95.05\nrc=0" if smi is None else smi
    configs = {200: gpu_sample("pct-config-dev.txt")} if configs is None else configs
    parts = [("kernel", "6.8.12-4-pve"), ("packages", "pve-container 5.2.3\npve-manager 8.3.0"),
             ("proc-version", proc), ("sys-version", sys_version), ("modinfo", modinfo), ("modules", modules),
             ("devices", gpu_sample("proc-devices-uvm509.txt") if devices is None else devices),
             ("nodes", gpu_sample("nodes-509.txt") if nodes is None else nodes),
             ("lspci", gpu_sample("lspci-nvidia.txt") if lspci is None else lspci), ("persistenced", persistenced),
             ("smi", smi)]
    parts += [(f"pct-config {c}", text + "rc=0") for c, text in configs.items()]
    out = "".join(f"{GPU_MARK} {name}\n{body.rstrip()}\n" if body else f"{GPU_MARK} {name}\n" for name, body in parts)
    return out + (f"{GPU_MARK} end\n" if end else "")


def gpu_host(**kw):
    from remote.facts import gpu

    return gpu.parse_host(gpu_host_text(**kw), GPU_MARK)


# -- sudo: pct command lines the drop-in must refuse (tests/unit/test_sudo.py, tests/lab/test_sudo_lab.py) ---------

EXAMPLE_CT = 200  # the container id in NOT_ALLOWED's lines (the lab test puts its own in its place)
NOT_ALLOWED = [
    "push 200 /etc/shadow /root/s", "pull 200 /tmp/x /etc/sudoers.d/zz", "set 200 -mp0 /,mp=/host", "enter 200",
    "mount 200", "unmount 200", "destroy 200", "create 999 local:vztmpl/x.tar.zst", "restore 999 /tmp/backup.tar",
    "unlock 200", "resize 200 rootfs +1G", "migrate 200 pve2", "clone 200 999", "template 200", "console 200",
    "fsck 200", "move-volume 200 rootfs local", "reboot 200", "shutdown 200", "suspend 200", "resume 200",
    "pending 200", "df 200", "cpusets", "rescan", "remote-migrate 200", "fstrim 200", "help",
    "exec 200 -- id", "exec 200 --keep-env 1 -- id", "exec 200 --keep-env 0 --", "ex 200 --keep-env 0 -- id",
    "status 200 --verbose", "config 200 --current", "config 200 --snapshot x", "list --full", "start 200 --debug 1",
    "stop 200 --skiplock 1", "snapshot 200 mine --description before deploy of x", "snapshot 200 remote-20261201-1",
    "delsnapshot 200 before-upgrade", "delsnapshot 200 remote-20261201-1 --force 1", "rollback 200 x --start 1 --y",
    "rollback 200 x", "listsnapshot 200 --x", "status 0200", "status abc",
    # The description is remote's only (the commit or the venv spec's hash): no pct option passes inside it.
    "snapshot 200 remote-20261201-1 --description before deploy of 0123abc --vmstate 1",
    "snapshot 200 remote-20261201-1 --description before deploy of anything at all",
    # A rollback restores the snapshot's container config: to remote's own snapshots only.
    "rollback 200 before-upgrade --start 1", "rollback 200 by-hand --start 0",
]


class Heard:
    """A session whose operations' events are heard: each event's line appended to `lines` (as the command line
    shows it); everything else is the session's own (its config, transports, agents)."""

    def __init__(self, session, lines: list):
        self._session, self.lines = session, lines

    def __getattr__(self, name):
        return getattr(self._session, name)

    def sink(self, event) -> None:
        self.lines.append(event.line)


class Reported:
    """A stand-in session for an operation whose container commands a test patches out: its Container is `ct`
    (one with a transport that closes, where none is given); what the operation reports is kept, each event
    in `events` and its line in `lines`."""

    def __init__(self, ct=None, lines: list | None = None):
        self.ct = ct if ct is not None else type("Ct", (), {"transport": type("T", (), {"close": None})()})()
        self.events: list = []
        self.lines = lines if lines is not None else []

    def container_for(self, spec, venv_on_path=True):
        return self.ct

    def sink(self, event) -> None:
        self.events.append(event)
        self.lines.append(event.line)


def target(session, spec, lines: list | None = None):
    """A Target of `spec` on `session`: a test's own spec (a run folder of its own, another train section);
    with `lines`, the lines its operations report are appended there."""
    from remote.target import Target

    return Target(session if lines is None else Heard(session, lines), spec)
