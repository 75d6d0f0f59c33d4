"""Lab tier: ~/.ssh/config as ssh reads it, against the lab's real sshd.

$HOME is a temporary folder in every test (conftest), so $HOME/.ssh is the test's own. The ProxyJump
test puts a second sshd in a network namespace of its own (only a loopback inside it): the direct path
cannot reach it, only a jump host that runs inside that namespace, which is the lab's sshd config
started per connection (sshd -i) there behind a listener on this side: a bastion between two networks.
"""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import LAB_CONTAINERS, free_port

from remote import config
from remote.errors import AuthenticationError, ConnectError, HostKeyError
from remote.transport import SshTransport

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
SSHD = shutil.which("sshd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def ssh_config(text: str) -> Path:
    ssh = Path.home() / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "config").write_text(text)
    return ssh


def alias_entry(lab, name="pve-alias", identity=True) -> str:
    return (f"Host {name}\n    HostName 127.0.0.1\n    Port {lab.port}\n    User root\n"
            + (f"    IdentityFile {lab.key_file}\n" if identity else "")
            + f"    UserKnownHostsFile {lab.known_hosts}\n")


@pytest.mark.fault("Host known only by its ~/.ssh/config alias",
                   promise="HostName, Port, User, IdentityFile, UserKnownHostsFile apply; address: ALIAS is enough")
def test_an_alias_in_ssh_config_is_enough_for_the_hosts_file(lab, tmp_path):
    ssh_config("Host *\n    ServerAliveInterval 30\n" + alias_entry(lab))
    t = SshTransport(config.Host(name="pve1", address="pve-alias"), sleep=lambda s: None)
    assert t.run(["sh", "-c", "echo $SSH_CONNECTION"]).out.split()[2:] == ["127.0.0.1", str(lab.port)]
    t.close()
    ctid = LAB_CONTAINERS[0]
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  pve1:\n    address: pve-alias\ncontainers:\n  {ctid}:\n    host: pve1\n")
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()",
                        "exec", "-c", str(ctid), "--command", "echo $((6 * 7)) $(hostname)"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts)})
    assert (r.returncode, r.stdout, r.stderr) == (0, f"42 lab{ctid}\n", "")


def test_hosts_file_keys_override_the_alias(lab):
    ssh_config(alias_entry(lab).replace(f"Port {lab.port}", f"Port {free_port()}"))
    t = SshTransport(config.Host(name="pve1", address="pve-alias", port=lab.port), sleep=lambda s: None)
    assert t.run(["true"]).ok
    t.close()


@pytest.mark.fault("No key_file and no ssh-agent",
                   promise="~/.ssh/id_ed25519, id_ecdsa, id_rsa tried; when all fail, each named and what to set")
