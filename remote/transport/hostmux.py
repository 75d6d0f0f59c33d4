"""Many host-side streams over one SSH channel: the containers' agents of a host share one login shell.

Every SSH command pays the host's session set-up and login shell, whose rc files run for each one
(about 105 ms of CPU on the lab, where root's .bashrc runs `pyenv init`), and a fleet task starts one
agent per container. So on an SSH host the agents are started through one `python3 -I -S -c MUX`
per host (stdlib only), which runs each `pct exec ... -- python3 -c AGENT` as its own child and
relays its stdin, stdout and stderr as frames; the agents and their protocol are unchanged.

Frames, both ways: a 9-byte header (stream id: 4 bytes, kind: 1 byte, length: 4 bytes, big-endian),
then the payload. Controller to mux: s (start: argv as JSON), i (stdin bytes), c (close stdin),
k (forget: close the child's pipes, as a closed SSH channel would). Mux to controller: r (ready, on
stream 0), a (the child started: a command lost after this may have run, and is never run again by
itself), o and e (stdout and stderr bytes), x (exit status, 128 + N for a signal, after both pipes ended). The mux ends on EOF or a broken pipe, or after SILENCE s unheard with no child left, and then
closes every child's pipes: an agent then sees its end of input and kills what it ran, as it does
when its own SSH channel closes.
"""

from __future__ import annotations

import json
import threading
import time

from ..errors import ConnectError
from . import NotStarted, Result
from .framing import SERVE, BoundedStream, Frames, Link

HANDSHAKE_TIMEOUT = 30.0  # seconds for the mux's first frame (the SSH session, the login shell, python3)
MUX_SILENCE = 60  # the mux's side: unheard this long with no child left, it exits
CHUNK = 1 << 20  # the largest payload of one frame

MUX = SERVE + r'''
import json, select, struct, subprocess  # and SERVE's: os, selectors, signal, sys, time
HEAD = struct.Struct(">IcI")
kids = {}  # id -> {"p": Popen, "open": pipes still open, "pending": bytes for its stdin, "eof": close stdin after}

def send(i, kind, data=b""):
    data = memoryview(HEAD.pack(i, kind, len(data)) + data)
    end = time.monotonic() + SILENCE
    while data:
        try:
            data = data[os.write(1, data):]
        except BlockingIOError:
            if time.monotonic() > end:
                raise Gone()
            select.select([], [1], [], 1.0)

def close_stdin(k):
    if k["p"].stdin is not None:
        try:
            sel.unregister(k["p"].stdin)
        except (KeyError, ValueError):
            pass
        try:
            k["p"].stdin.close()
        except OSError:
            pass
        k["p"].stdin = None

def forget(i):
    k = kids.pop(i, None)
    if k is None:
        return
    close_stdin(k)
    for f in (k["p"].stdout, k["p"].stderr):
        try:
            sel.unregister(f)
        except (KeyError, ValueError):
            pass
        f.close()

def start(i, argv):
    try:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        send(i, b"e", f"{argv[0]}: {exc.strerror}\n".encode())
        send(i, b"x", b"126" if isinstance(exc, PermissionError) else b"127")
        return
    for f in (p.stdin, p.stdout, p.stderr):
        os.set_blocking(f.fileno(), False)
    kids[i] = {"p": p, "open": 2, "pending": b"", "eof": False}
    sel.register(p.stdout, selectors.EVENT_READ, (i, b"o"))
    sel.register(p.stderr, selectors.EVENT_READ, (i, b"e"))
    send(i, b"a")  # started: from here on the controller never runs it again by itself

def to_stdin(i, data):
    k = kids.get(i)
    if k is None or k["p"].stdin is None:
        return
    was = k["pending"]
    k["pending"] += data
    if not was and k["pending"]:
        sel.register(k["p"].stdin, selectors.EVENT_WRITE, (i, b"i"))

def flush_stdin(i):
    k = kids[i]
    try:
        n = os.write(k["p"].stdin.fileno(), k["pending"][:1 << 16])
    except BlockingIOError:
        return
    except OSError:  # the child closed its stdin: what it did not read is dropped, as a pipe would
        k["pending"] = b""
        close_stdin(k)
        return
    k["pending"] = k["pending"][n:]
    if not k["pending"]:
        sel.unregister(k["p"].stdin)
        if k["eof"]:
            close_stdin(k)

def handle(i, kind, data):
    if kind == b"s":
        start(i, json.loads(data))
    elif kind == b"i":
        to_stdin(i, data)
    elif kind == b"c":
        k = kids.get(i)
        if k is not None:
            k["eof"] = True
            if not k["pending"]:
                close_stdin(k)
    elif kind == b"k":
        forget(i)

def wait():
    return 0.05 if any(k["open"] == 0 for k in kids.values()) else 1.0

def on_input(buf):
    while len(buf) >= HEAD.size:
        i, kind, n = HEAD.unpack_from(buf)
        if len(buf) < HEAD.size + n:
            break
        data, buf = buf[HEAD.size:HEAD.size + n], buf[HEAD.size + n:]
        handle(i, kind, data)
    return buf

def on_pipe(key):
    i, kind = key.data
    if i not in kids:
        return
    if kind == b"i":
        flush_stdin(i)
        return
    try:
        chunk = os.read(key.fileobj.fileno(), 1 << 16)
    except BlockingIOError:
        return
    if chunk:
        send(i, kind, chunk)
    else:
        sel.unregister(key.fileobj)
        kids[i]["open"] -= 1

def after(last_in):
    for i, k in list(kids.items()):
        if k["open"] == 0 and k["p"].poll() is not None:
            code = k["p"].returncode
            forget(i)
            send(i, b"x", str(128 - code if code < 0 else code).encode())
    return not kids and time.monotonic() - last_in > SILENCE

def forget_all():
    for i in list(kids):
        forget(i)

run(lambda: serve(lambda: send(0, b"r", str(os.getpid()).encode()), on_input, on_pipe, after, wait, 1 << 18), forget_all)
'''

