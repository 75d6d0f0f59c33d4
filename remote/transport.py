"""Running an argv on a Proxmox host: the Transport protocol, SSH and local implementations.

Only this module imports fabric and paramiko. A command is an argv, quoted exactly once here
(`shlex.join`) for the host's login shell. Stdin is closed (or fed and then closed), there is no
pty, and stdout and stderr are drained together so neither can fill up and stall the other.
A `deadline` here only stops waiting: whoever builds the argv must also bound the process where
it runs (`timeout` inside the container), because closing a channel does not kill anything.
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from .config import Host
from .errors import AuthenticationError, CommandError, CommandTimeout, ConnectError, HostKeyError, TransportError

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", chunk)


@dataclass(frozen=True)
class Result:
    """What a finished command left behind."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes
    duration: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def check(self, where: str = "") -> "Result":
        """Raise CommandError unless the command succeeded."""
        if self.exit_code != 0:
            raise CommandError(shlex.join(self.argv), self.exit_code, self.err, where)
        return self


class Transport(Protocol):
    """Runs an argv on one host."""

    name: str

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, deadline: float | None = None,
            on_output: OutputCallback | None = None) -> Result: ...

    def describe(self, argv: Sequence[str]) -> str:
        """The command line a person would type to do the same (for dry runs)."""
        ...

    def close(self) -> None: ...


def _check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    argv = tuple(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"argv must be a non-empty sequence of str, got {argv!r}")
    if any("\0" in a for a in argv):
        raise ValueError("argv items cannot contain NUL bytes")
    return argv


