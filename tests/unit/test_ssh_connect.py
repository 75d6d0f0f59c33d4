"""Connecting to hosts that are not (well-behaved) SSH servers: real sockets on loopback, no sshd.

Whatever the peer does, the caller gets one of the library's errors with a message in plain words:
no paramiko exception, traceback or log line reaches the user, and a host that never answers is
waited for once, not once per retry."""

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest

from remote import config
from remote.errors import ConfigError, ConnectError, ConnectTimeout, RemoteError, TransportError
from remote.transport import SshTransport
from remote.transport.connect import _mapped
from remote.transport.sshconfig import Target

ROOT = Path(__file__).resolve().parent.parent.parent


class Peer:
    """A TCP server on loopback that does `behave(conn)` with each connection; counts them."""

    def __init__(self, behave):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted, self.held = 0, []
        self.behave = behave
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            self.behave(conn)
        except OSError:
            pass

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def mute(conn):
    time.sleep(60)  # accepts, never speaks


def http(conn):
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n")
    time.sleep(0.2)
    conn.close()


def banner_then_close(conn):
    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
    time.sleep(0.1)
    conn.close()


def banner_then_garbage(conn):
    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n" + bytes(range(256)) * 8)
    time.sleep(2)
    conn.close()


def banner_then_silence(conn):
    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
    time.sleep(60)


def old_ssh(conn):
    conn.sendall(b"SSH-1.5-OldServer\r\n")
    time.sleep(2)


def close_at_once(conn):
    conn.close()


@pytest.fixture
def peer():
    made = []

    def start(behave):
        made.append(Peer(behave))
        return made[-1]

    yield start
    for p in made:
        p.close()


@pytest.fixture
def key_files(tmp_path):
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "kh").write_text("")
    return str(key), str(tmp_path / "kh")


def transport(port, key_files, timeout=1.0, address="127.0.0.1", attempts=3):
    sleeps = []
    host = config.Host(name="pve1", address=address, port=port, key_file=key_files[0], known_hosts=key_files[1],
                       connect_timeout=timeout)
    return SshTransport(host, attempts=attempts, sleep=sleeps.append), sleeps


@pytest.mark.fault("Host accepts TCP and never speaks",
                   promise="fails once, within connect_timeout + a few s, naming the missing SSH greeting")
def test_a_mute_host_fails_once_within_the_connect_timeout(peer, key_files, caplog):
    p = peer(mute)
    t, sleeps = transport(p.port, key_files, timeout=1.0)
    start = time.monotonic()
    with pytest.raises(ConnectTimeout, match="no SSH greeting came within 1 s"):
        t.run(["true"])
    took = time.monotonic() - start
    with pytest.raises(ConnectTimeout):  # a fallback path on the same transport does not wait again
        t.run(["true"])
    assert sleeps == [] and p.accepted == 1
    assert took < 1.0 + 4  # a hang guard: the bound itself is measured in bench/connect.py
    assert caplog.records == []  # not retried, and none of paramiko's log lines


@pytest.mark.fault("Port that is not SSH (e.g. HTTP)", promise="one line quoting what it answered; not retried")
def test_a_port_that_is_not_ssh_says_what_answered(peer, key_files, caplog):
    p = peer(http)
    t, sleeps = transport(p.port, key_files)
    with pytest.raises(TransportError) as e:
        t.run(["true"])
    assert not isinstance(e.value, ConnectError) and sleeps == [] and p.accepted == 1
    assert str(e.value) == (f"pve1: [127.0.0.1]:{p.port} is not an SSH server: it answered 'HTTP/1.1 400 Bad Request' "
                            "(is the port right? `ssh -p PORT HOST` says the same)")
    assert caplog.records == []  # none of paramiko's log lines or tracebacks


@pytest.mark.parametrize("behave, error, words", [
    (banner_then_close, ConnectError, "during the SSH handshake"),
    (banner_then_garbage, TransportError, "SSH failed"),
    (banner_then_silence, ConnectTimeout, "the SSH handshake did not finish within 1 s"),
    (old_ssh, TransportError, "Incompatible version"),
    (close_at_once, ConnectError, "during the SSH handshake"),
])
def test_no_paramiko_exception_or_log_line_escapes(peer, key_files, caplog, behave, error, words):
    p = peer(behave)
    t, sleeps = transport(p.port, key_files, attempts=2)
    with pytest.raises(RemoteError) as e:
        t.run(["true"])
    assert type(e.value) is error and words in str(e.value), e.value
    # paramiko's own records (tracebacks from its thread) reach no handler; ours say a retry in words
    assert [(r.name, r.getMessage().endswith("(attempt 2 of 2)")) for r in caplog.records] == \
        [("remote.transport", True)] * len(sleeps)


def test_the_cli_prints_one_line_for_a_port_that_is_not_ssh(peer, key_files, tmp_path):
    p = peer(http)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS.format(port=p.port, key=key_files[0], kh=key_files[1]))
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()",
                        "exec", "-c", "200", "--command", "true"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: pve1: [127.0.0.1]:{p.port} is not an SSH server: it answered 'HTTP/1.1 400 Bad Request' "
        "(is the port right? `ssh -p PORT HOST` says the same)"], r.stderr


def test_refused_is_retried_and_each_retry_is_said_in_plain_words(key_files, caplog):
    from support import free_port

    t, sleeps = transport(free_port(), key_files, attempts=3)
    with pytest.raises(ConnectError, match="connection refused"):
        t.run(["true"])
    lines = [r.getMessage() for r in caplog.records]
    assert len(sleeps) == 2 and len(lines) == 2
    assert lines[0].startswith("pve1: cannot connect to [127.0.0.1]:") and "; trying again in " in lines[0]
    assert lines[1].endswith("(attempt 3 of 3)") and "Retrying" not in lines[1] and "ConnectError" not in lines[1]


