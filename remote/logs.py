"""Reading a job's log: resumable following, carriage-return collapsing, throughput and crash signatures.

Following resumes by byte offset: the follower counts every byte it received, keeps a partial
last line in memory, and after a dropped connection asks for the log from that offset again,
so no line is lost or repeated. Line handling and the throughput/crash checks are pure
functions over text, tested as data.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from . import shell
from .errors import ConnectError, TransportError
from .pct import Container

# Throughput forms recognised when train.metric is not set: (pattern, factor to Ktok/s).
DEFAULT_METRICS = [
    (re.compile(r"([\d.]+)\s*K\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), 1.0),
    (re.compile(r"([\d.]+)\s*M\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), 1000.0),
    (re.compile(r"([\d.]+)\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), 0.001),
    (re.compile(r"tok(?:ens)?[_ ]?(?:per[_ ]sec(?:ond)?|/s)\s*[:=]\s*([\d.]+)", re.I), 0.001),
]

# Known failure texts: (pattern, name, what to do).
SIGNATURES = [
    (re.compile(r"Detected that you are using FX to symbolically trace a dynamo-optimized function"),
     "compile race",
     "threads compiled at once (torch <= 2.13 shares the FX-tracing flag): wrap each device's first step in "
     "remote_guard.CompileGuard and run `invoke warmup` (README: The compile race)"),
    (re.compile(r"flex_attention called without torch\.compile"), "flex_attention uncompiled",
     "flex_attention runs its unfused eager path (5-7x slower): a compile fell back to eager -- look for a "
     "compile race or a recompile, and keep error_on_nested_fx_trace on"),
    (re.compile(r"Detected recompile when torch\.compile stance is 'fail_on_recompile'"), "recompile after warmup",
     "something compiled after the guard sealed: a new shape or code path; make warmup run the exact training "
     "configuration, or raise the variants the guard allows"),
    (re.compile(r"attempted to recompile the code object too many times|hit config\.(recompile|cache_size)_limit"
                r"|FailOnRecompileLimitHit"), "recompile limit hit",
     "shapes or devices vary more than the recompile limit allows: keep shapes static (the guard does) or raise "
     "torch._dynamo.config.recompile_limit to devices x variants"),
    (re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"), "CUDA out of memory",
     "the GPU ran out of memory: check for a leftover job (`invoke status`, nvidia-smi), then reduce batch or "
     "sequence length"),
    (re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|NCCL timeout",
                re.I), "NCCL error",
     "a collective failed: rerun with NCCL_DEBUG=INFO in train.env; check that every GPU is visible and healthy"),
]


def compile_metric(pattern: str | None):
    return [(re.compile(pattern), 1.0)] if pattern else DEFAULT_METRICS


def parse_metric(line: str, metrics) -> float | None:
    """The throughput a line reports, in the metric's unit (Ktok/s for the defaults), or None."""
    for pattern, factor in metrics:
        for m in pattern.finditer(line):
            try:
                return float(m.group(1)) * factor
            except (ValueError, IndexError):
                continue
    return None


def match_signature(line: str) -> tuple[str, str] | None:
    for pattern, name, hint in SIGNATURES:
        if pattern.search(line):
            return name, hint
    return None


def collapse_cr(line: str) -> str:
    """A progress bar redrawn with carriage returns shows only its last state."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


class LineSplitter:
    """Bytes in, complete lines out; keeps the partial last line between chunks."""

    def __init__(self):
        self.pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return [collapse_cr(line.decode("utf-8", "replace")) for line in lines]

    def flush(self) -> list[str]:
        rest, self.pending = self.pending, b""
        return [collapse_cr(rest.decode("utf-8", "replace"))] if rest else []


@dataclass
class Watch:
    """Throughput against the baseline, and crash signatures, over a stream of lines."""

    metrics: list = field(default_factory=lambda: DEFAULT_METRICS)
    baseline: float | None = None
    tolerance: float = 0.2
    values: deque = field(default_factory=lambda: deque(maxlen=5))  # the rolling window
    last: float | None = None
    low: bool = False
    found: list = field(default_factory=list)  # (name, hint, line)

    @property
    def threshold(self) -> float | None:
        return None if self.baseline is None else self.baseline * (1 - self.tolerance)

    @property
    def rolling(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    def line(self, text: str) -> list[str]:
        """Notices (warnings, hints) that this line calls for."""
        notes = []
        sig = match_signature(text)
        if sig and sig[0] not in {f[0] for f in self.found}:
            self.found.append((*sig, text))
            notes.append(f"!! {sig[0]}: {sig[1]}")
        value = parse_metric(text, self.metrics)
        if value is not None:
            self.values.append(value)
            self.last = value
            if self.threshold is not None:
                if value < self.threshold and not self.low:
                    self.low = True
                    notes.append(f"!! throughput {value:g} is below {self.threshold:g} "
                                 f"(baseline {self.baseline:g} - {self.tolerance:.0%}): rolling {self.rolling:.2f}")
                elif value >= self.threshold and self.low:
                    self.low = False
                    notes.append(f"throughput recovered: {value:g} (baseline {self.baseline:g})")
        return notes

    def summary(self) -> str:
        if self.last is None:
            return "no throughput reported"
        base = f" vs baseline {self.baseline:g} ({self.rolling / self.baseline:.0%})" if self.baseline else ""
        return f"throughput last {self.last:g}, rolling {self.rolling:.2f}{base}"




def follow(ct: Container, run: str, *, offset: int = 0, on_bytes: Callable[[bytes], None],
           follow_: bool = True, slice_seconds: int = 300, reconnect: Callable[[], None] | None = None,
           max_reconnects: int = 20, sleep=time.sleep, echo=print) -> int:
    """Stream the log of `run` (a run folder) from byte `offset`; returns the final offset.

    With follow_, keeps streaming until the job's pid is gone; a dropped connection is
    re-established and streaming resumes at the byte where it stopped."""
    failures = 0
    while True:
        got = [0]

        def on_output(kind: str, chunk: bytes) -> None:
            if kind == "stdout":
                got[0] += len(chunk)
                on_bytes(chunk)

        try:
            r = ct.script(shell.load("follow"), f"{run}/log", str(offset), f"{run}/pid", str(slice_seconds if follow_ else 0),
                          on_output=on_output, check=False, mutates=False)
            offset += got[0]
            failures = 0
        except (ConnectError, TransportError) as exc:
            offset += got[0]
            failures += 1
            if failures > max_reconnects:
                raise
            echo(f"-- connection lost ({exc}); resuming at byte {offset}")
            sleep(min(5.0, 0.5 * failures))
            if reconnect:
                reconnect()
            continue
        if r.exit_code == 3:
            raise TransportError(ct.where, r.err.strip())
        if not follow_ or r.exit_code == 0:
            return offset  # tail exits 0 when the job's pid is gone (or when not following)
        # timeout (124): the slice ended while the job runs on; continue from the new offset
