"""Local tier: a benchmark run as a user runs it, with another `remote` importable before its checkout's
(the project venv's editable install of another checkout, a PYTHONPATH), still uses its own checkout's code."""

from __future__ import annotations

import os
import subprocess
import sys

from support import ROOT


def test_oneoff_uses_its_checkouts_remote_before_another_on_the_path(tmp_path):
    """bench/oneoff.py times its checkout's `remote` commands and waits for the kept connection they leave under
    the socket name it computes itself; with remote.target imported before ROOT was put first, that name came
    from whichever remote was found first, and the bench stopped with "no kept connection for lab within 60s"
    (fails before the fix: the decoy is imported)."""
    decoy = tmp_path / "decoy" / "remote"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text('raise SystemExit("a decoy remote was imported, not the checkout\'s")\n')
    env = {**os.environ, "PYTHONPATH": str(decoy.parent)}
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "oneoff.py"), "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "decoy" not in r.stdout + r.stderr
    assert "--exec-only" in r.stdout
