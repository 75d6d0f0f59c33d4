"""`remote runs`: every run a container holds under train.run_dir, read in one command (remote/sh/runs.sh).

For each run: its id, start, state (running, exited, stopped, LOST), exit status, last throughput and command,
from what its folder holds (manifest.json, pid, exit, the log's tail; remote/ops/jobs.py says what
they are). Everything there is the container's, so it is parsed as untrusted text.
"""

from __future__ import annotations

import secrets

from .. import shell
from ..config import ContainerSpec
from ..facts.runs import RunState, parse_state
from ..ops import jobs
from ..results import RunSummary
from ..target import Target

# Of each log: state.sh's 32 KiB, so that `runs` finds the throughput `status` finds (16 KiB lost a stopped
# run's last metric line behind a long traceback).
TAIL_BYTES = 32768


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
