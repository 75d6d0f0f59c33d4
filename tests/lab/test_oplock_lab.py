"""Lab tier: the per-container operation lease (remote.ops.oplock) and deploy's cleanup of interrupted builds."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.cli.format import deploy_text
from remote.ops import oplock
from remote.ops.deploy import deploy
from remote.errors import BusyError
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent


def lease_file(ct) -> dict:
    return oplock.parse(ct.run(["cat", oplock.LEASE], check=False, mutates=False).out)


@pytest.mark.fault("Concurrent deploys", promise="the second is refused, naming the holder")
def test_a_second_deploy_is_refused_with_the_holder_shown(deployed, lab_session, ct):
    with oplock.hold(ct, "warmup", holder="ctl-a pid 4242"):
        with pytest.raises(BusyError) as exc:
            deploy(target_of(lab_session, 200))
        assert "container 200 is busy: `warmup` held by ctl-a pid 4242 since " in str(exc.value)
        assert exc.value.exit_code == 3 and exc.value.holder["holder"] == "ctl-a pid 4242"
        with pytest.raises(BusyError, match="ctl-a pid 4242"):
            with oplock.hold(ct, "deploy"):
                pass
    assert lease_file(ct) == {}  # released on leaving the block
    with oplock.hold(ct, "deploy") as lease:
        assert lease.took_over is None  # nothing left over: taken at once
        assert lease_file(ct)["token"] == lease.token


def test_the_lease_is_renewed_while_held(deployed, ct):
    with oplock.hold(ct, "deploy", ttl=3) as lease:
        first = lease_file(ct)["expires"]
        end = time.monotonic() + 120
        while lease_file(ct)["expires"] == first:
            assert time.monotonic() < end and not lease.lost
            time.sleep(0.2)
        lease.check()


@pytest.mark.fault("Controller SIGKILLed at 5 points of deploy",
                   promise="after each: a working venv, a clean checkout, the lease taken over after it expires, the next deploy completes")
def test_a_lease_left_by_a_sigkilled_controller_is_taken_over_after_it_expires(deployed, lab_hosts, ct):
    holder = subprocess.Popen([sys.executable, "-c", """
import sys, time
from remote import config
from remote.ops import oplock
from remote.transport.session import Session
with Session(config.load(sys.argv[1]), agent=True) as s:
    with oplock.hold(s.container(200), "warmup", ttl=5):
        print("held", flush=True)
        time.sleep(3600)
""", str(lab_hosts)], env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    left = lease_file(ct)
    assert left["holder"].endswith(f"pid {holder.pid}") and left["command"] == "warmup"
    end = time.monotonic() + 300
    while True:  # refused while it is live, taken over once it expired (nobody renews it any more)
        try:
            with oplock.hold(ct, "deploy") as lease:
                assert lease.took_over["token"] == left["token"] and lease.took_over["holder"] == left["holder"]
                break
        except BusyError as exc:
            assert f"pid {holder.pid}" in str(exc) and time.monotonic() < end
            time.sleep(0.5)
    assert lease_file(ct) == {}


START = """
pidfile=$(mktemp)
setsid -f env "$@" bash -c 'echo $$ > "$0"; exec sleep 3600' "$pidfile" </dev/null >/dev/null 2>&1
for _ in $(seq 100); do [ -s "$pidfile" ] && break; sleep 0.05; done
cat "$pidfile"
"""


def gone(ct, pid: int) -> bool:
    """Whether `pid` has ended (a zombie waiting for init to reap it counts as ended)."""
    end = time.monotonic() + 60
    while ct.run(["grep", "-qv", "^State:.*Z", f"/proc/{pid}/status"], check=False).ok:
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.fault("Reused pid in a pid file", promise="never signalled: processes are found by the run's marker")
def test_cleanup_never_signals_a_pid_file_that_points_at_an_unrelated_process(deployed, lab_session, ct):
    v = "/root/venv.versions"
    unrelated = int(ct.script(START, "X=1").out)
    # A builder of an interrupted build, recognised by the marker in its environment.
    builder = int(ct.script(START, f"REMOTE_VENV_BUILD={v}/b-20200101-000000").out)
    try:
        # Leftovers whose pid files name the unrelated process (as if its pid was reused), old style and new.
        ct.script("""
v=$1 pid=$2
mkdir -p "$v/a-20200101-000000.partial" "$v/b-20200101-000000/bin" "$v/b-20200101-000000.building"
echo "$pid" > "$v/a-20200101-000000.partial.pid"
echo "$pid" > "$v/b-20200101-000000.building/pid"
""", v, str(unrelated))
        summary = deploy(target_of(lab_session, 200))
        assert any("interrupted deploy" in c for c in summary.changed), deploy_text(summary)
        assert ct.run(["kill", "-0", str(unrelated)]).ok  # never signalled
        assert gone(ct, builder)  # the marked builder was stopped
        listing = ct.run(["ls", v]).out.split()
        assert not [n for n in listing if n.startswith(("a-2020", "b-2020"))], listing
    finally:
        ct.run(["kill", "-KILL", str(unrelated), str(builder)], check=False)
