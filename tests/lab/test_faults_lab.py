"""Lab tier: rows of docs/evidence/reliability.md that no other test checks: a dropped connection mid-deploy, a
container stopped under a job, pct's config lock held, the disk filling up during a venv build."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import threading
import time

import pytest
from support import lab_ids, load_config, sshd_serving, target, wait_until

from remote.cli.format import deploy_text
from remote import config
from remote.ops.deploy import deploy
from remote.errors import BusyError, ContainerLocked, DeployError, RemoteError
from remote.naming import LEASE
from remote.ops.jobs import Preflight, final_status, launch, show_log, state
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
A, B = lab_ids(__file__)[:2]  # on conftest's third_lab (support.THIRD_LAB_MODULES)
PRE = Preflight(commit="0" * 40, venv={"verify": {}}, gpus=None, notes=[])


@pytest.mark.fault("Container stopped mid-job", promise="the run is reported lost, not exited")
def test_a_container_stopped_under_a_job_reports_the_run_lost(lab_session):
    base = lab_session.config.container(B)
    spec = dataclasses.replace(base, code=dataclasses.replace(base.code, path="/root"),
                               train=dataclasses.replace(base.train, run_dir="/root/runs-stopped"))
    t = target(lab_session, spec)
    ct = lab_session.container(B)
    run_id, _ = launch(t, PRE, command="echo started; sleep 600")
    assert wait_until(lambda: "started" in state(t, run_id).tail, 30)
    ct.stop()
    ct.start()
    ct.wait_running(timeout=30)
    # After the restart the container's pids begin again: the pid file may name a new process.
    ct.run(["bash", "-c", "for i in $(seq 20); do setsid sleep 300 </dev/null >/dev/null 2>&1 & done"])
    st = state(t, run_id)
    assert st.lost and not st.alive and st.exit is None, st
    lines: list[str] = []
    final = show_log(target(lab_session, spec, lines), run_id, follow=True)  # returns: nothing runs any more
    assert final_status(final) == 1 and "LOST" in lines[-1] and lines[0] == "started"


@pytest.mark.fault("pct locked", promise="ContainerLocked, saying to retry when the other pct operation is done")
def test_pct_with_the_config_lock_held_is_a_typed_error(lab, lab_session):
    ct = lab_session.container(A)
    (lab.dir / "lock").mkdir(exist_ok=True)
    with open(lab.dir / "lock" / f"pve-config-{A}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # as a backup or another push would hold it
        with pytest.raises(ContainerLocked, match="locked by another pct operation"):
            ct.run_pct("push", str(A), "/etc/hostname", "/root/locked", mutates=True)
    ct.run_pct("push", str(A), "/etc/hostname", "/root/locked", mutates=True)  # free again


def once_the_lease_is_free(operation, timeout=300.0):
    """operation(), retried while an interrupted operation's lease is still live (released, or expired
    30 s after its controller died)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return operation()
        except BusyError as exc:
            assert time.monotonic() < end, str(exc)
            time.sleep(1)


@pytest.mark.fault("SSH dropped mid-deploy", promise="the current venv and checkout stay usable; the next deploy completes")
def test_a_connection_dropped_mid_deploy_leaves_the_venv_and_the_next_deploy_completes(lab, lab_hosts, deployed, ct):
    before = ct.run(["readlink", "/root/venv"]).out
    head = ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out
    # A spec no other test builds: a kept build of it (test_deploy_lab, test_warmup_lab build mpmath==1.3.0)
    # would be swapped in without a build, and the connection would drop after the deploy, not during it.
    changed = load_config(lab_hosts, **{"packages: [torch==2.13.0+cpu, numpy==2.2.6]":
                                        "packages: [torch==2.13.0+cpu, numpy==2.2.6, 'mpmath>=1.2']"})
    lines: list[str] = []
    outcome: list = []
    with Session(config.load(str(changed)), agent=True, events=lambda e: lines.append(e.line)) as s:  # its lines, as events' text
        def work():
            try:
                outcome.append(deploy(target_of(s, A)))
            except Exception as exc:
                outcome.append(exc)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        assert wait_until(lambda: any(l.startswith("==> building venv") for l in lines) or outcome, 300), lines
        assert not outcome, outcome
        for pid in sshd_serving(s, lab):
            os.kill(pid, signal.SIGKILL)
        t.join(timeout=300)
        assert outcome and isinstance(outcome[0], RemoteError), outcome
        assert ct.run(["readlink", "/root/venv"]).out == before
        assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out == head
        assert ct.run(["python", "-c", "import torch"]).ok
        # The lease of the interrupted deploy may still be live; it was this process's.
        summary = once_the_lease_is_free(lambda: deploy(target_of(s, A)))
    assert ct.run(["python", "-c", "import mpmath, torch"]).ok, deploy_text(summary)
    assert ".building" not in ct.run(["ls", "/root/venv.versions"]).out
    with Session(config.load(str(lab_hosts)), agent=True) as s:
        deploy(target_of(s, A))


