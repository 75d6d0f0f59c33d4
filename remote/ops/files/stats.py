"""A transfer's progress on the terminal, and sizes as people read them (what it moved: remote.results.Transfer)."""

from __future__ import annotations

import sys
import time

from ...naming import size


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
