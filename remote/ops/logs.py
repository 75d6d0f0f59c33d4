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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .. import shell
from ..errors import ConnectError, TransportError
from ..naming import json_loads
from ..results import Metric
from ..transport.pct import Container


@dataclass(frozen=True)
class SpeedPattern:
    """A speed that a log line reports: group 1 of `pattern` (inverted first with `invert`, for a time per
    iteration shown as a rate), times `scale`, in `unit`. Plain data, so the stall watch in the container
    (remote/sh/watch.py) reads the same values from the same lines."""

    pattern: re.Pattern
    unit: str | None = None
    higher_is_better: bool = True
    scale: float = 1.0
    invert: bool = False

    def parse(self, line: str) -> float | None:
        for m in self.pattern.finditer(line):
            try:
                value = float(m.group(1))
                value = (1 / value if self.invert else value) * self.scale
            except (ValueError, IndexError, ZeroDivisionError):
                continue
            return value
        return None

    def describe(self) -> dict:
        return {"pattern": self.pattern.pattern, "flags": int(self.pattern.flags & re.I), "unit": self.unit,
                "scale": self.scale, "invert": self.invert}


# The forms recognised when train.metric is not set. Each keeps the unit the log prints (train.baseline
# is in that unit: a log of "12000 tok/s" has a baseline like 12000); tqdm's s/it (which it prints
# instead of it/s when an iteration takes over a second) is shown as it/s, so one run keeps one unit
# and one direction.
BUILTIN_METRICS = [
    SpeedPattern(re.compile(r"([\d.]+)\s*K\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), "Ktok/s"),
    SpeedPattern(re.compile(r"([\d.]+)\s*M\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), "Mtok/s"),
    SpeedPattern(re.compile(r"([\d.]+)\s*tok(?:ens)?\s*/\s*s(?:ec)?\b", re.I), "tok/s"),
    SpeedPattern(re.compile(r"tok(?:ens)?[_ ]?(?:per[_ ]sec(?:ond)?|/s)\s*[:=]\s*([\d.]+)", re.I), "tok/s"),
    SpeedPattern(re.compile(r"([\d.]+)\s*samples?\s*/\s*s(?:ec)?\b", re.I), "samples/s"),
    SpeedPattern(re.compile(r"(?<![\w.])([\d.]+)\s*it/s\b"), "it/s"),
    SpeedPattern(re.compile(r"(?<![\w.])([\d.]+)\s*s/it\b"), "it/s", invert=True),
]


def compile_metric(spec) -> list[SpeedPattern]:
    """The metrics to look for: the configured one (a MetricSpec), or the built-in forms."""
    if spec is None:
        return BUILTIN_METRICS
    return [SpeedPattern(re.compile(spec.pattern), spec.unit, spec.higher_is_better)]


def parse_metric(line: str, metrics) -> float | None:
    """The speed a line reports, in its metric's unit (Ktok/s for token rates), or None."""
    for metric in metrics:
        value = metric.parse(line)
        if value is not None:
            return value
    return None


def fmt(value: float | None, unit: str | None) -> str:
    if value is None:
        return "none"
    text = f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"  # 12000 tok/s, not 1.2e+04
    return text + (f" {unit}" if unit else "")


# Known failure texts: (pattern, name, what to do), first match wins; the patterns are compiled once, below.
_KNOWN_FAILURES = [
    (r"Detected that you are using FX to symbolically trace a dynamo-optimized function", "compile race",
     "threads compiled at once (torch <= 2.13 shares the FX-tracing flag): wrap each device's first step in "
     "remote_guard.CompileGuard and run `remote warmup` (docs/internals/compile-race.md)"),
    (r"flex_attention called without torch\.compile", "flex_attention uncompiled",
     "flex_attention runs its unfused eager path (5-7x slower): a compile fell back to eager -- look for a "
     "compile race or a recompile, and keep error_on_nested_fx_trace on"),
    (r"Detected recompile when torch\.compile stance is 'fail_on_recompile'", "recompile after warmup",
     "something compiled after the guard sealed: a new shape or code path; make warmup run the exact training "
     "configuration, or raise the variants the guard allows"),
    (r"attempted to recompile the code object too many times|hit config\.(recompile|cache_size)_limit"
     r"|FailOnRecompileLimitHit", "recompile limit hit",
     "shapes or devices vary more than the recompile limit allows: keep shapes static (the guard does) or raise "
     "torch._dynamo.config.recompile_limit to devices x variants"),
    (r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory", "CUDA out of memory",
     "the GPU ran out of memory: check for a leftover job (`remote status`, nvidia-smi), then reduce batch or "
     "sequence length"),
    (r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError", "a torchrun rank failed",
     "one rank died and torchrun stopped the others: the lines marked with that rank say why (exitcode -9 is a "
     "SIGKILL, often the kernel's OOM killer; see `Root Cause` above)"),
    (r"(?i)NCCL (error|WARN)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|NCCL timeout", "NCCL error",
     "a collective failed: rerun with NCCL_DEBUG=INFO in train.env; check that every GPU is visible and healthy"),
]
SIGNATURES = [(re.compile(pattern), name, hint) for pattern, name, hint in _KNOWN_FAILURES]


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


PENDING_MAX = 1 << 20  # bytes of an unfinished line kept (the watch's cap too, remote/sh/watch.py)


class LineSplitter:
    """Bytes in, complete lines out; keeps the partial last line between chunks, bounded: of a line that
    only redraws a progress bar (`\r` without `\n`, for hours) only the latest redraw is kept, and of a
    line without either, its last PENDING_MAX bytes; so following costs the same however long it runs."""

    def __init__(self, limit: int = PENDING_MAX):
        self.pending = b""
        self.limit = limit

    def feed(self, chunk: bytes) -> list[str]:
        *lines, rest = (self.pending + chunk).split(b"\n")
        cut = rest.rstrip(b"\r").rfind(b"\r")
        if cut > 0:  # earlier redraws of the same line: only the last one is ever shown (collapse_cr)
            rest = rest[cut:]
        self.pending = rest if len(rest) <= self.limit else rest[-self.limit:]
        return [collapse_cr(line.decode("utf-8", "replace")) for line in lines]

    def flush(self) -> list[str]:
        rest, self.pending = self.pending, b""
        return [collapse_cr(rest.decode("utf-8", "replace"))] if rest else []


@dataclass(frozen=True)
class Notice:
    """What a line of a run's log calls for (Watch.notices)."""

    text: str  # a crash signature's hint, or the words of the notice
    warning: bool
    signature: str | None = None  # the crash signature's name (logs.SIGNATURES), where it is one
    # No line of its own: whoever shows it words it (jobs.show_log: t.warn for a warning, t.output otherwise).


@dataclass
class Watch:
    """The run's speed against the baseline, and crash signatures, over a stream of lines.

    The first metric that matches fixes the unit and direction for the run; a lower-is-better metric
    (a time per iteration) is slow when it rises above baseline x (1 + tolerance)."""

    metrics: list = field(default_factory=lambda: BUILTIN_METRICS)
    baseline: float | None = None
    tolerance: float = 0.2
    values: deque = field(default_factory=lambda: deque(maxlen=5))  # the rolling window
    last: float | None = None
    low: bool = False  # currently slower than the threshold ("low" speed, whatever the direction)
    metric: SpeedPattern | None = None
    found: list = field(default_factory=list)  # (name, hint, line)
    first: float | None = None  # the first value: its step includes the first compile, so it is not steady
    seen: int = 0  # metric values read

    @property
    def unit(self) -> str | None:
        return self.metric.unit if self.metric else None

    @property
    def higher_is_better(self) -> bool:
        return self.metric.higher_is_better if self.metric else True

    @property
    def threshold(self) -> float | None:
        if self.baseline is None:
            return None
        return self.baseline * (1 - self.tolerance if self.higher_is_better else 1 + self.tolerance)

    @property
    def rolling(self) -> float | None:
        """The mean of the last few values from the first steady step on (the first value left out); the
        first value alone where the log has only one."""
        if not self.values:
            return self.first
        return sum(self.values) / len(self.values)

    def slow(self, value: float) -> bool:
        t = self.threshold
        return t is not None and (value < t if self.higher_is_better else value > t)

    @property
    def speed_ratio(self) -> float | None:
        """The rolling value as a fraction of the baseline's speed (1.0 = as fast; >1 faster)."""
        r = self.rolling
        if not self.baseline or r is None:
            return None
        if self.higher_is_better:
            return r / self.baseline  # 0 when the rolling value is 0: no speed at all
        return self.baseline / r if r else None  # 0 s per step has no ratio

    def _parse(self, text: str) -> float | None:
        for metric in ([self.metric] if self.metric else self.metrics):
            value = metric.parse(text)
            if value is not None:
                self.metric = metric
                return value
        return None

    def line(self, text: str) -> list[Notice]:
        """Read one line of the log: its metric, and the notices (warnings, hints) it calls for, typed."""
        return self.notices(text)

    def notices(self, text: str) -> list[Notice]:
        """Notices (warnings, hints) that this line calls for, typed: a crash signature's (once per kind),
        a throughput below the baseline's threshold, and its recovery."""
        notes = []
        sig = match_signature(text)
        if sig and sig[0] not in {f[0] for f in self.found}:
            self.found.append((*sig, text))
            notes.append(Notice(sig[1], True, sig[0]))
        value = self._parse(text)
        if value is not None:
            self.seen += 1
            self.last = value
            if self.seen == 1:  # the rolling figure starts at the first steady step: the first value's step
                self.first = value  # compiled (nanoGPT's iteration 0: 4451 ms against a steady 14 ms)
                return notes
            self.values.append(value)
            if self.slow(value) and not self.low:
                self.low = True
                above, sign = ("below", "-") if self.higher_is_better else ("above", "+")
                notes.append(Notice(f"throughput {fmt(value, self.unit)} is {above} {fmt(self.threshold, self.unit)} "
                                    f"(baseline {self.baseline:g} {sign} {self.tolerance:.0%}"
                                    f"{'' if self.higher_is_better else ', lower is better'}): "
                                    f"rolling {fmt(self.rolling, self.unit)}", True))
            elif self.threshold is not None and not self.slow(value) and self.low:
                self.low = False
                notes.append(Notice(f"throughput recovered: {fmt(value, self.unit)} (baseline {self.baseline:g})",
                                    False))
        return notes

    def summary(self) -> str:
        if self.last is None:
            return "no throughput reported"
        text = f"throughput last {fmt(self.last, self.unit)}, rolling {fmt(self.rolling, self.unit)}"
        if self.baseline:
            rolling = self.rolling  # not None: `last` is in the window
            verdict = "SLOW" if rolling is not None and self.slow(rolling) else "ok"
            ratio = self.speed_ratio
            share = f"{ratio:.0%} of its speed" if ratio is not None else "no ratio to it"
            text += (f" vs baseline {fmt(self.baseline, self.unit)}: {share} ({verdict}"
                     f"{'' if self.higher_is_better else ', lower is better'})")
        return text


def follow(ct: Container, run: str, run_id: str, *, offset: int = 0, on_bytes: Callable[[bytes], None],
           follow_: bool = True, slice_seconds: int = 300, reconnect: Callable[[], None] | None = None,
           max_reconnects: int = 20, sleep=time.sleep, on_resume: Callable[[int, str], None] | None = None,
           stop: Callable[[], bool] | None = None,
           on_compile: Callable[[str], None] | None = None) -> int:
    """Stream the log of `run` (a run folder) from byte `offset`; returns the final offset.

    With follow_, keeps streaming until the run ends (remote/sh/lib.sh: no exit record and a live leader
    of its own); a dropped connection is re-established and streaming resumes at the byte where it
    stopped. Without, prints what is there and returns, even while the job runs. `stop()` true: return
    before the next slice (a follower whose reader has gone: its thread ends, it does not poll on). With
    on_compile, each line of the run's compile.jsonl (and the first steady step's `{"steady": ...}` line) is
    passed to it, each once (remote/sh/follow.sh sends them on stderr). `on_resume(offset, reason)`: each time
    a lost connection is picked up again (Target.resumed: a Resumed event)."""
    failures = 0
    compiled = [0]  # bytes of compile.jsonl received (whole lines only), across slices and reconnects
    while True:
        if stop is not None and stop():
            return offset
        got = [0]
        errs = LineSplitter()

        def on_output(kind: str, chunk: bytes, got: list[int] = got, errs: LineSplitter = errs) -> None:
            if kind == "stdout":  # this attempt's count
                got[0] += len(chunk)
                on_bytes(chunk)
            elif on_compile is not None:
                for line in errs.feed(chunk):
                    if line.startswith('{"t"') or line.startswith('{"steady"'):
                        if line.startswith('{"t"'):
                            compiled[0] += len(line.encode()) + 1
                        on_compile(line)

        try:
            extra = [str(compiled[0])] if on_compile is not None else []
            r = ct.script(shell.with_lib("follow"), f"{run}/log", str(offset), run, run_id,
                          str(slice_seconds if follow_ else 0), *extra, on_output=on_output, check=False,
                          mutates=False, label="follow the log")
            offset += got[0]
            failures = 0
        except (ConnectError, TransportError) as exc:
            offset += got[0]
            failures += 1
            if failures > max_reconnects:
                raise
            if on_resume is not None:
                on_resume(offset, str(exc))
            sleep(min(5.0, 0.5 * failures))
            if reconnect:
                reconnect()
            continue
        err = "\n".join(line for line in r.err.splitlines() if not line.startswith("{")).strip()
        if r.exit_code == 3:
            raise TransportError(ct.where, err)
        if r.exit_code not in (0, 124):
            raise TransportError(ct.where, f"following {run}/log failed (exit {r.exit_code}): {err}")
        if not follow_ or r.exit_code == 0:
            return offset
        # 124: the slice ended while the job runs on; continue from the new offset


def read_text(ct: Container, run: str, run_id: str) -> str:
    """The log of `run` (a run folder) as it is now, whole; undecodable bytes replaced (remote.api's Run.text)."""
    chunks: list[bytes] = []
    follow(ct, run, run_id, on_bytes=chunks.append, follow_=False, reconnect=ct.transport.close)
    return b"".join(chunks).decode("utf-8", "replace")


def as_lines(text: str) -> list[str]:
    """A log's text as lines without their newlines, a progress bar's redraws collapsed as following shows them."""
    splitter = LineSplitter(limit=len(text.encode()) + 1)
    return splitter.feed(text.encode()) + splitter.flush()


BARS = "▁▂▃▄▅▆▇█"


def parse_metrics(text: str) -> list[Metric]:
    """A run's metrics.jsonl: one value per line that is a JSON object (others skipped: the file is the
    container's); t, value and unit where they are finite numbers and text (an integer too large for a float,
    Infinity or NaN: None)."""
    from .compilelog import number

    out = []
    for line in text.splitlines():
        try:
            got = json_loads(line)
        except ValueError:
            continue
        if not isinstance(got, dict):
            continue
        t, value, unit = got.get("t"), got.get("value"), got.get("unit")
        out.append(Metric(number(t), number(value), unit if isinstance(unit, str) else None, got))
    return out


def read_metrics(ct: Container, run_path: str) -> list[Metric]:
    """The run's metrics.jsonl, read now ([] before its first value)."""
    r = ct.run(["cat", f"{run_path}/metrics.jsonl"], check=False, mutates=False, timeout=120)
    return parse_metrics(r.out)


def watch_for(spec) -> Watch:
    """The metric watch of a container's train spec (metric, baseline, tolerance)."""
    return Watch(metrics=compile_metric(spec.train.metric), baseline=spec.train.baseline,
                 tolerance=spec.train.tolerance)


def series(spec, text: str | Iterable[bytes], *, last_line: bool = True) -> tuple[list[float], Watch]:
    """Every metric value of a log (its text, or its bytes in chunks: a log read from a file is never held
    whole), in order, and the watch that read it (unit, direction, crash hints). Without last_line, an
    unfinished last line (a log still being written) is left out."""
    watch = watch_for(spec)
    splitter = LineSplitter()
    values = []

    def take(lines: list[str]) -> None:
        for line in lines:
            watch.line(line)
            value = watch.metric.parse(line) if watch.metric else None
            if value is not None:
                values.append(value)

    for chunk in [text.encode()] if isinstance(text, str) else text:
        take(splitter.feed(chunk))
    if last_line:
        take(splitter.flush())
    return values, watch


def sparkline(values: list[float], width: int = 24) -> str:
    """The values as one line of block characters, averaged into at most `width` buckets."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [sum(chunk) / len(chunk) for chunk in
                  (values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)] for i in range(width))]
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(BARS[min(len(BARS) - 1, int((v - lo) / span * (len(BARS) - 1) + 0.5))] for v in values)