@pytest.mark.fault("Disk full during a venv build",
                   promise="the build fails with the reason; the current venv and checkout are untouched")
def test_a_disk_that_fills_up_during_the_venv_build_fails_the_deploy_and_changes_nothing(lab_session, lab_hosts):
    ct = lab_session.container(B)
    before = ct.run(["readlink", "/root/venv"], check=False).out
    ct.run(["mkdir", "-p", "/root/venv.versions"])
    mounted = ct.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", "/root/venv.versions"], check=False)
    assert mounted.ok, f"cannot mount a small tmpfs in the lab container: {mounted.err}"
    try:
        lines: list[str] = []
        with pytest.raises(DeployError, match="the venv build failed") as e:
            deploy(target_of(dataclasses.replace(lab_session, events=lambda e: lines.append(e.line)), B))  # its lines, as events' text
        assert "current venv and checkout were left in place" in str(e.value)
        assert any("No space left on device" in l or "os error 28" in l for l in lines), "\n".join(lines[-20:])
        assert ".building" not in ct.run(["ls", "-a", "/root/venv.versions"]).out  # the failed build removed
    finally:
        ct.run(["umount", "/root/venv.versions"], check=False)
    assert ct.run(["readlink", "/root/venv"], check=False).out == before


# Where the controller is SIGKILLed: (what is happening, the output line it is stopped at). The controller
# runs under PAUSE, which holds it at exactly that point and says so in a marker file: the kill lands there
# however slow or fast the machine is (no timer).
KILL_POINTS = [
    ("probing", None),                                    # connected, the first probe about to go out
    ("planned, nothing built", "==> venv:"),
    ("the build started", "==> building venv"),
    ("mid-build", "    installing "),                     # uv pip sync running in the container
    ("verifying the build", "    built in"),
    ("swapped, not yet pruned", "==> /root/venv now points to"),
]

PAUSE = r"""
import os, sys, time
from pathlib import Path

marker, pattern = Path(os.environ["KILL_MARKER"]), os.environ["KILL_AT"]


def pause():  # the kill point: say so, then wait for the SIGKILL
    marker.write_text(pattern)
    while True:
        time.sleep(3600)


if not pattern:
    from remote.ops import deploy

    deploy.probe = lambda *a, **kw: pause()
else:
    class Stopping:
        def __init__(self, inner):
            self.inner, self.line = inner, ""

        def write(self, text):
            n = self.inner.write(text)
            self.inner.flush()
            for part in text.splitlines(keepends=True):
                self.line += part
                if self.line.startswith(pattern):
                    pause()
                if self.line.endswith("\n"):
                    self.line = ""
            return n

        def __getattr__(self, name):
            return getattr(self.inner, name)

    sys.stdout = Stopping(sys.stdout)
from remote.cli import program

program.run()
"""


def kill_deploy_at(env: dict, pattern: str | None, marker):
    """Run `deploy` as the command does, held at the first output line starting with `pattern` (at the first
    probe when None); SIGKILL it there. Returns the process and the lines it printed."""
    import sys

    marker.unlink(missing_ok=True)
    output = marker.with_name("deploy-output")
    with open(output, "w") as out:  # a file, not a pipe: a held deploy never waits on its reader
        proc = subprocess.Popen([sys.executable, "-c", PAUSE, "deploy", "--container", str(A)],
                                env={**env, "KILL_MARKER": str(marker), "KILL_AT": pattern or ""},
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: marker.exists() or proc.poll() is not None, 900)  # a hang guard, not a timer
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    return proc, output.read_text().splitlines()


@pytest.mark.fault("Controller SIGKILLed at 5 points of deploy",
                   promise="after each: a working venv, a clean checkout, the lease taken over after it expires, "
                           "the next deploy completes")
