"""Local tier: remote's exit status comes from the error's class alone; a step's own exit status (tar's, a
transfer script's, a command's) is the error's `command_status`, never remote's. A script that retries on
3 ("busy") must not loop on a command that happened to exit 3; a full disk (tar's 2) is no "bad input"."""

import pytest

from remote.cli import exit_status
from remote.errors import BusyError, CommandError, CommandTimeout, TransferError, TransferPathError, UnknownRun
from remote.lab.testing import Expect, FakeTransport
from remote.ops import files
from remote.transport.pct import Container

FULL = "tar: ./big.bin: Cannot write: No space left on device\ntar: Exiting with failure status due to previous errors\n"


@pytest.mark.fault("A step's own exit status (tar's, a command's)",
                   promise="never remote's: a failed step exits 1 (its status in the message and .command_status); "
                           "only bad input exits 2 and only busy 3")
@pytest.mark.parametrize("status", [2, 3, 4, 124, 130, 255])
def test_a_commands_own_status_is_kept_apart_from_remotes(status):
    err = CommandError("bash -c 'exit N'", status, "why\n", "ct 200")
    assert err.command_status == status and f"command exited {status}" in str(err)
    assert err.exit_code == 1 and exit_status(err) == 1
    assert exit_status(TransferError("tar failed", command_status=status)) == 1
    assert exit_status(CommandTimeout("sleep 9", 2.0)) == 1


def test_bad_input_and_busy_keep_their_statuses_by_class():
    assert exit_status(BusyError(200, "busy")) == 3 and exit_status(UnknownRun("no run x")) == 2
    assert exit_status(TransferPathError("no such file", command_status=3)) == 2
    assert TransferPathError.exit_code == 2 and issubclass(TransferPathError, TransferError)


def stream_ct(code: int, stderr: str, stdout: bytes = b""):
    t = FakeTransport([Expect(lambda argv: True, code, stdout, stderr)])
    return Container(t, 200), t


@pytest.mark.fault("A step's own exit status (tar's, a command's)",
                   promise="never remote's: a failed step exits 1 (its status in the message and .command_status); "
                           "only bad input exits 2 and only busy 3")
def test_a_push_whose_tar_fails_on_a_full_disk_exits_1_not_2(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "big.bin").write_bytes(b"x" * 100_000)
    ct, t = stream_ct(2, FULL)
    with pytest.raises(TransferError) as e:
        files.push(ct, tmp_path / "src", "/root/small", sleep=lambda s: None)
    assert e.value.command_status == 2 and exit_status(e.value) == 1, repr(e.value)
    assert "No space left on device" in str(e.value) and "push_tree.sh exited 2" in str(e.value)
    assert "nothing was moved into place" in str(e.value)
    t.assert_done()  # nothing retried, nothing committed


def test_a_folder_pushed_onto_a_file_is_bad_input_not_busy(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a\n")
    ct, t = stream_ct(4, "/root/file is there and is not a folder\n")
    with pytest.raises(TransferPathError) as e:
        files.push(ct, tmp_path / "src", "/root/file", sleep=lambda s: None)
    assert exit_status(e.value) == 2 and "/root/file is a file there, not a folder" in str(e.value)
    t.assert_done()


def test_a_folder_pulled_onto_a_local_file_is_bad_input_and_leaves_the_file(tmp_path):
    dest = tmp_path / "notes.txt"
    dest.write_text("mine\n")
    ct, t = stream_ct(0, "", b"d 0 -\n")  # xfer_probe: a folder there
    with pytest.raises(TransferPathError) as e:
        files.pull(ct, "/root/out", dest, sleep=lambda s: None)
    assert exit_status(e.value) == 2 and "is a file here, not a folder" in str(e.value)
    assert dest.read_text() == "mine\n" and not (tmp_path / "notes.txt.partial").exists()
