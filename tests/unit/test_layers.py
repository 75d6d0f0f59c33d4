"""The package's layers, read statically (ast, nothing imported): facts (the read side) never import
operations, and nothing below remote.runs, remote.doctor and the CLI imports them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent / "remote"


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


def module_files(name: str) -> list[Path]:
    """remote.<name>'s files: the module, or every module of the package."""
    single = ROOT / f"{name}.py"
    return [single] if single.exists() else sorted((ROOT / name).rglob("*.py"))


def imports_of(name: str) -> set[str]:
    """Every module remote.<name> imports, over all its files where it is a package (its own modules left out)."""
    own = f"remote.{name}"
    return {m for path in module_files(name) for m in imported_modules(path)
            if not (m == own or m.startswith(own + "."))}


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
    return sorted((ROOT / "cli").rglob("*.py")) + [ROOT.parent / "tasks.py"]


def test_the_command_line_and_the_invoke_tasks_use_only_the_public_api():
    """remote/cli/ (the invoke collection with it) and the checkout's tasks.py reach operations and the transport
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
    assert (ROOT / "cli" / "table.py").exists() and (ROOT / "cli" / "format.py").exists()


def test_the_face_check_sees_an_operation_imported_by_the_command_line(tmp_path, monkeypatch):
    pkg = tmp_path / "remote"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "cli" / "extra.py").write_text("def f():\n    from ..ops.jobs import stop\n")
    for name in ("table.py", "format.py"):
        (pkg / "cli" / name).write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    with pytest.raises(AssertionError, match="extra.py"):
        test_the_command_line_and_the_invoke_tasks_use_only_the_public_api()


# What the command line may import of remote: the API and the words it speaks (its errors, its result and
# event types, the escaping of what a container says). Nothing of ops, transport, facts, config or doctor.
CLI_MAY_IMPORT = ("remote.api", "remote.errors", "remote.results", "remote.events", "remote.naming")


def lazy_imports(path: Path) -> set[int]:
    """The line numbers of the imports a file makes inside a function (run only when it is called)."""
    lines = set()
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.update(n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return lines


def cli_offenders() -> dict[str, list[str]]:
    """Each module of remote/cli/ -> what it imports of remote beyond the API and its words (the lab only
    inside a function: `remote lab ...`)."""
    bad = {}
    for path in sorted((ROOT / "cli").rglob("*.py")):
        lazy = lazy_imports(path)
        found = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # remote/cli/x.py: level 1 is remote.cli, level 2 is remote
                    base = ".".join(["remote", "cli"][:3 - node.level] + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if base in ("remote", "remote.cli") else base for a in node.names]
            for name in names:
                if not (name == "remote" or name.startswith("remote.")) or name.startswith("remote.cli"):
                    continue
                if name in ("remote.__version__",) or any(name == m or name.startswith(m + ".") for m in CLI_MAY_IMPORT):
                    continue
                if (name == "remote.lab" or name.startswith("remote.lab.")) and node.lineno in lazy:
                    continue
                found.append(name)
        if found:
            bad[str(path.relative_to(ROOT.parent))] = sorted(set(found))
    return bad


def test_the_command_line_imports_only_the_api_and_its_errors():
    """remote/cli/ is a client like any script: remote.api, remote.errors (and the result, event and
    escaping modules the API speaks with); the lab only inside the `remote lab ...` tasks."""
    assert cli_offenders() == {}


def test_the_cli_check_sees_config_doctor_and_an_eager_lab(tmp_path, monkeypatch):
    pkg = tmp_path / "remote" / "cli"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from .. import config as cfg\nfrom ..lab import Lab\nfrom ..api import open\n"
                              "def f():\n    from ..doctor import passport_line\n    from ..lab.ns import open_lab\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "remote")
    assert cli_offenders() == {"remote/cli/x.py": ["remote.config", "remote.doctor", "remote.lab"]}


MUTATORS = {"append", "extend", "insert", "remove", "pop", "clear", "update", "setdefault", "add", "discard"}
CLI_REGISTRIES = {("remote/cli/table.py", "TASKS")}  # the task table `@task` fills as the modules load
PER_THREAD = {"local", "ContextVar"}  # threading.local(), contextvars.ContextVar(...): state by thread, kept by module


def cli_module_state() -> dict[str, list[str]]:
    """Each module of remote/cli/ -> the module-level state its functions keep (a name they mutate: `.append`,
    `[k] = v`, `del x[k]`, a `global` statement; a threading.local or ContextVar of the module): a command line
    keeps no state between its calls (`-c all` once kept the fleet in progress in such a list, for the task
    functions it ran per container), only the task table its modules fill as they load."""
    bad = {}
    for path in sorted((ROOT / "cli").rglob("*.py")):
        rel = str(path.relative_to(ROOT.parent))
        tree = ast.parse(path.read_text(), str(path))
        names = set()
        found = []
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
                    value = node.value
                    called = value.func if isinstance(value, ast.Call) else None
                    if (isinstance(called, ast.Attribute) and called.attr in PER_THREAD
                            or isinstance(called, ast.Name) and called.id in PER_THREAD):
                        found.append(f"{t.id} (per thread)")
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {
                n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            for node in ast.walk(fn):
                if isinstance(node, ast.Global):
                    found += [f"{n} (global)" for n in node.names]
                target = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                    target = node.func.value
                elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                    for t in (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]):
                        if isinstance(t, ast.Subscript):
                            target = t.value
                if isinstance(target, ast.Name) and target.id in names - local and (rel, target.id) not in CLI_REGISTRIES:
                    found.append(target.id)
        if found:
            bad[rel] = sorted(set(found))
    return bad


@pytest.mark.fault("The command line keeping a fleet in a module global", "no module of remote/cli/ keeps state "
                   "between calls (a mutated module-level name, a `global`, a per-thread local): `-c all` hands "
                   "one API call per container to the library instead of sharing a fleet with its own task "
                   "functions (tests/unit/test_cli_fanout.py runs them)")
def test_the_command_line_keeps_no_module_level_state():
    assert cli_module_state() == {}


def test_the_state_check_sees_a_shared_fleet_a_global_and_a_thread_local(tmp_path, monkeypatch):
    pkg = tmp_path / "remote" / "cli"
    pkg.mkdir(parents=True)
    (pkg / "table.py").write_text("TASKS = {}\n_current: list = []\ndef register(fn):\n    TASKS['x'] = fn\n"
                                  "def sharing(fleet):\n    _current.append(fleet)\n")
    (pkg / "x.py").write_text("import threading\n_pending = threading.local()\ncount = 0\nseen = {}\n"
                              "def f(k):\n    global count\n    count += 1\n    del seen[k]\n"
                              "def g(seen):\n    seen.clear()\n    mine = seen\n    seen = {}\n    seen['a'] = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "remote")
    assert cli_module_state() == {"remote/cli/table.py": ["_current"],
                                  "remote/cli/x.py": ["_pending (per thread)", "count (global)", "seen"]}


def test_nothing_in_the_library_imports_the_lab_or_the_command_line():
    """The lab (the pct double, the ns lab, the unit tiers' FakeTransport) and remote.testing are clients:
    no module of the library imports them, so `import remote` can never load them."""
    users = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("lab", "cli", "testing"):
            continue  # the clients themselves
        found = sorted(m for m in imported_modules(path)
                       if any(m == f or m.startswith(f + ".") for f in ("remote.lab", "remote.cli", "remote.testing")))
        if found:
            users[str(rel)] = found
    assert users == {}


def test_the_api_reaches_the_operations_never_the_transport():
    """remote/api/ (the public API) reaches what runs commands through the operations only (a session from
    remote.ops.session), never remote.transport; and no module of it is over 500 lines (one noun each)."""
    assert offenders("api", ("remote.transport", "remote.lab", "remote.cli")) == {}
    long = {p.name: n for p in sorted((ROOT / "api").glob("*.py")) if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


OVER_700_TODAY: set[str] = set()  # modules allowed over 700 lines until they are split: none today


def test_no_module_of_the_library_is_over_700_lines():
    long = {str(p.relative_to(ROOT.parent)) for p in sorted(ROOT.rglob("*.py")) if len(p.read_text().splitlines()) > 700}
    assert long <= OVER_700_TODAY, f"over 700 lines: {sorted(long - OVER_700_TODAY)}"


def test_the_shared_vocabulary_sits_below_the_operations():
    """remote.results (what operations return), remote.events (their progress), remote.target (a container
    resolved once) and remote.executor (work on many containers) sit below the operations: they import no
    operation, nothing that reads runs, no doctor, API or command line; results and events not even the
    transport."""
    above = ("remote.ops", "remote.runs", "remote.doctor", "remote.gpudoctor", "remote.api", "remote.cli")
    bad = {}
    for name in ("results", "events", "target", "executor"):
        forbidden = above + (("remote.transport",) if name in ("results", "events") else ())
        found = sorted(m for m in imports_of(name) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if found:
            bad[name] = found
    assert bad == {}


def swaps_of_the_standard_streams(path: Path) -> list[int]:
    """Lines of a file that assign sys.stdout or sys.stderr (a process-wide swap)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            for one in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(one, ast.Attribute) and one.attr in ("stdout", "stderr") \
                        and isinstance(one.value, ast.Name) and one.value.id == "sys":
                    lines.append(node.lineno)
    return lines


def test_nothing_in_remote_swaps_sys_stdout_or_stderr(tmp_path):
    """Progress reaches a user through events and callbacks (remote.events), never a process-wide swap of
    sys.stdout/sys.stderr (the command line marks a container's lines with say())."""
    found = {str(p.relative_to(ROOT.parent)): lines for p in sorted(ROOT.rglob("*.py"))
             if (lines := swaps_of_the_standard_streams(p))}
    assert found == {}
    planted = tmp_path / "x.py"
    planted.write_text("import sys\nold = sys.stdout\nsys.stdout, sys.stderr = old, old\n")
    assert swaps_of_the_standard_streams(planted) == [3, 3]  # both names of the one line


def test_importing_the_library_loads_neither_the_lab_nor_the_command_line():
    """What `import remote` and the API load, read from sys.modules in a fresh interpreter."""
    import subprocess

    code = ("import sys, remote, remote.api, remote.errors; remote.open; remote.Fleet; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'remote')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent, check=True)
    loaded = r.stdout.split()
    assert "remote.api" in loaded
    assert [m for m in loaded if m.startswith(("remote.lab", "remote.cli", "remote.testing"))] == []


def test_only_remote_fabric_imports_fabric():
    """fabric is the dependency of remote.fabric alone (the `fabric` extra): nothing else imports it."""
    users = {str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
             if any(m == "fabric" or m.startswith("fabric.") for m in imported_modules(p))}
    assert users <= {"remote/fabric.py"}
def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of remote/ -> the modules of remote/ it imports, anywhere in the file (lazy imports too).
    `from X import a` is an import of X.a where that is a module, else of X (a name X defines)."""
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: each group of modules that import each other (a strongly connected component
    of more than one), as one path through it that ends where it began, sorted."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(set(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        start = min(group)
        path, seen = [start], {start}
        while True:  # walk inside the group until the path closes
            nxt = sorted(graph[path[-1]] & group)
            back = start if start in nxt else None
            if back and len(path) > 1 or not (set(nxt) - seen):
                path.append(back or nxt[0])
                break
            step = min(set(nxt) - seen)
            path.append(step)
            seen.add(step)
        out.append(path)
    return sorted(out)


def test_the_circle_finder_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "remote" / "t"
    pkg.mkdir(parents=True)
    (tmp_path / "remote" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("A = 1\ndef f():\n    from .b import B\n")
    (pkg / "b.py").write_text("from . import A\nB = 2\n")  # b -> the package -> a -> b
    (pkg / "c.py").write_text("from . import a\n")  # a module of the package, not the package: no circle
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "remote")
    assert circles(import_graph()) == [["remote.t", "remote.t.a", "remote.t.b", "remote.t"]]


@pytest.mark.fault("Import circle in remote/", "tests/unit/test_layers.py names every module of remote/ that imports "
                   "itself through others (function-level imports included), and fails on it")
def test_no_module_imports_itself_through_others():
    found = circles(import_graph())
    assert found == [], "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_what_a_warm_exec_imports_pulls_in_no_operation_paramiko_or_yaml(tmp_path):
    """The modules a warm `remote exec` runs through (the command line, the API, the config with its file
    kept, the kept connection's client, the job environment), imported in a fresh interpreter, load no
    operation but the job environment, no GPU facts, no paramiko, no yaml and no ctypes (bench/oneoff.py
    measures the time)."""
    import subprocess

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: {h: {address: 192.0.2.1}}\ncontainers: {200: {host: h}}\n")
    load = "import sys; from remote import config; config.load(sys.argv[1])"
    code = (load + "; import remote.cli, remote.api, remote.ops.jobenv, remote.transport.session, "
            "remote.transport.keeper; print(' '.join(sorted(sys.modules)))")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path), "PYTHONPATH": str(ROOT.parent)}
    subprocess.run([sys.executable, "-c", load, str(hosts)], env=env, check=True)  # the file's first command: yaml
    r = subprocess.run([sys.executable, "-c", code, str(hosts)], env=env, capture_output=True, text=True, check=True)
    loaded = set(r.stdout.split())
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("paramiko", "yaml", "ctypes", "fabric", "invoke")
                   or m.startswith(("remote.facts.gpu", "remote.ops.")) and m != "remote.ops.jobenv")
    assert "remote.ops.jobenv" in loaded and heavy == []


def test_results_and_events_import_nothing_of_remote_but_its_errors():
    """The vocabulary every layer speaks (what operations return, what they report) depends on nothing of
    remote above the exception tree: a results or event type never drags in config, naming or a transport."""
    bad = {}
    for name in ("results", "events"):
        found = sorted(m for m in imports_of(name)
                       if (m == "remote" or m.startswith("remote.")) and not (m == "remote.errors"
                                                                            or m.startswith("remote.errors.")))
        if found:
            bad[name] = found
    assert bad == {}


def target_builders(root: Path) -> dict[str, list[int]]:
    """Each module of the library outside target.py -> the lines that call remote.target's Target(...) or
    HostTarget(...) (by name where it imports them, or as `target.Target(...)`; transport/sshconfig.py's own
    SSH Target is another class)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root) == Path("target.py"):
            continue
        imported = imported_modules(path)
        by_name = {n for n in ("Target", "HostTarget") if f"remote.target.{n}" in imported}
        if not by_name and "remote.target" not in imported:
            continue
        lines = [n.lineno for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Call)
                 and (getattr(n.func, "id", None) in by_name or getattr(n.func, "attr", None) in ("Target", "HostTarget"))]
        if lines:
            out[str(path.relative_to(root.parent))] = lines
    return out


def test_a_target_is_built_only_in_target_py(tmp_path, monkeypatch):
    """remote.target.resolve (resolve_host) is the one place a container id becomes a Target: nothing else
    builds one by hand (with another spec, or a second pct Container)."""
    assert target_builders(ROOT) == {}
    (tmp_path / "remote" / "ops").mkdir(parents=True)
    (tmp_path / "remote" / "ops" / "x.py").write_text("from .. import target\nt = target.Target(s, spec)\n")
    (tmp_path / "remote" / "ops" / "y.py").write_text("from ..target import HostTarget\n\nh = HostTarget(s, host)\n")
    (tmp_path / "remote" / "ops" / "z.py").write_text("class Target:\n    pass\n\n\nt = Target()\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "remote")
    assert target_builders(tmp_path / "remote") == {"remote/ops/x.py": [2], "remote/ops/y.py": [3]}


PREFIXES = ("==> ", "-- ", "!! ")
# Where a line is still read for its prefix (none: every operation reports through typed events, and none may
# start reading one back).
PREFIX_READERS_TODAY: dict[str, int] = {}


def prefix_readers(root: Path) -> dict[str, int]:
    """Each module outside remote/sh -> how many places read a progress prefix (==>, --, !!) back out of a
    line: `startswith(...)`/`removeprefix(...)` of one, a slice compared with one (`line[:3] == "!! "`), a
    regular expression that begins with one (`re.match(r"^==> ", line)`)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "sh":
            continue  # the in-container scripts speak in lines: reading them there is their protocol
        n = 0
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and node.args:
                attr = getattr(node.func, "attr", None)
                arg = node.args[0]
                texts = [e.value for e in (arg.elts if isinstance(arg, ast.Tuple) else [arg])
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if attr in ("startswith", "removeprefix"):
                    n += any(t.startswith(PREFIXES) for t in texts)
                elif attr in ("match", "search", "fullmatch", "compile") and getattr(node.func, "value", None) \
                        and getattr(node.func.value, "id", None) == "re":
                    n += any(t.lstrip("^").startswith(PREFIXES) for t in texts)
            elif isinstance(node, ast.Compare) and any(isinstance(s, ast.Subscript) for s in [node.left, *node.comparators]):
                n += any(isinstance(c, ast.Constant) and c.value in PREFIXES for c in [node.left, *node.comparators])
        if n:
            out[str(path.relative_to(root.parent))] = n
    return out


def test_no_progress_prefix_is_sniffed_outside_the_in_container_scripts(tmp_path):
    """Progress travels as typed events (remote.events); the command line renders them. No module parses
    `==> ` / `-- ` / `!! ` back out of a line, but the one reader the operations' old lines still need."""
    assert prefix_readers(ROOT) == PREFIX_READERS_TODAY
    (tmp_path / "remote" / "cli").mkdir(parents=True)
    (tmp_path / "remote" / "cli" / "x.py").write_text("def f(t):\n    return t.startswith(('-- in progress: ', 'x'))\n")
    (tmp_path / "remote" / "api" / "y.py").parent.mkdir()
    (tmp_path / "remote" / "api" / "y.py").write_text(
        "import re\n\n\ndef g(t):\n    return t[:3] == '!! ' or re.match(r'^==> (.*)', t) or t.removeprefix('-- ')\n")
    (tmp_path / "remote" / "sh").mkdir()
    (tmp_path / "remote" / "sh" / "z.py").write_text("def h(t):\n    return t.startswith('==> ')\n")  # its protocol
    assert prefix_readers(tmp_path / "remote") == {"remote/cli/x.py": 1, "remote/api/y.py": 3}


@pytest.mark.fault("The lab in the product wheel", promise="nothing of remote/ but the lab's own tasks "
                   "(remote/cli/labtasks.py) imports remote.lab, and the wheel leaves it out (pyproject.toml): the "
                   "tests' doubles are not the product; remote.testing is the users' test double")
def test_nothing_but_the_lab_tasks_imports_the_lab_and_the_wheel_leaves_it_out():
    import tomllib

    importing = {str(p.relative_to(ROOT.parent)) for p in sorted(ROOT.rglob("*.py"))
                 if "lab" not in p.relative_to(ROOT).parts[:1]
                 and any(m == "remote.lab" or m.startswith("remote.lab.") for m in imported_modules(p))}
    assert importing == {"remote/cli/labtasks.py"}
    wheel = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "remote/lab" in wheel["exclude"]


# -- one calling convention: a Target in (issue 38) ----------------------------------------------------------

# The functions of ops/, runs/ and facts/ that still take (ct, spec) instead of a Target: none (the pure
# primitives on one pct Container take `ct` alone: files, oplock).
CT_SPEC_TODAY: dict[str, list[str]] = {}
# The functions below remote/api that still take an `echo` line reporter instead of reporting through their
# Target (t.step/note/warn/output): none, and none may be added. What is no one container's reports through the
# session's sink (cluster's notes, a dry run's commands) or remote.target.reporter(session) (a multi-node run
# as a whole).
ECHO_TODAY: dict[str, list[str]] = {}


def signatures(root: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(module -> its functions of ops/, runs/, facts/ that take both a `ct` and a `spec`; module -> its
    functions outside api/, cli/, sh/ and lab/ with an `echo` parameter, and its classes with an `echo` field
    (`Class.echo`))."""
    ct_spec: dict[str, list[str]] = {}
    echo: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        name = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and parts[0] not in ("api", "cli", "sh", "lab"):
                echo.setdefault(name, []).extend(
                    f"{node.name}.echo" for f in node.body
                    if isinstance(f, ast.AnnAssign) and getattr(f.target, "id", None) == "echo")
                if not echo[name]:
                    del echo[name]
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = [a.arg for a in node.args.posonlyargs + node.args.args]
            if parts[0] in ("ops", "runs", "facts") and {"ct", "spec"} <= set(args):
                ct_spec.setdefault(name, []).append(node.name)
            if parts[0] not in ("api", "cli", "sh", "lab") and "echo" in args + [a.arg for a in node.args.kwonlyargs]:
                echo.setdefault(name, []).append(node.name)
    return ct_spec, echo


def test_operations_take_a_target_and_report_through_it(tmp_path):
    """No function in ops/, runs/, facts/ that takes a `ct` and a `spec` (in any place) and no `echo=` below
    the API (an AST check): every operation takes a Target."""
    ct_spec, echo = signatures(ROOT)
    assert ct_spec == CT_SPEC_TODAY
    assert echo == ECHO_TODAY
    (tmp_path / "remote" / "ops").mkdir(parents=True)
    (tmp_path / "remote" / "ops" / "x.py").write_text("def f(ct, spec, n):\n    pass\n\n\ndef g(t, *, echo=None):\n"
                                                       "    pass\n\n\ndef h(t, ct, spec):\n    pass\n\n\n"
                                                       "class S:\n    echo: object = None\n")
    assert signatures(tmp_path / "remote") == ({"remote/ops/x.py": ["f", "h"]}, {"remote/ops/x.py": ["g", "S.echo"]})
