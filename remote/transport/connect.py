"""Opening an SSH connection to a host of the hosts file, as ssh would.

~/.ssh/config applies (remote.transport.sshconfig: aliases, HostName, Port, User, IdentityFile,
UserKnownHostsFile, ProxyJump); jump hosts are connected, verified and authenticated like the target;
keys are tried in ssh's order and every one is named when none works; host keys are checked and
never added. Each phase (TCP, SSH greeting, handshake, authentication, a jump's channel) waits at
most the host's connect_timeout, and a timeout is not retried: a host that never answers fails once.

    open_client(host)  the connection, trying again after a refused or reset one (what the transport
                       and a kept connection both call)
    connect(host)      one attempt

`_mapped` is the one place where paramiko's and the socket's exceptions become the library's, most
specific first. paramiko's own log lines go to the `remote.transport.paramiko` logger, which prints
nothing unless a handler is attached to it.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator

import paramiko

from ..config import Host
from ..errors import AuthenticationError, ConnectError, ConnectTimeout, HostKeyError, RemoteError, TransportError
from . import sshconfig
from .sshconfig import Target

log = logging.getLogger("remote.transport")
WIRE_LOG = "remote.transport.paramiko"
_wire = logging.getLogger(WIRE_LOG)
_wire.addHandler(logging.NullHandler())
_wire.propagate = False  # a Transport thread logs tracebacks at ERROR: they must not reach a user's terminal
_wire.disabled = True  # nor any handler at all (pytest 9.2's log capture, say, sees loggers that do not propagate)


class Client(paramiko.SSHClient):
    """An SSHClient that also closes the jump hosts it was reached through."""

    def __init__(self, target: Target, jumps: list[Client]):
        super().__init__()
        self.target, self.jumps = target, jumps

    def close(self) -> None:
        super().close()
        for jump in reversed(self.jumps):
            jump.close()


def resolve_host(host: Host, ssh_config: str | None = None) -> Target:
    """The host's connect parameters: its hosts-file keys over ~/.ssh/config (read now unless given)."""
    text = sshconfig.read() if ssh_config is None else ssh_config
    return sshconfig.resolve(host, text, local_user=_local_user())


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


def open_client(host: Host, *, attempts: int = 4, max_wait: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                retry_timeouts: bool = False, ssh_config: str | None = None) -> Client:
    """A connection to `host`, trying again (with backoff, reported in plain words) after a refused or reset
    one: an sshd restarting, or one past its MaxStartups. A timeout is tried again only with retry_timeouts
    (a host that answered before and dropped); otherwise it would only wait as long again."""
    import tenacity

    target = resolve_host(host, ssh_config)

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, ConnectError) or (retry_timeouts and isinstance(exc, ConnectTimeout))

    def report(state) -> None:
        log.warning("%s; trying again in %.1f s (attempt %d of %d)", state.outcome.exception(),
                    state.next_action.sleep, state.attempt_number + 1, attempts)

    retry = tenacity.Retrying(
        retry=tenacity.retry_if_exception(transient),
        stop=tenacity.stop_after_attempt(attempts) | tenacity.stop_after_delay(max_wait),
        wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=5),
        before_sleep=report, sleep=sleep, reraise=True)
    return retry(_connect, target, host.connect_timeout)


def connect(host: Host, *, ssh_config: str | None = None) -> Client:
    """One attempt to connect to `host` (no retries); the library's errors only."""
    return _connect(resolve_host(host, ssh_config), host.connect_timeout)


