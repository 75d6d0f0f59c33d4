"""Commands and files: a finished command, a push or pull verified."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from ..errors import CommandError

# -- commands ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    """A finished command: its argv, its own exit status and output (bytes, exactly as it wrote them)."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def out(self) -> str:
        return self.text

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def check(self, where: str = "") -> Result:
        """Raise CommandError unless the command succeeded."""
        if self.exit_code != 0:
            raise CommandError(shlex.join(self.argv), self.exit_code, self.err, where)
        return self


# -- files -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """A push or pull: what arrived, verified by sha256 (a file's hash, a tree's manifest)."""

    direction: str  # "push" | "pull"
    src: str
    dest: str
    files: int
    bytes: int  # of file content now at the destination
    seconds: float
    attempts: int = 1
    sha256: str | None = None  # of a single file
    refused: tuple[str, ...] = ()  # members of a pulled tree not written, each "<path>: <why>"
    verified: bool = True  # always: a transfer that does not verify raises TransferError
    kind: Literal["file", "tree"] = "file"
    sent: int = 0  # bytes of file content that travelled this time (less than `bytes` after a resume)
    resumed_from: int = 0  # the byte a resumed file transfer started at

    @property
    def mb_per_s(self) -> float:
        return self.sent / 1e6 / self.seconds if self.seconds > 0 else 0.0
