"""The package's layers, read statically (ast, nothing imported): facts (the read side) never import
operations, and nothing below remote.runs, remote.doctor and the CLI imports them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "remote"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports (relative imports resolved against its package), lazy ones included."""
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from .. import ops`
    return found


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if bad:
            out[str(path.relative_to(ROOT.parent))] = bad
    return out


def test_the_import_reader_sees_relative_lazy_and_package_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "remote" / "facts"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("def f():\n    from ..ops import jobs\nfrom .. import ops\nimport remote.ops.venv\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "remote")
    assert {"remote.ops", "remote.ops.jobs", "remote.ops.venv"} <= imported_modules(pkg / "x.py")


@pytest.mark.fault("facts import no operation", "no module of remote/facts imports remote/ops (or what sits above "
                   "it): the read side that operations plan from has no circle with them")
def test_facts_never_import_operations():
    assert offenders("facts", ("remote.ops", "remote.runs", "remote.doctor", "remote.cli")) == {}


def test_operations_never_import_what_reads_runs():
    assert offenders("ops", ("remote.runs", "remote.doctor", "remote.cli")) == {}
    assert offenders("transport", ("remote.facts", "remote.ops", "remote.runs", "remote.doctor", "remote.cli")) == {}


def faces() -> list[Path]:
    """The command line and the invoke collection: thin faces of the public API (remote.api)."""
    return sorted(ROOT.glob("cli*.py")) + [ROOT / "invoke_tasks.py", ROOT / "tasks.py", ROOT.parent / "tasks.py"]


def test_the_command_line_and_the_invoke_tasks_use_only_the_public_api():
    """remote/cli*.py, the invoke collection and the checkout's tasks.py reach operations and the transport
    only through remote.api: whatever they do, a script can do too."""
    forbidden = ("remote.ops", "remote.transport")
    bad = {}
    for path in faces():
        if not path.exists():
            continue
        found = sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if found:
            bad[path.name] = found
    assert bad == {}
    assert (ROOT / "cli_table.py").exists() and (ROOT / "cli_format.py").exists()


def test_the_face_check_sees_an_operation_imported_by_the_command_line(tmp_path, monkeypatch):
    pkg = tmp_path / "remote"
    pkg.mkdir()
    (pkg / "cli_extra.py").write_text("def f():\n    from .ops.jobs import stop\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    with pytest.raises(AssertionError, match="cli_extra.py"):
        test_the_command_line_and_the_invoke_tasks_use_only_the_public_api()


def test_only_remote_fabric_imports_fabric():
    """fabric is the dependency of remote.fabric alone (the `fabric` extra): nothing else imports it."""
    users = {str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
             if any(m == "fabric" or m.startswith("fabric.") for m in imported_modules(p))}
    assert users <= {"remote/fabric.py"}
