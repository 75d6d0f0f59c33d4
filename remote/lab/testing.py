"""FakeTransport: a scripted transport for unit tests. It raises on any command it was not told to expect."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..transport import Result


@dataclass
class Expect:
    """One expected command: `match` is an exact argv, or a predicate over it."""

    match: Sequence[str] | Callable[[tuple[str, ...]], bool]
    exit_code: int = 0
    stdout: bytes | str = b""
    stderr: bytes | str = b""
    raises: BaseException | None = None

    def matches(self, argv: tuple[str, ...]) -> bool:
        return self.match(argv) if callable(self.match) else tuple(self.match) == argv


@dataclass
class FakeTransport:
    expected: list[Expect] = field(default_factory=list)
    name: str = "fake"
    calls: list[tuple[tuple[str, ...], bytes | None]] = field(default_factory=list)

    def describe(self, argv) -> str:
        return "fake: " + shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = tuple(argv)
        self.calls.append((argv, stdin))
        if not self.expected:
            raise AssertionError(f"unexpected command: {shlex.join(argv)}")
        exp = self.expected.pop(0)
        if not exp.matches(argv):
            raise AssertionError(f"expected {exp.match!r}, got: {shlex.join(argv)}")
        if exp.raises:
            raise exp.raises
        out = exp.stdout.encode() if isinstance(exp.stdout, str) else exp.stdout
        err = exp.stderr.encode() if isinstance(exp.stderr, str) else exp.stderr
        if on_output:
            if out:
                on_output("stdout", out)
            if err:
                on_output("stderr", err)
        return Result(argv, exp.exit_code, out, err, 0.0)

    def open_stream(self, argv) -> FakeStream:
        """The next expected command as a stream: its stdout to read, what is written kept in `.written`."""
        result = self.run(argv)
        return FakeStream(result.stdout, result.stderr, result.exit_code)

    def close(self) -> None:
        pass

    def assert_done(self) -> None:
        assert not self.expected, f"commands expected but never run: {[e.match for e in self.expected]}"


def inner_argv(argv: Sequence[str], timed: bool | None = None) -> tuple[str, ...]:
    """The container-side argv of a `pct exec ... -- env ... <argv>` command (wrappers removed).

    `timed` says whether a `timeout -k G T` wrapper is there; None guesses from the text, which a
    command that is itself `timeout -k ...` would fool."""
    argv = list(argv)
    rest = argv[argv.index("--") + 1:]
    assert rest[:2] == ["env", "-C"], rest
    i = 3
    while "=" in rest[i]:
        i += 1
    if timed if timed is not None else rest[i:i + 2] == ["timeout", "-k"]:
        i += 4
    return tuple(rest[i:])


class FakeStream:
    """A finished command's output served as a Stream."""

    def __init__(self, stdout: bytes, stderr: bytes = b"", exit_code: int = 0):
        self._out, self._err, self._code = bytearray(stdout), stderr, exit_code
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def read(self, n: int) -> bytes:
        chunk = bytes(self._out[:n])
        del self._out[:n]
        return chunk

    def close_stdin(self) -> None:
        pass

    def wait(self, timeout=None) -> int:
        return self._code

    def error_text(self) -> str:
        return self._err.decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True
