"""The transport's contract: the Transport and Stream protocols every transport keeps, the Result a command
returns (remote.results'), and what every implementation shares (the argv check, the error a caller may retry).

remote.transport.local runs on this machine, remote.transport.ssh over one SSH connection; both are
importable from remote.transport as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..errors import ConnectError
from ..results import Result as Result  # the one definition (remote.results); transports return it

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


def _check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    argv = tuple(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"argv must be a non-empty sequence of str, got {argv!r}")
    if any("\0" in a for a in argv):
        raise ValueError("argv items cannot contain NUL bytes")
    return argv

