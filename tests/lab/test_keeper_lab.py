"""Lab tier: the kept connection (remote.transport.keeper) of whole `remote` processes against the real sshd.

Each test has a runtime folder of its own ($XDG_RUNTIME_DIR), whose keepers are ended after it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from support import LAB_CONTAINERS, wait_until
from remote import config
from remote.transport import keeper

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = LAB_CONTAINERS[0]


@pytest.fixture
def rundir(monkeypatch):
    run = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", run)
    yield Path(run)
    if (Path(run) / "remote").is_dir():
        keeper.disconnect(where=Path(run) / "remote")
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture
def hosts(lab, tmp_path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(lab.hosts_yaml((CT,)))
    return path


def with_persist(hosts: Path, seconds) -> Path:
    text = hosts.read_text().replace("    user: root\n", f"    user: root\n    control_persist: {seconds}\n", 1)
    hosts.write_text(text)
    return hosts


def remote(hosts: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def exec_in_ct(hosts: Path, command: str = "true", check: bool = True) -> subprocess.CompletedProcess:
    """`remote exec` there; once it succeeded, its keeper up: a cold exec leaves it starting behind it
    (remote.transport.direct), and these tests are about what the keeper then does."""
    r = remote(hosts, "exec", "-c", str(CT), "--command", command, check=check)
    if r.returncode == 0 and "control_persist: 0" not in hosts.read_text():
        assert wait_until(lambda: info(hosts) is not None, 60), "no kept connection after a successful exec"
    return r


def keepers(rundir: Path) -> list[int]:
    """The keeper processes serving sockets in this runtime folder (their environment names it: their argv
    holds nothing of the settings, which come on stdin)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            args = (p / "cmdline").read_bytes().decode(errors="replace")
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if "remote.transport.keeperd" in args and f"XDG_RUNTIME_DIR={rundir}".encode() in env \
                and keeper._alive(int(p.name)):
            assert str(rundir) not in args and '"host"' not in args, args  # no settings on a command line
            found.append(int(p.name))
    return found


def info(hosts: Path) -> dict | None:
    cfg = config.load(str(hosts))
    return keeper.KeptTransport(cfg.hosts["lab"], str(hosts)).info()


def accepted(lab) -> int:
    """Connections the lab's sshd has accepted so far."""
    return (lab.dir / "sshd.log").read_text().count("Accepted publickey")


def test_keeper_is_reused_by_ten_commands(lab, hosts, rundir):
    before = accepted(lab)
    for i in range(10):
        assert exec_in_ct(hosts, f"echo {i}").stdout == f"{i}\n"
    assert accepted(lab) - before == 2  # the cold one's own, then the keeper's for the other nine
    assert len(keepers(rundir)) == 1
    status = remote(hosts, "status")
    assert f"lab: reachable (kept connection: pid {keepers(rundir)[0]}" in status.stdout


@pytest.mark.parametrize("first", [("status", "-c", str(CT)), ("status",), ("doctor", "-c", str(CT)),
                                   ("exec", "-c", str(CT), "--", "true")], ids=" ".join)
def test_the_first_command_leaves_the_keeper_the_next_reuses(lab, hosts, rundir, first):
    """Each command that reaches the host leaves its kept connection (bench/oneoff.py --exec-only starts with
    `remote status -c ID`, then waits for it), and `remote exec` after it runs through that one: the same keeper,
    one SSH connection for both."""
    before = accepted(lab)
    remote(hosts, *first, check=first[0] != "doctor")  # doctor of a container never deployed finds errors
    # A cold exec went over ssh and left its keeper starting behind it: up in a moment, on a connection of its own.
    assert wait_until(lambda: info(hosts) is not None, 60), f"no kept connection after remote {' '.join(first)}"
    kept = info(hosts)
    assert keepers(rundir) == [kept["pid"]]
    assert remote(hosts, "exec", "-c", str(CT), "--", "echo", "reused").stdout == "reused\n"
    assert info(hosts)["pid"] == kept["pid"] and keepers(rundir) == [kept["pid"]]
    assert accepted(lab) - before == (2 if first[0] == "exec" else 1)


@pytest.mark.fault("Kept connection killed", promise="the next command starts another and succeeds")
def test_killed_keeper_is_replaced(lab, hosts, rundir):
    exec_in_ct(hosts)
    first = info(hosts)["pid"]
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: not keeper._alive(first), 10)
    assert exec_in_ct(hosts, "echo again").stdout == "again\n"  # a stale socket: replaced, nothing said
    assert info(hosts)["pid"] != first
    assert keepers(rundir) == [info(hosts)["pid"]]


