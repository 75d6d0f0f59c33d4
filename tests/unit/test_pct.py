import pytest

from remote.events import DryCommand
from remote.ops import files
from remote.errors import (CommandError, CommandTimeout, ContainerCommandNotFound, ContainerLocked,
                           ContainerNotFound, ContainerNotRunning, HostPermissionError, PctError, TransferError)
from remote.transport.pct import Container, classify, exec_argv, parse_list, parse_status, pct_argv
from remote.lab.testing import Expect, FakeTransport, inner_argv

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_exec_argv_is_exact():
    assert exec_argv("pct", 200, ["ls", "-la", "a b"], cwd="/srv", env={"X": "1"}, timeout=30) == [
        "pct", "exec", "200", "--keep-env", "0", "--", "env", "-C", "/srv", "HOME=/root", f"PATH={PATH}",
        "LANG=C.UTF-8", "X=1", "timeout", "-k", "5", "30", "ls", "-la", "a b"]


def test_exec_argv_pct_command_and_no_timeout():
    argv = exec_argv("sudo -n /usr/sbin/pct", 201, ["true"])
    assert argv[:4] == ["sudo", "-n", "/usr/sbin/pct", "exec"] and "timeout" not in argv
    assert inner_argv(argv) == ("true",)


@pytest.mark.parametrize("bad, err", [([], ValueError), (["A=b"], ValueError)])
def test_exec_argv_rejects(bad, err):
    with pytest.raises(err):
        exec_argv("pct", 200, bad)
    with pytest.raises(ValueError, match="invalid environment variable"):
        exec_argv("pct", 200, ["x"], env={"A B": "1"})


@pytest.mark.parametrize("stderr, code, cls", [
    ("Configuration file 'nodes/pve1/lxc/200.conf' does not exist\n", 255, ContainerNotFound),
    ("container '200' not running!\n", 255, ContainerNotRunning),
    ("can only push files to a running CT\n", 255, ContainerNotRunning),
    ("trying to acquire lock...\ncan't lock file '/run/lock/lxc/pve-config-200.lock' - got timeout\n", 255,
     ContainerLocked),
    ('lxc-attach: 200: ../src/lxc/attach.c: lxc_attach_run_command: 1841 No such file or directory - '
     'Failed to exec "nvidia-smi"\n', 127, ContainerCommandNotFound),
    ("env: 'nvidia-smi': No such file or directory\n", 127, ContainerCommandNotFound),
    ("please run as root\n", 255, HostPermissionError),
    ("sudo: a password is required\n", 1, HostPermissionError),
    ("bash: line 1: sudo: command not found\n", 127, HostPermissionError),
    ("bash: line 1: pct: command not found\n", 127, PctError),
    ("Unknown option: la\n400 unable to parse option\n", 255, PctError),
])
def test_classify_pct_errors(stderr, code, cls):
    err = classify(stderr, code, 200, "pve1")
    assert type(err) is cls
    assert err.ctid == 200 and err.stderr_tail


@pytest.mark.parametrize("stderr, code", [
    ("Traceback ...\nRuntimeError: boom\n", 1),
    ("container '200' not running!\n", 0),  # exit 0: the command ran fine
    ("my script says: container '200' not running! (not pct)", 255),  # not at the start of stderr
    ('lxc-attach: 200: x Failed to exec "y"\n', 1),  # the text, but not exec failure's exit code
])
def test_classify_leaves_command_failures_alone(stderr, code):
    assert classify(stderr, code, 200, "pve1") is None


def test_messages_say_what_to_do():
    assert "pct start 200" in str(classify("container '200' not running!\n", 255, 200, "pve1"))
    assert "hosts.pve1.pct" in str(classify("sh: 1: pct: not found\n", 127, 200, "pve1"))


def test_parsers():
    assert parse_status("status: running\n") == "running"
    with pytest.raises(ValueError):
        parse_status("running")
    assert parse_list("") == {}
    table = "VMID       Status     Lock         Name                \n200        running                 gpu\n"
    assert parse_list(table) == {200: "running"}


def ct_with(*expects, **kw):
    t = FakeTransport(list(expects))
    return Container(t, 200, **kw), t


