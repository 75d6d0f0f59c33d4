"""Local tier: remote/sh/push_file.sh run here with bash (as in the container): a writer left by an
attempt whose link went silent never blocks the retry for ever."""

import hashlib
import subprocess
import time

import pytest
from support import wait_until

from remote import shell


def writer(part, offset, stall, **kw):
    return subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + shell.load("push_file"), "remote", str(part),
                             str(offset), str(stall)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


@pytest.mark.fault("Link goes silent mid-push (no EOF): the first writer holds the partial file",
                   promise="the stall is noticed, the earlier writer ended by its marker, the retry resumes and verifies")
def test_a_stalled_writer_is_ended_by_its_marker_and_the_retry_takes_over(tmp_path):
    part = tmp_path / "dest.bin.partial"
    first = writer(part, 0, 30)
    first.stdin.write(b"a" * 1000)
    first.stdin.flush()  # ... and then nothing more: its stdin stays open, as under a silent link
    assert wait_until(lambda: part.exists() and part.stat().st_size == 1000, 10)
    start = time.monotonic()
    retry = writer(part, 1000, 2)
    out, err = retry.communicate(b"b" * 500, timeout=30)
    assert retry.returncode == 0, err
    assert out.decode().strip() == hashlib.sha256(b"a" * 1000 + b"b" * 500).hexdigest()
    assert b"wrote nothing for 2s: ended" in err and time.monotonic() - start < 15
    assert first.wait(timeout=10) != 0  # ended, not finished


def test_a_writer_that_is_still_writing_is_waited_for_not_ended(tmp_path):
    part = tmp_path / "dest.bin.partial"
    first = writer(part, 0, 30)
    first.stdin.write(b"x")
    first.stdin.flush()
    assert wait_until(lambda: part.exists() and part.stat().st_size == 1, 10)  # it holds the lock
    second = writer(part, 0, 2)
    for _ in range(8):  # the first keeps writing for 4 s, longer than the second's stall
        first.stdin.write(b"x" * 100)
        first.stdin.flush()
        time.sleep(0.5)
    first.stdin.close()
    assert first.wait(timeout=10) == 0
    out, err = second.communicate(b"y", timeout=30)
    assert second.returncode == 0 and b"ended" not in err
    assert out.decode().strip() == hashlib.sha256(b"y").hexdigest()
