"""The public Python API (remote.api) without the lab: its names and signatures, what `import remote`
loads, the errors it raises on bad input, a fleet's result per container, and that it prints nothing."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import remote
from remote import cli

SNAPSHOT = Path(__file__).parent.parent / "data" / "public_api.txt"

HOSTS = """hosts:
  nowhere: {address: 192.0.2.1, connect_timeout: 1}
containers:
  200: {host: nowhere}
  201: {host: nowhere}
train: {command: python t.py}
"""


def public_api() -> str:
    """Every public name of `remote` and, for classes, their public methods and properties, with signatures."""
    lines = []
    for name in sorted(remote.__all__):
        obj = getattr(remote, name)
        if inspect.isclass(obj):
            kind = "exception" if issubclass(obj, BaseException) else "class"
            bases = ", ".join(b.__name__ for b in obj.__bases__)
            lines.append(f"{kind} {name}({bases})")
            if kind == "exception":
                continue
            if hasattr(obj, "__dataclass_fields__"):
                for f in obj.__dataclass_fields__.values():
                    if not f.name.startswith("_"):
                        lines.append(f"  field {f.name}: {f.type}")
            else:
                for attr, kind_ in own_and_inherited(obj, "__annotations__").items():
                    lines.append(f"  attribute {attr}: {kind_}")
            for attr, value in sorted(own_and_inherited(obj).items()):
                if attr.startswith("_"):
                    continue
                if isinstance(value, property):
                    lines.append(f"  property {attr}")
                elif inspect.isfunction(value):
                    lines.append(f"  def {attr}{inspect.signature(value)}")
        elif callable(obj):
            lines.append(f"def {name}{inspect.signature(obj)}")
        else:
            lines.append(f"{name} = {type(obj).__name__}")
    return "\n".join(lines) + "\n"


def own_and_inherited(cls: type, attr: str | None = None) -> dict:
    """A class's namespace (or one mapping of it, such as __annotations__) merged over its bases' in remote
    (remote.api.Fleet's methods are partly FleetBase's): what a user of the class sees."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        if klass is cls or klass.__module__.startswith("remote"):
            merged.update(vars(klass) if attr is None else vars(klass).get(attr, {}))
    return merged


def test_the_public_names_and_signatures_are_the_snapshot():
    """A change to a public name or signature is a visible change: this snapshot changes with it
    (regenerate: REMOTE_API_SNAPSHOT=write pytest tests/unit/test_library.py -k snapshot)."""
    now = public_api()
    if os.environ.get("REMOTE_API_SNAPSHOT") == "write":
        SNAPSHOT.write_text(now)
    assert now == SNAPSHOT.read_text()


def test_the_contract_names_are_public():
    for name in ("open", "Fleet", "Container", "Group", "GroupResult", "Result", "Transfer", "Run", "Finding",
                 "RemoteError", "ConfigError", "ContainerNotRunning", "JobError", "UnknownRun", "BusyError"):
        assert name in remote.__all__ and getattr(remote, name) is not None
    assert remote.ConfigError is __import__("remote.errors").errors.ConfigError
    with pytest.raises(AttributeError):
        remote.no_such_name  # noqa: B018


