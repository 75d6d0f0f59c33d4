"""The test suite's own layout: every test file lies in the folder of its tier, names no other tier's marker,
and takes what it shares from tests/support.py (conftest.py holds fixtures and hooks only)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from support import (LONG_FILES, OWN_LAB_CONTAINERS, OWN_LAB_MODULES, ROOT, SELF_MADE_LAB_MODULES, TESTS, THIRD_LAB_CONTAINERS,
                     THIRD_LAB_MODULES, TIERS, tier_of, work_unit)


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


def test_the_own_and_third_lab_modules_exist_and_use_their_labs_ids():
    """A module of support.OWN_LAB_MODULES (THIRD_LAB_MODULES) runs on conftest's own_lab (third_lab), under
    xdist beside the session lab's modules: it must not reach for the session lab's containers."""

    assert not set(OWN_LAB_MODULES) & set(THIRD_LAB_MODULES)
    for name in OWN_LAB_MODULES + THIRD_LAB_MODULES:
        path = TESTS / "lab" / name
        assert path.is_file(), f"support names {name} as a lab module, which is not in tests/lab/"
        text = path.read_text()
        assert "LAB_CONTAINERS" not in text and not re.search(r"(?<!--steps )\b20[01]\b", text), \
            f"{name} names the session lab's containers: take ids from support.lab_ids(__file__)"


def test_xdist_work_units_keep_each_lab_on_one_worker():
    """conftest's scheduler: one unit for the session lab's modules, one for own_lab's, one for third_lab's,
    one for the newcomer tier, a unit per file elsewhere; every lab module in one of the three lab units but
    those that make a lab of their own."""
    units = {str(p.relative_to(ROOT)): work_unit(str(p.relative_to(ROOT))) for p in all_test_files()}
    lab = {path for path, unit in units.items()
           if tier_of(ROOT / path) == "lab" and Path(path).name not in SELF_MADE_LAB_MODULES}
    assert {units[path] for path in lab} == {"lab", "lab-own", "lab-third"}
    assert {Path(path).name for path in lab if units[path] == "lab-own"} == set(OWN_LAB_MODULES)
    assert {Path(path).name for path in lab if units[path] == "lab-third"} == set(THIRD_LAB_MODULES)
    assert {unit for path, unit in units.items() if tier_of(ROOT / path) == "newcomer"} == {"newcomer"}
    others = [path for path in units if tier_of(ROOT / path) in ("unit", "local")]
    assert all(units[path] == path for path in others) and len(others) > 40


def test_the_long_files_are_handed_out_right_after_the_lab():
    """conftest's run order (the scheduler hands units out in it): the lab's modules, then the newcomer tier and
    support.LONG_FILES, then the other local files, then the unit files, each tier's files in their order."""
    assert all((TESTS / "local" / name).is_file() for name in LONG_FILES), LONG_FILES
    given = ["tests/unit/test_layers.py", "tests/local/test_shell.py", f"tests/local/{LONG_FILES[1]}",
             "tests/newcomer", f"tests/local/{LONG_FILES[0]}", "tests/lab/test_oplock_lab.py",
             "tests/local/test_code_local.py"]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *given],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    files = list(dict.fromkeys(line.split("::")[0] for line in r.stdout.splitlines() if "::" in line))
    assert files == ["tests/lab/test_oplock_lab.py", f"tests/local/{LONG_FILES[1]}", "tests/newcomer/test_newcomer.py",
                     f"tests/local/{LONG_FILES[0]}", "tests/local/test_shell.py", "tests/local/test_code_local.py",
                     "tests/unit/test_layers.py"], r.stdout[-3000:] + r.stderr[-2000:]


def test_a_module_that_makes_its_own_lab_uses_none_of_conftests():
    """A module of support.SELF_MADE_LAB_MODULES runs on any worker, beside the three labs: it must ask for
    none of conftest's lab fixtures and name none of their containers (its own ids, machine-wide)."""
    shared = {"lab", "lab_session", "lab_hosts", "deployed", "demo_repo", "ct", "warm", "session_lab", "own_lab",
              "third_lab"}
    for name in SELF_MADE_LAB_MODULES:
        path = TESTS / "lab" / name
        assert path.is_file(), f"support.SELF_MADE_LAB_MODULES names {name}, which is not in tests/lab/"
        tree = ast.parse(path.read_text())
        asked = {a.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                 for a in node.args.args}
        fixtures = {a.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                    and any("fixture" in ast.unparse(d) for d in node.decorator_list) for a in node.args.args}
        assert not (asked | fixtures) & shared, f"{name} uses conftest's lab: {sorted((asked | fixtures) & shared)}"
        ids = {str(i) for i in (*OWN_LAB_CONTAINERS, *THIRD_LAB_CONTAINERS)}
        text = path.read_text()
        assert "LAB_CONTAINERS" not in text and not re.search(r"(?<!--steps )\b20[01]\b", text), name
        assert not any(re.search(rf"\b{i}\b", text) for i in ids), f"{name} names another lab's containers"


def test_a_test_module_is_imported_only_from_its_own_folder():
    """A tier runs alone (`pytest tests/lab`): what another tier's test module holds comes from support.py."""
    crossing = []
    for p in all_test_files():
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.startswith("test_") and not (p.parent / f"{name}.py").is_file():
                    crossing.append(f"{p.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert crossing == [], crossing
