"""The test suite's own layout: every test file lies in the folder of its tier, names no other tier's marker,
and takes what it shares from tests/support.py (conftest.py holds fixtures and hooks only)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support import ROOT, TESTS, TIERS, tier_of


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def marks_named(tree: ast.Module) -> set[str]:
    """The tier markers a file names anywhere (`pytestmark = pytest.mark.lab`, `@pytest.mark.lab`, a list)."""
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in TIERS
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"}


def test_every_test_file_lies_in_a_tier_folder():
    stray = [str(p.relative_to(ROOT)) for p in all_test_files() if tier_of(p) is None]
    assert stray == [], f"move these into one of tests/{{{','.join(TIERS)}}}/: {stray}"
    assert {tier_of(p) for p in all_test_files()} == set(TIERS)  # no tier is empty: the rule is not vacuous


def test_no_file_names_a_marker_of_another_tier():
    wrong = {}
    for p in all_test_files():
        other = marks_named(ast.parse(p.read_text())) - {tier_of(p)}
        if other:
            wrong[str(p.relative_to(ROOT))] = sorted(other)
    assert wrong == {}, f"a file's tier marker disagrees with its folder: {wrong}"


def test_the_marker_check_sees_a_mark_in_every_form():
    source = ("import pytest\npytestmark = [pytest.mark.lab, pytest.mark.fault('x')]\n"
              "@pytest.mark.newcomer\ndef test_x(): pass\n")
    assert marks_named(ast.parse(source)) == {"lab", "newcomer"}


def test_no_file_imports_from_conftest():
    bad = []
    for p in [*all_test_files(), TESTS / "support.py"]:
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if "conftest" in names:
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert bad == [], f"shared helpers come from tests/support.py, not conftest.py: {bad}"


def test_a_test_gets_the_marker_of_its_folder(request):
    assert request.node.get_closest_marker("unit") is not None
    assert all(request.node.get_closest_marker(t) is None for t in TIERS if t != "unit")


def test_ci_s_expression_selects_the_unit_and_local_folders_whole():
    """.ci/run's second run, `-m "not lab and not newcomer"`: every file of tests/unit and tests/local, nothing
    of tests/lab or tests/newcomer (the markers come from the folders)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not lab and not newcomer",
                        "tests"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    files = {line.split("::")[0] for line in r.stdout.splitlines() if "::" in line}
    assert files == {str(p.relative_to(ROOT)) for p in all_test_files() if tier_of(p) in ("unit", "local")}
    assert "deselected" in r.stdout.splitlines()[-1]  # the lab and newcomer tests were collected, then left out