@pytest.mark.fault("Kept connection stuck (stopped)", promise="killed after 10 s, the command runs on a new one")
def test_a_stuck_keeper_is_replaced(lab, hosts, rundir):
    exec_in_ct(hosts)
    first = info(hosts)["pid"]
    os.kill(first, signal.SIGSTOP)  # alive, its socket there, answering nothing
    try:
        assert exec_in_ct(hosts, "echo through").stdout == "through\n"
    finally:
        if keeper._alive(first):
            os.kill(first, signal.SIGCONT)
    assert wait_until(lambda: not keeper._alive(first), 10)
    assert keepers(rundir) == [info(hosts)["pid"]] != [first]


def test_keeper_socket_refuses_another_user(lab, hosts, rundir):
    exec_in_ct(hosts)
    sock = next((rundir / "remote").glob("*.sock"))
    assert sock.stat().st_mode & 0o777 == 0o600
    client = ("import socket, struct, sys\n"
              "s = socket.socket(socket.AF_UNIX)\n"
              "s.settimeout(20)\n"
              "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    print('denied'); sys.exit()\n"
              "req = b'{\"op\": \"info\"}'\n"
              "try:\n    s.sendall(b'q' + struct.pack('>I', len(req)) + req)\n    got = s.recv(100)\n"
              "except (BrokenPipeError, ConnectionResetError):\n    got = b''\n"
              "print('answered' if got else 'refused')\n")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # one nobody may run
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-I", "-c", client,
                 str(sock)]
    assert subprocess.run(as_nobody, capture_output=True, text=True, timeout=30).stdout.strip() == "denied"
    # With the folder and the socket opened to everyone, the keeper itself still refuses another uid.
    for path, mode in ((rundir, 0o755), (rundir / "remote", 0o755), (sock, 0o666)):
        os.chmod(path, mode)
    assert subprocess.run(as_nobody, capture_output=True, text=True, timeout=30).stdout.strip() == "refused"
    assert info(hosts)["pid"] == keepers(rundir)[0]  # and goes on serving its own user


def test_changed_host_entry_starts_a_new_keeper(lab, hosts, rundir, tmp_path):
    exec_in_ct(hosts)
    first = info(hosts)["pid"]
    known = tmp_path / "known_hosts"
    shutil.copy(lab.known_hosts, known)
    hosts.write_text(hosts.read_text().replace(str(lab.known_hosts), str(known)))
    exec_in_ct(hosts)
    second = info(hosts)["pid"]
    assert second != first
    assert wait_until(lambda: keepers(rundir) == [second], 10)  # the old one never outlives its entry


def test_a_keeper_whose_entry_changed_exits_without_waiting_for_a_command(lab, hosts, rundir):
    exec_in_ct(hosts)
    assert len(keepers(rundir)) == 1
    hosts.write_text(hosts.read_text().replace("    user: root\n", "    user: root\n    connect_timeout: 9\n"))
    assert wait_until(lambda: not keepers(rundir), 15)  # well before its 60 s of idle time


def test_control_persist_zero_leaves_no_process(lab, hosts, rundir):
    before = accepted(lab)
    exec_in_ct(with_persist(hosts, 0))
    exec_in_ct(hosts)
    assert accepted(lab) - before == 2  # a connection of its own each time, as before keepers
    assert keepers(rundir) == []
    assert not list(rundir.glob("remote/*.sock"))


def test_disconnect_leaves_none(lab, hosts, rundir):
    exec_in_ct(hosts)
    pid = info(hosts)["pid"]
    r = remote(hosts, "disconnect", "--host", "lab")
    assert f"ended 1 kept connection(s) (pid {pid})" in r.stdout
    assert keepers(rundir) == []
    assert not list(rundir.glob("remote/*.sock"))
    exec_in_ct(hosts)
    assert "ended 1" in remote(hosts, "disconnect").stdout  # every host's
    assert keepers(rundir) == []


@pytest.mark.fault("remote disconnect with another hosts file's kept connections",
                   promise="ends only this hosts file's hosts' keepers; another file's keeper, and the command it runs, "
                   "are left alone")