def test_import_remote_loads_no_transport_paramiko_or_yaml():
    code = ("import sys, remote; remote.RemoteError; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('paramiko', 'yaml', 'invoke', 'fabric') "
            "or m.startswith(('remote.transport', 'remote.ops', 'remote.api'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


def test_a_fleet_that_only_reads_its_config_connects_nothing_and_prints_nothing(tmp_path, capsys):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    with remote.open(path) as fleet:
        assert fleet.ids == [200, 201] and fleet.select("all") == [200, 201]
        assert [c.id for c in fleet.containers([201])] == [201]
        assert fleet.container(200).host == "nowhere"
        assert fleet._made is None
    assert capsys.readouterr() == ("", "")


def test_bad_input_raises_the_documented_errors(tmp_path, capsys):
    with pytest.raises(remote.ConfigError, match="missing.yaml"):
        remote.open(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: {}\n")
    with pytest.raises(remote.ConfigError, match="bad.yaml: hosts"):
        remote.open(bad)
    with pytest.raises(remote.ConfigError, match="<dict>"):
        remote.open({"hosts": {}})
    with remote.open({"hosts": {"h": {"address": "192.0.2.1"}}, "containers": {"200": {"host": "h"}}}) as fleet:
        with pytest.raises(remote.ConfigError, match="999"):
            fleet.container(999)
        with pytest.raises(remote.ConfigError, match="nogroup"):
            fleet.containers("nogroup")
    assert capsys.readouterr() == ("", "")


def test_a_group_returns_a_result_per_container_and_prints_nothing(tmp_path, capsys):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)

    def work(ct):
        if ct.id == 201:
            raise remote.BusyError(201, "busy: another deploy")
        print("never shown")  # a library call that printed would be seen
        return ct.id * 2

    with remote.open(path) as fleet:
        import contextlib
        import io

        sink = io.StringIO()
        with contextlib.redirect_stdout(sink):
            result = fleet.containers("all").map(work)
    assert isinstance(result, remote.GroupResult)
    assert result.succeeded == {200: 400}
    assert list(result.failed) == [201] and isinstance(result.failed[201], remote.BusyError)
    assert result[201].exit_code == 3 and not result.ok
    assert capsys.readouterr() == ("", "")


def test_fail_fast_skips_the_containers_not_started(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS.replace("connect_timeout: 1}", "connect_timeout: 1, max_parallel: 1}"))

    def work(ct):
        raise remote.JobError("no")

    with remote.open(path) as fleet:
        result = fleet.containers("all").map(work, fail_fast=True)
    assert result[200].error is not None and result[201].skipped and not result[201].ok


@pytest.mark.fault("train interrupted while following", "Ctrl-C while `remote train` follows the log stops "
                   "following, says the job keeps running, and exits 130 (the README's status), not 0")
def test_train_interrupted_while_following_exits_130(tmp_path, monkeypatch, capsys):
    from remote.ops import jobs

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    pre = jobs.Preflight("abc", {}, None, [])
    monkeypatch.setattr(jobs, "preflight", lambda t, host_gpu=None, force=False: pre)
    monkeypatch.setattr(jobs, "launch", lambda t, p, force=False, held=None, command=None, env=None, **checkpoint:
                        ("run-1", 42))
    monkeypatch.setattr(jobs.oplock, "hold", lambda ct, what: contextlib.nullcontext(None))  # no lease to take

    def following(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "show_log", following)
    assert cli.run(["train", "-c", "200", "--hosts", str(path)]) == 130
    out, err = capsys.readouterr()
    assert "run run-1 started" in out and "keeps running" in out and err.strip() == "interrupted"
    # Detached, the same start is exit 0, and nothing followed.
    assert cli.run(["train", "-c", "200", "--detach", "--hosts", str(path)]) == 0


@pytest.mark.fault("report --dest (deprecated)", "report's file is --out, as init's; the shipped --dest still "
                   "works, with a warning naming --out; both, differing, is bad input (exit 2)")
def test_report_takes_out_and_still_its_old_dest(tmp_path, monkeypatch, capsys):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    got = []
    monkeypatch.setattr(remote.api.Container, "report", lambda self, run=None, out=None: got.append(out) or Path(out))
    assert cli.run(["report", "-c", "200", "--out", "a.html", "--hosts", str(path)]) == 0
    assert capsys.readouterr().err == ""
    assert cli.run(["report", "-c", "200", "--dest", "b.html", "--hosts", str(path)]) == 0
    assert "--dest is deprecated: use --out" in capsys.readouterr().err
    assert got == ["a.html", "b.html"]
    assert cli.run(["report", "-c", "200", "--dest", "b.html", "--out", "c.html", "--hosts", str(path)]) == 2
    assert "give --out" in capsys.readouterr().err and got == ["a.html", "b.html"]


@pytest.mark.fault("Wrong argument types or values given to the API", "a TypeError or ValueError naming the "
                   "argument, raised before anything connects (never a lost connection, never a traceback from "
                   "deep inside)")
def test_wrong_arguments_are_type_and_value_errors_before_anything_connects(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    with pytest.raises(TypeError, match="source"):
        remote.open(123)  # type: ignore[arg-type]
    with remote.open(path) as fleet:
        ct = fleet.container(200)
        for call, error, words in (
                (lambda: ct.exec(["echo", 5]), TypeError, "argv: every item must be a str, got 5"),
                (lambda: ct.exec(123), TypeError, "argv: expected a str"),
                (lambda: ct.exec([]), ValueError, "argv: an empty argv"),
                (lambda: ct.exec("true", timeout="5"), TypeError, "timeout"),
                (lambda: ct.push(5, "/root/x"), TypeError, "src: expected a path"),
                (lambda: ct.pull("/root/x", 5), TypeError, "dest: expected a path"),
                (lambda: ct.warmup(devices=5), TypeError, "devices: expected a list of str"),
                (lambda: ct.warmup(devices="0,1"), TypeError, "devices: expected a list of str"),
                (lambda: ct.train(detach="no"), TypeError, "detach: expected True or False"),
                (lambda: ct.train(env={"A": 1}), TypeError, "env: expected a mapping of str to str"),
                (lambda: ct.train(args="--steps 3"), TypeError, "args: expected a list of str"),
                (lambda: ct.runs(limit=-1), ValueError, "limit: expected at least 1, got -1"),
                (lambda: ct.runs(limit="5"), TypeError, "limit: expected an int")):
            with pytest.raises(error, match=__import__("re").escape(words)):
                call()
        assert fleet._made is None or not fleet._made._transports  # nothing connected


def test_a_timeout_waiting_for_a_run_is_a_job_timeout_and_a_timeout_error():
    assert issubclass(remote.JobTimeout, remote.JobError) and issubclass(remote.JobTimeout, TimeoutError)
    assert remote.JobTimeout.exit_code == remote.JobError.exit_code


def test_the_library_speaks_of_the_container_argument_and_the_command_line_of_its_flag(tmp_path):
    """No `--container` in the library's messages (a script has no flag); the command line still says it."""
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    with remote.open(path) as fleet:
        for call, words in ((lambda: fleet.container("two hundred"), "container: expected a container id"),
                            (lambda: fleet.container(999), "container: container 999 is not in this file"),
                            (lambda: fleet.container(None), "name one (the container argument)"),
                            (lambda: fleet.select("nogroup"), "container: 'nogroup' is neither")):
            with pytest.raises(remote.ConfigError) as exc:
                call()
            assert words in str(exc.value) and "--container" not in str(exc.value)
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "deploy", "--hosts", str(path)],
                       capture_output=True, text=True, env={**os.environ, "REMOTE_CONTAINER": ""})
    assert r.returncode == 2 and "pass --container" in r.stderr, r.stderr


