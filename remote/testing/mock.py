"""MockTransport: every host's transport answered by a handler (remote.testing re-exports it)."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..config import Host
from ..errors import TransportError
from ..results import Result
from ..transport.base import OutputCallback, Stream

__all__ = ["Command", "Handler", "MockTransport", "Reply"]


@dataclass(frozen=True)
class Command:
    """One command a fleet ran on a host."""

    host: str  # the host's name in the hosts file
    argv: tuple[str, ...]  # exactly what the host runs (`pct exec 200 -- env ... python train.py`)
    stdin: bytes | None  # what was fed to it (None: nothing)
    container: int | None = None  # the container of a `pct exec` (None: a command on the host itself)
    inner: tuple[str, ...] = ()  # the command inside the container, remote's wrappers taken off (argv: on the host)


@dataclass(frozen=True)
class Reply:
    """What a mocked command answers: its output and exit status (text is sent as UTF-8)."""

    stdout: str | bytes = b""
    stderr: str | bytes = b""
    status: int = 0


Handler = Callable[[Command], Reply]


class MockTransport:
    """Every host's transport, answered by `handler`; `calls` holds each Command in the order they ran.
    Pass it as `remote.open(..., transport=mock)`."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.calls: list[Command] = []
        self._lock = threading.Lock()  # a group's containers run at once

    def __call__(self, host: Host) -> _HostTransport:
        """The transport of one host (what a session asks for, once per host)."""
        return _HostTransport(self, host.name)

    def _answer(self, command: Command) -> Reply:
        with self._lock:
            self.calls.append(command)
        reply = self.handler(command)
        if not isinstance(reply, Reply):
            where = f"container {command.container}" if command.container is not None else f"host {command.host}"
            raise TypeError(f"MockTransport's handler returned {type(reply).__name__} for `{shlex.join(command.inner)}` "
                            f"on {where}: return a remote.testing.Reply")
        return reply


@dataclass
class _HostTransport:
    """One host's side of a MockTransport (remote.transport.Transport)."""

    mock: MockTransport
    name: str
    closed: bool = field(default=False)

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None, deadline: float | None = None,
            on_output: OutputCallback | None = None) -> Result:
        args = tuple(argv)
        container, inner = _inside(args)
        reply = self.mock._answer(Command(self.name, args, stdin, container, inner))
        out, err = _bytes(reply.stdout), _bytes(reply.stderr)
        if on_output is not None:
            if out:
                on_output("stdout", out)
            if err:
                on_output("stderr", err)
        return Result(args, reply.status, out, err, 0.0)

    def open_stream(self, argv: Sequence[str]) -> Stream:
        raise TransportError(self.name, f"{self.name}: MockTransport mocks commands, not streams "
                                        f"(file transfers, the in-container agent): {shlex.join(argv)}")

    def describe(self, argv: Sequence[str]) -> str:
        return shlex.join(argv)

    def close(self) -> None:
        self.closed = True


def _bytes(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


def _inside(argv: tuple[str, ...]) -> tuple[int | None, tuple[str, ...]]:
    """A `[sudo -n] pct exec ID [--keep-env 0] -- ...` command's container and the command inside it, with
    remote's wrappers taken off: `env [-C DIR] NAME=VALUE...`, `timeout -k G T`, the job's `bash -c SCRIPT
    jobexec VENV CHECKOUT SHIPPED MARK` (remote/sh/jobexec.sh). Any other command: (None, argv)."""
    for i in range(len(argv) - 2):
        if argv[i].rsplit("/", 1)[-1] == "pct" and argv[i + 1] == "exec" and argv[i + 2].isdigit() and "--" in argv[i:]:
            rest = list(argv[argv.index("--", i) + 1:])
            break
    else:
        return None, argv
    if rest[:1] == ["env"]:
        rest = rest[1:]
        if rest[:1] == ["-C"]:
            rest = rest[2:]
        while rest and "=" in rest[0] and not rest[0].startswith("="):
            rest = rest[1:]
    if rest[:2] == ["timeout", "-k"]:
        rest = rest[4:]
    if rest[:2] == ["bash", "-c"] and rest[3:4] == ["jobexec"]:
        rest = rest[8:]
    return int(argv[i + 2]), tuple(rest)