FRAMES = Frames(">IcI")  # stream id, kind, length (the MUX program's HEAD)


class Mux(Link):
    """The controller's side of one host's mux: `open_stream(argv)` as a transport's, over one stream.

    One reader thread feeds every stream; each holds a bounded buffer (remote.transport.framing), so a
    stream whose consumer stops reading holds that reader, and with it the host's other streams, until it
    reads again or is closed, as one SSH channel's window would: its consumers (the agents' readers,
    `run`) read all the time."""

    noun = "mux"

    def __init__(self, stream, where: str, *, handshake_timeout: float = HANDSHAKE_TIMEOUT):
        super().__init__(stream, where)
        self._streams: dict[int, MuxStream] = {}
        self._next = 1
        self._lock = threading.Lock()  # ids, the streams' map, `dead`
        self._write_lock = threading.Lock()  # frames go out whole; a write blocked on a dead link holds only this
        self._start("the host's stream mux", handshake_timeout)

    def _read_frames(self) -> None:
        i, kind, _ = FRAMES.read(self.stream)
        self._ready.put(None if (i, kind) == (0, b"r") else f"unexpected first frame {kind!r}")
        while True:
            i, kind, data = FRAMES.read(self.stream)
            s = self._streams.get(i)
            if s is not None:
                s._frame(kind, data)

    def _lost(self, reason: str) -> None:
        with self._lock:
            if self.dead is not None:
                return
            self.dead = reason
            streams = list(self._streams.values())
        self._ready.put(reason)
        for s in streams:
            s._frame(b"x", b"-1")
        try:
            self.stream.close()
        except Exception:  # closing what is already broken: nothing more to do
            pass

    def _send(self, i: int, kind: bytes, data: bytes = b"") -> None:
        if self.dead is not None:
            raise ConnectError(self.where, f"{self.where}: mux gone: {self.dead}")
        try:
            with self._write_lock:
                self.stream.write(FRAMES.pack(i, kind, data=data))
        except Exception as exc:
            self._lost(f"cannot write to the mux: {exc or type(exc).__name__}")
            raise ConnectError(self.where, f"{self.where}: mux gone: {self.dead}") from exc

    def open_stream(self, argv) -> MuxStream:
        """Start argv on the host (no shell, the mux's environment) with its stdin and stdout as a Stream."""
        with self._lock:
            i, self._next = self._next, self._next + 1
            s = self._streams[i] = MuxStream(self, i)
        try:
            self._send(i, b"s", json.dumps(list(argv)).encode())
        except ConnectError as exc:  # its start never reached the mux: nothing ran
            self._streams.pop(i, None)
            raise NotStarted(self.where, str(exc)) from exc
        return s

    def run(self, argv, *, deadline: float | None = None) -> Result:
        """A host command through the mux, collected as a transport's `run` does (read as it comes)."""
        start = time.monotonic()
        s = self.open_stream(argv)
        out = bytearray()
        try:
            s.close_stdin()
            left = lambda: None if deadline is None else deadline - (time.monotonic() - start)  # noqa: E731
            while chunk := s.read(CHUNK, timeout=left()):
                out += chunk
            code = s.wait(left())
        finally:
            s.close()
        if code == -1 and not s.started:
            raise NotStarted(self.where, f"{self.where}: the mux was lost before {argv[0]} started: {self.dead}")
        if code == -1:
            raise ConnectError(self.where, f"{self.where}: connection lost while running {argv[0]} (it may have "
                               f"run: it is not run again by itself): {self.dead}")
        return Result(tuple(argv), code, bytes(out), bytes(s._err), time.monotonic() - start)

    def close(self) -> None:
        self._lost("closed")


class MuxStream(BoundedStream):
    """One child of the mux as a Stream (remote.transport.Stream): what it writes is held here, bounded,
    until read."""

    def __init__(self, mux: Mux, i: int):
        super().__init__(mux.where)
        self.mux, self.i = mux, i
        self.started = False  # the mux said the child started (or it wrote, or ended)

    def _frame(self, kind: bytes, data: bytes) -> None:
        if kind != b"x" or data != b"-1":
            self.started = True  # any frame of the child's own: it ran
        if kind == b"a":
            return
        if kind == b"o":
            self.feed(data)
        elif kind == b"e":
            self.feed_err(data)
        elif kind == b"x" and self.finish(int(data)):
            self.mux._streams.pop(self.i, None)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(view), CHUNK):
            self.mux._send(self.i, b"i", bytes(view[start:start + CHUNK]))

    def close_stdin(self) -> None:
        try:
            self.mux._send(self.i, b"c")
        except ConnectError:
            pass

    def error_text(self) -> str:
        text = super().error_text()
        if self._code == -1 and self.mux.dead and self.mux.dead != "closed":
            text = f"{text}\n{self.mux.dead}".strip()
        return text

    def alive(self) -> bool:
        return super().alive() and self.mux.alive()

    def close(self) -> bool:
        if not super().close():
            return False
        if self._code is None:
            try:
                self.mux._send(self.i, b"k")
            except ConnectError:
                pass
        self.mux._streams.pop(self.i, None)
        return True
