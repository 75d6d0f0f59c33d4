"""A kept connection, the client's side: one background process per user and host that keeps the SSH connection, the host's
stream mux and the containers' agents alive between commands, as OpenSSH's ControlPersist does.

A one-off command (`remote exec`, `status`, a no-op `deploy`) would otherwise pay, every time, a new
SSH connection, a session and login shell, pct's start-up and lxc-attach before it runs at all. The
first command to a host starts a keeper (`KeptTransport`); the next ones talk to it over a Unix socket
in the user's runtime folder ($XDG_RUNTIME_DIR/remote, else /run/user/<uid>/remote, else a 0700
/tmp/remote-<uid>): mode 0600, and each side checks the other's uid (SO_PEERCRED, or getpeereid on macOS and the BSDs: a platform
with neither has no kept connection, see remote.transport.session); never a TCP port.
The keeper connects with the ordinary SshTransport, so host keys are checked as ever, when the
connection is made. It exits after `control_persist` seconds without a request (hosts file, per host;
0: no keeper at all), on `remote disconnect`, and when its host's entry changes: the socket's name is a
hash of the hosts file and host name (the group) and of everything the entry says plus the stamps of the key,
known_hosts and ~/.ssh/config files (the identity); a client that finds another identity of its group retires it.

Requests, one per connection: a frame `q` (JSON: op run | memo | ct | stream | info | quit; memo: a host
command run once, its successful answer kept by the keeper for the next clients), then stdin as
`i` frames and a `c`; the keeper answers `a` (accepted: from here the command may have run), then
`o`/`e` (stdout, stderr) and `x` (JSON: the exit status, or an error to raise). A frame is a kind
byte and a 4-byte big-endian length, then the payload. A client that goes away (Ctrl-C) cancels its
command: the agent kills it, a channel is closed. A client that finds no keeper, a dead one (a stale
socket) or one that does not accept within ACCEPT_TIMEOUT starts a new one and sends the request there.

This module is the client's side (KeptTransport, disconnect); the keeper process is
remote.transport.keeperd, and what both speak on the socket is remote.transport.keepwire.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..config import Host
from ..errors import CommandTimeout, ConnectError, RemoteError, TransportError
from . import OutputCallback, Result, SshTransport, _check_argv
from .base import Capabilities
from .framing import BoundedStream
from .keepwire import (
    CHUNK,
    file_of,
    group_of,
    pack_error,
    peer,
    peer_credentials_supported,
    recv,
    runtime_dir,
    send,
    socket_path,
    unpack_error,
)

__all__ = ["KeptTransport", "disconnect", "pack_error", "peer_credentials_supported", "runtime_dir", "socket_path",
           "unpack_error"]

log = logging.getLogger(__name__)

ACCEPT_TIMEOUT = 10.0  # a keeper that does not accept a request this long is stuck: it is replaced
START_SLACK = 60.0  # beyond the connect timeouts, how long a new keeper may take to say it is ready
ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the `remote` package the keeper runs

# The first process forks the keeper and exits at once, so nobody has to reap it; the keeper is in a
# session of its own (no terminal: Ctrl-C in the shell that started it does not reach it).
# The host's settings come on stdin, read before the fork: nothing of them on a command line (`ps` shows those
# to every user of the machine).
BOOT = r"""
import os, sys
spec = sys.stdin.read()
if os.fork():
    os._exit(0)
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
sys.path.insert(0, sys.argv[1])
from remote.transport.keeperd import main
main(spec)
"""



# A keeper started behind a cold one-off command (remote.transport.direct), which does not wait for it: this
# process starts it as any command does (the start lock held until it is ready, nothing done where one is
# alive) and exits; the command that started it has gone meanwhile.
BEHIND = r"""
import os, sys
spec = sys.stdin.read()
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
sys.path.insert(0, sys.argv[1])
from remote.transport.keeper import start_behind_from
start_behind_from(spec)
"""


class _Refused(Exception):
    """No keeper took the request (none there, a stale socket, one exiting): nothing ran."""


class KeptTransport(Capabilities):
    """A Transport whose commands go through the host's keeper, started on first use.

    Container commands go through `agent(ctid)` (the keeper's agent for that container); host
    commands through the keeper's mux; `open_stream` gets a channel of its own, relayed by the keeper."""

    host: Host  # always a configured host
    login_shell = False  # the keeper's mux pays it once, not this process
    kept = True
    can_stream = True

    def __init__(self, host: Host, config_file: str, one_off: bool = False):
        self.host, self.name = host, host.name
        self.config_file = config_file
        self.direct = SshTransport(host)  # never connected here: only describes commands
        self._path: Path | None = None
        # A one-off task (`remote exec`): its first container command, where no keeper is alive, goes over
        # OpenSSH's ssh (remote.transport.direct) and the keeper starts behind it, for the next command.
        self.one_off = one_off
        self._first = threading.Lock()
        self._behind: int | None = None  # the pipe end whose closing (this process's end) starts the keeper behind
        self._warm: list[int] = []  # containers whose agents a keeper this starts starts at once (start_behind)

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
            _, uid = peer(sock)
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
                send(sock, b"q", json.dumps(req).encode())
                sock.settimeout(ACCEPT_TIMEOUT)
                kind, data = recv(sock)
                sock.settimeout(None)
                if kind != b"a":
                    raise _Refused(f"unexpected first frame {kind!r}")
                return sock
            except TimeoutError:
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
            pid, _ = peer(sock)
            sock.close()
            log.warning("%s: the kept connection (pid %s) did not answer in %gs: replacing it", self.name, pid,
                        ACCEPT_TIMEOUT)
            if pid:  # where the platform does not say (getpeereid), the socket goes and the keeper idles out
                os.kill(pid, signal.SIGKILL)
        except (OSError, TransportError):
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

    def start_behind(self, warm: Sequence[int] = ()) -> None:
        """Start this host's keeper in the background for the next command, without waiting for it; a failure
        is only logged (its log: <runtime folder>/<group>.log), never this command's.

        It starts once this process has ended: a shell waits for the end of a pipe whose other end only this
        process holds (closed by its exit), then runs BEHIND. So the keeper's Python and paramiko take no CPU
        from this command's last steps (on a loaded 2-core machine, up to a tenth of a second). Once up, it starts the
        agents of `warm` (the mux's login shell, pct, python3), so that the next command there is one round trip."""
        try:
            spec = self._spec(warm)
            r, w = os.pipe()  # w: never closed here, nor inherited (close-on-exec); the process's end closes it
            with open(self._log, "a") as logf:
                proc = subprocess.Popen(["/bin/sh", "-c", 'fd=$1; shift; cat <&"$fd" >/dev/null; exec "$@"', "sh",
                                         str(r), sys.executable, "-c", BEHIND, ROOT], stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=logf, cwd="/", start_new_session=True,
                                        pass_fds=(r,))
            os.close(r)
            self._behind = w
            assert proc.stdin is not None  # PIPE
            with proc.stdin:
                proc.stdin.write(spec.encode())
        except Exception as exc:  # noqa: BLE001 -- the command ran; the next one starts a keeper itself
            log.debug("%s: no kept connection started behind the command: %s", self.name, exc)

    def direct_first(self, ctid: int, argv: Sequence[str], *, env, cwd, timeout, stdin, on_output,
                     deadline) -> Result | None:
        """A one-off task's first container command over OpenSSH's ssh where no keeper is alive (the keeper
        then starts behind it); None where it goes the usual way (a keeper is alive, not the first command,
        ssh cannot reach the host as remote would, or ssh did not get as far as starting it)."""
        if not self.one_off or not self._first.acquire(blocking=False):
            return None  # the lock is never released: one command only, the first
        try:
            self._connect().close()
            return None  # a live keeper: warm
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        except (OSError, TransportError):
            return None
        from . import direct
        from .base import InContainer
        from .pct import DEFAULT_PATH, KILL_GRACE, exec_argv

        try:
            how = direct.plan(self.host)
        except RemoteError:
            return None  # an ssh config remote cannot read: the usual path says so
        if how is None:
            return None
        inner = list(argv) if timeout is None else ["timeout", "-k", str(KILL_GRACE), f"{timeout:g}", *argv]
        full = exec_argv(self.host.pct, ctid, direct.guarded(inner), env=env, cwd=cwd,
                         path=env.get("PATH", DEFAULT_PATH))
        try:
            result = direct.run(how, self.name, InContainer(full, ctid, argv), stdin=stdin, on_output=on_output,
                                deadline=deadline)
        except direct.NotReached as exc:
            log.debug("%s", exc)
            return None  # nothing ran: the usual path connects, and names the fix where it fails too
        except BaseException:  # interrupted, a lost link: the host answered, so a keeper for the next command
            self.start_behind([ctid])
            raise
        self.start_behind([ctid])
        return result

    def _spec(self, warm: Sequence[int] = ()) -> str:
        import base64  # here: only a cold command starts a keeper
        import pickle

        # The entry as it is (whatever fields it has, of whatever types), and the socket in plain sight; `warm`:
        # containers whose agents the keeper starts once it is up (those of a cold exec that went around it).
        return json.dumps({"host": base64.b64encode(pickle.dumps(self.host)).decode(), "path": str(self.path),
                           "persist": self.host.control_persist, "file": os.path.realpath(self.config_file),
                           "config": self.config_file, "warm": [int(c) for c in warm]})

    def _spawn(self) -> None:
        spec = self._spec(self._warm)
        with open(self._log, "w") as logf:
            proc = subprocess.Popen([sys.executable, "-c", BOOT, ROOT], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=logf, cwd="/", start_new_session=True)
        try:
            assert proc.stdin is not None  # PIPE
            try:
                proc.stdin.write(spec.encode())
            finally:
                proc.stdin.close()
            wait = self.host.connect_timeout * 4 + START_SLACK
            out = proc.stdout
            assert out is not None  # PIPE
            ready, _, _ = select.select([out], [], [], wait)
            line = out.readline() if ready else b""
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            proc.wait()  # the first process only forks the keeper and exits
        try:
            answer = json.loads(line)
        except ValueError:
            raise ConnectError(self.name, f"{self.name}: the kept connection did not start: "
                                          f"{self._log_tail() or f'no answer in {wait:g}s'}") from None
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
                    send(sock, b"i", stdin[i:i + CHUNK])
            send(sock, b"c")
            # The keeper enforces the deadline; this only guards against a keeper that stops answering.
            sock.settimeout(None if deadline is None else deadline + 30)
            while True:
                kind, data = recv(sock)
                if kind in (b"o", b"e"):
                    (out if kind == b"o" else err).append(data)
                    if on_output:
                        on_output("stdout" if kind == b"o" else "stderr", data)
                elif kind == b"x":
                    answer = json.loads(data)
                    if "error" in answer:
                        raise unpack_error(answer["error"])
                    return Result(argv, answer["code"], b"".join(out), b"".join(err), time.monotonic() - start)
        except TimeoutError:
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

    def remembered(self, argv, *, deadline=None) -> Result:
        """A host command whose answer holds while the connection does (the host's node name): run once by
        the keeper, its successful answer kept there for the next commands."""
        argv = _check_argv(argv)
        return self._call({"op": "memo"}, argv, None, None, deadline)

    def agent(self, ctid: int) -> KeptAgent:
        return KeptAgent(self, int(ctid))

    def open_stream(self, argv: Sequence[str]) -> KeptStream:
        argv = _check_argv(argv)
        return KeptStream(self._request({"op": "stream", "argv": list(argv)}), self.name)

    def info(self) -> dict | None:
        """What the live keeper of this entry says about itself; None when there is none (nothing started)."""
        try:
            sock = self._connect()
        except OSError:
            return None
        try:
            send(sock, b"q", json.dumps({"op": "info"}).encode())
            sock.settimeout(5)
            while True:
                kind, data = recv(sock)
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
        first = self.transport.direct_first(self.ctid, argv, env=env, cwd=cwd, timeout=timeout, stdin=stdin,
                                            on_output=on_output, deadline=deadline)
        if first is not None:
            return first
        req = {"op": "ct", "ctid": self.ctid, "env": dict(env), "cwd": cwd, "timeout": timeout}
        return self.transport._call(req, tuple(argv), stdin, on_output, deadline)


class KeptStream(BoundedStream):
    """A command's stdin and stdout relayed by the keeper (remote.transport.Stream). What the keeper sends
    is held here up to the bounded stream's limit: beyond it this side stops reading the socket, the
    keeper's writes wait, and so does its channel's window (a slow reader is never sent the whole stream)."""

    def __init__(self, sock: socket.socket, where: str):
        super().__init__(where)
        self.sock = sock
        self._error: dict | None = None
        self._wlock = threading.Lock()
        threading.Thread(target=self._reader, daemon=True, name=f"kept-stream-{where}").start()

    def _reader(self) -> None:
        code = -1
        try:
            while True:
                kind, data = recv(self.sock)
                if kind == b"o":
                    self.feed(data)
                elif kind == b"e":
                    self.feed_err(data)
                elif kind == b"x":
                    answer = json.loads(data)
                    self._error = answer.get("error")
                    code = answer.get("code", -1)
                    break
        except (OSError, EOFError, ValueError):
            pass
        self.finish(code)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            for i in range(0, len(view), CHUNK):
                send(self.sock, b"i", bytes(view[i:i + CHUNK]), self._wlock)
        except OSError as exc:
            raise ConnectError(self.where, f"{self.where}: the kept connection ended during a stream: {exc}") from exc

    def close_stdin(self) -> None:
        try:
            send(self.sock, b"c", b"", self._wlock)
        except OSError:
            pass

    def error_text(self) -> str:
        text = super().error_text()
        if self._error:
            text = f"{text}\n{self._error.get('message', '')}".strip()
        return text

    def close(self) -> bool:
        closed = super().close()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        return closed


def start_behind_from(spec_json: str) -> None:
    """BEHIND's body: the keeper of the entry in spec_json, started unless one is alive (KeptTransport._start)."""
    import base64
    import pickle

    spec = json.loads(spec_json)
    kept = KeptTransport(pickle.loads(base64.b64decode(spec["host"])), spec["config"])
    kept._warm = spec.get("warm", [])
    try:
        kept._start()
    except Exception as exc:  # noqa: BLE001 -- nobody waits: said in the log, the next command starts one itself
        print(f"the kept connection started behind a command did not start: {exc}", file=sys.stderr)


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
        pid, uid = peer(sock)
        if uid != os.geteuid():
            return None
        send(sock, b"q", json.dumps({"op": "quit", "graceful": graceful}).encode())
        sock.settimeout(5)
        while True:
            kind, data = recv(sock)
            if kind == b"x":
                return pid or json.loads(data).get("pid")  # the keeper says its pid where the platform does not
    except (OSError, EOFError, ValueError, TransportError):
        _unlink_if_ours(path)
        return None
    finally:
        sock.close()


def disconnect(config_file: str | None = None, host: str | None = None, where: Path | None = None,
               wait: float = 10.0) -> list[int]:
    """End keepers now: those of `host` in `config_file`, or of every host of `config_file` (the file is not
    read: its keepers' sockets are named by it), or without a file every keeper of this user. Returns their
    pids, each gone (or killed) before this returns. Another hosts file's keepers, and the commands they
    run, are left alone."""
    where = where or runtime_dir()
    if host and config_file is None:
        raise ValueError("disconnect: a host is named in a hosts file: give config_file with host")
    if config_file is None:
        pattern = "*.sock"
    elif host:
        pattern = f"{group_of(config_file, host)}-*.sock"
    else:
        pattern = f"{file_of(config_file)}{'?' * (len(group_of(config_file, '')) - len(file_of(config_file)))}-*.sock"
    _starts_done(where, pattern.replace("-*.sock", ".lock").replace("*.sock", "*.lock"), wait)
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


def _starts_done(where: Path, locks: str, wait: float) -> None:
    """Wait (at most `wait` s) for the keepers being started now (one started behind a cold command holds its
    host's start lock until it is up): ended with the others, not left to appear after a disconnect."""
    end = time.monotonic() + wait
    for path in where.glob(locks):
        try:
            with open(path, "a") as lock:
                while True:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > end:
                            break
                        time.sleep(0.05)
        except OSError:
            pass


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
