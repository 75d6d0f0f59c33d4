"""Unit tier: the kept connection's naming, folder, error relay and configuration (no SSH here; the keeper
itself runs in tests/lab/test_keeper_lab.py)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from remote import config
from remote.config import Host
from remote.errors import CommandTimeout, ConfigError, HostKeyError, TransportError
from remote.transport import NotStarted, SshTransport, keeper, keepwire
from remote.transport.session import Session

HOSTS = """
hosts:
  pve:
    address: 10.0.0.5
    key_file: id
    known_hosts: known
    {extra}
  here:
    address: localhost
    local: true
containers:
  200:
    host: pve
  201:
    host: here
"""


def load(tmp_path, extra=""):
    (tmp_path / "known").write_text("")
    (tmp_path / "id").write_text("")
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS.format(extra=extra))
    return config.load(str(path))


def test_control_persist_defaults_to_a_minute_and_zero_turns_it_off(tmp_path):
    assert load(tmp_path).hosts["pve"].control_persist == 60
    assert load(tmp_path, "control_persist: 0").hosts["pve"].control_persist == 0
    with pytest.raises(ConfigError, match=r"hosts\.pve\.control_persist: expected a value from 0"):
        load(tmp_path, "control_persist: -1")


def test_only_the_cli_sessions_ssh_hosts_with_control_persist_are_kept(tmp_path):
    cfg = load(tmp_path)
    assert isinstance(Session(cfg, keep=True).transport(cfg.hosts["pve"]), keeper.KeptTransport)
    assert not isinstance(Session(cfg, keep=True).transport(cfg.hosts["here"]), keeper.KeptTransport)
    assert isinstance(Session(cfg).transport(cfg.hosts["pve"]), SshTransport)  # the library's default: direct
    off = load(tmp_path, "control_persist: 0")
    assert isinstance(Session(off, keep=True).transport(off.hosts["pve"]), SshTransport)


def test_socket_name_changes_with_every_part_of_the_host_entry(tmp_path):
    host = load(tmp_path).hosts["pve"]
    file = str(tmp_path / "hosts.yaml")
    path = keeper.socket_path(host, file, tmp_path)
    assert path == keeper.socket_path(host, file, tmp_path)
    group = path.name.split("-")[0]
    for change in ({"address": "10.0.0.6"}, {"port": 2222}, {"user": "admin"}, {"key_file": "/other"},
                   {"known_hosts": "/other"}, {"pct": "sudo -n pct"}):
        other = keeper.socket_path(dataclasses.replace(host, **change), file, tmp_path)
        assert other != path, change
        assert other.name.startswith(group + "-")  # the same host of the same file: found and retired
    (tmp_path / "known").write_text("[10.0.0.5]:22 ssh-ed25519 AAAA\n")  # known_hosts edited
    edited = keeper.socket_path(host, file, tmp_path)
    assert edited != path
    ssh = tmp_path / "home" / ".ssh"  # $HOME is the test's own (conftest)
    ssh.mkdir(parents=True)
    (ssh / "config").write_text("Host 10.0.0.5\n  ProxyJump bastion\n")  # ~/.ssh/config edited
    assert keeper.socket_path(host, file, tmp_path) != edited
    assert not keeper.socket_path(host, str(tmp_path / "other.yaml"), tmp_path).name.startswith(group)


def test_a_known_hosts_file_named_in_an_included_ssh_config_retires_the_keeper_when_it_changes(tmp_path):
    """A host key removed from a UserKnownHostsFile (named in an Include of ~/.ssh/config, for a jump host
    too) must not leave a keeper that trusts it in use."""
    host = dataclasses.replace(load(tmp_path).hosts["pve"], known_hosts=None)
    file = str(tmp_path / "hosts.yaml")
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text("Include conf.d/*\n")
    (ssh / "conf.d").mkdir()
    (ssh / "conf.d" / "pve").write_text("Host bastion\n  UserKnownHostsFile ~/.ssh/bastion_known\n")
    (ssh / "bastion_known").write_text("bastion ssh-ed25519 AAAA\n")
    before = keeper.socket_path(host, file, tmp_path)
    assert keeper.socket_path(host, file, tmp_path) == before
    (ssh / "bastion_known").write_text("")  # the key removed
    assert keeper.socket_path(host, file, tmp_path) != before


def test_sockets_live_in_a_private_runtime_folder(monkeypatch):
    run = os.environ["XDG_RUNTIME_DIR"]  # conftest's, short: a socket's path holds at most 107 bytes
    d = keeper.runtime_dir()
    assert str(d) == f"{run}/remote" and d.stat().st_mode & 0o777 == 0o700
    os.chmod(d, 0o755)
    assert keeper.runtime_dir().stat().st_mode & 0o777 == 0o700  # closed again


def test_a_symlinked_runtime_folder_is_not_used(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "remote").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(keepwire.tempfile, "gettempdir", lambda: str(tmp_path))
    assert keeper.runtime_dir() == tmp_path / f"remote-{os.geteuid()}"


@pytest.mark.parametrize("exc", [
    HostKeyError("pve", "pve: [10.0.0.5]:22 is not in known; unknown host keys are never accepted"),
    CommandTimeout("sleep 9", 2.5, "err tail", "pve/200"),
    NotStarted("pve", "pve: agent gone before running true"),
])
def test_errors_cross_the_socket_with_their_class_message_and_attributes(exc):
    back = keeper.unpack_error(keeper.pack_error(exc, "pve"))
    assert type(back) is type(exc) and str(back) == str(exc) and vars(back) == vars(exc)


def test_an_unexpected_failure_in_the_keeper_is_a_transport_error():
    back = keeper.unpack_error(keeper.pack_error(KeyError("x"), "pve"))
    assert isinstance(back, TransportError) and "pve: the kept connection failed: KeyError" in str(back)


def test_disconnect_with_no_keepers_ends_nothing(tmp_path):
    (tmp_path / "stale.sock").write_text("")  # a file nobody serves: removed
    assert keeper.disconnect(where=tmp_path) == []
    assert not (tmp_path / "stale.sock").exists()


def test_the_agent_kills_a_command_whose_caller_went_away():
    """What the keeper does when a client leaves mid-command (Ctrl-C): that command's process group is
    killed in the container, and the agent goes on serving the others."""
    import subprocess
    import sys
    import threading

    from support import wait_until
    from remote.transport import LocalTransport
    from remote.transport.agent import AGENT, Agent

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}
    agent = Agent(LocalTransport().open_stream([sys.executable, "-c", AGENT, "60"]), "here")
    started, outcome = [], []
    work = threading.Thread(target=lambda: outcome.append(agent.run(
        ["bash", "-c", "sleep 417.5 & wait"], env=env, cwd="/tmp", timeout=None, stdin=None, on_output=None,
        deadline=60, on_start=started.append)), daemon=True)
    work.start()
    running = lambda: subprocess.run(["pgrep", "-f", "sleep 417.5"], capture_output=True).returncode == 0
    try:
        assert wait_until(lambda: started and running(), 10)
        agent.kill(started[0])
        work.join(10)
        assert outcome[0].exit_code == 137
        assert wait_until(lambda: not running(), 10)  # the whole group, the shell's child included
        assert agent.run(["echo", "on"], env=env, cwd="/tmp", timeout=None, stdin=None, on_output=None,
                         deadline=30).out == "on\n"
    finally:
        agent.close()


def _no_peer_credentials(monkeypatch):
    """A platform with neither SO_PEERCRED (Linux) nor getpeereid (macOS, the BSDs)."""
    monkeypatch.delattr(keepwire.socket, "SO_PEERCRED", raising=False)
    monkeypatch.setattr(keepwire, "_getpeereid", lambda: None)
    monkeypatch.setattr(__import__("remote.transport.session").transport.session, "_NO_KEEPING_SAID", [])


@pytest.mark.fault("No peer-credential call on the controller's platform",
                   "no kept connection: every command connects directly, said in one line, never an internal error")
def test_a_platform_without_peer_credentials_connects_directly_with_one_note(tmp_path, monkeypatch, caplog):
    _no_peer_credentials(monkeypatch)
    cfg = load(tmp_path)
    with caplog.at_level("WARNING"):
        first = Session(cfg, keep=True).transport(cfg.hosts["pve"])
        second = Session(cfg, keep=True).transport(cfg.hosts["pve"])
    assert type(first) is SshTransport and type(second) is SshTransport
    notes = [r.getMessage() for r in caplog.records if "no kept connection" in r.getMessage()]
    assert len(notes) == 1 and "connects directly" in notes[0]


def test_without_peer_credentials_a_kept_socket_is_a_transport_error_not_a_crash(tmp_path, monkeypatch):
    import socket

    _no_peer_credentials(monkeypatch)
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b, pytest.raises(TransportError, match="control_persist: 0"):
        keepwire.peer(a)


def test_getpeereid_gives_the_peer_uid_where_so_peercred_is_missing(monkeypatch):
    """macOS and the BSDs: the uid from getpeereid(3) (simulated: glibc has none), no pid."""
    import ctypes
    import socket

    calls = []

    def getpeereid(fd, uid, gid):
        calls.append(fd)
        ctypes.cast(uid, ctypes.POINTER(ctypes.c_uint32))[0] = 4242
        return 0

    monkeypatch.delattr(keepwire.socket, "SO_PEERCRED", raising=False)
    monkeypatch.setattr(keepwire, "_getpeereid", lambda: getpeereid)
    monkeypatch.setattr(keepwire.sys, "platform", "freebsd14")
    assert keepwire.peer_credentials_supported()
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert keepwire.peer(a) == (None, 4242) and calls == [a.fileno()]


def test_linux_peer_credentials_name_this_process():
    import socket

    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert keepwire.peer(a) == (os.getpid(), os.geteuid())
