"""The keeper: the process that holds one host's SSH connection, its stream mux and its containers' agents
between commands (remote.transport.keeper is the client's side, remote.transport.keepwire the socket).

It is started by the first command to a host (keeper.KeptTransport), connects with the ordinary
SshTransport (host keys checked as ever), says so on stdout, and serves requests on its Unix socket, one
per connection, each in a thread of its own, from one Session: host commands through the host's mux,
container commands through the container's agent, streams on channels of their own, relayed with the
socket's flow control (a client that reads slowly holds the channel's window). It exits after
`control_persist` seconds without a request, on a quit request (`remote disconnect`), on SIGTERM, and
when its host's entry changes (its socket's name would change: keepwire.socket_path).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from .. import config as cfg
from .. import errors
from ..config import ContainerSpec, Host
from ..errors import TransportError
from . import NotStarted, SshTransport
from .keepwire import CHUNK, _stamp, _stamps, pack_error, peer, recv, send, socket_path
from .pct import PctExec
from .session import Session

log = logging.getLogger(__name__)

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


class Keeper:
    """Serves one host's requests from its own Session (agents, the mux, the SSH connection)."""

    def __init__(self, host: Host, path: Path, persist: float, config_file: str | None = None):
        self.host, self.path, self.persist, self.config_file = host, path, persist, config_file
        self._seen: tuple | None = None  # the hosts file's stamp when its entry was last compared
        self.session = Session(cfg.Config(file="(keeper)", hosts={host.name: host}, containers={}), agent=True,
                               transport_factory=QuietSsh)
        transport = self.session.transport(host)
        assert isinstance(transport, QuietSsh)  # transport_factory=QuietSsh: the session makes one of those
        self.transport = transport
        self.started = time.time()
        self.active = 0
        self.last = time.monotonic()
        self.stopping = False
        self.now = False  # quit at once, commands or not
        self._lock = threading.Lock()
        self._memo: dict[tuple, tuple[int, bytes, bytes]] = {}  # `remembered` answers: argv -> (code, stdout, stderr)
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
            waiting: list[socket.socket | int] = [listener, self._wake_r]
            ready, _, _ = select.select(waiting, [], [], self._tick)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if listener in ready:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    _, uid = peer(conn)
                except (OSError, TransportError):
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
            kind, data = recv(conn)
            req = json.loads(data)
            if self.stopping:
                return  # closed before `a`: the client starts a keeper of its own
            send(conn, b"a", b"", lock)
            op = req.get("op")
            try:
                if op == "stream":
                    return self._stream(conn, req, lock)
                if op == "info":
                    answer = self.info()
                elif op == "quit":
                    send(conn, b"x", json.dumps({"pid": os.getpid()}).encode(), lock)
                    self.stop(now=not req.get("graceful"))
                    return
                elif op in ("run", "ct", "memo"):
                    answer = self._command(conn, req, lock)
                else:
                    raise TransportError(self.host.name, f"unknown request {op!r}")
            except Exception as exc:  # noqa: BLE001 -- every failure goes back to the client to raise
                if not isinstance(exc, errors.RemoteError):
                    log.exception("request %s failed", op)
                answer = {"error": pack_error(exc, self.host.name)}
            send(conn, b"x", json.dumps(answer).encode(), lock)
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
                "agents": sorted(agents), "rss_kb": _rss_kb(), "remembered": len(self._memo)}

    def _stdin(self, conn: socket.socket) -> bytes:
        data = bytearray()
        while True:
            kind, chunk = recv(conn)
            if kind == b"c":
                return bytes(data)
            data += chunk

    def _command(self, conn: socket.socket, req: dict, lock: threading.Lock) -> dict:
        """A host command (`run`) or a container command (`ct`), its output sent as it comes."""
        stdin: bytes | None = self._stdin(conn)
        if not req.get("stdin"):
            stdin = None
        argv = req["argv"]
        done, gone = threading.Event(), threading.Event()
        started: list[tuple] = []
        cancel = threading.Lock()

        def on_output(kind: str, chunk: bytes) -> None:
            send(conn, b"o" if kind == "stdout" else b"e", chunk, lock)

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

        if req["op"] == "memo":  # a fact of the host that holds while this connection does (its node name)
            key = tuple(argv)
            with self._lock:
                kept = self._memo.get(key)
            if kept is None:
                result = self.session.host_run(self.host, argv, deadline=req.get("deadline"))
                kept = (result.exit_code, result.stdout, result.stderr)
                if result.exit_code == 0:
                    with self._lock:
                        self._memo[key] = kept
            for kind, chunk in (("stdout", kept[1]), ("stderr", kept[2])):
                if chunk:
                    on_output(kind, chunk)
            return {"code": kept[0]}
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
            send(conn, b"x", json.dumps({"error": pack_error(exc, self.host.name)}).encode(), lock)
            return

        def pump_in() -> None:
            try:
                while True:
                    kind, data = recv(conn)
                    if kind == b"i":
                        stream.write(data)
                    elif kind == b"c":
                        stream.close_stdin()
            except (OSError, EOFError, errors.RemoteError):
                stream.close()  # the client is gone: so is its command's channel

        threading.Thread(target=pump_in, daemon=True).start()
        try:
            while chunk := stream.read(CHUNK):
                send(conn, b"o", chunk, lock)
            code = stream.wait()
            if text := stream.error_text():
                send(conn, b"e", text.encode(), lock)
            send(conn, b"x", json.dumps({"code": code}).encode(), lock)
        except (OSError, errors.RemoteError):
            pass
        finally:
            stream.close()

    def warm(self, ctid: int) -> None:
        """Start the container's agent now (and the mux under it), as its first command would."""
        try:
            self.session._agent_for(ContainerSpec(ctid=ctid, host=self.host))
        except Exception as exc:  # noqa: BLE001 -- the next command starts it, or says why it cannot
            log.warning("agent of container %s not started ahead: %s", ctid, exc)

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
    for ctid in spec.get("warm", []):  # started behind a cold exec: its container's agent ready for the next one
        threading.Thread(target=keeper.warm, args=(int(ctid),), daemon=True).start()
    try:
        keeper.serve(listener)
    finally:
        keeper.close()