def test_a_group_reports_typed_events_each_marked_with_its_container(tmp_path, capfd):
    """Progress through one sink (remote.events): each container's lines as events marked with it, its end as
    Done or Failed; nothing reaches file descriptors 1 or 2."""
    from remote.events import Done, Failed, Note, StepStarted

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    got: list = []
    with remote.open(path, events=got.append) as fleet:
        def work(ct):
            ct._target.step(f"working on {ct.id}")  # what an operation on it reports, typed at the source
            ct._target.warn(f"careful {ct.id}")
            if ct.id == 201:
                raise remote.JobError("it broke")
            return ct.id

        result = fleet.containers("all").map(work)
    assert result.succeeded == {200: 200} and isinstance(result.failed[201], remote.JobError)
    by = {(type(e).__name__, e.container) for e in got}
    assert {("StepStarted", 200), ("StepStarted", 201), ("Note", 200), ("Note", 201), ("Done", 200),
            ("Failed", 201)} <= by
    failed = next(e for e in got if isinstance(e, Failed))
    assert failed.line == "it broke" and failed.exit_code == 1
    assert all(isinstance(e, (StepStarted, Note, Done, Failed)) for e in got)
    assert capfd.readouterr() == ("", "")


def test_job_running_and_the_events_module_come_with_import_remote():
    """Issue 40: `remote.JobRunning` (documented) is exported; `remote.events` is in __all__ and there after a
    bare `import remote`, without importing it by name."""
    code = ("import remote; import remote.errors as e; assert remote.JobRunning is e.JobRunning; "
            "assert issubclass(remote.JobRunning, remote.BusyError) and issubclass(remote.JobRunning, remote.JobError); "
            "print(remote.events.StepStarted.__module__, 'events' in remote.__all__, 'JobRunning' in remote.__all__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ,
                       "PYTHONPATH": str(Path(__file__).resolve().parent.parent.parent)})
    assert r.stdout.split() == ["remote.events", "True", "True"], r.stderr


