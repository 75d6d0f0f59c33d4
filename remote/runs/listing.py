"""`remote runs`: every run a container holds under train.run_dir, read in one command (remote/sh/runs.sh).

For each run: its id, start, state (running, exited, stopped, LOST), exit status, last throughput and command,
from what its folder holds (manifest.json, pid, exit, the log's tail; remote/ops/jobs.py says what
they are). Everything there is the container's, so it is parsed as untrusted text.
"""

from __future__ import annotations

import secrets
import time

from .. import shell
from ..config import ContainerSpec
from ..facts.runs import RunState, parse_state
from ..naming import printable
from ..ops import jobs
from ..results import RunSummary
from ..target import Target

TAIL_BYTES = 16384  # of each log: enough for the last metric lines


def list_runs(t: Target, limit: int = 20) -> list[RunSummary]:
    """The latest `limit` runs, oldest first."""
    ct, spec = t.ct, t.spec
    marker = f"--run-{secrets.token_hex(8)}--"
    r = ct.script(shell.with_lib("runs"), spec.train.run_dir, str(limit), marker, str(TAIL_BYTES),
                  mutates=False, timeout=120, label="list runs")
    blocks = r.out.split(marker + "\n")[1:]
    return [describe(st, spec) for st in map(parse_state, blocks) if st.run]


def describe(st: RunState, spec: ContainerSpec) -> RunSummary:
    """One run as `runs` shows it, from parse_state's answer (a run: st.run is set)."""
    from .report import series

    m = st.manifest
    _, watch = series(spec, st.tail, last_line=not st.alive)
    return RunSummary(st.run or "", m.started_at, m.started_epoch, jobs.run_status(st).state, st.exit, watch.last,
                      watch.unit, m.command, m.nodes, st.path, st.checkpoint, st.parent)


def render(runs: list[RunSummary], spec: ContainerSpec) -> str:
    """A table, newest last, the command cut to the line's end."""
    if not runs:
        return f"container {spec.ctid}: no runs in {spec.train.run_dir} (start one with `remote train`)"
    rows = [("RUN", "STARTED", "STATE", "EXIT", "THROUGHPUT", "COMMAND")]
    for r in runs:
        started = (time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_epoch)) if r.started_epoch
                   else _clean(r.started or "-"))
        tp = f"{r.throughput:.4g}{' ' + r.unit if r.unit else ''}" if r.throughput is not None else "-"
        rows.append((_clean(r.id), started, shown_state(r.state), "-" if r.exit is None else str(r.exit), tp,
                     _clean(r.command or "-") + (f"  ({_clean(r.resumes)})" if r.resumes else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def shown_state(state: str) -> str:
    """A run's state as `runs` has always shown it (and its JSON says it): a lost run in capitals."""
    return "LOST" if state == "lost" else state


def _clean(text: str) -> str:
    """Printable on one line: a folder name or a command from the container can hold anything."""
    return printable(text)
