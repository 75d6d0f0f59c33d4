"""A kept connection: one background process per user and host that keeps the SSH connection, the host's
stream mux and the containers' agents alive between commands, as OpenSSH's ControlPersist does.

A one-off command (`remote exec`, `status`, a no-op `deploy`) would otherwise pay, every time, a new
SSH connection, a session and login shell, pct's start-up and lxc-attach before it runs at all. The
first command to a host starts a keeper (`KeptTransport`); the next ones talk to it over a Unix socket
in the user's runtime folder ($XDG_RUNTIME_DIR/remote, else /run/user/<uid>/remote, else a 0700
/tmp/remote-<uid>): mode 0600, and each side checks the other's uid (SO_PEERCRED); never a TCP port.
The keeper connects with the ordinary SshTransport, so host keys are checked as ever, when the
connection is made. It exits after `control_persist` seconds without a request (hosts file, per host;
0: no keeper at all), on `remote disconnect`, and when its host's entry changes: the socket's name is a
hash of the hosts file and host name (the group) and of everything the entry says plus the stamps of the key,
known_hosts and ~/.ssh/config files (the identity); a client that finds another identity of its group retires it.

Requests, one per connection: a frame `q` (JSON: op run | ct | stream | info | quit), then stdin as
`i` frames and a `c`; the keeper answers `a` (accepted: from here the command may have run), then
`o`/`e` (stdout, stderr) and `x` (JSON: the exit status, or an error to raise). A frame is a kind
byte and a 4-byte big-endian length, then the payload. A client that goes away (Ctrl-C) cancels its
command: the agent kills it, a channel is closed. A client that finds no keeper, a dead one (a stale
socket) or one that does not accept within ACCEPT_TIMEOUT starts a new one and sends the request there.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import pickle
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from . import NotStarted, OutputCallback, Result, SshTransport, _check_argv
from .. import errors
from . import sshconfig
from ..config import Host
from ..errors import CommandTimeout, ConnectError, TransportError

log = logging.getLogger(__name__)

HEAD = struct.Struct(">cI")
CHUNK = 1 << 18  # the largest payload of a data frame
ACCEPT_TIMEOUT = 10.0  # a keeper that does not accept a request this long is stuck: it is replaced
START_SLACK = 60.0  # beyond the connect timeouts, how long a new keeper may take to say it is ready
ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the `remote` package the keeper runs


# -- where the sockets live ----------------------------------------------------------------------------

def _private(d: Path) -> bool:
    """d exists (made 0700 if missing), is a real folder owned by us and closed to everyone else."""
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.geteuid():
        return False
    if st.st_mode & 0o077:
        try:
            os.chmod(d, 0o700)
        except OSError:
            return False
    return True


def runtime_dir() -> Path:
    """The folder of this user's keeper sockets: $XDG_RUNTIME_DIR/remote, /run/user/<uid>/remote, or
    /tmp/remote-<uid>, the first that is (or can be made) private to this user."""
    uid = os.geteuid()
    for base in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        if base and os.path.isdir(base) and os.stat(base).st_uid == uid:
            d = Path(base) / "remote"
            if len(str(d)) <= 72 and _private(d):  # a socket's path holds at most 107 bytes
                return d
    d = Path(tempfile.gettempdir()) / f"remote-{uid}"
    if not _private(d):
        raise TransportError("keeper", f"cannot use {d} for the kept connections' sockets: it is not a folder of "
                                       f"this user's with mode 0700 (remove it, or set control_persist: 0)")
    return d


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _stamp(path: str | None) -> list | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return st and [st.st_mtime_ns, st.st_size, st.st_ino]


_FILE_KEYS = re.compile(r"\s*(userknownhostsfile|globalknownhostsfile|identityfile)\s*[\s=]\s*(.+)$", re.IGNORECASE)


def _stamps(host: Host) -> list:
    """The files a connection to `host` is made from besides the hosts file: ~/.ssh/config with its Includes
    (which may name the address, port, user, keys and jump hosts: remote.transport.sshconfig), its key
    files and every known_hosts file that config or the hosts file names, the jump hosts' too (a superset:
    any of them changing retires the keeper, a removed host key first of all). Read without paramiko."""
    home = os.path.expanduser("~")
    text = sshconfig.read(home=home)
    names = {host.key_file, host.known_hosts, *sshconfig.DEFAULT_KNOWN_HOSTS, *sshconfig.GLOBAL_KNOWN_HOSTS}
    for line in text.splitlines():
        m = _FILE_KEYS.match(line)
        if m:
            names.update(v.strip('"') for v in m.group(2).split())
    files = sorted(sshconfig._expand_home(n, home) for n in names if n)
    return [_digest(text), *([f, _stamp(f)] for f in files)]


def group_of(config_file: str, host_name: str) -> str:
    """The keepers of one host of one hosts file share this prefix, whatever its entry says."""
    return _digest(os.path.realpath(config_file) + "\0" + host_name)


def socket_path(host: Host, config_file: str, where: Path | None = None) -> Path:
    """The keeper's socket for this host entry: any change to the entry, its key file or known_hosts
    gives another name (and so another keeper)."""
    entry = json.dumps({**dataclasses.asdict(host), "stamps": _stamps(host)}, sort_keys=True, default=str)
    return (where or runtime_dir()) / f"{group_of(config_file, host.name)}-{_digest(entry)}.sock"


# -- frames ------------------------------------------------------------------------------------------

def _send(sock: socket.socket, kind: bytes, data: bytes = b"", lock: threading.Lock | None = None) -> None:
    frame = HEAD.pack(kind, len(data)) + data
    if lock is None:
        sock.sendall(frame)
    else:
        with lock:
            sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _recv(sock: socket.socket) -> tuple[bytes, bytes]:
    kind, n = HEAD.unpack(_recv_exact(sock, HEAD.size))
    return kind, _recv_exact(sock, n)


def _peer_uid(sock: socket.socket) -> tuple[int, int]:
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def pack_error(exc: BaseException, where: str) -> dict:
    """An exception as JSON, to be raised again on the client's side with its class and attributes."""
    if not isinstance(exc, errors.RemoteError):
        exc = TransportError(where, f"{where}: the kept connection failed: {type(exc).__name__}: {exc}")
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, dict, list, type(None)))}
    return {"type": type(exc).__name__, "message": str(exc), "attrs": attrs}


