"""The transfer scripts' streams: each runs in a `pct exec` of its own, under a watch that takes a stall
as a lost link; a lost link is retried (each attempt resumes what the last left); the scripts' exit
status and their small outputs."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import CommandTimeout, ConnectError, TransferError
from ...naming import printable
from ...shell import load
from ...threads import ContextThread
from ...transport.pct import Container

if TYPE_CHECKING:
    from ...results import Transfer

log = logging.getLogger("remote.ops.files")

CHUNK = 1 << 20
PARTIAL = ".partial"  # suffix of the file or staging folder beside a destination
STALL = 60.0  # seconds in which a push writes nothing, or a pull reads nothing: stalled, taken as a lost link (and retried)
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


def retrying(attempt: Callable[[], Transfer], attempts: int, sleep) -> Transfer:
    """Run a transfer again after a lost connection (each attempt resumes what the last one left)."""
    import dataclasses

    import tenacity

    retry = tenacity.Retrying(retry=tenacity.retry_if_exception_type(ConnectError),
                              stop=tenacity.stop_after_attempt(max(1, attempts)),
                              wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=10),
                              before_sleep=tenacity.before_sleep_log(log, logging.WARNING), sleep=sleep, reraise=True)
    for n, state in enumerate(retry, 1):
        with state:
            stats = attempt()
        outcome = state.retry_state.outcome  # set when the `with` ends
        if outcome is not None and not outcome.failed:
            return dataclasses.replace(stats, attempts=n)
    raise AssertionError("unreachable")


PROBE_LINE = re.compile(r"([fdno]) (\d{1,20}) ([0-9a-f]{64}|-)")


def probe(ct: Container, *pairs: str | int) -> list[str]:
    """xfer_probe.sh for (path, prefix) pairs: [kind, size, sha, kind, size, sha, ...]. An answer that is not
    one well-formed line per pair (the container said something else) is a TransportError, not an IndexError."""
    out = ct.script(load("xfer_probe"), *map(str, pairs), timeout=600, mutates=False).out
    lines = out.splitlines()
    if len(lines) != len(pairs) // 2 or not all(PROBE_LINE.fullmatch(line) for line in lines):
        raise TransferError(f"{ct.where}: the transfer's probe of {pairs[0]} answered "
                             f"{printable(out[:200])!r}, not what xfer_probe.sh prints: is bash there, and the path's "
                             "folder readable?")
    return out.split()


class Watched:
    """A stream under a watch: when no byte is written or read for `limit` seconds (the far side stopped
    reading or sending, over a link that still answers heartbeats or one that never says it is gone), or the
    deadline set by `allow` passes, the stream is closed, so that the blocked write or read ends and the
    retry starts."""

    def __init__(self, stream, limit: float | None):
        import threading

        self.stream, self.limit, self.stalled = stream, limit, False
        self.last = time.monotonic()
        self._done = threading.Event()
        ContextThread(target=self._watch, daemon=True, name="transfer-stall-watch").start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            if self.limit is not None and time.monotonic() - self.last > self.limit:
                self.stalled = True
                log.warning("nothing moved for %gs: the transfer is stalled; closing its stream", self.limit)
                self.stream.close()
                return

    def allow(self, seconds: float | None) -> None:
        """From now on, `seconds` in all (None: no bound) before the stream is taken as stalled."""
        self.last, self.limit = time.monotonic(), seconds

    def done(self) -> None:
        self._done.set()

    def write(self, data: bytes) -> None:
        self.stream.write(data)
        self.last = time.monotonic()

    def read(self, n: int) -> bytes:
        chunk = self.stream.read(n)
        if chunk:
            self.last = time.monotonic()
        return chunk

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_stream(ct: Container, script: str, *args: str, send=None, receive=None, stall: float | None = None,
                wait: float | None = None) -> tuple[int, str]:
    """Run a transfer script: `send(stream)` writes stdin, `receive(stream)` reads stdout; (exit status, stderr).

    Nothing written for `stall` seconds while sending, or after it nothing read for `wait` seconds (no
    output, no exit status), is a lost link (ConnectError: the caller's retry resumes), even where the link never says so."""
    raw = ct.open_stream(load(script), *args)
    stream = Watched(raw, stall)

    def lost(what: str) -> ConnectError:
        why = (f"nothing moved for {stream.limit:g}s" if stream.stalled else "connection lost")
        return ConnectError(ct.transport.name, f"{ct.where}: {why} during {script} ({what}); taken as a lost link")

    try:
        if send is not None:
            try:
                send(stream)
            except ConnectError:
                if stream.stalled:
                    raise lost("sending") from None
                # The script may have ended early (a full disk, a bad path): then its status says why.
                code = _exit_status(raw)
                if code in (None, -1, 0):
                    raise
                return code, raw.error_text()
        stream.allow(wait)
        raw.close_stdin()
        if receive is not None:
            try:
                receive(stream)
            except (ConnectError, TransferError):
                if stream.stalled:
                    raise lost("receiving") from None
                raise
        if stream.stalled:
            raise lost("waiting for its result")
        code = raw.wait()
        if code == -1:
            raise lost("waiting for its exit status")
        return code, raw.error_text()
    finally:
        stream.done()
        raw.close()


def _exit_status(stream) -> int | None:
    try:
        return stream.wait(timeout=5)
    except CommandTimeout:
        return None


def check(ct: Container, script: str, code: int, err: str, what: str = "") -> None:
    """A transfer script that failed, as a TransferError: the script's own exit status (tar's 2 on a full
    disk, say) is its `command_status`, never remote's exit status."""
    if code != 0:
        tail = "\n".join(err.strip().splitlines()[-5:])
        raise TransferError(f"{ct.where}: {what or script} failed in the container ({script}.sh exited {code})"
                            + (f":\n{tail}" if tail else ""), command_status=code)


def read_all(stream, limit: int) -> bytes:
    data = bytearray()
    for chunk in iter(lambda: stream.read(65536), b""):
        data += chunk
        if len(data) > limit:
            raise TransferError(f"unexpected output from a transfer script: {bytes(data[:200])!r}")
    return bytes(data)


def read_line(stream, limit: int = 4096) -> bytes:
    """One line from a stream, read a byte at a time so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        c = stream.read(1)
        if not c or len(line) > limit:
            break
        line += c
    return bytes(line)
