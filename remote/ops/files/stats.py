"""What a push or pull moved, and its progress on the terminal."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from ...naming import printable


@dataclass(frozen=True)
class TransferStats:
    """What a push or pull moved."""

    direction: str  # "push" | "pull"
    kind: str  # "file" | "tree"
    src: str
    dest: str
    total: int  # bytes of file content now at the destination
    sent: int  # bytes of file content that travelled this time (less than total after a resume)
    files: int
    seconds: float
    resumed_from: int = 0
    attempts: int = 1
    sha256: str | None = None  # of a single file
    refused: tuple[str, ...] = ()  # members of a pulled tree not written, each "<path>: <why>"

    @property
    def mb_per_s(self) -> float:
        return self.sent / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def render(self) -> str:
        what = f"{self.files} file(s)" if self.kind == "tree" else "1 file"
        resumed = f", resumed at {size(self.resumed_from)}" if self.resumed_from else ""
        tries = f", {self.attempts} attempts" if self.attempts > 1 else ""
        text = printable(f"{self.direction}ed {what}, {size(self.total)}, {self.src} -> {self.dest} in "
                         f"{self.seconds:.1f}s ({self.mb_per_s:.1f} MB/s{resumed}{tries}), verified by sha256")
        if self.refused:  # the container's member names and link targets: one line each, escapes shown
            text += f"\n{len(self.refused)} refused (not written):\n" + "\n".join(f"  {printable(r)}" for r in self.refused)
        return text


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class ProgressPrinter:
    """Progress on stderr: bytes/total, percent and MB/s, at most every `every` seconds (one line when not a tty)."""

    def __init__(self, label: str, stream=None, every: float | None = None, clock=time.monotonic):
        self.label, self.stream, self.clock = label, stream or sys.stderr, clock
        self.tty = self.stream.isatty()
        self.every = every if every is not None else (0.5 if self.tty else 5.0)
        self.start = self.last = clock()
        self.finished = False

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.finished or (now - self.last < self.every and done < total):
            return
        self.last, self.finished = now, done >= total
        rate = done / 1e6 / max(now - self.start, 1e-6)
        pct = f" {100 * done / total:3.0f}%" if total else ""
        line = f"{self.label}: {size(done)} / {size(total)}{pct}  {rate:.1f} MB/s"
        self.stream.write(("\r" + line + ("\n" if done >= total else "")) if self.tty else line + "\n")
        self.stream.flush()
