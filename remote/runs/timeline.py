"""A run over wall-clock time: the data the watch left in its run folder (remote/sh/watch.py, job.sh) read
and drawn. metrics.jsonl (throughput), gpu.csv (utilisation, memory), events.jsonl (stalls) and the
wrapper's attempts, as one SVG with the throughput on top and the GPU's utilisation and memory under it on
the same time axis, stalls and restarts marked. Pure: text (or its bytes in chunks) in, SVG out; everything read is untrusted
(a line that does not parse is skipped).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..facts.runs import Attempt
from ..naming import json_loads
from ..ops.compilelog import describe, parse_line
from ..ops.compilelog import number as _num  # a finite float, or None (an int too large for one too)
from ..results import CompileEvent


@dataclass
class Timeline:
    metrics: list[tuple[float, float]] = field(default_factory=list)  # (t, value)
    unit: str | None = None
    gpu: list[tuple[float, float | None, float | None]] = field(default_factory=list)  # (t, util %, mem GiB)
    stalls: list[tuple[float, float]] = field(default_factory=list)  # (t, seconds without output)
    attempts: tuple[Attempt, ...] = ()  # the wrapper's records (remote/sh/job.sh)
    compiles: list[CompileEvent] = field(default_factory=list)  # the compile watch's events (compile.jsonl)

    def __bool__(self) -> bool:
        return bool(self.metrics or self.gpu or self.compiles)


def _cell(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


MAX_LINE = 1 << 16  # a record longer than this is none the watch wrote: skipped, and never held whole


def lines(data: str | Iterable[bytes]):
    """The lines of a text, or of bytes read in chunks (a file read so is never held whole); a line longer
    than MAX_LINE is skipped."""
    if isinstance(data, str):
        yield from data.splitlines()
        return
    pending, skipping = b"", False
    for chunk in data:
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if skipping:  # the end of a line already too long
                skipping = False
            elif len(line) <= MAX_LINE:
                yield line.decode("utf-8", "replace")
        if len(pending) > MAX_LINE:
            pending, skipping = b"", True
    if pending and not skipping:
        yield pending.decode("utf-8", "replace")


MAX_COMPILES = 400  # compile events drawn (the latest)


def parse(metrics: str | Iterable[bytes] = "", gpu: str | Iterable[bytes] = "",
          events: str | Iterable[bytes] = "", attempts: tuple[Attempt, ...] | None = None,
          compiles: str | Iterable[bytes] = "") -> Timeline:
    """The timeline of what the watch left: each file as its text or as chunks of its bytes."""
    tl = Timeline(attempts=tuple(attempts or ()))
    for line in lines(compiles):
        ev = parse_line(line)
        if ev is not None:
            tl.compiles.append(ev)
            if len(tl.compiles) > 2 * MAX_COMPILES:
                del tl.compiles[:MAX_COMPILES]
    tl.compiles = tl.compiles[-MAX_COMPILES:]
    for line in lines(metrics):
        try:
            row = json_loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and _num(row.get("t")) is not None and _num(row.get("value")) is not None:
            tl.metrics.append((float(row["t"]), float(row["value"])))
            if isinstance(row.get("unit"), str):
                tl.unit = row["unit"][:40]
    per_t: dict[float, list[tuple[float | None, float | None]]] = {}
    for line in lines(gpu):
        cells = line.split(",")
        if len(cells) != 7 or _cell(cells[0]) is None:
            continue  # the header, or a torn row
        util, used = _cell(cells[2]), _cell(cells[3])
        per_t.setdefault(float(cells[0]), []).append((util, used))
    for t, rows in sorted(per_t.items()):  # one point per reading: mean utilisation, summed memory
        utils = [u for u, _ in rows if u is not None]
        mems = [m for _, m in rows if m is not None]
        tl.gpu.append((t, sum(utils) / len(utils) if utils else None, sum(mems) / 1024 if mems else None))
    for line in lines(events):
        try:
            ev = json_loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "stall" and _num(ev.get("at")) is not None:
            tl.stalls.append((float(ev["at"]), _num(ev.get("seconds")) or 0.0))
    return tl


COMPILE_COLORS = {"compile": "#9e9e9e", "recompile": "#ef6c00", "graph-break": "#6a1b9a", "eager-fallback": "#c00"}


def _poly(points: list[tuple[float, float]], color: str, title: str) -> str:
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return (f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"><title>{html.escape(title)}'
            "</title></polyline>")


def svg(tl: Timeline, baseline: float | None = None, w: int = 880) -> str:
    """Throughput over time (top), GPU utilisation % and memory GiB (below), stalls and restarts marked."""
    if not tl:
        return "<p>No metrics.jsonl or gpu.csv for this run (a run started before the watch, or not pulled).</p>"
    times = [t for t, _ in tl.metrics] + [t for t, _, _ in tl.gpu] + [t for t, _ in tl.stalls]
    times += [a.started for a in tl.attempts]
    times += [e.t for e in tl.compiles]
    t0, t1 = min(times), max(times)
    span = (t1 - t0) or 1.0
    pad_l, pad_r = 64, 56
    top_h, gpu_h, gap, pad_t, pad_b = 200, 110 if tl.gpu else 0, 24, 16, 36
    h = pad_t + top_h + (gap + gpu_h if tl.gpu else 0) + pad_b
    x0, x1 = pad_l, w - pad_r

    def x(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             'font-family="sans-serif" font-size="12">']

    def panel(y_top: float, height: float, lo: float, hi: float, label: str):
        hi = hi if hi > lo else lo + 1.0

        def y(v: float) -> float:
            return y_top + height - (v - lo) / (hi - lo) * height

        parts.append(f'<rect x="{x0}" y="{y_top}" width="{x1 - x0}" height="{height}" fill="#fafafa" stroke="#ccc"/>')
        for i in range(3):
            v = lo + (hi - lo) * i / 2
            parts.append(f'<text x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
        parts.append(f'<text x="{x0 + 6}" y="{y_top + 14}" fill="#555">{html.escape(label)}</text>')
        return y

    vals = [v for _, v in tl.metrics] + ([baseline] if baseline is not None else [])
    y = panel(pad_t, top_h, min(0.0, *vals) if vals else 0.0, max(vals) * 1.1 if vals else 1.0,
              f"throughput ({tl.unit or 'metric'})")
    if baseline is not None:
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y(baseline):.1f}" y2="{y(baseline):.1f}" stroke="#c00" '
                     f'stroke-dasharray="6 4"><title>baseline {baseline:g}</title></line>')
    if tl.metrics:
        parts.append(_poly([(x(t), y(v)) for t, v in tl.metrics], "#1565c0", "throughput"))
    bottom = pad_t + top_h
    if tl.gpu:
        g_top = pad_t + top_h + gap
        yu = panel(g_top, gpu_h, 0, 100, "GPU utilisation % (green), memory GiB (purple, right axis)")
        utils = [(x(t), yu(u)) for t, u, _ in tl.gpu if u is not None]
        if utils:
            parts.append(_poly(utils, "#2e7d32", "GPU utilisation %"))
        mems = [(t, m) for t, _, m in tl.gpu if m is not None]
        if mems:
            top = max(m for _, m in mems) * 1.1 or 1.0
            parts.append(_poly([(x(t), g_top + gpu_h - m / top * gpu_h) for t, m in mems], "#6a1b9a", "GPU memory GiB"))
            parts.append(f'<text x="{x1 + 4}" y="{g_top + 10}">{top:.3g} GiB</text>')
        bottom = g_top + gpu_h
    for t, secs in tl.stalls:
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{pad_t}" y2="{bottom}" stroke="#c00" stroke-width="2">'
                     f'<title>STALLED: no output for {secs:g} s</title></line>'
                     f'<text x="{x(t) + 3:.1f}" y="{pad_t + 28}" fill="#c00">stall</text>')
    for e in tl.compiles:  # a tick per compile event along the throughput panel's top, coloured by kind
        color = COMPILE_COLORS.get(e.kind, "#777")
        parts.append(f'<line class="compile {e.kind}" x1="{x(e.t):.1f}" x2="{x(e.t):.1f}" y1="{pad_t}" '
                     f'y2="{pad_t + (10 if e.kind == "compile" else 22)}" stroke="{color}" stroke-width="2">'
                     f'<title>{html.escape(describe(e))} ({e.seconds:.2f} s)</title></line>')
    if tl.compiles:
        legend = " ".join(f'<tspan fill="{c}">&#9646; {k}</tspan>' for k, c in COMPILE_COLORS.items())
        parts.append(f'<text x="{x1 - 4}" y="{pad_t + 36}" text-anchor="end" font-size="11">{legend}</text>')
    for a in tl.attempts[1:]:
        started = a.started
        parts.append(f'<line x1="{x(started):.1f}" x2="{x(started):.1f}" y1="{pad_t}" y2="{bottom}" stroke="#ef6c00" '
                     f'stroke-dasharray="4 3" stroke-width="2"><title>attempt {a.attempt}</title></line>'
                     f'<text x="{x(started) + 3:.1f}" y="{pad_t + 42}" fill="#ef6c00">attempt {a.attempt}'
                     "</text>")
    parts.append(f'<text x="{(x0 + x1) / 2}" y="{h - 8}" text-anchor="middle">seconds since the run\'s first record '
                 f'(0 to {span:.0f} s)</text></svg>')
    return "".join(parts)