def test_container_raises_pct_errors_and_command_errors():
    ct, t = ct_with(Expect(lambda a: True, 255, stderr="container '200' not running!\n"))
    with pytest.raises(ContainerNotRunning):
        ct.run(["true"])
    ct, t = ct_with(Expect(lambda a: inner_argv(a) == ("false",), 1, stderr="nope\n"))
    with pytest.raises(CommandError) as e:
        ct.run(["false"])
    assert e.value.command_status == 1 and e.value.stderr_tail == "nope"
    ct, t = ct_with(Expect(lambda a: True, 7))
    assert ct.run(["x"], check=False).exit_code == 7
    t.assert_done()


def test_container_timeout_is_inside_and_reported(monkeypatch):
    ct, t = ct_with(Expect(lambda a: "timeout" in a, 124))
    monkeypatch.setattr("remote.transport.pct.time.monotonic", iter([0.0, 100.0]).__next__)
    with pytest.raises(CommandTimeout, match="timed out after 2s"):
        ct.run(["sleep", "9"], timeout=2)


def test_dry_run_prints_mutations_and_runs_reads():
    got: list = []
    ct, t = ct_with(Expect(["pct", "status", "200"], stdout="status: running\n"), dry=True, events=got.append)
    ct.run(["rm", "-rf", "/x"])
    assert ct.status() == "running"
    argv = exec_argv("pct", 200, ["rm", "-rf", "/x"])
    assert got == [DryCommand(200, "fake: " + " ".join(argv), tuple(argv))]  # typed: what it would have run
    assert len(t.calls) == 1  # only the read ran


def test_push_verifies_digest():
    ct, t = ct_with(Expect(lambda a: True, 0, stdout=files.sha256(b"data") + "\n"))
    files.push_bytes(ct, b"data", "/root/x")
    assert t.calls[0][1] == b"data"
    ct, t = ct_with(Expect(lambda a: True, 0, stdout="0" * 64 + "\n"))
    with pytest.raises(TransferError, match="did not verify"):
        files.push_bytes(ct, b"data", "/root/x")


def test_pull_verifies_digest():
    ct, _ = ct_with(Expect(lambda a: True, 0, stdout=b"abc", stderr=files.sha256(b"abc")))
    assert files.pull_bytes(ct, "/f") == b"abc"
    ct, _ = ct_with(Expect(lambda a: True, 0, stdout=b"ab", stderr=files.sha256(b"abc")))
    with pytest.raises(TransferError):
        files.pull_bytes(ct, "/f")


def test_fake_transport_refuses_unexpected_commands():
    ct, _ = ct_with()
    with pytest.raises(AssertionError, match="unexpected command"):
        ct.run(["true"])


def test_pct_argv():
    assert pct_argv("pct", "status", "200") == ["pct", "status", "200"]


def test_a_dry_run_shows_one_line_per_command_its_scripts_elided_and_logs_the_full_text(caplog):
    """Issue 40 item 2: a dry run printed each embedded script in full (996 lines for deploy warmup train); now
    one line a command, each of remote/sh's programs named with its length; the full text at DEBUG (`remote.dry`)."""
    import logging

    from remote import shell

    printed: list[str] = []
    ct, t = ct_with(dry=True, events=lambda e: printed.append(e.line))
    with caplog.at_level(logging.DEBUG, logger="remote.dry"):
        ct.script(shell.load("oplock"), "take", "deploy")
        ct.run(["bash", "-c", shell.with_lib("launch"), "launch", "/root/runs", "r1", '{\n "id": "r1"\n}', "x" * 300])
    lines = shell.load("oplock").count("\n") + 1  # and strict mode's line before it
    assert printed[0].endswith(f"LANG=C.UTF-8 bash -c <oplock.sh, {lines + 1} lines> remote take deploy"), printed
    assert "bash -c <launch.sh, " in printed[1] and "launch /root/runs r1 <text, 3 lines> <text, 300 chars>" in printed[1]
    assert all("\n" not in p for p in printed) and len(printed) == 2 and t.calls == []
    from remote.transport.dryline import elided

    assert elided("REMOTE_SETTINGS=" + "y" * 300) == "REMOTE_SETTINGS=<text, 300 chars>"
    full = [r.getMessage() for r in caplog.records if r.name == "remote.dry"]
    assert len(full) == 2 and shell.load("oplock").splitlines()[0] in full[0] and full[0].count("\n") >= lines - 1
    assert "x" * 300 in full[1]
