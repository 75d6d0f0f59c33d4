"""The framing the three hand-written protocols share (the in-container agent, the host's stream mux and
the kept connection's socket), and the bounded stream their receiving sides are built on.

A frame is a fixed header (struct fields, the last one the payload's length) and then the payload:
the agent's is `>I` (the length alone; the payload is JSON), the mux's `>IcI` (stream id, kind,
length), the keeper's `>cI` (kind, length). `Frames(format)` packs and reads them; `read_exact` reads
exactly n bytes from anything with `read(n)` (a Stream) or `recv(n)` (a socket).

`BoundedStream` is what a reader thread fills and a consumer drains: a command's stdout, a bounded tail
of its stderr, and its exit status. It holds at most `limit` bytes of stdout (plus one frame): a reader
thread that would go beyond waits until the consumer has read, so it stops reading its own source, and the
push back reaches the sender (the keeper's socket fills, then its SSH channel's window): a slow reader
never has a stream held whole in this process.

Two of the protocols run a helper program at the far end (AGENT in a container, MUX on a host): both
programs start with SERVE, the loop they share, and `Link` is the controller's side both build on.
"""

from __future__ import annotations

import queue
import struct
import threading
import time
from collections.abc import Callable

from ..errors import CommandTimeout, ConnectError

STDERR_TAIL = 1 << 16  # bytes of a stream's stderr kept for messages
BUFFER_LIMIT = 4 << 20  # stdout bytes a BoundedStream holds before its reader waits for the consumer


# The start of both helper programs' text (python3 -I -S -c, stdlib only). `serve` reads stdin into
# `on_input(buf) -> what it left` (a part frame), hands a ready child's pipe to `on_pipe(key)`, and
# after each wake calls `after(last_in)` (when stdin last said anything), which tends the children and
# says whether to end; it ends at stdin's EOF too. `run` ends quietly when the controller is gone and
# always calls `cleanup`. SILENCE is the program's first argument.
SERVE = r'''
import os, selectors, signal, sys, time
SILENCE = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
sel = selectors.DefaultSelector()

class Gone(Exception):
    pass

def serve(hello, on_input, on_pipe, after, wait, size):
    os.set_blocking(0, False)
    os.set_blocking(1, False)
    sel.register(0, selectors.EVENT_READ, None)
    buf = b""
    last_in = time.monotonic()
    hello()
    while True:
        for key, _ in sel.select(wait()):
            if key.data is None:
                try:
                    chunk = os.read(0, size)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                last_in = time.monotonic()
                buf = on_input(buf + chunk)
                continue
            on_pipe(key)
        if after(last_in):
            return

def run(main, cleanup):
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        main()
    except (OSError, Gone):
        pass  # stdout closed (EPIPE) or stalled: the controller is gone
    finally:
        cleanup()
'''


def read_exact(source, n: int) -> bytes:
    """Exactly n bytes from `source` (a Stream's `read` or a socket's `recv`); EOFError at its end."""
    read: Callable[[int], bytes] = source.read if hasattr(source, "read") else source.recv
    data = bytearray()
    while len(data) < n:
        chunk = read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


class Frames:
    """One protocol's frames: `pack(*fields, data)` and `read(source) -> (*fields, payload)`."""

    def __init__(self, head: str):
        self.head = struct.Struct(head)

    def pack(self, *fields, data: bytes = b"") -> bytes:
        return self.head.pack(*fields, len(data)) + data

    def read(self, source) -> tuple:
        *fields, n = self.head.unpack(read_exact(source, self.head.size))
        return (*fields, read_exact(source, n))


