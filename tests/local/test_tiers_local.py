"""Local tier: a real pytest process collects the suite as .ci/run's second run does (the folder rules
themselves, read statically, are in tests/unit/test_tiers.py)."""

import subprocess
import sys

from support import ROOT, TESTS, tier_of


def all_test_files():
    return sorted(TESTS.rglob("test_*.py"))


def test_ci_s_expression_selects_the_unit_and_local_folders_whole():
    """.ci/run's second run, `-m "not lab and not newcomer"`: every file of tests/unit and tests/local, nothing
    of tests/lab or tests/newcomer (the markers come from the folders)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not lab and not newcomer",
                        "tests"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    files = {line.split("::")[0] for line in r.stdout.splitlines() if "::" in line}
    assert files == {str(p.relative_to(ROOT)) for p in all_test_files() if tier_of(p) in ("unit", "local")}
    assert "deselected" in r.stdout.splitlines()[-1]  # the lab and newcomer tests were collected, then left out
