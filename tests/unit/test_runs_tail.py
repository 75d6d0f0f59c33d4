"""`runs` and `status` read a stopped run's throughput from the same bytes of its log: the real runs.sh and
state.sh, run here by bash over a run folder, then the library's own parsers (remote.runs.listing.describe,
remote.ops.logs.series as jobs.status_of reads it)."""

from __future__ import annotations

import json
import subprocess

import pytest

from remote import config, shell
from remote.facts.runs import parse_state
from remote.ops import logs
from remote.runs import listing

SPEC = config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}}}, "hosts.yaml").containers[200]
MARKER = "--run-0123456789abcdef--"


def run_folder(tmp_path, log: str):
    run = tmp_path / "runs" / "20261206-010203-abcd"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"command": "python train.py", "started_epoch": 1.0}) + "\n")  # as launch.sh writes it
    (run / "exit").write_text("143\n")
    (run / "stop").write_text("")
    (run / "log").write_text(log)
    (tmp_path / "runs" / "current").symlink_to(run.name)
    return tmp_path / "runs"


def bash(script: str, *args: str) -> str:
    return subprocess.run(["bash", "-c", script, "remote", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.fault("A stopped run whose log's last metric line is followed by many lines",
                   promise="`runs` (Container.runs()) shows the throughput `status` shows for it: both read the "
                           "same 32 KiB of its log")
@pytest.mark.parametrize("after", [
    "[remote] got SIGTERM at 2026-12-06T01:02:03+00:00\n",  # a stop's one line
    "Traceback (most recent call last):\n" + "".join(f'  File "/opt/venv/lib/torch/_dynamo/f{i}.py", line {i}, in '
                                                      f"call_{i}\n    return fn(*args, **kwargs)\n" for i in range(260))
    + "RuntimeError: stopped\n[remote] got SIGTERM at 2026-12-06T01:02:03+00:00",  # a long traceback, over 16 KiB
])
def test_runs_and_status_agree_on_a_stopped_runs_last_throughput(tmp_path, after):
    log = "".join(f"step {i}: loss 2.10, {150 + i}.5 Ktok/s\n" for i in range(40)) + after
    run_dir = run_folder(tmp_path, log)
    shown = logs.series(SPEC, parse_state(bash(shell.with_lib("state"), str(run_dir), "")).tail, last_line=False)[1]
    blocks = bash(shell.with_lib("runs"), str(run_dir), "20", MARKER, str(listing.TAIL_BYTES)).split(MARKER + "\n")[1:]
    listed = [listing.describe(st, SPEC) for st in map(parse_state, blocks) if st.run]
    assert shown.last == 189.5
    assert [(r.state, r.throughput) for r in listed] == [("stopped", 189.5)], listed


@pytest.mark.fault("A run's manifest.json rewritten by the job without a last newline",
                   promise="status still finds the log's tail after it (state.sh ends the manifest's line itself) and "
                           "reads the manifest and the throughput")
def test_a_manifest_without_its_last_newline_hides_nothing_from_status(tmp_path):
    run_dir = run_folder(tmp_path, "".join(f"step {i}: loss 2.10, {150 + i}.5 Ktok/s\n" for i in range(40)))
    manifest = next(run_dir.glob("2*")) / "manifest.json"
    manifest.write_text(json.dumps({"command": "python train.py", "started_epoch": 1.0}))  # no newline at its end
    st = parse_state(bash(shell.with_lib("state"), str(run_dir), ""))
    assert st.manifest.command == "python train.py"
    assert logs.series(SPEC, st.tail, last_line=False)[1].last == 189.5
