"""The test suite's own layout: every test file lies in the folder of its tier, names no other tier's marker,
and takes what it shares from tests/support.py (conftest.py holds fixtures and hooks only)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import OWN_LAB_MODULES, ROOT, TESTS, TIERS, tier_of, work_unit


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


def test_the_own_lab_modules_exist_and_use_their_labs_ids():
    """A module of support.OWN_LAB_MODULES runs on conftest's own_lab (under xdist beside the session lab's
    modules): it must not reach for the session lab's containers."""

    for name in OWN_LAB_MODULES:
        path = TESTS / "lab" / name
        assert path.is_file(), f"support.OWN_LAB_MODULES names {name}, which is not in tests/lab/"
        text = path.read_text()
        assert "LAB_CONTAINERS" not in text and not re.search(r"\b20[01]\b", text), \
            f"{name} names the session lab's containers: take ids from support.lab_ids(__file__)"


def test_xdist_work_units_keep_each_lab_on_one_worker():
    """conftest's scheduler: one unit for the session lab's modules, one for own_lab's, one for the newcomer
    tier, a unit per file elsewhere; every lab module in one of the two lab units."""
    units = {str(p.relative_to(ROOT)): work_unit(str(p.relative_to(ROOT))) for p in all_test_files()}
    lab = {path for path, unit in units.items() if tier_of(ROOT / path) == "lab"}
    assert {units[path] for path in lab} == {"lab", "lab-own"}
    assert {Path(path).name for path in lab if units[path] == "lab-own"} == set(OWN_LAB_MODULES)
    assert {unit for path, unit in units.items() if tier_of(ROOT / path) == "newcomer"} == {"newcomer"}
    others = [path for path in units if tier_of(ROOT / path) in ("unit", "local")]
    assert all(units[path] == path for path in others) and len(others) > 40
