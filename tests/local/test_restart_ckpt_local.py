"""job.sh's restart with train.checkpoint when the checkpoint tool itself fails (run for real: bash, python3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import shell

SH = Path(shell.__file__).with_name("sh")


@pytest.mark.fault("a restart whose checkpoint tool fails (not: finds none)",
                   promise="the run is not started over (its first save would overwrite the checkpoints the tool "
                           "could not read): it ends, its log naming train --resume; no complete checkpoint still "
                           "starts over")
@pytest.mark.parametrize("tool_exit", [1, 3])
def test_a_failing_checkpoint_tool_does_not_start_the_run_over(tmp_path, tool_exit):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log").write_text("")
    (run / "command").write_text("echo attempt $REMOTE_RESTART; exit 1\n")
    (run / "command-resume").write_text("echo resumed; exit 1\n")
    (run / "checkpoint.json").write_text(json.dumps({"path": str(tmp_path / "ckpt.pt")}) + "\n")
    tool = tmp_path / "ckpt.py"  # stands for ckpt.py: a crash (1) or "no complete checkpoint" (3)
    tool.write_text(f"import sys\nprint('no complete checkpoint')\nsys.exit({tool_exit})\n")
    r = subprocess.run(["bash", str(SH / "job.sh"), str(run), str(tmp_path), "1", "", "", str(tool)],
                       env={**os.environ, "REMOTE_RUN_ID": "t", "PATH": f"{Path(sys.executable).parent}:"
                            f"{os.environ['PATH']}"}, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    starts = [line for line in (run / "attempts").read_text().splitlines() if line.startswith("start ")]
    log = (run / "log").read_text()
    if tool_exit == 3:
        assert len(starts) == 2 and "starts over: no complete checkpoint" in log, log
    else:
        assert len(starts) == 1, log
        assert "the checkpoint tool failed (exit 1" in log and "remote train --resume" in log, log
    assert (run / "exit").read_text().strip() == "1"