class BoundedStream:
    """The receiving half of a relayed command (remote.transport.Stream without `write`/`close_stdin`,
    which the protocol's subclass adds): `feed`/`feed_err`/`finish` from the reader thread, `read`/`wait`
    from the consumer. `buffered` is what is held now; it never exceeds `limit` plus one frame."""

    def __init__(self, where: str, limit: int = BUFFER_LIMIT):
        self.where, self.limit = where, limit
        self._buf = bytearray()
        self._err = bytearray()
        self._code: int | None = None
        self._closed = False
        self._cond = threading.Condition()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    # -- the reader thread's side ------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Hold stdout bytes for the consumer; waits while `limit` is held (dropped once closed or ended)."""
        with self._cond:
            while len(self._buf) >= self.limit and not self._closed and self._code is None:
                self._cond.wait()
            if not self._closed and self._code is None:
                self._buf += data
            self._cond.notify_all()

    def feed_err(self, data: bytes) -> None:
        with self._cond:
            self._err += data
            del self._err[:-STDERR_TAIL]
            self._cond.notify_all()

    def finish(self, code: int) -> bool:
        """The exit status (-1: the link was lost first); False if one was already there."""
        with self._cond:
            if self._code is not None:
                return False
            self._code = code
            self._cond.notify_all()
            return True

    # -- the consumer's side -----------------------------------------------------------------------
    def read(self, n: int, timeout: float | None = None) -> bytes:
        """Up to n bytes of stdout; b"" once the command ended (or the stream was closed) and all was read."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._buf and self._code is None and not self._closed:
                left = None if end is None else end - time.monotonic()
                if timeout is not None and left is not None and left <= 0:
                    raise CommandTimeout("stream", timeout, self.error_text(), self.where)
                self._cond.wait(left)
            chunk = bytes(self._buf[:n])
            del self._buf[:n]
            self._cond.notify_all()  # room again: the reader goes on
            return chunk

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; -1 when the link was lost first. Read stdout to its end first: a reader
        held by a full buffer cannot bring the status."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._code is None:
                left = None if end is None else end - time.monotonic()
                if timeout is not None and left is not None and left <= 0:
                    raise CommandTimeout("stream", timeout, self.error_text(), self.where)
                self._cond.wait(left)
            return self._code

    def error_text(self) -> str:
        return bytes(self._err).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return not self._closed and self._code is None

    def close(self) -> bool:
        """Stop holding anything (a reader waiting for room goes on, dropping); False if already closed."""
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._buf.clear()
            self._cond.notify_all()
            return True


class Link:
    """The controller's side of a helper program answering in frames over one stream (the agent, the host's
    stream mux): `_start` runs the reader thread and waits for the program's first frame; a stream that
    fails or ends makes the link `dead` (why) through the subclass's `_lost`, which wakes its callers."""

    noun = "link"  # in messages and thread names: "agent stream ended (EOFError)", "agent-pve1/200"

    def __init__(self, stream, where: str):
        self.stream, self.where = stream, where
        self.dead: str | None = None
        self._ready: queue.Queue = queue.Queue()  # the handshake: None (ready), or why not

    def _start(self, what: str, timeout: float) -> None:
        """Start the reader and wait for the handshake; without one, the link is lost and ConnectError says
        that `what` did not start."""
        threading.Thread(target=self._reader, daemon=True, name=f"{self.noun}-{self.where}").start()
        try:
            first = self._ready.get(timeout=timeout)
        except queue.Empty:
            first = f"no answer in {timeout:g}s"
        if first is not None:
            self._lost(first)
            raise ConnectError(self.where, f"{self.where}: {what} did not start: {first}")

    def _reader(self) -> None:
        try:
            self._read_frames()
        except Exception as exc:  # EOF, a lost connection, a garbled frame: the program is gone either way
            try:
                text = self.stream.error_text()
            except Exception:
                text = ""
            self._lost(text or f"{self.noun} stream ended ({type(exc).__name__})")

    def _read_frames(self) -> None:
        """Read frames until the stream fails (it raises); the first one answers `_ready`."""
        raise NotImplementedError

    def _lost(self, reason: str) -> None:
        """Declare the link dead (once) with `reason`, wake whoever waits on it, close the stream."""
        raise NotImplementedError

    def alive(self) -> bool:
        if self.dead:
            return False
        try:
            return bool(self.stream.alive())
        except Exception:
            return False
