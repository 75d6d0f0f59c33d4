"""A Transport over one reused SSH connection (paramiko, connected by remote.transport.connect): host keys
checked, never added; a heartbeat that notices a silent link; ChannelStream, a command's stdin and stdout
as an SSH channel.
"""

from __future__ import annotations

import logging
import select
import shlex
import threading
import time
from collections.abc import Callable, Sequence

from ..config import Host
from ..errors import CommandTimeout, ConnectError, ConnectTimeout
from ..threads import ContextThread
from .base import Capabilities, OutputCallback, Result, _check_argv
from .framing import STDERR_TAIL

log = logging.getLogger("remote.transport")

STREAM_WINDOW = 16 << 20  # SSH channel window of a stream: what may be in flight (and buffered) at once
STREAM_PACKET = 1 << 18
HEARTBEAT_EVERY = 5.0  # seconds between the SSH heartbeats of a connection
HEARTBEAT_SILENCE = 20.0  # no answer this long: the link is gone (noticed within 30 s), the connection closed
UNREACHABLE_HOLD = 60.0  # a host that never answered is not tried again for this long (one task, one wait)


class _CallbackFailed(Exception):
    """Carries an exception raised by the caller's on_output, so it is never mistaken for a lost connection."""


def _emit(on_output: OutputCallback | None, kind: str, chunk: bytes) -> None:
    if on_output:
        try:
            on_output(kind, chunk)
        except BaseException as exc:
            raise _CallbackFailed() from exc


