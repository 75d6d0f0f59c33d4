"""What the watch beside a run leaves, as the controller reads it, and what it is told at launch.

The container side is remote/sh/job.sh (attempts: restarts, REMOTE_RESTART, backoff, a final stop) and
remote/sh/watch.py (stalls with their stacks, metrics.jsonl, gpu.csv, watch.json); docs/guide/watch.md says what
each file holds. What the watch wrote is read by remote/facts/runs.py (RunState): untrusted, checked field by field.
"""

from __future__ import annotations

from ..config import ContainerSpec
from ..facts.runs import Stall
from . import logs


def watch_settings(spec: ContainerSpec, py_spy: str | None) -> dict:
    """What the watch in the container (remote/sh/watch.py) is told: the stall limit and what to do, where
    py-spy is, and the metric forms to read (the same ones `logs` reads)."""
    return {"stall": spec.train.stall or 0, "on_stall": spec.train.on_stall, "py_spy": py_spy,
            "metrics": [m.describe() for m in logs.compile_metric(spec.train.metric)],
            "metric_stall": spec.train.metric is not None, "gpu_every": 5, "grace": 10}


EXIT_STALLED = 124  # job.sh's exit record for a run the stall watch ended (train.on_stall: stop/restart)


def stall_text(stall: Stall | None) -> str:
    """A stall the watch found, for a run's end line."""
    return f"STALLED: no output for {stall.seconds:g} s; stacks in {stall.stacks}" if stall else ""