def test_deploy_sigkilled_at_each_point_leaves_a_working_venv_and_the_next_deploy_completes(lab_hosts, deployed, ct,
                                                                                            tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent.parent
    head = ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out
    killed = []
    for n, (point, pattern) in enumerate(KILL_POINTS):
        # A spec of its own each time (the same packages), so every deploy has a venv to build.
        hosts = load_config(lab_hosts, **{"packages: [torch==2.13.0+cpu, numpy==2.2.6]":
                                          f"packages: [torch==2.13.0+cpu, numpy==2.2.6, 'mpmath>=0.{n + 1}']"})
        env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(root)}
        end = time.monotonic() + 120
        while True:  # the previous (killed) controller's lease blocks deploys until it expires
            proc, seen = kill_deploy_at(env, pattern, tmp_path / "killpoint")
            if proc.returncode == -signal.SIGKILL or not any("is busy" in line for line in seen):
                break
            assert time.monotonic() < end, "\n".join(seen)
            time.sleep(1)
        assert proc.returncode == -signal.SIGKILL, f"{point}: the deploy ended before the kill:\n" + "\n".join(seen)
        killed.append(point)
        # The venv in use is a finished build that works; the checkout is where it was and clean.
        real = ct.run(["readlink", "-f", "/root/venv"]).out.strip()
        assert not real.endswith(".building") and ct.run(["test", "-e", f"{real}/remote-venv.json"], check=False).ok, \
            f"{point}: {real}"
        assert ct.run(["python", "-c", "import torch"]).ok, point
        assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out == head, point
        assert ct.run(["git", "-C", "/root/dflash", "status", "--porcelain", "--untracked-files=no"]).out == "", point
        if n < len(KILL_POINTS) - 1:  # the dead controller's lease aged as its 30 s would (the last one expires)
            ct.run(["sh", "-c", 'if [ -e "$1" ]; then sed -i "s/^expires=.*/expires=0/" "$1"; fi', "sh", LEASE])
    assert len(killed) == len(KILL_POINTS)
    # The next deploy takes the dead controller's lease over once it expired, cleans up and completes.
    with Session(config.load(str(hosts)), agent=True) as s:
        summary = once_the_lease_is_free(lambda: deploy(target_of(s, A)))
    assert ".building" not in ct.run(["ls", "/root/venv.versions"]).out, deploy_text(summary)
    assert ct.run(["python", "-c", "import mpmath, torch"]).ok
    with Session(config.load(str(lab_hosts)), agent=True) as s:  # back to the session's spec
        deploy(target_of(s, A))
        assert deploy(target_of(s, A)).noop


@pytest.mark.fault("SSH dropped mid-warmup",
                   promise="the warmup fails with a connection error and leaves nothing running; its record stays "
                           "well-formed; the next warmup completes")
def test_a_connection_dropped_mid_warmup_leaves_nothing_running_and_the_next_warmup_completes(lab, lab_hosts,
                                                                                              deployed, ct):
    import json

    from remote.ops import warmup as wm

    lines: list[str] = []
    outcome: list = []
    with Session(config.load(str(lab_hosts)), agent=True, events=lambda e: lines.append(e.line)) as s:  # its lines, as events' text
        def work():
            try:
                outcome.append(wm.warmup(target_of(s, A)))
            except Exception as exc:
                outcome.append(exc)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        # Dropped while device 0's warmup runs in the container (asked over the fixture's own connection).
        assert wait_until(lambda: "drafter.warmup --device 0" in ct.run(["ps", "-eo", "args"]).out or outcome, 300)
        assert not outcome, outcome
        for pid in sshd_serving(s, lab):
            os.kill(pid, signal.SIGKILL)
        t.join(timeout=300)
        assert outcome and isinstance(outcome[0], RemoteError), outcome
        # The agent killed the warmup it was running: nothing of it is left in the container.
        assert wait_until(lambda: "drafter.warmup" not in ct.run(["ps", "-eo", "args"]).out, 30)
        record = ct.run(["bash", "-c", "cat /root/.cache/torch-compile/warmups.jsonl 2>/dev/null || true"]).out
        assert all(json.loads(line) for line in record.splitlines())
        # The interrupted warmup's lease is released by this process, or expires.
        results = once_the_lease_is_free(lambda: wm.warmup(target_of(s, A)), 120)
    assert [r.device for r in results] == ["0", "1"]