def test_disconnect_ends_only_this_hosts_files_keepers(lab, hosts, rundir, tmp_path):
    other = tmp_path / "other" / "hosts.yaml"  # another project's file: the same host, its own keeper
    other.parent.mkdir()
    other.write_text(hosts.read_text())
    exec_in_ct(hosts)
    exec_in_ct(other)
    mine, theirs = info(hosts)["pid"], info(other)["pid"]
    assert mine != theirs and len(keepers(rundir)) == 2
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(other), "PYTHONPATH": str(ROOT)}
    running = subprocess.Popen([sys.executable, "-c", "from remote.cli import main; main()", "exec", "-c", str(CT),
                                "--command", "sleep 3; echo survived"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        r = remote(hosts, "disconnect")
        assert f"ended 1 kept connection(s) (pid {mine})" in r.stdout, r.stdout
        assert keepers(rundir) == [theirs]
        out, _ = running.communicate(timeout=60)
        assert running.returncode == 0 and out == "survived\n"  # the other file's command ran on
    finally:
        running.kill()
    assert info(other)["pid"] == theirs  # its keeper still serves it
    assert "ended 1" in remote(other, "disconnect").stdout and keepers(rundir) == []


def test_keeper_exits_after_its_idle_time(lab, hosts, rundir):
    exec_in_ct(with_persist(hosts, 1))
    assert len(keepers(rundir)) == 1
    assert wait_until(lambda: not keepers(rundir), 15)
    assert not list(rundir.glob("remote/*.sock"))


def test_interrupted_command_is_killed_in_the_container(lab, hosts, rundir):
    """Ctrl-C on a one-off command ends it in the container, as when its own connection closed."""
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    marker = "313.25"
    # Ctrl-C handled as from a terminal, also under a runner started with & (which passes SIGINT on ignored).
    main = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from remote.cli import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", main, "exec", "-c", str(CT),
                             "--command", f"echo started; exec sleep {marker}"], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "started\n"
    running = lambda: f"sleep {marker}" in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert running()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    assert wait_until(lambda: not running(), 10)
    assert wait_until(lambda: len(keepers(rundir)) == 1, 60)  # a keeper for the next command (started behind)


def test_unknown_host_key_is_refused_through_the_keeper(lab, hosts, rundir, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    hosts.write_text(hosts.read_text().replace(str(lab.known_hosts), str(empty)))
    r = exec_in_ct(hosts, check=False)
    assert r.returncode == 1
    assert f"is not in {empty}; unknown host keys are never accepted" in r.stderr
    assert wait_until(lambda: not keepers(rundir), 10)  # it said why, and went


def test_push_and_pull_go_through_the_keeper(lab, hosts, rundir, tmp_path):
    """Transfers are streams of their own, relayed by the keeper: every byte both ways, one connection."""
    data = os.urandom(3 << 20)
    (tmp_path / "blob").write_bytes(data)
    before = accepted(lab)
    remote(hosts, "push", "-c", str(CT), "--src", str(tmp_path / "blob"), "--dest", "/root/keeper-blob", "--quiet")
    remote(hosts, "pull", "-c", str(CT), "--src", "/root/keeper-blob", "--dest", str(tmp_path / "back"), "--quiet")
    assert (tmp_path / "back").read_bytes() == data
    assert accepted(lab) - before == 1
    exec_in_ct(hosts, "rm /root/keeper-blob")


@pytest.mark.fault("Slow reader of a large stream through the kept connection",
                   promise="the controller holds at most its bounded buffer: the keeper's socket and the SSH window "
                           "push back, nothing is held whole")
def test_a_slow_reader_holds_only_a_bounded_buffer_through_the_keeper(lab, hosts, rundir):
    from remote.transport.framing import BUFFER_LIMIT
    from remote.transport.keepwire import CHUNK

    transport = keeper.KeptTransport(config.load(str(hosts)).hosts["lab"], str(hosts))
    size = 400 << 20
    stream = transport.open_stream(["head", "-c", str(size), "/dev/zero"])
    try:
        got = len(stream.read(1 << 16))
        # The reader pauses: the keeper goes on sending until this side's buffer is full, then waits.
        assert wait_until(lambda: stream.buffered >= BUFFER_LIMIT, 30)
        rss = transport.info()["rss_kb"]
        peak = stream.buffered
        for _ in range(20):  # still paused: what arrives stays bounded (unbounded, it would hold the stream)
            time.sleep(0.05)
            peak = max(peak, stream.buffered)
        assert peak <= BUFFER_LIMIT + CHUNK
        assert transport.info()["rss_kb"] - rss < 64 << 10  # nor does the keeper hold it: the SSH window pushes back
        while chunk := stream.read(1 << 20):
            got += len(chunk)
            peak = max(peak, stream.buffered)
        assert stream.wait(30) == 0 and got == size and peak <= BUFFER_LIMIT + CHUNK
    finally:
        stream.close()
