"""What the watch beside a run leaves, as the controller reads it, and what it is told at launch.

The container side is remote/sh/job.sh (attempts: restarts, REMOTE_RESTART, backoff, a final stop) and
remote/sh/watch.py (stalls with their stacks, metrics.jsonl, gpu.csv, watch.json); docs/guide/watch.md says what
each file holds. Everything read here was written in the container: untrusted, checked field by field.
"""

from __future__ import annotations

import re

from ..config import ContainerSpec
from ..naming import json_loads, printable
from . import logs


def watch_settings(spec: ContainerSpec, py_spy: str | None) -> dict:
    """What the watch in the container (remote/sh/watch.py) is told: the stall limit and what to do, where
    py-spy is, and the metric forms to read (the same ones `logs` reads)."""
    return {"stall": spec.train.stall or 0, "on_stall": spec.train.on_stall, "py_spy": py_spy,
            "metrics": [m.describe() for m in logs.compile_metric(spec.train.metric)],
            "metric_stall": spec.train.metric is not None, "gpu_every": 5, "grace": 10}


def shown(value, limit: int) -> str:
    """A string the container wrote, bounded, then made safe to print (remote.naming.printable)."""
    return printable(str(value if value is not None else "")[:limit])


def read_watch(text: str) -> dict:
    """watch.json as the container wrote it (untrusted): only the fields and types status shows."""
    try:
        data = json_loads(text) if text.strip() else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    stalled, gpu = data.get("stalled"), data.get("gpu")
    out = {}
    if isinstance(stalled, dict) and isinstance(stalled.get("seconds"), (int, float)):
        out["stalled"] = {"seconds": stalled["seconds"], "stacks": shown(stalled.get("stacks"), 500),
                          "action": shown(stalled.get("action"), 20),
                          "at": stalled.get("at") if isinstance(stalled.get("at"), (int, float)) else None}
    if isinstance(data.get("stalls"), int):
        out["stalls"] = max(0, min(data["stalls"], 1000))
    if isinstance(gpu, dict):
        out["gpu"] = {k: gpu[k] for k in ("t", "gpus", "util_pct", "mem_used_mib", "mem_total_mib")
                      if isinstance(gpu.get(k), (int, float)) and not isinstance(gpu.get(k), bool)}
    return out


COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # what `git rev-parse HEAD` prints (sha1, sha256 repos)


def parse_attempts(text: str) -> list[dict]:
    """The wrapper's `start K EPOCH [COMMIT]` / `end K EPOCH STATUS` lines (remote/sh/job.sh): one entry per attempt."""
    out: dict[int, dict] = {}
    for line in text.splitlines():
        f = line.split()
        try:
            if len(f) in (3, 4) and f[0] == "start":  # the 4th: the commit the checkout had then (job.sh)
                commit = f[3] if len(f) == 4 and COMMIT.fullmatch(f[3]) else None
                out[int(f[1])] = {"attempt": int(f[1]), "started": float(f[2]), "ended": None, "exit": None,
                                  "commit": commit}
            elif len(f) == 4 and f[0] == "end" and int(f[1]) in out:
                out[int(f[1])].update(ended=float(f[2]), exit=int(f[3]))
        except ValueError:
            continue
    return [out[k] for k in sorted(out)]


EXIT_STALLED = 124  # job.sh's exit record for a run the stall watch ended (train.on_stall: stop/restart)


def stall_text(st: dict) -> str:
    s = st.get("stalled") or {}
    return f"STALLED: no output for {s.get('seconds', 0):g} s; stacks in {s.get('stacks')}" if s else ""
