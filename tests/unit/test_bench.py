"""bench/, read statically: the benchmarks share one helper for a lab and its hosts file (bench/benchlab.py), and
reach remote through its public names (remote.open, Fleet, Container, remote.lab's Lab, the command line) except
where a benchmark measures an inner layer itself, named here with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT

BENCH = ROOT / "bench"
INNER = ("remote.ops", "remote.transport")

# The benchmarks that import remote.ops or remote.transport, and why the public API cannot do their job.
MEASURES_AN_INNER_LAYER = {
    "connect.py": "times SshTransport's own connect against a mute host",
    "cluster.py": "counts status's connections and round trips per node over counting transports (a Session's "
                  "transport_factory: FakeCluster's nodes)",
    "exec_overhead.py": "times the transport's parts one by one: a session, a channel, pct start-up, lxc-attach",
    "doctor.py": "counts doctor's round trips at the transport (a counting transport) and times the probe alone",
    "gpu_doctor.py": "counts doctor --gpu's round trips at the transport and times preflight's GPU part alone",
    "oneoff.py": "times the kept connection (KeptTransport) beside ssh by hand",
    "follow.py": "drives the job wrapper (ops.jobs.launch) while it kills the server side of the connection",
    "watchdog.py": "launches jobs with the watch's settings (ops.jobs) and reads the watch's own state",
    "deploy.py": "UV_ENV: the environment deploy runs uv with, for the rebuild it times beside pip",
    "sudo.py": "ends the kept connections of its own hosts files only (keeper.disconnect; `remote disconnect` "
               "ends every one of the user's)",
}


def bench_files() -> list[Path]:
    return sorted(BENCH.glob("*.py"))


def inner_imports(path: Path) -> set[str]:
    """remote.ops / remote.transport modules a benchmark imports, in its code or in a child program it runs
    (a string of Python source)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(INNER):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(INNER)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                found |= inner_imports_of(ast.parse(node.value))
            except SyntaxError:  # not Python source
                pass
    return found


def inner_imports_of(tree: ast.Module) -> set[str]:
    return {node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(INNER)}


def test_benchmarks_reach_inner_layers_only_where_they_measure_them():
    importing = {p.name: sorted(inner_imports(p)) for p in bench_files() if inner_imports(p)}
    assert set(importing) <= set(MEASURES_AN_INNER_LAYER), \
        f"use remote.open / Fleet / Container (or say here why not): {importing}"
    stale = set(MEASURES_AN_INNER_LAYER) - set(importing)
    assert not stale, f"these no longer import an inner layer: drop them from MEASURES_AN_INNER_LAYER: {stale}"


def test_the_inner_import_check_reads_child_programs_too(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text('CHILD = r"""\nimport sys\nfrom remote.transport.session import Session\n"""\nimport remote\n')
    assert inner_imports(path) == {"remote.transport.session"}


def test_lab_and_hosts_file_setup_live_in_benchlab():
    """No benchmark repeats the lab's set-up (a free port, a Lab in a folder of its own, parsing its ids)."""
    repeated = {}
    for p in bench_files():
        if p.name == "benchlab.py":
            continue
        tree = ast.parse(p.read_text())
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} & {"free_port", "parse_ids"}
        labs = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Lab"
                and any(k.arg in ("dir", "port") for k in n.keywords)]
        if defs or labs:
            repeated[p.name] = (sorted(defs), labs)
    assert repeated == {}, f"use bench/benchlab.py (private_lab, hosts_file, free_port, parse_ids): {repeated}"


def remote_imported_before_the_checkout(tree: ast.Module) -> list[int]:
    """Lines of module-level imports of remote that come before the benchmark puts its own checkout first on
    sys.path (`sys.path.insert(0, ...)`, or importing benchlab, which does it): such an import takes whatever
    remote is found first, e.g. an editable install of another checkout."""
    early = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func) == "sys.path.insert":
            return early
        if isinstance(node, ast.If):  # benchlab: `if str(ROOT) not in sys.path: sys.path.insert(0, ...)`
            if any(isinstance(n, ast.Call) and ast.unparse(n.func) == "sys.path.insert" for n in ast.walk(node)):
                return early
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if "benchlab" in names:
            return early
        if any(n == "remote" or n.startswith("remote.") for n in names):
            early.append(node.lineno)
    return early


def test_benchmarks_import_their_own_checkouts_remote():
    """A benchmark times its checkout's `remote` commands (PYTHONPATH=ROOT); what it computes in its own process
    (a keeper's socket name, a config) must come from that same checkout. bench/oneoff.py imported remote.target
    before putting ROOT first, so with the project venv's editable install of another checkout it looked for
    the kept connection under that checkout's socket name and gave up: no kept connection within 60s."""
    early = {p.name: lines for p in bench_files() if (lines := remote_imported_before_the_checkout(ast.parse(p.read_text())))}
    assert early == {}, f"import remote only after sys.path.insert(0, ROOT) (or `from benchlab import ...`): {early}"


def test_the_checkout_first_check_sees_an_early_import():
    early = ast.parse("import sys\nfrom remote.target import resolve\nsys.path.insert(0, ROOT)\nfrom remote import config\n")
    late = ast.parse("import sys\nsys.path.insert(0, ROOT)\nfrom remote.target import resolve\n")
    via_benchlab = ast.parse("from benchlab import ROOT\nimport remote\n")
    assert remote_imported_before_the_checkout(early) == [2]
    assert remote_imported_before_the_checkout(late) == []
    assert remote_imported_before_the_checkout(via_benchlab) == []
