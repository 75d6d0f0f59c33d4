"""The transport's contract: the Transport and Stream protocols every transport keeps, the Result a command
returns (remote.results'), and what every implementation shares (the argv check, the error a caller may retry).

remote.transport.local runs on this machine, remote.transport.ssh over one SSH connection; both are
importable from remote.transport as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..errors import ConnectError
from ..results import Result as Result  # the one definition (remote.results); transports return it

if TYPE_CHECKING:
    from ..config import Host

OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", chunk)


class NotStarted(ConnectError):
    """The connection was found gone before the command was sent: nothing ran, so it may be run again."""


class Transport(Protocol):
    """Runs an argv on one host, and declares what else it can do (its capabilities, as Ansible's connection
    plugins and pyinfra's connectors declare theirs): callers read these, never probe for a method.

    A host argv that runs a command in a container comes as an `InContainer` (its container and the command
    inside remote's wrappers): a transport may read those; it runs the argv as it is."""

    name: str
    kept: bool  # a kept connection (remote.transport.keeper): its keeper holds agents and remembers host facts
    login_shell: bool  # each command pays a new session and login shell: a host mux shares one (hostmux)
    can_stream: bool  # open_stream works (the in-container agent, transfers); else commands go through pct exec

    @property
    def host(self) -> Host | None:
        """The configured host it reaches (an error then names where its settings come from); None: a name only."""
        ...

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, deadline: float | None = None,
            on_output: OutputCallback | None = None) -> Result: ...

    def open_stream(self, argv: Sequence[str]) -> Stream:
        """Start argv with its stdin and stdout as byte streams (transfers, the in-container agent)."""
        ...

    def describe(self, argv: Sequence[str]) -> str:
        """The command line a person would type to do the same (for dry runs)."""
        ...

    def close(self) -> None: ...


class Capabilities:
    """What a transport declares where it says nothing: no kept connection, no login shell to share, no
    streams, no configured host. A transport subclasses it and sets what it differs in (a test double too)."""

    host: Host | None = None
    kept: bool = False
    login_shell: bool = False
    can_stream: bool = False


class InContainer(tuple):
    """A host argv that runs a command in a container (`pct exec ID -- env ... ARGV`), saying so: `ctid`
    and `inner` (ARGV, inside remote's env and timeout wrappers), from the pct Container that built it.
    A plain tuple to any transport that runs it; a test double (remote.testing.MockTransport) reads the
    two instead of taking the host's argv apart by position."""

    ctid: int
    inner: tuple[str, ...]

    def __new__(cls, argv: Sequence[str], ctid: int, inner: Sequence[str]) -> InContainer:
        made = super().__new__(cls, argv)
        made.ctid, made.inner = ctid, tuple(inner)
        return made


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