def test_a_name_that_does_not_resolve_is_not_retried(key_files):
    t, sleeps = transport(22, key_files, address="no-such-host.invalid")
    with pytest.raises(TransportError, match="cannot resolve 'no-such-host.invalid'.*Host alias"):
        t.run(["true"])
    assert sleeps == []


def _instances():
    """One of every exception paramiko declares, and the socket's."""
    keys = paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)
    made = [paramiko.BadHostKeyException("10.0.0.5", *keys)]
    for name in dir(paramiko.ssh_exception):
        cls = getattr(paramiko.ssh_exception, name)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            continue
        args = {"BadHostKeyException": None, "BadAuthenticationType": ("no", ["password"]),
                "ChannelException": (2, "Connect failed"), "PartialAuthentication": (["password"],),
                "NoValidConnectionsError": ({("127.0.0.1", 22): ConnectionRefusedError(111, "refused")},),
                "ProxyCommandFailure": ("nc", "exited"), "ConfigParseError": ("bad",),
                "CouldNotCanonicalize": ("x",)}.get(name, ("something went wrong",))
        if args is not None:
            made.append(cls(*args))
    made += [socket.timeout(), TimeoutError(), ConnectionRefusedError(111, "Connection refused"),
             ConnectionResetError(104, "reset"), OSError(113, "No route to host"), EOFError(),
             socket.gaierror(-2, "Name or service not known"), ValueError("odd"), RuntimeError()]
    return made


@pytest.mark.parametrize("exc", _instances(), ids=lambda e: type(e).__name__)
def test_every_backend_exception_maps_to_a_library_error(exc):
    jump = Target("jump host j", "j", "j", 22, "root", (), "default", True, ("/kh",))
    target = Target("pve1", "pve1", "10.0.0.5", 22, "root", (), "default", True, ("/kh",), via=jump)
    for phase in ("tcp", "channel", "ssh"):
        mapped = _mapped(exc, target, phase, b"", 10)
        assert isinstance(mapped, TransportError) and str(mapped).startswith("pve1: ")
        assert "Traceback" not in str(mapped)
        assert "\n" not in str(mapped) or isinstance(exc, paramiko.BadHostKeyException)  # that one says how to fix it


HOSTS = """hosts:
  pve1: {{address: 127.0.0.1, port: {port}, key_file: {key}, known_hosts: {kh}}}
containers:
  200: {{host: pve1}}
"""


@pytest.mark.fault("key_file or known_hosts missing", promise="exit 2 at load naming the key and path; nothing connected")
@pytest.mark.parametrize("missing", ["key_file", "known_hosts"])
def test_a_missing_key_file_or_known_hosts_exits_2_naming_it(tmp_path, key_files, missing):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    paths = {"key": key_files[0], "kh": key_files[1]}
    gone = str(tmp_path / "no" / "such")
    paths["key" if missing == "key_file" else "kh"] = gone
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS.format(port=listener.getsockname()[1], **paths))
    with pytest.raises(ConfigError) as e:
        config.load(str(hosts))
    assert e.value.key == f"hosts.pve1.{missing}" and gone in e.value.message
    for task in (["status"], ["exec", "-c", "200", "--command", "true"]):
        r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *task],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
        assert r.returncode == 2 and f"hosts.pve1.{missing}: no such file: {gone}" in r.stderr, r
        assert "Traceback" not in r.stderr
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing connected
        listener.accept()
    listener.close()


@pytest.mark.fault("~/.ssh/config that ssh cannot read", promise="exit 2 naming the file and the Host entry, in every task")
def test_a_bad_ssh_config_exits_2_in_status_and_exec(tmp_path, key_files):
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host pve1\n    Port twenty-two\n")
    (tmp_path / "hosts.yaml").write_text("hosts:\n  pve1: {address: pve1}\ncontainers:\n  200: {host: pve1}\n")
    for task in (["status"], ["exec", "-c", "200", "--command", "true"]):
        r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *task],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
        assert (r.returncode, r.stderr) == (2, "error: ~/.ssh/config: Host pve1: Port: expected a port from 1 to "
                                               "65535, got 'twenty-two'\n"), task


def test_known_hosts_markers_are_read_not_fatal(tmp_path, key_files):
    """paramiko's own reader raises on `@` lines (every connection failed with InvalidHostKey): the
    @cert-authority line is skipped, the @revoked key kept apart, a garbled line skipped."""
    from remote.transport import connect

    key = " ".join(Path(key_files[0] + ".pub").read_text().split()[:2])
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@cert-authority *.example.com {key}\nhost1 {key}\nhost2 ssh-ed25519 not-base64!\n"
                  f"@revoked * {key}\n")
    with pytest.raises(paramiko.hostkeys.InvalidHostKey):
        paramiko.HostKeys(str(kh))  # what every connection did
    entries, revoked = connect._read_known_hosts(str(kh))
    assert [e.hostnames for e in entries] == [["host1"]]
    assert [(e.hostnames, n) for e, n in revoked] == [(["*"], 4)]
    target = connect.resolve_host(config.Host(name="h", address="host1", port=22, known_hosts=str(kh)), "")
    client = connect.Client(target, [])
    connect._load_known_hosts(client, target)
    assert client.get_host_keys().lookup("host1") is None  # the revoked key is not accepted
    assert connect.revoked_line(target, entries[0].key) == f"{kh} line 4"