def _connect(target: Target, timeout: float) -> Client:
    jumps: list[Client] = []
    sock: paramiko.Channel | socket.socket | None = None
    peer: _Peer | None = None
    client: Client | None = None
    phase = "tcp"
    try:
        if target.via is not None:
            try:
                jumps.append(_connect(target.via, timeout))  # verified and authenticated like any host
            except TransportError as exc:
                raise type(exc)(target.label, f"{target.label}: {exc}") from exc
            phase = "channel"
            hop = jumps[-1].get_transport()
            assert hop is not None  # connected just now
            sock = hop.open_channel(
                "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout)
        else:
            sock = socket.create_connection((target.hostname, target.port), timeout=timeout)
        phase = "ssh"
        peer = _Peer(sock)
        client = Client(target, jumps)
        client.set_missing_host_key_policy(_Refuse())
        _load_known_hosts(client, target)
        # start_client waits timeout + 2: the greeting's own timeout (banner_timeout) fires first and says so.
        # sock: _Peer stands in for the socket (paramiko calls only what a socket has), hence the ignore.
        client.connect(target.hostname, target.port, username=target.user, sock=peer,  # type: ignore[arg-type]
                       timeout=timeout + 2,
                       banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout,
                       transport_factory=_fast_cipher_transport, auth_strategy=_Keys(target))
        return client
    except BaseException as exc:
        for closing in (client, sock, *reversed(jumps)):
            if closing is not None:
                try:
                    closing.close()
                except Exception:
                    pass
        if isinstance(exc, (RemoteError, KeyboardInterrupt, SystemExit)):
            raise
        raise _mapped(exc, target, phase, peer.heard if peer else b"", timeout) from exc


class _Peer:
    """The socket (or a jump host's channel) paramiko reads, keeping the first bytes the server sent:
    when it is not an SSH server, the message shows what it said instead."""

    KEEP = 200

    def __init__(self, sock):
        self._sock, self.heard = sock, b""
        self.send = sock.send  # every packet goes out through it: no lookup through __getattr__

    def recv(self, n: int) -> bytes:
        data = self._sock.recv(n)
        self.heard += data[:self.KEEP - len(self.heard)]
        if len(self.heard) >= self.KEEP:
            self.recv = self._sock.recv  # type: ignore[method-assign]  # enough kept: from now on paramiko reads the socket directly
        return data

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _UnknownHostKey(Exception):
    def __init__(self, name: str, key):
        self.name, self.key = name, key


class _Refuse(paramiko.MissingHostKeyPolicy):
    """Never learn a key: say which one was offered."""

    def missing_host_key(self, client, hostname, key):
        raise _UnknownHostKey(hostname, key)


_NOTED: set[str] = set()  # known_hosts files whose @cert-authority lines were noted (once per process)


def _read_known_hosts(path: str) -> tuple[list[paramiko.hostkeys.HostKeyEntry], list[tuple]]:
    """The entries of one known_hosts file, and its @revoked ones as (entry, line number). @cert-authority
    lines are skipped with one note (host certificates are not supported); a line that is not a key
    (a bad base64 field, an unknown type) is skipped, as ssh skips it."""
    entries, revoked, authorities = [], [], 0
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            marker = None
            if line.startswith("@"):
                marker, _, line = line.partition(" ")
                line = line.strip()
                if marker == "@cert-authority":
                    authorities += 1
                    continue
                if marker != "@revoked":
                    log.warning("%s line %d: unknown marker %s: line skipped", path, lineno, marker)
                    continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
            except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
                entry = None
            if entry is None:
                continue
            if marker == "@revoked":
                revoked.append((entry, lineno))
            else:
                entries.append(entry)
    if authorities and path not in _NOTED:
        _NOTED.add(path)
        log.warning("note: %s has %d @cert-authority line%s: host certificates are not supported, so %s skipped "
                    "(hosts need their plain host keys listed)", path, authorities, "s" * (authorities > 1),
                    "they are" if authorities > 1 else "it is")
    return entries, revoked


def revoked_line(target: Target, key) -> str | None:
    """`FILE line N` of an @revoked line with this key, or None. A revoked key is refused for every host,
    whatever the line's host patterns (ssh applies them; revoking is meant for all)."""
    for path in target.known_hosts:
        try:
            _, revoked = _read_known_hosts(path)
        except (OSError, UnicodeDecodeError):
            continue
        for entry, lineno in revoked:
            if entry.key == key:
                return f"{path} line {lineno}"
    return None


def _load_known_hosts(client: paramiko.SSHClient, target: Target) -> None:
    """Every key the known_hosts files give this host, less those an @revoked line names (paramiko's own
    reader fails on any @ line): a revoked key offered is then refused, and _mapped says by which line."""
    keys = client.get_host_keys()
    entries, revoked = [], []
    for path in target.known_hosts:
        try:
            got, gone = _read_known_hosts(path)
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise HostKeyError(target.label, f"{target.label}: cannot read known_hosts {path}: {exc}") from None
        entries += got
        revoked += [entry for entry, _ in gone]
    for entry in entries:
        if any(entry.key == r.key for r in revoked):
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


class _NoKey(paramiko.AuthenticationException):
    """Every key was tried and refused (or could not be used): `tried` says each one and why."""

    def __init__(self, tried: list[str]):
        super().__init__("no key accepted")
        self.tried = tried


class _AuthLost(Exception):
    """The connection went (or timed out) while authenticating."""


class _Keys(paramiko.auth_strategy.AuthStrategy):
    """The keys ssh would offer, in its order: hosts.yaml's key_file alone; else IdentityFile's keys, then
    ssh-agent's; else ssh-agent's, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa. Each outcome is kept."""

    def __init__(self, target: Target):
        super().__init__(ssh_config=None)  # type: ignore[arg-type]  # unused: authenticate below is this class's own
        self.target = target
        self.tried: list[str] = []

    def get_sources(self) -> Iterator[paramiko.auth_strategy.AuthSource]:
        """Not used: authenticate picks and tries the keys itself (AuthStrategy's own raises the same)."""
        raise NotImplementedError

    def authenticate(self, transport):
        t = self.target
        files: list[tuple[str, str | None]] = [("file", p) for p in t.identities]
        agent: list[tuple[str, str | None]] = [("agent", None)] if t.agent else []
        order = agent + files if t.identities_from == "default" else files + agent
        for kind, path in order:
            if kind == "agent" and self._agent(transport) or \
                    kind == "file" and path is not None and self._file(transport, path):
                return []
        raise _NoKey(self.tried)

    def _file(self, transport, path: str) -> bool:
        label = {"key_file": f"key_file {path}", "connect_kwargs": f"connect_kwargs key_filename {path}"}.get(
            self.target.identities_from, _tilde(path))
        if not os.path.exists(path):
            self.tried.append(f"{label}: no such file")
            return False
        try:
            key = paramiko.PKey.from_path(path)
        except paramiko.PasswordRequiredException:
            self.tried.append(f"{label}: has a passphrase (load it into ssh-agent: ssh-add {_tilde(path)})")
            return False
        except Exception as exc:  # unreadable, not a key, a type paramiko does not know
            self.tried.append(f"{label}: cannot use it ({exc or type(exc).__name__})")
            return False
        return self._offer(transport, key, label)

    def _agent(self, transport) -> bool:
        if not os.environ.get("SSH_AUTH_SOCK"):
            self.tried.append("ssh-agent: not running (SSH_AUTH_SOCK is not set)")
            return False
        agent = paramiko.Agent()
        try:
            keys = agent.get_keys()
            if not keys:
                self.tried.append("ssh-agent: holds no keys (ssh-add lists them)")
            for key in keys:
                if self._offer(transport, key, f"ssh-agent key {key.comment or key.fingerprint}"):
                    return True
            return False
        finally:
            agent.close()

    def _offer(self, transport, key, label: str) -> bool:
        try:
            transport.auth_publickey(self.target.user, key)
        except paramiko.BadAuthenticationType as exc:
            self.tried.append(f"{label}: the host takes no keys at all (it allows: {', '.join(exc.allowed_types)})")
            raise _NoKey(self.tried) from None
        except paramiko.AuthenticationException as exc:
            if not transport.is_active() or "timeout" in str(exc).lower():
                raise _AuthLost(str(exc)) from exc
            self.tried.append(f"{label}: refused")
            return False
        if transport.is_authenticated():
            return True
        self.tried.append(f"{label}: accepted, but the host asks for a second factor, which remote cannot give")
        return False


def _tilde(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home != "/" and path.startswith(home + "/") else path


def fingerprint(key) -> str:
    """SHA256:... as ssh and ssh-keygen -lf print it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


_KEYGEN_TYPE = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "rsa-sha2-256": "rsa", "rsa-sha2-512": "rsa"}


def _key_type(key) -> str:
    name = key.get_name()
    return _KEYGEN_TYPE.get(name, "ecdsa" if name.startswith("ecdsa") else name)


_ERRNO_WORDS = {errno.ECONNREFUSED: "connection refused (is sshd running, and on this port?)",
                errno.ECONNRESET: "the connection was reset", errno.EHOSTUNREACH: "no route to host",
                errno.ENETUNREACH: "network unreachable", errno.ECONNABORTED: "the connection was aborted"}


def _timed_out(exc: BaseException) -> bool:
    """Whether a wait ran out: a socket timeout anywhere in the chain (paramiko's banner error wraps one, and
    is raised again in our thread with it as context), or paramiko's own words for one."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (socket.timeout, TimeoutError)):
            return True
        text = str(seen).lower()
        if isinstance(seen, _AuthLost) and "timeout" in text or isinstance(seen, paramiko.SSHException) and (
                text in ("no existing session", "timeout opening channel.") or "timed out" in text):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _mapped(exc: BaseException, t: Target, phase: str, heard: bytes, timeout: float) -> TransportError:
    """paramiko's and the socket's exceptions as the library's, most specific first."""
    name = t.label
    via = f" through {t.via.label} ({t.via.alias})" if t.via else ""
    jump = t.via.label if t.via else "the jump host"  # the channel's phase: there is one
    dest = f"{t.address}{via}"
    if isinstance(exc, (_UnknownHostKey, paramiko.BadHostKeyException)) and (where := revoked_line(t, exc.key)):
        return HostKeyError(name, f"{name}: {t.address} offered {exc.key.get_name()} {fingerprint(exc.key)}, a key "
                                  f"REVOKED by {where}: refused. Ask the host's administrator for its new key.")
    if isinstance(exc, _UnknownHostKey):
        return HostKeyError(name, _unknown_key_message(t, exc.key))
    if isinstance(exc, paramiko.BadHostKeyException):
        kh = t.known_hosts[0]
        return HostKeyError(name, (
            f"{name}: the host key of {t.address} has CHANGED since it was recorded in {kh}.\n"
            "This can be a reinstalled host or an attack. If you know why it changed, remove the old key\n"
            f"  ssh-keygen -R '{t.address}' -f {kh}\n"
            f"It now offers {exc.key.get_name()} {fingerprint(exc.key)} (recorded: {fingerprint(exc.expected_key)}); "
            "check that on the host itself, then add it as for a new host (docs/guide/ssh.md)."))
    if isinstance(exc, _NoKey):
        return AuthenticationError(name, _no_key_message(t, exc.tried))
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthenticationError(name, f"{name}: {t.user}@{dest} refused authentication: {exc}")
    if heard and not heard.startswith(b"SSH-") and b"\nSSH-" not in heard:
        said = heard.split(b"\n", 1)[0].decode("ascii", "replace").strip()[:80]
        return TransportError(name, f"{name}: {dest} is not an SSH server: it answered {said!r} "
                              "(is the port right? `ssh -p PORT HOST` says the same)")
    if isinstance(exc, paramiko.ChannelException):
        if exc.code == 1:  # OPEN_ADMINISTRATIVELY_PROHIBITED
            return TransportError(name, f"{name}: {jump} refused to forward to {t.address} "
                                  f"(administratively prohibited: its sshd needs AllowTcpForwarding yes)")
        return ConnectError(name, f"{name}: {jump} could not reach {t.address}: {exc.text or exc}")
    if isinstance(exc, socket.gaierror):
        return TransportError(name, f"{name}: cannot resolve {t.hostname!r}: {exc.strerror} (a typo, or a Host "
                              "alias that ~/.ssh/config does not have?)")
    if _timed_out(exc):
        if phase == "tcp":
            why = f"no answer to the TCP connection within {timeout:g} s (host down, or a firewall dropping it?)"
        elif phase == "channel":
            why = f"{jump} did not open a channel to it within {timeout:g} s"
        elif not heard:
            why = (f"the connection was accepted but no SSH greeting came within {timeout:g} s "
                   "(not an SSH server, the wrong port, or an sshd too busy to answer?)")
        else:
            why = f"the SSH handshake did not finish within {timeout:g} s"
        return ConnectTimeout(name, f"{name}: cannot connect to {dest}: {why}")
    if isinstance(exc, OSError) and exc.errno in _ERRNO_WORDS:
        during = " during the SSH handshake" if phase == "ssh" else ""
        return ConnectError(name, f"{name}: cannot connect to {dest}: {_ERRNO_WORDS[exc.errno]}{during}")
    if isinstance(exc, (OSError, EOFError, _AuthLost)) or (
            isinstance(exc, paramiko.SSHException) and str(exc).startswith("Error reading SSH protocol banner")):
        return ConnectError(name, f"{name}: cannot connect to {dest}: the connection was closed during the SSH "
                            "handshake")
    if isinstance(exc, paramiko.SSHException):
        return TransportError(name, f"{name}: SSH failed with {dest}: {_short(exc)}")
    return TransportError(name, f"{name}: SSH failed with {dest}: {type(exc).__name__}: {_short(exc)}")


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).strip().splitlines()[0][:200]


def _unknown_key_message(t: Target, key) -> str:
    kh = t.known_hosts[0]
    kind = _key_type(key)
    scan = f"ssh-keyscan -p {t.port} -t {kind} {t.hostname} >> {kh}"
    if t.via is not None:  # only the jump host reaches it
        scan = f"ssh {t.via.alias} ssh-keyscan -p {t.port} -t {kind} {t.hostname} >> {kh}"
    return (f"{t.label}: {t.address} is not in {' or '.join(t.known_hosts)}; unknown host keys are never accepted.\n"
            f"It offered {key.get_name()} {fingerprint(key)}. Check that on the host itself (its console, not "
            f"over this network):\n  ssh-keygen -lf /etc/ssh/ssh_host_{kind}_key.pub\n"
            f"and if the fingerprints match, add it:\n  {scan}")


def _no_key_message(t: Target, tried: list[str]) -> str:
    lines = [f"{t.label}: {t.user}@{t.address} accepted none of the keys tried:"]
    lines += [f"  {line}" for line in tried] or ["  (no key to try)"]
    if t.identities_from == "connect_kwargs":
        todo = ("fix key_filename in the Connection's connect_kwargs, or load the key into ssh-agent (ssh-add) and "
                "drop key_filename")
    elif t.label.startswith("jump host"):
        todo = f"name its key with IdentityFile under `Host {t.alias}` in ~/.ssh/config, or load it into ssh-agent"
    else:
        todo = (f"set hosts.{t.label}.key_file in the hosts file, load the key into ssh-agent (ssh-add), or name it "
                f"with IdentityFile under `Host {t.alias}` in ~/.ssh/config")
    lines.append(f"To fix: {todo}; the host needs the public key in ~{t.user}/.ssh/authorized_keys.")
    return "\n".join(lines)


def _fast_cipher_transport(sock, **kwargs):
    """A paramiko Transport that prefers AES-GCM: measured on loopback (bench/transfer.py), about 1.5x
    the throughput of paramiko's default aes128-ctr + hmac-sha2-256, which hashes every packet again.
    The others stay offered, so a server without GCM still connects. Its log goes to WIRE_LOG."""
    t = paramiko.Transport(sock, **kwargs)
    t.set_log_channel(WIRE_LOG)
    opts = t.get_security_options()
    gcm = tuple(c for c in opts.ciphers if c.endswith("-gcm@openssh.com"))
    opts.ciphers = gcm + tuple(c for c in opts.ciphers if c not in gcm)
    return t
