"""The facts probe (remote/facts/probe.py) run here with this machine's python, against doubles of the
programs it asks (nvidia-smi on PATH): what a container's own probe would do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from remote.facts import PROBE_SOURCE, gpus_of


@pytest.mark.fault("Hung GPU driver (nvidia-smi never answers)", "the facts probe answers within seconds with the "
                   "hang as a finding, well inside its caller's limit: preflight and doctor report it")
def test_a_hung_nvidia_smi_is_a_finding_within_seconds(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 600\n")  # a driver that never answers
    smi.chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    arg = {"parts": ["gpus", "torch"], "venv": str(venv), "versions": str(tmp_path / "v"), "uv": "/nonexistent",
           "checkout": str(tmp_path / "co"), "cache_dir": str(tmp_path / "cache"), "run_dir": str(tmp_path / "runs"),
           "lease": str(tmp_path / "lease"), "torch_cache": str(tmp_path / "torch.json")}
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", PROBE_SOURCE, json.dumps(arg)], env=env, capture_output=True,
                       text=True, timeout=400)
    took = time.monotonic() - start
    raw = json.loads(r.stdout)
    assert gpus_of(raw).error == "nvidia-smi did not answer within 10 s (a hung GPU driver?)"
    # A hang guard, not a speed goal: before, each nvidia-smi call waited 60 s after the one before it.
    assert took < 60, took
