"""Running an argv on a Proxmox host: the Transport protocol, SSH and local implementations.

Only this package imports paramiko (connecting: remote.transport.connect). A command is an argv, quoted exactly once here
(`shlex.join`) for the host's login shell. Stdin is closed (or fed and then closed), there is no
pty, and stdout and stderr are drained together so neither can fill up and stall the other.
A `deadline` here only stops waiting: whoever builds the argv must also bound the process where
it runs (`timeout` inside the container), because closing a channel does not kill anything.

`run` collects a command's output; `open_stream` hands its stdin and stdout to the caller as a
`Stream` to read and write in chunks (the in-container agent, file transfers), on both transports.
Locally, Ctrl-C is passed on to the child's process group (it runs in a session of its own).
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from ..config import Host
from ..errors import CommandTimeout, ConnectError, ConnectTimeout, TransportError
from ..results import Result as Result  # the one definition (remote.results); transports return it
from ..threads import ContextThread
from .framing import STDERR_TAIL

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", chunk)


class NotStarted(ConnectError):
    """The connection was found gone before the command was sent: nothing ran, so it may be run again."""


class Transport(Protocol):
    """Runs an argv on one host."""

    name: str

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, deadline: float | None = None,
            on_output: OutputCallback | None = None) -> Result: ...

    def open_stream(self, argv: Sequence[str]) -> Stream:
        """Start argv with its stdin and stdout as byte streams (transfers, the in-container agent)."""
        ...

    def describe(self, argv: Sequence[str]) -> str:
        """The command line a person would type to do the same (for dry runs)."""
        ...

    def close(self) -> None: ...


class Stream(Protocol):
    """A running command whose stdin and stdout the caller reads and writes in chunks.

    Nothing is held beyond the transport's window: the caller paces the data. stderr is kept as a
    bounded tail for error messages. `read` returns b"" at the end of stdout."""

    def write(self, data: bytes) -> None: ...

    def read(self, n: int) -> bytes: ...

    def close_stdin(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit status (128 + N for a signal); -1 when the connection was lost first."""
        ...

    def error_text(self) -> str: ...

    def alive(self) -> bool: ...

    def close(self) -> object:
        """Stop it; what it returns (a bounded stream: whether it was still open) is not part of the contract."""
        ...


STREAM_WINDOW = 16 << 20  # SSH channel window of a stream: what may be in flight (and buffered) at once
STREAM_PACKET = 1 << 18
HEARTBEAT_EVERY = 5.0  # seconds between the SSH heartbeats of a connection
HEARTBEAT_SILENCE = 20.0  # no answer this long: the link is gone (noticed within 30 s), the connection closed
UNREACHABLE_HOLD = 60.0  # a host that never answered is not tried again for this long (one task, one wait)


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
        failed: list[BaseException] = []

        def pump(name, stream):
            # Drain to the end whatever happens: a reader that stops leaves the child blocked on a full pipe.
            for chunk in iter(lambda: stream.read1(65536), b""):
                chunks[name].append(chunk)
                if on_output and not failed:
                    try:
                        on_output(name, chunk)
                    except BaseException as exc:
                        failed.append(exc)
                        _killpg(proc.pid, signal.SIGKILL)  # the caller gave up on this command

        readers = [ContextThread(target=pump, args=(n, s), daemon=True)
                   for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
        try:  # from the child's start: a Ctrl-C that comes while the readers start is passed on too
            for t in readers:
                t.start()
            if stdin is not None and proc.stdin is not None:  # a pipe, with stdin given
                try:
                    proc.stdin.write(stdin)
                except BrokenPipeError:
                    pass
                proc.stdin.close()
            try:
                code = proc.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise CommandTimeout(shlex.join(argv), deadline, where=self.name) from None
        except KeyboardInterrupt:
            # The child is in its own session (so a terminal's Ctrl-C does not reach it directly): pass it on.
            _interrupt(proc)
            raise
        for t in readers:
            t.join()
        if failed:
            raise failed[0]
        # A signal death is reported the way a shell would: 128 + N.
        code = 128 - code if code < 0 else code
        return Result(argv, code, b"".join(chunks["stdout"]), b"".join(chunks["stderr"]), time.monotonic() - start)

    def open_stream(self, argv: Sequence[str]) -> LocalStream:
        argv = _check_argv(argv)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0, start_new_session=True)
        except OSError as exc:
            raise TransportError(self.name, f"{self.name}: cannot run {argv[0]}: {exc}") from None
        return LocalStream(proc, argv)

    def close(self) -> None:
        pass


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _interrupt(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGINT to the child's process group, SIGKILL if it is still there after `grace` seconds."""
    _killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: no more grace
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class LocalStream:
    """A local child's stdin/stdout as a stream; stderr collected (a bounded tail) by a thread."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: Sequence[str]):
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three PIPE
        self.proc, self.argv = proc, argv
        self._stdin, self._stdout, self._stderr = proc.stdin, proc.stdout, proc.stderr
        self._err = bytearray()
        self._errors = ContextThread(target=self._drain_stderr, daemon=True)
        self._errors.start()

    def _drain_stderr(self) -> None:
        for chunk in iter(lambda: self._stderr.read(65536), b""):
            self._err += chunk
            del self._err[:-STDERR_TAIL]

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[self._stdin.write(view):]
        except (OSError, ValueError) as exc:  # the child closed its stdin or exited
            raise ConnectError("local", f"the local command {self.argv[0]} stopped reading: {exc}") from exc

    def read(self, n: int) -> bytes:
        try:
            return os.read(self._stdout.fileno(), n)
        except (OSError, ValueError):
            return b""

    def close_stdin(self) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass

    def wait(self, timeout: float | None = None) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(shlex.join(self.argv), timeout or 0, self.error_text()) from None
        except KeyboardInterrupt:
            _interrupt(self.proc)
            raise
        self._errors.join(timeout=5)
        return 128 - code if code < 0 else code

    def error_text(self) -> str:
        return bytes(self._err).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close our ends; a child still running after that is killed (nobody is left to talk to it)."""
        for f in (self._stdin, self._stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


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


class SshTransport:
    """One reused SSH connection to a host; host keys checked, never added."""

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


def for_host(host: Host, **kwargs) -> Transport:
    """The transport a host's configuration asks for."""
    return LocalTransport(host.name) if host.local else SshTransport(host, **kwargs)