class _Connection:
    """An open client (and the jump hosts it goes through)."""

    def __init__(self, client):
        self.client = client

    @property
    def is_connected(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def close(self) -> None:
        self.client.close()


class SshTransport(Capabilities):
    """One reused SSH connection to a host; host keys checked, never added."""

    host: Host  # always a configured host
    can_stream = True
    login_shell = True  # every command is a new session and a login shell with its rc files (remote.transport.hostmux)

    def __init__(self, host: Host, *, attempts: int = 4, max_wait: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, heartbeat_every: float = HEARTBEAT_EVERY,
                 heartbeat_silence: float = HEARTBEAT_SILENCE):
        self.host = host
        self.heartbeat_every, self.heartbeat_silence = heartbeat_every, heartbeat_silence
        self.name = host.name
        self._conn: _Connection | None = None
        self._lock = threading.Lock()
        self._attempts, self._max_wait, self._sleep = attempts, max_wait, sleep
        self._reached = False  # connected at least once
        self._unreachable: tuple[float, ConnectTimeout] | None = None

    def describe(self, argv: Sequence[str]) -> str:
        """The ssh command line; ssh applies ~/.ssh/config to the address as remote does."""
        h = self.host
        opts = ["-p", str(h.port)] if h.port else []
        if h.key_file:
            opts += ["-i", h.key_file]
        if h.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={h.known_hosts}"]
        user = h.user or self.target().user
        return shlex.join(["ssh", *opts, f"{user}@{h.address}", shlex.join(argv)])

    def target(self):
        """Where and how this host is reached: its hosts-file keys over ~/.ssh/config (remote.transport.sshconfig)."""
        from .connect import resolve_host

        return resolve_host(self.host)

    # -- connecting -------------------------------------------------------------------------
    def connect(self):
        """Open the connection if needed and return the paramiko client (remote.transport.connect.open_client).

        A host never reached in this transport's life is not waited for twice: its connect timeout is
        remembered for UNREACHABLE_HOLD s, so a fallback path fails at once instead of waiting again.
        One that answered before and dropped gets the retries (a short outage is ridden out)."""
        from .connect import open_client

        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn.client
            if self._unreachable and time.monotonic() < self._unreachable[0]:
                raise ConnectTimeout(self.name, str(self._unreachable[1]))
            if self._conn is not None:  # gone: its client (and any jump hosts') closed before a new one
                self._conn.close()
                self._conn = None
            try:
                client = open_client(self.host, attempts=self._attempts, max_wait=self._max_wait, sleep=self._sleep,
                                     retry_timeouts=self._reached)
            except ConnectTimeout as exc:
                if self._reached:  # a reconnect: still a lost connection, which callers resume after
                    raise ConnectError(self.name, str(exc)) from exc
                self._unreachable = (time.monotonic() + UNREACHABLE_HOLD, exc)
                raise
            self._reached = True
            transport = client.get_transport()
            assert transport is not None  # connected just now
            transport.set_keepalive(15)
            ContextThread(target=_heartbeat, args=(transport, self.name, self.heartbeat_every,
                                                      self.heartbeat_silence),
                             daemon=True, name=f"ssh-heartbeat-{self.name}").start()
            self._conn = _Connection(client)
            return client

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
                feeder = ContextThread(target=feed, daemon=True)
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
            assert failed.__cause__ is not None  # raised `from` the callback's exception
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

    def open_stream(self, argv: Sequence[str], *, window: int = STREAM_WINDOW) -> ChannelStream:
        """A command with its stdin and stdout as byte streams (transfers, the in-container agent).

        The channel's window bounds what is in flight (and buffered here) at once; paramiko's
        default (2 MiB, 32 KiB packets) caps a loopback transfer well below the link."""
        argv = _check_argv(argv)
        client = self.connect()
        try:
            chan = client.get_transport().open_session(window_size=window, max_packet_size=STREAM_PACKET,
                                                       timeout=self.host.connect_timeout)
            chan.exec_command(shlex.join(argv))
        except Exception as exc:
            self.close()
            raise ConnectError(self.name, f"{self.name}: connection lost: {exc}") from exc
        return ChannelStream(chan, self.name)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class ChannelStream:
    """An SSH channel as a Stream. Socket errors become ConnectError (the connection is gone)."""

    def __init__(self, chan, where: str = ""):
        self.chan, self.where = chan, where
        self._err = bytearray()
        self._buf, self._pos = b"", 0

    def _lost(self, exc: BaseException) -> ConnectError:
        return ConnectError(self.where, f"{self.where}: connection lost during a stream: {exc or type(exc).__name__}")

    def _drain_stderr(self) -> None:
        # stderr shares the channel's window: unread, it would stall stdout.
        while self.chan.recv_stderr_ready():
            self._err += self.chan.recv_stderr(65536)
            del self._err[:-STDERR_TAIL]

    def write(self, data: bytes) -> None:
        try:
            self.chan.sendall(data)
        except (OSError, EOFError) as exc:
            raise self._lost(exc) from exc
        self._drain_stderr()

    def read(self, n: int) -> bytes:
        # Take all that paramiko holds at once and serve small reads from here: its buffer deletes
        # what is read from its front, so many small reads of a full window copy the window each time.
        if self._pos >= len(self._buf):
            try:
                self._buf, self._pos = self.chan.recv(STREAM_WINDOW), 0  # b"" once the channel is closed
            except (OSError, EOFError) as exc:
                raise self._lost(exc) from exc
            self._drain_stderr()
        chunk = self._buf[self._pos:self._pos + n]
        self._pos += len(chunk)
        return chunk

    def close_stdin(self) -> None:
        try:
            self.chan.shutdown_write()
        except (OSError, EOFError):
            pass

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.chan.exit_status_ready():
            if self.chan.closed or not self.chan.get_transport().is_active():
                return -1
            if end is not None and timeout is not None and time.monotonic() > end:
                raise CommandTimeout("stream", timeout, self.error_text(), self.where)
            self.chan.status_event.wait(0.2)
            self._drain_stderr()
        self._drain_stderr()
        return self.chan.recv_exit_status()

    def error_text(self) -> str:
        self._drain_stderr()
        return bytes(self._err).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return not self.chan.closed and self.chan.get_transport().is_active()

    def close(self) -> None:
        try:
            self.chan.close()
        except (OSError, EOFError):  # the connection is already gone: so is the channel
            pass


def _heartbeat(transport, name: str, every: float, silence: float) -> None:
    """Ask the server for an answer every `every` seconds; none within `silence` seconds is a silent link
    (a NAT or Wi-Fi drop keeps the TCP connection open with nobody behind it, and paramiko's keepalives
    expect no reply): the connection is closed, so whatever waits on it gets ConnectError and reconnects.

    `keepalive@openssh.com` with want-reply is what OpenSSH's ServerAliveInterval sends; any SSH server
    answers it (with a failure, for a request it does not know), which is all that is needed."""
    while transport.is_active():
        time.sleep(every)
        answered = threading.Event()

        def ask(answered: threading.Event) -> None:
            try:
                transport.global_request("keepalive@openssh.com", wait=True)
            except Exception:  # the connection went meanwhile: the loop's next check ends it
                pass
            finally:
                answered.set()

        ContextThread(target=ask, args=(answered,), daemon=True, name=f"ssh-keepalive-{name}").start()
        if not answered.wait(silence) and transport.is_active():
            log.warning("%s: no answer from the SSH server in %gs; closing the connection (a silent link?)",
                        name, silence)
            transport.close()
            return


def _short(command: str, limit: int = 160) -> str:
    return command if len(command) <= limit else command[:limit] + " ..."

