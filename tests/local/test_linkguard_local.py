"""Local tier: remote/sh/linkguard.py, the guard of a cold `remote exec`'s command (remote.transport.direct), run
here with this machine's python3 as the container runs it: the command gets the N bytes after the header as its
stdin and its own exit status passes through; when the guard's stdin ends (the ssh link gone) or it gets SIGHUP,
the command's whole process group is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from remote.errors import ConnectError
from remote.transport import direct

MARK = "sleep 309.25"


def guard(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(direct.guarded(list(argv)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def alive(text: str) -> bool:
    found = subprocess.run(["pgrep", "-f", f"^{text}"], capture_output=True, text=True).stdout.split()
    return bool(found)


def wait(predicate, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_the_command_gets_its_stdin_and_its_status_passes_through_while_the_link_stays():
    p = guard("bash", "-c", 'cat; echo " and out"; echo err >&2; exit 7')
    payload = b"a\0b c\n"
    p.stdin.write(b"%d\n" % len(payload) + payload)
    p.stdin.flush()  # and kept open: the link is there
    assert p.wait(timeout=30) == 7
    assert p.stdout.read() == payload + b" and out\n" and p.stderr.read() == direct.STARTED + b"err\n"
    p.stdin.close()


def test_a_program_that_is_not_there_is_named_as_env_names_it():
    p = guard("no-such-program-here")
    p.stdin.write(b"0\n")
    p.stdin.flush()
    assert p.wait(timeout=30) == 127
    assert p.stderr.read() == direct.STARTED + b"env: 'no-such-program-here': No such file or directory\n"
    p.stdin.close()


@pytest.mark.fault("The ssh link of a cold one-off `remote exec` dropped mid-command",
                   "the command ends in the container (the guard sees its link go); remote says the connection "
                   "was lost, exit 1")
@pytest.mark.parametrize("how", ["eof", "hup"])
def test_the_link_going_kills_the_whole_process_group(how):
    # A child of the command's own (the shell's sleep) goes too: the group is killed, not one process.
    p = guard("bash", "-c", f"{MARK} & wait")
    p.stdin.write(b"0\n")
    p.stdin.flush()
    try:
        assert wait(lambda: alive(MARK))
        if how == "eof":
            p.stdin.close()
        else:
            p.send_signal(signal.SIGHUP)
        assert p.wait(timeout=30) == 128 + signal.SIGHUP
        assert wait(lambda: not alive(MARK))
    finally:
        for pid in subprocess.run(["pgrep", "-f", f"^{MARK}"], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)  # only where the guard failed to


def test_no_header_is_no_command(tmp_path):
    p = guard("touch", str(tmp_path / "never"))
    p.stdin.close()
    assert p.wait(timeout=30) == 255 and not (tmp_path / "never").exists()


# An ssh stand-in: the remote command line (run()'s last argument) run by a shell here, as sshd's login shell
# runs it on the host; stdin and the output pass through as ssh passes them.
BY_HAND = ("bash", "-c", 'eval "$1"', "fake-ssh")


@pytest.mark.fault("A cold one-off `remote exec` whose command exits 255 saying what ssh says when it cannot "
                   "connect (an ssh of its own inside the container that failed)",
                   "the command's own exit 255 and words, run once: not taken for ssh failing to reach the host "
                   "and run a second time the usual way")
def test_a_command_that_ran_and_exits_255_with_ssh_words_is_its_own_result_run_once(tmp_path):
    ran = tmp_path / "ran"
    command = direct.guarded(["bash", "-c", f"echo x >> {ran}; echo 'Host key verification failed.' >&2; exit 255"])
    seen: list[tuple[str, bytes]] = []
    r = direct.run(direct.Plan(BY_HAND, None), "fake", command, stdin=None,
                   on_output=lambda kind, chunk: seen.append((kind, chunk)), deadline=60)
    assert r.exit_code == 255 and r.stderr == b"Host key verification failed.\n" and r.stdout == b""
    assert ran.read_text() == "x\n"  # once
    assert b"".join(c for k, c in seen if k == "stderr") == b"Host key verification failed.\n"  # the mark stripped


def test_ssh_failing_before_the_guard_started_is_not_reached():
    never = ("bash", "-c", "echo 'Host key verification failed.' >&2; exit 255", "fake-ssh")
    with pytest.raises(direct.NotReached, match="Host key verification failed"):
        direct.run(direct.Plan(never, None), "fake", direct.guarded(["true"]), stdin=None, on_output=None,
                   deadline=60)


@pytest.mark.fault("The ssh link of a cold one-off `remote exec` dropped mid-command with ssh's `Connection closed by "
                   "HOST port N` (words it also prints when it never connected)",
                   "remote says the connection was lost; the command, which ran, is not run a second time the usual way")
def test_a_link_lost_after_the_start_with_words_of_a_failed_connect_is_lost_not_unreached(tmp_path):
    ran = tmp_path / "ran"
    lost = ("bash", "-c", 'eval "$1"; echo "Connection closed by 10.0.0.5 port 22" >&2; exit 255', "fake-ssh")
    with pytest.raises(ConnectError, match="connection lost") as got:
        direct.run(direct.Plan(lost, None), "fake", direct.guarded(["touch", str(ran)]), stdin=None, on_output=None,
                   deadline=60)
    assert not isinstance(got.value, direct.NotReached) and ran.exists()