class LocalTransport:
    """Runs on this machine: the controller is the Proxmox host itself."""

    def __init__(self, name: str = "local"):
        self.name = name

    def describe(self, argv: Sequence[str]) -> str:
        return shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = _check_argv(argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            return Result(argv, 127, b"", f"{argv[0]}: command not found\n".encode(), 0.0)
        chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

        def pump(name, stream):
            for chunk in iter(lambda: stream.read1(65536), b""):
                chunks[name].append(chunk)
                if on_output:
                    on_output(name, chunk)

        readers = [threading.Thread(target=pump, args=(n, s), daemon=True)
                   for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
        for t in readers:
            t.start()
        if stdin is not None:
            try:
                proc.stdin.write(stdin)
            except BrokenPipeError:
                pass
            proc.stdin.close()
        try:
            code = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise CommandTimeout(shlex.join(argv), deadline, where=self.name) from None
        for t in readers:
            t.join()
        # A signal death is reported the way a shell would: 128 + N.
        code = 128 - code if code < 0 else code
        return Result(argv, code, b"".join(chunks["stdout"]), b"".join(chunks["stderr"]), time.monotonic() - start)

    def close(self) -> None:
        pass


class _CallbackFailed(Exception):
    """Carries an exception raised by the caller's on_output, so it is never mistaken for a lost connection."""


def _emit(on_output: OutputCallback | None, kind: str, chunk: bytes) -> None:
    if on_output:
        try:
            on_output(kind, chunk)
        except BaseException as exc:
            raise _CallbackFailed() from exc


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ConnectError)


class SshTransport:
    """One reused SSH connection to a host; host keys checked, never added."""

    def __init__(self, host: Host, *, attempts: int = 4, max_wait: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.host = host
        self.name = host.name
        self._conn = None
        self._lock = threading.Lock()
        self._attempts, self._max_wait, self._sleep = attempts, max_wait, sleep

    @property
    def known_hosts(self) -> str:
        return self.host.known_hosts or os.path.expanduser("~/.ssh/known_hosts")

    def describe(self, argv: Sequence[str]) -> str:
        opts = ["-p", str(self.host.port)]
        if self.host.key_file:
            opts += ["-i", self.host.key_file]
        if self.host.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={self.host.known_hosts}"]
        return shlex.join(["ssh", *opts, f"{self.host.user}@{self.host.address}", shlex.join(argv)])

    # -- connecting -------------------------------------------------------------------------
    def connect(self):
        """Open the connection if needed (retrying transient failures) and return the paramiko client."""
        import tenacity

        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn.client
            retry = tenacity.Retrying(
                retry=tenacity.retry_if_exception(_retryable),
                stop=tenacity.stop_after_attempt(self._attempts) | tenacity.stop_after_delay(self._max_wait),
                wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=5),
                before_sleep=tenacity.before_sleep_log(log, logging.WARNING),
                sleep=self._sleep,
                reraise=True,
            )
            self._conn = retry(self._open)
            return self._conn.client

    def _open(self):
        import paramiko
        from fabric import Config, Connection

        h = self.host
        connect_kwargs = {"allow_agent": h.key_file is None, "look_for_keys": False,
                          "banner_timeout": h.connect_timeout, "auth_timeout": h.connect_timeout}
        if h.key_file:
            connect_kwargs["key_filename"] = [h.key_file]
        # Never read ~/.ssh/config: the hosts file is the whole truth about a host.
        config = Config(lazy=True, overrides={"load_ssh_configs": False})
        conn = Connection(h.address, user=h.user, port=h.port, config=config,
                          connect_timeout=max(1, int(h.connect_timeout)), connect_kwargs=connect_kwargs)
        # Fabric defaults to AutoAddPolicy; an unknown key must be refused, not learned.
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            conn.client.get_host_keys().load(self.known_hosts)
        except FileNotFoundError:
            pass
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyError(h.name, f"{h.name}: cannot read known_hosts {self.known_hosts}: {exc}") from None
        try:
            conn.open()
        except BaseException as exc:
            conn.close()
            raise self._map_connect_error(exc) from exc
        conn.client.get_transport().set_keepalive(15)
        return conn

    def _map_connect_error(self, exc: BaseException) -> BaseException:
        """The one place paramiko's and socket's exceptions become ours (most specific first)."""
        import paramiko

        h = self.host
        target = h.address if h.port == 22 else f"[{h.address}]:{h.port}"
        if isinstance(exc, paramiko.BadHostKeyException):
            return HostKeyError(h.name, (
                f"{h.name}: the host key of {target} has CHANGED since it was recorded in {self.known_hosts}.\n"
                "This can be a reinstalled host or an attack. If you know why it changed, remove the old key\n"
                f"  ssh-keygen -R '{target}' -f {self.known_hosts}\n"
                "then verify the new fingerprint out of band and add it (see README: Host keys)."))
        if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
            return HostKeyError(h.name, (
                f"{h.name}: {target} is not in {self.known_hosts}; unknown host keys are never accepted.\n"
                f"Check the fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then\n"
                f"  ssh-keyscan -p {h.port} {h.address} >> {self.known_hosts}"))
        if isinstance(exc, paramiko.AuthenticationException):
            how = f"key {h.key_file}" if h.key_file else "ssh-agent keys"
            return AuthenticationError(h.name, (
                f"{h.name}: {h.user}@{target} refused {how}: add the public key to the host's "
                "authorized_keys, or set hosts.{0}.key_file".format(h.name)))
        if isinstance(exc, (socket.timeout, TimeoutError, ConnectionError, EOFError,
                            paramiko.ssh_exception.NoValidConnectionsError, socket.gaierror)) or (
                isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower()):
            return ConnectError(h.name, f"{h.name}: cannot connect to {target}: {exc or type(exc).__name__}")
        if isinstance(exc, paramiko.SSHException):
            return TransportError(h.name, f"{h.name}: SSH failed with {target}: {exc}")
        return exc

    # -- running ----------------------------------------------------------------------------
    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = _check_argv(argv)
        command = shlex.join(argv)
        client = self.connect()
        start = time.monotonic()
        try:
            chan = client.get_transport().open_session(timeout=self.host.connect_timeout)
        except Exception as exc:  # the connection died since we last used it
            self.close()
            raise ConnectError(self.name, f"{self.name}: connection lost: {exc}") from exc
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            chan.exec_command(command)
            feeder = None
            if stdin:
                def feed():
                    try:
                        chan.sendall(stdin)
                    except OSError:
                        pass
                    finally:
                        chan.shutdown_write()
                feeder = threading.Thread(target=feed, daemon=True)
                feeder.start()
            else:
                chan.shutdown_write()
            stdout_open = True
            while True:
                progressed = False
                while chan.recv_stderr_ready():
                    chunk = chan.recv_stderr(65536)
                    err.append(chunk)
                    progressed = True
                    _emit(on_output, "stderr", chunk)
                if chan.recv_ready():
                    chunk = chan.recv(65536)
                    progressed = True
                    if chunk:
                        out.append(chunk)
                        _emit(on_output, "stdout", chunk)
                    else:
                        stdout_open = False
                elif stdout_open and chan.eof_received:
                    stdout_open = False
                if not stdout_open and (chan.exit_status_ready() or chan.closed) and not chan.recv_stderr_ready():
                    break
                if not progressed and (chan.closed or not chan.get_transport().is_active()) \
                        and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break  # the connection died under us: no EOF and no exit status will come
                if deadline is not None and time.monotonic() - start > deadline:
                    raise CommandTimeout(command, deadline, b"".join(err).decode("utf-8", "replace"), self.name)
                if not progressed:
                    select.select([chan], [], [], 0.2)
            if feeder:
                feeder.join(timeout=5)
            code = chan.recv_exit_status() if chan.exit_status_ready() else -1
        except CommandTimeout:
            raise
        except _CallbackFailed as failed:
            raise failed.__cause__ from None
        except (OSError, EOFError) as exc:
            self.close()
            raise ConnectError(self.name, f"{self.name}: connection lost while running {_short(command)}: {exc}") from exc
        finally:
            chan.close()
        if code == -1:
            self.close()
            raise ConnectError(self.name, f"{self.name}: connection lost while running {_short(command)}")
        return Result(argv, code, b"".join(out), b"".join(err), time.monotonic() - start)

    def open_stream(self, argv: Sequence[str]) -> "ChannelStream":
        """A long-lived command with its stdin and stdout as a byte stream (for the in-container agent)."""
        argv = _check_argv(argv)
        client = self.connect()
        try:
            chan = client.get_transport().open_session(timeout=self.host.connect_timeout)
            chan.exec_command(shlex.join(argv))
        except Exception as exc:
            self.close()
            raise ConnectError(self.name, f"{self.name}: connection lost: {exc}") from exc
        return ChannelStream(chan)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class ChannelStream:
    def __init__(self, chan):
        self.chan = chan

    def write(self, data: bytes) -> None:
        self.chan.sendall(data)

    def read(self, n: int) -> bytes:
        return self.chan.recv(n)  # b"" once the channel or the connection is closed

    def error_text(self) -> str:
        err = b""
        while self.chan.recv_stderr_ready():
            err += self.chan.recv_stderr(65536)
        return err.decode("utf-8", "replace").strip()

    def close(self) -> None:
        self.chan.close()


def _short(command: str, limit: int = 160) -> str:
    return command if len(command) <= limit else command[:limit] + " ..."


def for_host(host: Host, **kwargs) -> Transport:
    """The transport a host's configuration asks for."""
    return LocalTransport(host.name) if host.local else SshTransport(host, **kwargs)
