"""Lab tier: transfers over a link that goes silent (no EOF, no reset), and to mount points."""

import hashlib
import os
import signal
import threading
import time

import pytest
from support import lab_ids, sshd_serving

from remote.errors import ConnectError
from remote.ops import files

pytestmark = pytest.mark.lab
CT = lab_ids(__file__)[0]  # on conftest's own_lab (support.OWN_LAB_MODULES)


def random_file(path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            chunk = os.urandom(1 << 20)
            f.write(chunk)
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.fault("Link goes silent mid-push (no EOF): the first writer holds the partial file",
                   promise="the stall is noticed, the earlier writer ended by its marker, the retry resumes and verifies")
def test_a_push_whose_link_goes_silent_is_retried_and_completes(lab, lab_session, tmp_path):
    ct = lab_session.container(CT)
    src = tmp_path / "big.bin"
    digest = random_file(src, 96 << 20)
    dest = "/root/xfer-silent/big.bin"
    ct.run(["rm", "-rf", "/root/xfer-silent"])
    frozen: list[int] = []

    def freeze(done, total):  # the link goes silent: the session's sshd stops, its TCP connection stays open
        if done >= 24 << 20 and not frozen:
            frozen.extend(sshd_serving(lab_session, lab))
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)

    outcome: list = []

    def push():
        try:
            outcome.append(files.push(ct, src, dest, progress=freeze, stall=20, sleep=lambda s: None))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    start = time.monotonic()
    t = threading.Thread(target=push, daemon=True)
    t.start()
    try:
        t.join(timeout=240)
        assert outcome, f"the push still hangs after {time.monotonic() - start:.0f}s"
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGKILL)
    stats = outcome[0]
    assert isinstance(stats, files.Transfer), stats
    assert frozen and stats.attempts == 2 and stats.resumed_from > 0 and stats.sha256 == digest
    assert ct.run(["sha256sum", dest]).out.split()[0] == digest
    assert ct.run(["test", "-e", dest + ".partial"], check=False).exit_code == 1
    # No writer of either attempt is left behind.
    left = ct.script("grep -l -a -z '^REMOTE_PUSH_PARTIAL=' /proc/[0-9]*/environ 2>/dev/null || true").out
    assert left.strip() == "", left


@pytest.fixture
def local_mount(tmp_path):
    """A tmpfs mounted on this machine: a filesystem of its own, as a data disk's mount point is."""
    import subprocess

    point = tmp_path / "mnt"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], check=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.fault("Push to a mount point in the container; pull to a local mount point",
                   promise="staged on the destination's own filesystem, merged by rename or hard link; nothing left")
def test_push_and_pull_of_a_folder_to_mount_points(lab_session, tmp_path, local_mount):
    ct = lab_session.container(CT)
    ct.script("umount /mnt/data 2>/dev/null || true; rm -rf /mnt/data /mnt/data.partial; mkdir -p /mnt/data && "
              "mount -t tmpfs -o size=64m tmpfs /mnt/data && echo kept > /mnt/data/kept")
    try:
        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "a.bin").write_bytes(os.urandom(1 << 20))
        (src / "sub" / "b.txt").write_text("b\n")
        stats = files.push(ct, src, "/mnt/data")
        assert stats.files == 2
        assert ct.run(["cat", "/mnt/data/sub/b.txt", "/mnt/data/kept"]).out == "b\nkept\n"
        assert ct.run(["ls", "-A", "/mnt/data"]).out.split() == ["a.bin", "kept", "sub"]  # no staging left
        assert ct.run(["test", "-e", "/mnt/data.partial"], check=False).exit_code == 1  # nothing on the root fs
        # The mount point's own filesystem holds the files (the container's root does not).
        assert ct.run(["stat", "-c", "%d", "/mnt/data/a.bin"]).out == ct.run(["stat", "-c", "%d", "/mnt/data"]).out

        (local_mount / "old.txt").write_text("old\n")
        stats = files.pull(ct, "/mnt/data", local_mount)
        assert stats.files == 3
        assert sorted(os.listdir(local_mount)) == ["a.bin", "kept", "old.txt", "sub"]
        assert (local_mount / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
        assert os.stat(local_mount / "a.bin").st_dev == os.stat(local_mount).st_dev
        assert not (tmp_path / "mnt.partial").exists()
    finally:
        ct.script("umount /mnt/data 2>/dev/null || true; rm -rf /mnt/data")


@pytest.mark.fault("Container-side stall mid-pull (a stopped sender, the link healthy)",
                   promise="no byte for `stall` s is a lost link: the retry resumes from what landed and verifies, "
                           "never a hang")
def test_a_pull_whose_sender_stops_is_retried_and_completes(lab_session, tmp_path):
    ct = lab_session.container(CT)
    src = "/root/xfer-stall.bin"
    ct.run(["sh", "-c", f"head -c {64 << 20} /dev/urandom > {src}"])
    digest = ct.run(["sha256sum", src]).out.split()[0]
    stopped: list[int] = []

    def stop(done, total):  # the container's sender stops mid-stream; the link itself stays healthy
        if done >= 4 << 20 and not stopped:
            stopped.append(ct.run(["pkill", "-STOP", "-x", "dd"], check=False).exit_code)

    outcome: list = []

    def pull():
        try:
            outcome.append(files.pull(ct, src, tmp_path / "back.bin", progress=stop, stall=3, attempts=2,
                                      sleep=lambda s: None))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    t = threading.Thread(target=pull, daemon=True)
    t.start()
    try:
        t.join(timeout=120)
        assert outcome, "the pull still hangs on a stopped sender"
    finally:
        ct.run(["pkill", "-KILL", "-x", "dd"], check=False)
        ct.run(["rm", "-f", src])
    stats = outcome[0]
    assert isinstance(stats, files.Transfer), stats
    assert stopped == [0] and stats.attempts == 2 and stats.resumed_from > 0 and stats.sha256 == digest
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == digest


def test_a_stalled_pull_with_no_retry_left_names_the_stall(lab_session, tmp_path):
    ct = lab_session.container(CT)
    src = "/root/xfer-stall1.bin"
    ct.run(["sh", "-c", f"head -c {64 << 20} /dev/urandom > {src}"])
    stopped: list[int] = []

    def stop(done, total):
        if done >= 4 << 20 and not stopped:
            stopped.append(ct.run(["pkill", "-STOP", "-x", "dd"], check=False).exit_code)

    try:
        with pytest.raises(ConnectError, match=r"nothing moved for 3s during pull_file .*taken as a lost link"):
            files.pull(ct, src, tmp_path / "back.bin", progress=stop, stall=3, attempts=1)
    finally:
        ct.run(["pkill", "-KILL", "-x", "dd"], check=False)
        ct.run(["rm", "-f", src])
    assert stopped == [0]
