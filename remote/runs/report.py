"""A run's picture: one self-contained HTML file (inline SVG, no script, nothing from the network) with
the metric over time against the baseline and the known-good run, the manifest, the warmups and any
crash hints; and the one-line sparkline `status` prints.
"""

from __future__ import annotations

import html
import json
import tempfile
import time
from pathlib import Path

from ..config import ContainerSpec
from ..errors import JobError, TransferError
from ..facts.runs import Attempt, RunState
from ..naming import json_loads
from ..ops import compilelog, files, jobs, logs
from ..ops import warmup as wm
from ..ops.logs import series, sparkline  # noqa: F401 -- the status line's pieces, also this page's
from ..results import CompileHealth
from ..target import Target
from . import timeline as timeline_mod


def _svg(runs: list[tuple[str, list[float], str]], baseline: float | None, unit: str | None,
         w: int = 880, h: int = 320) -> str:
    """A line chart: each run a polyline over its own sample index (scaled to the width), the baseline dashed;
    the legend in a band of its own below the axis' label, never over the lines."""
    pad_l, pad_r, pad_t, pad_b, row = 64, 16, 16, 36, 16
    allv = [v for _, vals, _ in runs for v in vals] + ([baseline] if baseline is not None else [])
    if not allv:
        return "<p>No metric values in the log.</p>"
    lo, hi = min(0.0, min(allv)), max(allv) * 1.1 or 1.0
    x0, x1, y0, y1 = pad_l, w - pad_r, h - pad_b, pad_t
    h += 8 + row * len(runs)  # the legend's band: one row per run, below everything plotted

    def y(v: float) -> float:
        return y0 - (v - lo) / (hi - lo) * (y0 - y1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#fafafa" stroke="#ccc"/>']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e4e4e4"/>'
                     f'<text x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    parts.append(f'<text x="{(x0 + x1) / 2}" y="{y0 + pad_b - 8}" text-anchor="middle">progress through the run '
                 f'(metric samples) — {html.escape(unit or "")}</text>')
    if baseline is not None:
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y(baseline):.1f}" y2="{y(baseline):.1f}" stroke="#c00" '
                     f'stroke-dasharray="6 4"/><text x="{x1 - 4}" y="{y(baseline) - 4:.1f}" text-anchor="end" '
                     f'fill="#c00">baseline {baseline:g}</text>')
    for label, vals, color in runs:
        if not vals:
            continue
        n = max(len(vals) - 1, 1)
        pts = " ".join(f"{x0 + (x1 - x0) * i / n:.1f},{y(v):.1f}" for i, v in enumerate(vals))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}">'
                     f'<title>{html.escape(label)}</title></polyline>')
    for k, (label, _vals, color) in enumerate(runs):
        top = y0 + pad_b + 8 + row * k  # below the plot and its axis label
        parts.append(f'<g class="legend"><rect x="{x0}" y="{top + 5}" width="12" height="3" fill="{color}"/>'
                     f'<text x="{x0 + 18}" y="{top + 10}">{html.escape(label)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _compile_section(tl: timeline_mod.Timeline | None, health: CompileHealth | None = None) -> str:
    """The compile watch's counts and findings (remote/ops/compilelog.py): `health` is the run's whole
    compile.jsonl read as status and doctor read it (each process's totals); the timeline's events (the
    latest timeline.MAX_COMPILES, drawn as ticks) stand in only when it is not given."""
    if health is None and tl and tl.compiles:
        steady = tl.metrics[1][0] if len(tl.metrics) > 1 else None
        lines = [json.dumps({"t": e.t, "kind": e.kind, "fn": e.fn, "file": e.file, "line": e.line, "n": e.n,
                             "why": e.why, "reason": e.reason, "where": e.where, "seconds": e.seconds, "pid": e.pid})
                 for e in tl.compiles]
        health = compilelog.summarize(lines, steady)
    if health is None or not (health.events or health.processes):
        return "<p>No compile.jsonl for this run (nothing compiled, or a venv deployed before the watch).</p>"
    found = "".join(f"<li><b>{html.escape(f.code)}</b>: {html.escape(f.what)}<br><i>{html.escape(f.why)}</i></li>"
                    for f in compilelog.findings(health))
    return (f"<p>{html.escape(compilelog.health_line(health))} (the ticks at the top of the timeline).</p>"
            + (f'<ul class="bad">{found}</ul>' if found else "<p>No recompile or compile after the first steady "
               "step, no graph break, no eager fallback.</p>"))


def render(spec: ContainerSpec, run: RunState, log_text, known_good: dict | None, kg_log,
           warmups: list[dict], timeline: timeline_mod.Timeline | None = None,
           compile_health: CompileHealth | None = None) -> str:
    """The HTML page. Pure: everything it shows is passed in (the logs as text, or as chunks of bytes read
    once from files; timeline: what the run's watch left, remote/sh/watch.py; compile_health: the run's
    compile.jsonl read whole, compilelog.read_run, for the compile section's counts and findings)."""
    values, watch = series(spec, log_text)
    kg_values = series(spec, kg_log)[0] if kg_log else []
    m = run.manifest
    esc = html.escape
    runs = [(f"run {run.run}", values, "#1565c0")]
    if known_good and known_good.get("run") != run.run:
        runs.append((f"known-good run {known_good.get('run')}", kg_values, "#2e7d32"))
    kg_tp = (known_good or {}).get("throughput") or {}
    rows = "".join(f"<tr><td>{esc(str(r.get('device')))}</td><td>{r.get('seconds')}</td><td>{r.get('new_files')}</td>"
                   f"<td>{r.get('hits')}/{r.get('misses')}</td><td>{esc(str(r.get('commit', ''))[:12])}</td></tr>"
                   for r in warmups)
    hints = "".join(f"<li><b>{esc(name)}</b>: {esc(hint)}<br><code>{esc(line[:300])}</code></li>"
                    for name, hint, line in watch.found)
    status = jobs.describe_end(run)
    summary = watch.summary()
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>run {esc(str(run.run))} — container {spec.ctid}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:940px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}} pre{{background:#f4f4f4;padding:8px;overflow:auto;
font-size:12px}} .bad{{color:#c00}}</style></head><body>
<h1>Run {esc(str(run.run))} <small>container {spec.ctid}</small></h1>
<p>{esc(status)}; {esc(summary)}.<br>Commit <code>{esc((m.commit or '')[:12])}</code>, torch
{esc(str(m.torch))} (CUDA build {esc(m.cuda_build or 'none')}), started {esc(str(m.started_at))}.
{'Known-good: run ' + esc(str(known_good.get('run'))) + ', ' + esc(logs.fmt(kg_tp.get('value'), kg_tp.get('unit')))
 + ' (commit ' + esc(str(known_good.get('commit') or '')[:12]) + ').' if known_good else 'No known-good run recorded.'}</p>
<h2>Metric over the run</h2>
{_svg(runs, spec.train.baseline if spec.train.baseline is not None else m.baseline, watch.unit)}
<h2>Over time: throughput, GPU utilisation and memory; stalls and restarts marked</h2>
{timeline_mod.svg(timeline or timeline_mod.Timeline(), spec.train.baseline if spec.train.baseline is not None else m.baseline)}
<h2>Compile health</h2>
{_compile_section(timeline, compile_health)}
<h2>Crash hints</h2>
{'<ul class="bad">' + hints + '</ul>' if hints else '<p>None found in the log.</p>'}
<h2>Warmups for this commit and venv</h2>
{'<table><tr><th>device</th><th>seconds</th><th>new files</th><th>guard hits/misses</th><th>commit</th></tr>'
 + rows + '</table>' if rows else '<p>None recorded.</p>'}
<h2>Manifest</h2>
<pre>{esc(json.dumps(m.raw, indent=1))}</pre>
<p><small>Written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by <code>remote report</code>.</small></p>
</body></html>
"""


def default_path(ctid: int, run_id: str) -> Path:
    """Where a report goes unless the caller says: the current folder, where a user looks for what a command
    wrote (it said ~/.local/share/remote/reports before 0.3); the command line says where, in one line."""
    return Path.cwd() / f"report-{ctid}-{run_id}.html"


def write(t: Target, run_id: str | None, dest: str | None) -> Path:
    """Read a run (default: the latest) and the known-good one from the container; write the HTML file."""
    spec, ct = t.spec, t.ct
    st = jobs.state(t, run_id)
    if not st.run:
        raise JobError(f"container {spec.ctid} has no run {run_id or ''} in {spec.train.run_dir}".replace("  ", " ")
                       + ": start one with `remote train`")
    from .knowngood import path_of

    kg_raw = ct.run(["cat", path_of(spec)], check=False, mutates=False, timeout=60).out
    try:
        kg = json_loads(kg_raw) if kg_raw.strip() else None
    except ValueError:
        kg = None
    m = st.manifest
    warmups = [r for r in wm.records(t)
               if r.get("commit") == m.commit and r.get("venv_lock") == m.venv_lock_sha256]
    if not dest and not jobs.RUN_ID.fullmatch(st.run):  # the container's `current`: untrusted, never a path
        raise JobError(f"container {spec.ctid}: its run id {st.run!r} is not one remote makes; give out=FILE")
    path = Path(dest) if dest else default_path(spec.ctid, st.run)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The logs and what the run's watch left come to local files (streamed, verified) and are read from
    # there in chunks: a run's log can be gigabytes, its metrics.jsonl grows with it, and only the values
    # are kept.
    with tempfile.TemporaryDirectory(prefix="remote-report-") as d:
        tl = read_timeline(ct, st.path, st.attempts, Path(d))
        log = Path(d) / "log"
        files.pull(ct, f"{st.path}/log", log)
        if not log.is_file():  # what the container has there is not a log
            raise JobError(f"container {spec.ctid}: {st.path}/log is not a file")
        kg_log = None
        if kg and kg.get("run") and kg["run"] != st.run:
            try:
                files.pull(ct, f"{spec.train.run_dir}/{kg['run']}/log", Path(d) / "kg-log")
                kg_log = _chunks(Path(d) / "kg-log")
            except TransferError:  # the known-good run's folder is gone: the page shows it without its curve
                kg_log = None
        path.write_text(render(spec, st, _chunks(log), kg, kg_log, warmups, tl, compilelog.read_run(d)))
    return path


WATCH_FILES = ("metrics.jsonl", "gpu.csv", "events.jsonl", "compile.jsonl")


def read_timeline(ct, run_path: str, attempts: tuple[Attempt, ...], folder: Path) -> timeline_mod.Timeline:
    """The run over time from what its watch left (WATCH_FILES, each there or not): each pulled into
    `folder` under its own name as the log is, in one streamed command, and read from there in chunks, never
    whole (the folder then reads as the run's for compilelog.read_run)."""
    got = {}
    for name in WATCH_FILES:
        local = folder / name
        got[name] = _chunks(local) if files.pull_if_there(ct, f"{run_path}/{name}", local) else ()
    return timeline_mod.parse(got["metrics.jsonl"], got["gpu.csv"], got["events.jsonl"], attempts,
                              got["compile.jsonl"])


def _chunks(path: Path, size: int = 1 << 20):
    with path.open("rb") as f:
        while chunk := f.read(size):
            yield chunk