def test_log_returns_the_text_and_a_run_gives_its_text_and_lines(tmp_path):
    """Issue 40: Container.log() returns the log (it returned a RunStatus, the text going only to a sink);
    run.text() and run.lines() beside follow(); stream_log() is the old behaviour."""
    from remote.lab.testing import Expect, FakeTransport
    from remote.transport.session import Session

    log = b"step 1\nbar 10%\rbar 100%\nd\xe9j\xe0 vu\nlast"
    state = "run=R1\npath=/root/runs/R1\npid=7\nalive=0\nexit=0\n--manifest--\n{}\n--tail--\n"

    def follow(argv):
        return "/root/runs/R1/log 0 /root/runs/R1 R1 0" in " ".join(argv)

    def reads_state(argv):
        return "/root/runs" in " ".join(argv) and not follow(argv)

    fake = FakeTransport([Expect(reads_state, stdout=state), Expect(follow, stdout=log),
                          Expect(reads_state, stdout=state), Expect(follow, stdout=log)])
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    with remote.open(path) as fleet:
        fleet._made = Session(fleet.config, transport_factory=lambda host: fake, agent=False)
        ct = fleet.container(200)
        text = ct.log()
        assert isinstance(text, str) and text == log.decode("utf-8", "replace")
        run = ct.run("R1")
        assert run.lines() == ["step 1", "bar 100%", "d\ufffdj\ufffd vu", "last"]
    assert not fake.expected


def test_a_scripts_fleet_starts_no_kept_connection_unless_asked_and_the_cli_keeps_one(tmp_path, monkeypatch):
    """Issue 40 item 10: `with remote.open(...)` leaves no kept-connection process behind (it left one for 60 s);
    keep=True and the command line go through the kept connection, which stays for the next command."""
    from remote.api import base
    from remote.cli import table
    from remote.transport.keeper import KeptTransport

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    with remote.open(path) as fleet:
        assert not isinstance(fleet._session.transport(fleet.config.hosts["nowhere"]), KeptTransport)
    with remote.open(path, keep=True) as fleet:
        assert fleet._keep
    opened = []
    monkeypatch.setattr(base.FleetBase, "__init__", lambda self, config, **kw: opened.append(kw) or None)
    table.fleet_of(str(path))
    assert opened[-1]["keep"] is True


def test_the_kept_connection_gets_its_settings_on_stdin_never_on_its_command_line(tmp_path, monkeypatch):
    """Issue 40 item 10: the keeper's command line held a base64 pickle of the host's settings (`ps` shows it to
    every user of the machine); they come on stdin."""
    import subprocess as sp

    from remote import config as cfg
    from remote.transport import keeper

    read_end, write_end = os.pipe()
    os.write(write_end, b'{"ok": 1}\n')
    os.close(write_end)
    seen = {}

    class Popen:
        def __init__(self, argv, **kw):
            seen["argv"], seen["stdin"] = argv, kw.get("stdin")
            self.stdin = open(tmp_path / "stdin", "wb")
            self.stdout = os.fdopen(read_end, "rb")

        def wait(self):
            return 0

    monkeypatch.setattr(sp, "Popen", Popen)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    host = cfg.load(str(path)).hosts["nowhere"]
    kept = keeper.KeptTransport(host, str(path))
    kept._spawn()
    assert seen["stdin"] == sp.PIPE and len(seen["argv"]) == 4  # python -c BOOT ROOT: nothing more
    assert not any("192.0.2.1" in a or str(kept.path) in a for a in seen["argv"])
    given = json.loads((tmp_path / "stdin").read_text())
    assert given["path"] == str(kept.path) and given["host"]