def unpack_error(d: dict) -> BaseException:
    cls = NotStarted if d.get("type") == "NotStarted" else getattr(errors, str(d.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.RemoteError)):
        cls = TransportError
    exc = cls.__new__(cls)
    Exception.__init__(exc, d.get("message", ""))
    exc.__dict__.update(d.get("attrs") or {})
    return exc


# -- the client's side ---------------------------------------------------------------------------------

class _Refused(Exception):
    """No keeper took the request (none there, a stale socket, one exiting): nothing ran."""


class KeptTransport:
    """A Transport whose commands go through the host's keeper, started on first use.

    Container commands go through `agent(ctid)` (the keeper's agent for that container); host
    commands through the keeper's mux; `open_stream` gets a channel of its own, relayed by the keeper."""

    login_shell = False  # the keeper's mux pays it once, not this process
    kept = True

    def __init__(self, host: Host, config_file: str):
        self.host, self.name = host, host.name
        self.config_file = config_file
        self.direct = SshTransport(host)  # never connected here: only describes commands
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = socket_path(self.host, self.config_file)
        return self._path

    def describe(self, argv: Sequence[str]) -> str:
        return self.direct.describe(argv)

    # -- reaching the keeper -------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
            _, uid = _peer_uid(sock)
            if uid != os.geteuid():
                raise TransportError(self.name, f"{self.name}: {self.path} is served by uid {uid}, not by this user: "
                                                "remove it (`remote disconnect`), or set control_persist: 0")
        except BaseException:
            sock.close()
            raise
        return sock

    def _request(self, req: dict) -> socket.socket:
        """A connection to a live keeper that accepted `req` (one is started when needed)."""
        for attempt in range(5):
            if attempt:
                time.sleep(0.02 * attempt)  # a keeper on its way out removes its socket in a moment
            try:
                sock = self._connect()
            except (FileNotFoundError, ConnectionRefusedError):
                self._start()
                continue
            try:
                _send(sock, b"q", json.dumps(req).encode())
                sock.settimeout(ACCEPT_TIMEOUT)
                kind, data = _recv(sock)
                sock.settimeout(None)
                if kind != b"a":
                    raise _Refused(f"unexpected first frame {kind!r}")
                return sock
            except socket.timeout:
                sock.close()
                self._replace_stuck()
            except (OSError, EOFError, _Refused):  # it exited before taking the request: nothing ran
                sock.close()
        raise ConnectError(self.name, f"{self.name}: no kept connection could take the command (see {self._log})")

    @property
    def _log(self) -> Path:
        return self.path.with_name(f"{group_of(self.config_file, self.name)}.log")

    def _replace_stuck(self) -> None:
        try:
            sock = self._connect()
            pid, _ = _peer_uid(sock)
            sock.close()
            log.warning("%s: the kept connection (pid %d) did not answer in %gs: replacing it", self.name, pid,
                        ACCEPT_TIMEOUT)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        _unlink_if_ours(self.path)

    def _start(self) -> None:
        """Start this host's keeper unless another process just did (one start at a time per host)."""
        group = group_of(self.config_file, self.name)
        with open(self.path.with_name(f"{group}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._connect().close()
                return  # started meanwhile by another process
            except (FileNotFoundError, ConnectionRefusedError):
                pass
            _unlink_if_ours(self.path)
            for other in self.path.parent.glob(f"{group}-*.sock"):  # the entry changed: the old keeper goes
                if other != self.path:
                    _quit(other, graceful=True)
            self._spawn()

    def _spawn(self) -> None:
        # The entry as it is (whatever fields it has, of whatever types), and the socket in plain sight.
        spec = json.dumps({"host": base64.b64encode(pickle.dumps(self.host)).decode(), "path": str(self.path),
                           "persist": self.host.control_persist, "file": os.path.realpath(self.config_file)})
        with open(self._log, "w") as logf:
            proc = subprocess.Popen([sys.executable, "-c", BOOT, ROOT, spec], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=logf, cwd="/", start_new_session=True)
        try:
            wait = self.host.connect_timeout * 4 + START_SLACK
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            line = proc.stdout.readline() if ready else b""
        finally:
            proc.stdout.close()
            proc.wait()  # the first process only forks the keeper and exits
        try:
            answer = json.loads(line)
        except ValueError:
            raise ConnectError(self.name, f"{self.name}: the kept connection did not start: "
                                          f"{self._log_tail() or 'no answer in %gs' % wait}") from None
        if "error" in answer:
            raise unpack_error(answer["error"])

    def _log_tail(self) -> str:
        try:
            return self._log.read_text().strip()[-2000:]
        except OSError:
            return ""

    # -- commands ---------------------------------------------------------------------------------
    def _call(self, req: dict, argv: tuple, stdin: bytes | None, on_output: OutputCallback | None,
              deadline: float | None) -> Result:
        start = time.monotonic()
        sock = self._request({**req, "argv": list(argv), "deadline": deadline, "stdin": stdin is not None})
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            if stdin:
                for i in range(0, len(stdin), CHUNK):
                    _send(sock, b"i", stdin[i:i + CHUNK])
            _send(sock, b"c")
            # The keeper enforces the deadline; this only guards against a keeper that stops answering.
            sock.settimeout(None if deadline is None else deadline + 30)
            while True:
                kind, data = _recv(sock)
                if kind in (b"o", b"e"):
                    (out if kind == b"o" else err).append(data)
                    if on_output:
                        on_output("stdout" if kind == b"o" else "stderr", data)
                elif kind == b"x":
                    answer = json.loads(data)
                    if "error" in answer:
                        raise unpack_error(answer["error"])
                    return Result(argv, answer["code"], b"".join(out), b"".join(err), time.monotonic() - start)
        except socket.timeout:
            raise CommandTimeout(shlex.join(argv), deadline or 0, b"".join(err).decode("utf-8", "replace"),
                                 self.name) from None
        except (OSError, EOFError) as exc:
            raise ConnectError(self.name, f"{self.name}: the kept connection ended while running {argv[0]}: "
                                          f"{exc or type(exc).__name__}") from exc
        finally:
            sock.close()  # early (an exception, Ctrl-C): the keeper cancels the command

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        """A host command, through the keeper's mux (or a session of its own there when stdin is fed)."""
        argv = _check_argv(argv)
        return self._call({"op": "run", "stream_output": on_output is not None}, argv, stdin, on_output, deadline)

    def agent(self, ctid: int) -> "KeptAgent":
        return KeptAgent(self, int(ctid))

    def open_stream(self, argv: Sequence[str]) -> "KeptStream":
        argv = _check_argv(argv)
        return KeptStream(self._request({"op": "stream", "argv": list(argv)}), self.name)

    def info(self) -> dict | None:
        """What the live keeper of this entry says about itself; None when there is none (nothing started)."""
        try:
            sock = self._connect()
        except OSError:
            return None
        try:
            _send(sock, b"q", json.dumps({"op": "info"}).encode())
            sock.settimeout(5)
            while True:
                kind, data = _recv(sock)
                if kind == b"x":
                    return json.loads(data)
        except (OSError, EOFError, ValueError):
            return None
        finally:
            sock.close()

    def close(self) -> None:
        pass  # the keeper stays, for the next command


class KeptAgent:
    """A container's commands through its agent in the keeper (remote.transport.pct.Exec)."""

    def __init__(self, transport: KeptTransport, ctid: int):
        self.transport, self.ctid = transport, ctid

    def run(self, argv, *, env, cwd, timeout, stdin, on_output, deadline) -> Result:
        req = {"op": "ct", "ctid": self.ctid, "env": dict(env), "cwd": cwd, "timeout": timeout}
        return self.transport._call(req, tuple(argv), stdin, on_output, deadline)


class KeptStream:
    """A command's stdin and stdout relayed by the keeper (remote.transport.Stream)."""

    def __init__(self, sock: socket.socket, where: str):
        self.sock, self.where = sock, where
        self._buf = bytearray()
        self._err = bytearray()
        self._code: int | None = None
        self._error: dict | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._wlock = threading.Lock()
        threading.Thread(target=self._reader, daemon=True, name=f"kept-stream-{where}").start()

    def _reader(self) -> None:
        code = -1
        try:
            while True:
                kind, data = _recv(self.sock)
                with self._cond:
                    if kind == b"o":
                        self._buf += data
                    elif kind == b"e":
                        self._err = (self._err + data)[-(1 << 16):]
                    elif kind == b"x":
                        answer = json.loads(data)
                        self._error = answer.get("error")
                        code = answer.get("code", -1)
                        break
                    self._cond.notify_all()
        except (OSError, EOFError, ValueError):
            pass
        with self._cond:
            self._code = code
            self._cond.notify_all()

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            for i in range(0, len(view), CHUNK):
                _send(self.sock, b"i", bytes(view[i:i + CHUNK]), self._wlock)
        except OSError as exc:
            raise ConnectError(self.where, f"{self.where}: the kept connection ended during a stream: {exc}") from exc

    def read(self, n: int) -> bytes:
        with self._cond:
            while not self._buf and self._code is None and not self._closed:
                self._cond.wait()
            chunk = bytes(self._buf[:n])
            del self._buf[:n]
            return chunk

    def close_stdin(self) -> None:
        try:
            _send(self.sock, b"c", b"", self._wlock)
        except OSError:
            pass

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._code is None:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeout("stream", timeout, self.error_text(), self.where)
                self._cond.wait(left)
            return self._code

    def error_text(self) -> str:
        text = bytes(self._err).decode("utf-8", "replace").strip()
        if self._error:
            text = f"{text}\n{self._error.get('message', '')}".strip()
        return text

    def alive(self) -> bool:
        return not self._closed and self._code is None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _unlink_if_ours(path: Path) -> None:
    try:
        if os.lstat(path).st_uid == os.geteuid():
            path.unlink()
    except OSError:
        pass


def _quit(path: Path, graceful: bool) -> int | None:
    """Ask the keeper at `path` to exit (graceful: once its commands are done); its pid, or None when
    nobody served the socket (a stale file, removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        pid, uid = _peer_uid(sock)
        if uid != os.geteuid():
            return None
        _send(sock, b"q", json.dumps({"op": "quit", "graceful": graceful}).encode())
        sock.settimeout(5)
        while _recv(sock)[0] != b"x":
            pass
        return pid
    except (OSError, EOFError):
        _unlink_if_ours(path)
        return None
    finally:
        sock.close()


def disconnect(config_file: str | None = None, host: str | None = None, where: Path | None = None,
               wait: float = 10.0) -> list[int]:
    """End keepers now: those of `host` in `config_file`, or every keeper of this user. Returns their pids,
    each gone (or killed) before this returns."""
    where = where or runtime_dir()
    pattern = f"{group_of(config_file, host)}-*.sock" if host else "*.sock"
    pids = [pid for path in sorted(where.glob(pattern)) if (pid := _quit(path, graceful=False))]
    end = time.monotonic() + wait
    for pid in pids:
        while _alive(pid) and time.monotonic() < end:
            time.sleep(0.02)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (a keeper whose parent is this very process, in tests) has ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- the keeper's side ---------------------------------------------------------------------------------

IDLE_POLL = 1.0  # seconds between the idle SSH reader's looks for a close or a keepalive due (paramiko: 0.1)


class QuietSsh(SshTransport):
    """The keeper's connection, made as every connection is, with paramiko's reader waking once a second
    instead of ten times while nothing arrives: most of an idle keeper's CPU (bench/oneoff.py). Data wakes
    it at once either way; only noticing a close made from another thread can take up to IDLE_POLL."""

    _quieted = None

    def connect(self):
        client = super().connect()
        if client is not self._quieted:
            try:
                client.get_transport().sock.settimeout(IDLE_POLL)
            except (AttributeError, OSError):
                pass
            self._quieted = client
        return client


# The first process forks the keeper and exits at once, so nobody has to reap it; the keeper is in a
# session of its own (no terminal: Ctrl-C in the shell that started it does not reach it).
BOOT = r"""
import os, sys
if os.fork():
    os._exit(0)
sys.path.insert(0, sys.argv[1])
from remote.transport.keeper import main
main(sys.argv[2])
"""


class Keeper:
    """Serves one host's requests from its own Session (agents, the mux, the SSH connection)."""

    def __init__(self, host: Host, path: Path, persist: float, config_file: str | None = None):
        from .. import config as cfg
        from .session import Session

        self.host, self.path, self.persist, self.config_file = host, path, persist, config_file
        self._seen: tuple | None = None  # the hosts file's stamp when its entry was last compared
        self.session = Session(cfg.Config(file="(keeper)", hosts={host.name: host}, containers={}), agent=True,
                               transport_factory=QuietSsh)
        self.transport = self.session.transport(host)
        self.started = time.time()
        self.active = 0
        self.last = time.monotonic()
        self.stopping = False
        self.now = False  # quit at once, commands or not
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        # Wake-ups of an idle keeper: each request's end wakes the loop, so this only bounds how late the
        # idle exit comes (a quarter of the idle time, at most 5 s).
        self._tick = min(5.0, max(persist / 4, 0.05))

    def stop(self, now: bool) -> None:
        """Take no more requests; exit once those running are done (now: at once)."""
        self.stopping = True
        self.now = self.now or now
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:  # already full of wake-ups
            pass

    # -- the server loop -------------------------------------------------------------------------
    def serve(self, listener: socket.socket) -> None:
        ino = os.stat(self.path).st_ino
        try:
            self._loop(listener, ino)
        finally:  # an idle exit, a quit, SIGTERM: the socket goes first, so nobody waits on a keeper that left
            if self._still_ours(ino):
                self.path.unlink()
            listener.close()

    def _loop(self, listener: socket.socket, ino: int) -> None:
        while True:
            ready, _, _ = select.select([listener, self._wake_r], [], [], self._tick)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if listener in ready:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    _, uid = _peer_uid(conn)
                except OSError:
                    uid = -1
                if uid != os.geteuid():  # the socket's mode keeps others out; this is the second lock
                    log.warning("refused a connection from uid %d", uid)
                    conn.close()
                    continue
                with self._lock:
                    self.active += 1
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
            if not self.stopping and self._entry_changed():  # edited while no command came: go now
                self.stop(now=False)
            with self._lock:
                if self.active == 0 and time.monotonic() - self.last > self.persist:
                    self.stopping = True
                if not self._still_ours(ino):  # removed or replaced: go once the commands running are done
                    self.stopping = True
                if self.stopping and self._still_ours(ino):
                    # New clients find no socket and start another keeper; nothing they sent ran here.
                    self.path.unlink()
                if self.now or self.stopping and self.active == 0:
                    return

    def _entry_changed(self) -> bool:
        """Whether the host's entry (or its key or known_hosts file) now names another socket than this
        keeper's: a stat or two per tick, the hosts file read again only when it changed."""
        if not self.config_file:
            return False
        from .. import config as cfg

        stamp = (_stamp(self.config_file), *_stamps(self.host))
        if stamp == self._seen:
            return False
        try:
            host = cfg.load(self.config_file).hosts.get(self.host.name)
        except errors.RemoteError:
            return True  # unreadable now: the next command's keeper will say why
        changed = host is None or socket_path(host, self.config_file, self.path.parent) != self.path
        self._seen = stamp
        return changed

    def _still_ours(self, ino: int) -> bool:
        try:
            return os.stat(self.path).st_ino == ino
        except OSError:
            return False

    def _handle(self, conn: socket.socket) -> None:
        lock = threading.Lock()  # frames go out whole: output and the answer come from several threads
        try:
            kind, data = _recv(conn)
            req = json.loads(data)
            if self.stopping:
                return  # closed before `a`: the client starts a keeper of its own
            _send(conn, b"a", b"", lock)
            op = req.get("op")
            try:
                if op == "stream":
                    return self._stream(conn, req, lock)
                if op == "info":
                    answer = self.info()
                elif op == "quit":
                    _send(conn, b"x", json.dumps({"pid": os.getpid()}).encode(), lock)
                    self.stop(now=not req.get("graceful"))
                    return
                elif op in ("run", "ct"):
                    answer = self._command(conn, req, lock)
                else:
                    raise TransportError(self.host.name, f"unknown request {op!r}")
            except Exception as exc:  # noqa: BLE001 -- every failure goes back to the client to raise
                if not isinstance(exc, errors.RemoteError):
                    log.exception("request %s failed", op)
                answer = {"error": pack_error(exc, self.host.name)}
            _send(conn, b"x", json.dumps(answer).encode(), lock)
        except (OSError, EOFError, ValueError):
            pass  # the client went away
        finally:
            conn.close()
            with self._lock:
                self.active -= 1
                self.last = time.monotonic()
            self._wake()

    def info(self) -> dict:
        agents = [ctid for ctid, a in self.session._agents.items() if not isinstance(a, float) and a.alive()]
        return {"pid": os.getpid(), "host": self.host.name, "since": self.started, "persist": self.persist,
                "agents": sorted(agents), "rss_kb": _rss_kb()}

    def _stdin(self, conn: socket.socket) -> bytes:
        data = bytearray()
        while True:
            kind, chunk = _recv(conn)
            if kind == b"c":
                return bytes(data)
            data += chunk

    def _command(self, conn: socket.socket, req: dict, lock: threading.Lock) -> dict:
        """A host command (`run`) or a container command (`ct`), its output sent as it comes."""
        from .pct import PctExec
        from ..config import ContainerSpec

        stdin = self._stdin(conn)
        if not req.get("stdin"):
            stdin = None
        argv = req["argv"]
        done, gone = threading.Event(), threading.Event()
        started: list[tuple] = []
        cancel = threading.Lock()

        def on_output(kind: str, chunk: bytes) -> None:
            _send(conn, b"o" if kind == "stdout" else b"e", chunk, lock)

        def on_start(agent, i: int) -> None:
            with cancel:
                started.append((agent, i))
                if gone.is_set():  # the client left while it was being started
                    agent.kill(i)

        def watch() -> None:
            # The client sends nothing more: EOF here is the client gone (Ctrl-C), and its command is cancelled.
            try:
                conn.recv(1)
            except OSError:
                pass
            with cancel:
                if not done.is_set():
                    gone.set()
                    for agent, i in started:
                        agent.kill(i)

        if req["op"] == "run":
            if stdin is None and not req.get("stream_output"):
                result = self.session.host_run(self.host, argv, deadline=req.get("deadline"))
                if result.stdout:
                    on_output("stdout", result.stdout)
                if result.stderr:
                    on_output("stderr", result.stderr)
            else:
                result = self.transport.run(argv, stdin=stdin, deadline=req.get("deadline"), on_output=on_output)
            return {"code": result.exit_code}
        threading.Thread(target=watch, daemon=True).start()
        spec = ContainerSpec(ctid=int(req["ctid"]), host=self.host)
        try:
            for again in (True, False):
                agent = self.session._agent_for(spec)
                try:
                    if agent is None:
                        result = PctExec(self.transport, self.host.pct, spec.ctid).run(
                            argv, env=req["env"], cwd=req["cwd"], timeout=req.get("timeout"), stdin=stdin,
                            on_output=on_output, deadline=req.get("deadline"))
                    else:
                        result = agent.run(argv, env=req["env"], cwd=req["cwd"], timeout=req.get("timeout"),
                                           stdin=stdin, on_output=on_output, deadline=req.get("deadline"),
                                           on_start=lambda i, a=agent: on_start(a, i))
                    break
                except NotStarted:
                    if not again:
                        raise
        finally:
            done.set()
        return {"code": result.exit_code}

    def _stream(self, conn: socket.socket, req: dict, lock: threading.Lock) -> None:
        """A command's stdin and stdout relayed between the client and a channel of its own."""
        try:
            stream = self.transport.open_stream(req["argv"])
        except Exception as exc:  # noqa: BLE001 -- sent to the client to raise
            _send(conn, b"x", json.dumps({"error": pack_error(exc, self.host.name)}).encode(), lock)
            return

        def pump_in() -> None:
            try:
                while True:
                    kind, data = _recv(conn)
                    if kind == b"i":
                        stream.write(data)
                    elif kind == b"c":
                        stream.close_stdin()
            except (OSError, EOFError, errors.RemoteError):
                stream.close()  # the client is gone: so is its command's channel

        threading.Thread(target=pump_in, daemon=True).start()
        try:
            while chunk := stream.read(CHUNK):
                _send(conn, b"o", chunk, lock)
            code = stream.wait()
            if text := stream.error_text():
                _send(conn, b"e", text.encode(), lock)
            _send(conn, b"x", json.dumps({"code": code}).encode(), lock)
        except (OSError, errors.RemoteError):
            pass
        finally:
            stream.close()

    def close(self) -> None:
        self.session.close()


def _rss_kb() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return None


def main(spec_json: str) -> None:
    """The keeper process: connect, say so on stdout (or say why not), serve until idle, quit or signal."""
    os.setsid()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s keeper %(process)d: %(message)s")
    spec = json.loads(spec_json)
    host = pickle.loads(base64.b64decode(spec["host"]))  # from the process that started this one
    path = Path(spec["path"])
    keeper = Keeper(host, path, float(spec["persist"]), spec.get("file"))
    try:
        keeper.transport.connect()  # host keys checked here, as for any connection
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        listener.listen(64)
    except BaseException as exc:  # noqa: BLE001 -- told to the client that started us, to raise
        os.write(1, (json.dumps({"error": pack_error(exc, host.name)}) + "\n").encode())
        keeper.close()
        return
    try:
        os.write(1, (json.dumps({"ok": os.getpid()}) + "\n").encode())
    except OSError:  # the client that started it left (Ctrl-C): serve the next one
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    try:
        keeper.serve(listener)
    finally:
        keeper.close()
