"""Lab tier: `remote rollback` and the operation lease (remote.ops.oplock): a rollback takes the lease of a
running container and keeps it from the run check to the rollback, so it never rolls back under another
controller's deploy, warmup or launch."""

from __future__ import annotations

import subprocess

import pytest
from support import LAB_CONTAINERS

from remote.errors import BusyError
from remote.ops import oplock, snapshots
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
B = LAB_CONTAINERS[1]
MARKER = "/root/marker-rollback-lease"


def pct(lab, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(lab.dir / "bin" / "pct"), *map(str, args)], capture_output=True, text=True)


@pytest.mark.fault("A rollback while another controller holds the container's lease",
                   "refused (BusyError, exit 3) naming the holder; nothing rolled back")
def test_a_rollback_is_refused_while_another_controller_holds_the_lease(lab, lab_session):
    ct = lab_session.container(B)
    lab.set_storage(B, "local-lvm")  # a storage that snapshots (the double copies the layer)
    try:
        ct.run(["sh", "-c", f"echo before > {MARKER}"])
        made = pct(lab, "snapshot", B, "lease-test")
        assert made.returncode == 0, made.stderr
        ct.run(["sh", "-c", f"echo after > {MARKER}"])
        with oplock.hold(ct, "deploy", holder="another-controller pid 7"):
            with pytest.raises(BusyError, match="another-controller pid 7") as e:
                snapshots.rollback(target_of(lab_session, B), snapshot="lease-test")
            assert e.value.exit_code == 3
        assert ct.run(["cat", MARKER]).out == "after\n"  # nothing rolled back
        done = snapshots.rollback(target_of(lab_session, B), snapshot="lease-test")  # free now: it rolls back
        assert done.started and ct.run(["cat", MARKER]).out == "before\n"
    finally:
        pct(lab, "delsnapshot", B, "lease-test")
        lab.set_storage(B, "local")
        ct.run(["rm", "-f", MARKER])
