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
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable

from ..errors import CommandTimeout

STDERR_TAIL = 1 << 16  # bytes of a stream's stderr kept for messages
BUFFER_LIMIT = 4 << 20  # stdout bytes a BoundedStream holds before its reader waits for the consumer


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