def test_default_identities_are_tried_and_named_when_they_fail(lab, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    ssh = ssh_config(alias_entry(lab, identity=False))
    host = config.Host(name="pve1", address="pve-alias")
    with pytest.raises(AuthenticationError) as e:
        SshTransport(host, sleep=lambda s: None).run(["true"])
    assert str(e.value).splitlines() == [
        "pve1: root@[127.0.0.1]:%d accepted none of the keys tried:" % lab.port,
        "  ssh-agent: not running (SSH_AUTH_SOCK is not set)",
        "  ~/.ssh/id_ed25519: no such file",
        "  ~/.ssh/id_ecdsa: no such file",
        "  ~/.ssh/id_rsa: no such file",
        "To fix: set hosts.pve1.key_file in the hosts file, load the key into ssh-agent (ssh-add), or name it "
        "with IdentityFile under `Host pve-alias` in ~/.ssh/config; the host needs the public key in "
        "~root/.ssh/authorized_keys."]
    other = ssh / "id_ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(other)], check=True)
    shutil.copy(lab.key_file, ssh / "id_rsa")  # any name: the key type is read from the file
    t = SshTransport(host, sleep=lambda s: None)
    assert t.run(["true"]).ok  # id_ecdsa refused, then id_rsa (the lab's ed25519 key) accepted
    t.close()


def test_unknown_host_key_message_shows_the_offered_fingerprint(lab, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    host = config.Host(name="lab", address="127.0.0.1", port=lab.port, key_file=str(lab.key_file),
                       known_hosts=str(kh))
    with pytest.raises(HostKeyError) as e:
        SshTransport(host, sleep=lambda s: None).run(["true"])
    offered = subprocess.run(["ssh-keygen", "-lf", str(lab.ssh / "host_ed25519.pub")], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert offered.startswith("SHA256:") and f"It offered ssh-ed25519 {offered}." in str(e.value)
    assert "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in str(e.value)
    assert f"ssh-keyscan -p {lab.port} -t ed25519 127.0.0.1 >> {kh}" in str(e.value)
    assert kh.read_text() == ""


class Namespace:
    """A network namespace with only a loopback, an sshd inside it, and a jump host into it."""

    def __init__(self, lab, tmp: Path):
        self.name, self.tmp, self.lab = f"remote-ssh-{os.getpid()}", tmp, lab
        self.port = free_port()  # free here too: the direct path finds nothing there
        self.children: list[subprocess.Popen] = []
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "host_ed25519")], check=True)
        (tmp / "sshd_config").write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {tmp / 'host_ed25519'}",
            f"AuthorizedKeysFile {lab.ssh / 'authorized_keys'}", f"PidFile {tmp / 'sshd.pid'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "UsePAM no", "StrictModes no", ""]))
        self.inside(SSHD, "-f", str(tmp / "sshd_config"), "-E", str(tmp / "sshd.log"))
        # The jump host: the lab's sshd config, one sshd -i per connection, run inside the namespace.
        (tmp / "jump_config").write_text((lab.ssh / "sshd_config").read_text().replace(
            f"PidFile {lab.dir}/sshd.pid", f"PidFile {tmp / 'jump.pid'}"))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.jump_port = self.listener.getsockname()[1]
        threading.Thread(target=self._jump, daemon=True).start()
        end = time.monotonic() + 10
        while self.inside("bash", "-c", f"echo > /dev/tcp/127.0.0.1/{self.port}", check=False).returncode:
            assert time.monotonic() < end, (tmp / "sshd.log").read_text()
            time.sleep(0.1)
        lab_key = (lab.ssh / "host_ed25519.pub").read_text().split()
        own_key = (tmp / "host_ed25519.pub").read_text().split()
        (tmp / "kh_jump").write_text(f"[127.0.0.1]:{self.jump_port} {lab_key[0]} {lab_key[1]}\n")
        (tmp / "kh_inside").write_text(f"[127.0.0.1]:{self.port} {own_key[0]} {own_key[1]}\n")

    def inside(self, *argv, check=True):
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True, check=check)

    def _jump(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.children.append(subprocess.Popen(
                ["ip", "netns", "exec", self.name, SSHD, "-i", "-f", str(self.tmp / "jump_config"),
                 "-E", str(self.tmp / "jump.log")], stdin=conn.fileno(), stdout=conn.fileno()))
            conn.close()

    def close(self):
        self.listener.close()
        pid = self.tmp / "sshd.pid"
        if pid.exists():
            subprocess.run(["kill", pid.read_text().strip()])
        for child in self.children:
            child.kill()
            child.wait()
        subprocess.run(["ip", "netns", "del", self.name])


@pytest.fixture
def netns(lab, tmp_path):
    ns = Namespace(lab, tmp_path)
    yield ns
    ns.close()


JUMP_CONFIG = """
Host inside
    HostName 127.0.0.1
    Port {port}
    IdentityFile {key}
    UserKnownHostsFile {tmp}/kh_inside
    ProxyJump jump

Host jump
    HostName 127.0.0.1
    Port {jump_port}
    IdentityFile {key}
    UserKnownHostsFile {tmp}/{jump_kh}
"""


@pytest.mark.fault("Host reachable only through a jump host (ProxyJump)",
                   promise="the jump host connected, verified and authenticated from its own entry; a channel "
                           "through it carries the connection")
def test_proxyjump_reaches_a_host_the_direct_path_cannot(netns, lab):
    fmt = dict(port=netns.port, jump_port=netns.jump_port, key=lab.key_file, tmp=netns.tmp)
    ssh_config(JUMP_CONFIG.format(jump_kh="kh_jump", **fmt))
    direct = config.Host(name="inside", address="127.0.0.1", port=netns.port, key_file=str(lab.key_file),
                         known_hosts=str(netns.tmp / "kh_inside"))
    with pytest.raises(ConnectError, match="connection refused"):
        SshTransport(direct, attempts=1).run(["true"])
    t = SshTransport(config.Host(name="inside", address="inside"), attempts=1)
    theirs = netns.inside("readlink", "/proc/self/ns/net").stdout.strip()
    assert t.run(["readlink", "/proc/self/ns/net"]).out.strip() == theirs != os.readlink("/proc/self/ns/net")
    assert t.run(["sh", "-c", "echo $SSH_CONNECTION"]).out.split()[3] == str(netns.port)
    t.close()


def test_proxyjump_verifies_the_jump_hosts_key_too(netns, lab):
    (netns.tmp / "kh_empty").write_text("")
    fmt = dict(port=netns.port, jump_port=netns.jump_port, key=lab.key_file, tmp=netns.tmp)
    ssh_config(JUMP_CONFIG.format(jump_kh="kh_empty", **fmt))
    with pytest.raises(HostKeyError) as e:
        SshTransport(config.Host(name="inside", address="inside"), attempts=1).run(["true"])
    assert str(e.value).startswith(f"inside: jump host jump: [127.0.0.1]:{netns.jump_port} is not in ")
    assert "It offered ssh-ed25519 SHA256:" in str(e.value)
    assert (netns.tmp / "kh_empty").read_text() == ""


@pytest.mark.fault("A Fabric Connection set up through ~/.ssh/config (ProxyJump, several IdentityFile)",
                   promise="on the lab: fabric.Connection('inside') whose ~/.ssh/config entry has a ProxyJump and two "
                           "IdentityFile lines: remote.fabric takes it and its transport reaches the host behind the "
                           "jump host (no 'add ProxyJump', no 'one key file, got 2')")
def test_a_fabric_connection_through_ssh_config_reaches_the_host_behind_the_jump(netns, lab):
    import fabric  # a requirement of remote (pyproject.toml): never skipped

    import remote.fabric

    fmt = dict(port=netns.port, jump_port=netns.jump_port, key=lab.key_file, tmp=netns.tmp)
    text = JUMP_CONFIG.format(jump_kh="kh_jump", **fmt).replace(
        "    ProxyJump jump\n", f"    IdentityFile {netns.tmp}/no_such_key\n    ProxyJump jump\n")
    ssh_config(text)
    c = fabric.Connection("inside", user="root")
    assert c.gateway is not None and len(c.connect_kwargs["key_filename"]) == 2  # what Fabric made of it
    fleet = remote.fabric.fleet(c, [200])
    host = fleet.config.hosts["inside"]
    t = SshTransport(host, attempts=1)
    theirs = netns.inside("readlink", "/proc/self/ns/net").stdout.strip()
    assert t.run(["readlink", "/proc/self/ns/net"]).out.strip() == theirs != os.readlink("/proc/self/ns/net")
    t.close()
