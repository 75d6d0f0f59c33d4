"""`remote`'s own command line (remote/cli/parse.py over remote/cli/table.py's task table).

What a user types is checked here as `remote` would see it: help in every position connects nowhere,
bad input exits 2 with the flag named and no traceback, only the tasks' options exist, --dry means the
same wherever it stands, and `exec -- ARGV` hands over the argv untouched.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote import cli
from remote import config as cfg
from remote.cli import SHORT_FLAGS, TASKS
from remote.cli import parse as cliparse

ROOT = Path(__file__).resolve().parent.parent.parent
UNREACHABLE = """hosts:
  nowhere: {address: 192.0.2.1, connect_timeout: 1}
containers:
  200: {host: nowhere}
  201: {host: nowhere}
groups:
  pair: [200, 201]
"""


@pytest.fixture
def hosts(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(UNREACHABLE)
    monkeypatch.setenv("REMOTE_HOSTS_FILE", str(path))
    return path


@pytest.fixture
def nothing_connects(monkeypatch):
    """Any session, connection, local command or hosts-file read fails the test."""
    from remote import transport
    from remote.ops import hostsinit
    from remote.transport import session

    def refuse(*a, **k):
        raise AssertionError("connected or loaded although only help was asked for")

    monkeypatch.setattr(session.Session, "__init__", refuse)
    monkeypatch.setattr(transport.SshTransport, "connect", refuse)
    monkeypatch.setattr(transport.LocalTransport, "run", refuse)
    monkeypatch.setattr(transport.LocalTransport, "open_stream", refuse)
    monkeypatch.setattr(hostsinit, "read_host", refuse)
    monkeypatch.setattr(cfg, "load", refuse)


def remote(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    """`remote ARGS` in its own process, as a user runs it."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=full,
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def parse(*args):
    return cliparse.Parser(TASKS).parse(list(args))


def sample_argv(spec: cliparse.Spec) -> list[str]:
    """A valid-looking command line of a task with one of its value options given."""
    argv = spec.name.split()
    valued = [p for p in spec.params.values() if p.takes_value and not p.required]
    if valued:
        argv += [f"--{valued[0].flag}", "x"]
    return argv


# -- help --------------------------------------------------------------------------------------------------

@pytest.mark.fault("--help in any position", promise="the help is printed; nothing is loaded or connected")
def test_help_in_every_position_of_every_task_prints_its_help_and_connects_nowhere(hosts, nothing_connects, capsys):
    for name, spec in TASKS.items():
        words = name.split()
        base = sample_argv(spec)
        positions = [words + ["--help"], words + ["-h"], base + ["-h"], base[:len(words) + 1] + ["--help"],
                     ["-c", "200"] + words + ["--help"] if "container" in spec.params else words + ["--help"],
                     words + ["--help", "--no-such-flag"], words + ["--no-such-flag", "-h"],
                     words + ["-n", "-h"] if "dry" in spec.params else words + ["-h"]]
        for argv in positions:
            code = cli.run(argv)
            out = capsys.readouterr()
            assert code == 0, (argv, out.err)
            assert out.out.startswith(f"Usage: remote {name}"), (argv, out.out[:200])
            assert out.err == "", (argv, out.err)


def test_help_of_exec_is_help_even_as_the_value_of_command(hosts, nothing_connects, capsys):
    for argv in (["exec", "--help"], ["exec", "-h"], ["exec", "-c", "200", "--command", "--help"],
                 ["exec", "-c", "200", "-h", "--", "ls"], ["exec", "-t", "abc", "--help"]):
        assert cli.run(argv) == 0, argv
        assert capsys.readouterr().out.startswith("Usage: remote exec"), argv


def test_program_help_lists_the_users_tasks_with_whole_first_sentences(nothing_connects, capsys):
    assert cli.run(["--help"]) == 0
    text = capsys.readouterr().out
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert listed[:4] == ["init", "create", "config", "status"]
    assert set(listed) == {n for n in TASKS if " " not in n}  # the lab's tasks are not among them
    assert "remote lab up|down" in text
    for spec in TASKS.values():  # a summary is a whole sentence, never cut
        assert spec.summary.endswith((".", ")")), spec.name
    for flag in ("--echo", "--dry", "--complete", "--collection", "--list", "--debug"):  # no invoke core flag
        assert flag not in text


def test_group_help_and_version(nothing_connects, capsys):
    assert cli.run(["lab", "--help"]) == 0
    assert capsys.readouterr().out.startswith("Usage: remote lab up|down")
    assert cli.run(["--version"]) == 0
    assert capsys.readouterr().out == f"remote {cli.tasks.__version__}\n"


def test_help_imports_neither_ssh_nor_invoke_nor_yaml():
    code = ("import sys; from remote.cli import program; program.run(['deploy', '--help'], exit=False); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'paramiko', 'fabric', 'invoke', 'yaml'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr


# -- bad input: exit 2, the flag named, no traceback, nothing connected ------------------------------------

BAD = [
    (["--dry", "status"], "--dry: no task here takes it"),
    (["status", "-f", "hosts.yaml"], "status has no option -f"),
    (["status", "--echo"], "unknown option --echo"),
    (["--echo", "deploy"], "unknown option --echo"),
    (["-e", "deploy"], "-e belongs after its task"),
    (["deploy", "--collection", "x"], "unknown option --collection"),
    (["stop", "--grace", "abc"], "--grace: expected a whole number of seconds, got 'abc'"),
    (["stop", "--grace", "-1"], "--grace: expected 0 to 3600 seconds"),
    (["exec", "-t", "abc", "ls"], "--timeout: expected a number of seconds, got 'abc'"),
    (["exec", "--timeout=0", "ls"], "--timeout: expected 0.001 to 604800 seconds"),
    (["push", "--attempts", "abc"], "--attempts: expected a whole number, got 'abc'"),
    (["runs", "--limit", "0"], "--limit: expected 1 to 100000"),
    (["lab", "up", "--port", "99999"], "--port: expected 1 to 65535"),
    (["lab", "up", "--backend", "docker"], "--backend: expected lxc or ns, got 'docker'"),
    (["lab", "up", "--containers", "20"], "--containers: expected comma-separated container ids"),
    (["logs", "--run", "../../etc"], "--run: expected a run id"),
    (["pull", "--run", "a/b", "--dest", "x"], "--run: expected a run id"),
    (["exec", "-c", "200;reboot", "ls"], "--container: expected a container id"),
    (["stop", "--grace"], "--grace needs a value"),
    (["exec", "-c"], "-c needs a value"),
    (["exec", "-c", "200", "ls", "-la"], "unknown option -l in '-la' (a command's own options go after `--`"),
    (["exec", "-c", "200"], "exec needs `-- CMD ARG...` or --command STRING"),
    (["exec", "-c", "200", "--command", "ls", "--", "ls"], "give --command STRING or `-- CMD ARG...`, not both"),
    (["exec", "-c", "200", "--"], "nothing after `--`"),
    (["deploy", "--", "ls"], "deploy takes no arguments after `--`"),
    (["depoly"], "unknown task 'depoly' (did you mean 'deploy'?)"),
    (["lab"], "`lab` needs one of: up, down"),
    (["lab", "sideways"], "`lab` needs one of: up, down (got 'sideways')"),
    (["deploy", "--dry", "known-good"], "--dry: known-good has no --dry; run it on its own"),
    (["deploy", "-c", "200", "train", "-c", "201", "warmup"], "warmup: which --container?"),
    (["stop", "--grace", "1", "--grace", "2"], "--grace given twice"),
    (["deploy", "--dry=yes"], "--dry takes no value"),
    (["init"], "init needs --address ADDRESS"),
    (["init", "--address", "pve1;id"], "--address: expected a host name"),
    (["-c", "200"], "no task given"),
    # These pass the parser; the hosts file refuses them before anything connects.
    (["deploy", "-c", "999"], "--container: container 999 is not in this file (known: 200, 201)"),
    (["deploy", "-c", "nogroup"], "'nogroup' is neither a container id nor a group"),
    (["deploy"], "several containers configured (200, 201): pass --container"),
    (["status", "--hosts", "/nonexistent/hosts.yaml"], "/nonexistent/hosts.yaml: file not found"),
    (["shell", "-c", "pair"], "one container for a shell"),
    (["push", "-c", "200", "--src", "x"], "--dest required"),
    (["push", "-c", "200", "--src", "/nonexistent/data", "--dest", "/root/data"],
     "--src /nonexistent/data: no such file or folder on this machine"),
]


@pytest.mark.fault("Bad command-line input (40 cases)",
                   promise="exit 2 naming the flag, task or key; no traceback; nothing connected")
@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_naming_the_problem_without_a_traceback(hosts, argv, message):
    r = remote(*argv)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Retrying" not in r.stderr, r.stderr  # nothing tried to connect


def test_a_bad_value_is_refused_before_the_first_task_of_a_chain_runs(hosts, monkeypatch, capsys):
    ran = []
    monkeypatch.setitem(TASKS, "deploy", cliparse.Spec("deploy", lambda c, **k: ran.append(k), "Deploy.",
                                                       TASKS["deploy"].params))
    assert cli.run(["deploy", "-c", "200", "stop", "--grace", "soon"]) == 2
    assert ran == [] and "--grace: expected a whole number" in capsys.readouterr().err


# -- what the options mean -------------------------------------------------------------------------------

@pytest.mark.fault("--dry before, between or after tasks",
                   promise="a dry run of every task of the line, or refused when one has none")
def test_dry_means_the_same_before_between_and_after_tasks():
    for argv in (["--dry", "deploy"], ["deploy", "--dry"], ["deploy", "-n"], ["-n", "deploy"]):
        [call] = parse(*argv)
        assert call.kwargs["dry"] is True, argv
    calls = parse("deploy", "warmup", "--dry", "-c", "200")
    assert [c.kwargs["dry"] for c in calls] == [True, True]
    assert "dry" not in parse("deploy")[0].kwargs  # the function's default (False)


def test_chained_tasks_share_container_and_hosts_but_keep_their_own():
    calls = parse("deploy", "warmup", "train", "-c", "200", "--hosts", "h.yaml")
    assert [(c.spec.name, c.kwargs["container"], c.kwargs["hosts"]) for c in calls] == [
        ("deploy", "200", "h.yaml"), ("warmup", "200", "h.yaml"), ("train", "200", "h.yaml")]
    calls = parse("-c", "201", "deploy", "train", "--detach")
    assert [c.kwargs["container"] for c in calls] == ["201", "201"] and calls[1].kwargs["detach"] is True
    calls = parse("deploy", "-c", "200", "train", "-c", "201")
    assert [c.kwargs["container"] for c in calls] == ["200", "201"]


def test_a_tasks_own_option_stays_with_it():
    calls = parse("deploy", "--force", "train")
    assert calls[0].kwargs["force"] is True and "force" not in calls[1].kwargs
    with pytest.raises(cliparse.Usage, match="deploy has no option --parallel"):
        parse("deploy", "--parallel", "warmup")


def test_values_are_converted_and_short_forms_work():
    [call] = parse("stop", "-g5", "-r", "20261201-101010-ab12", "-c=200")
    assert call.kwargs == {"grace": 5, "run": "20261201-101010-ab12", "container": "200"}
    [call] = parse("train", "-wdn")
    assert call.kwargs == {"warmup": True, "detach": True, "dry": True}
    [call] = parse("exec", "-t", "2.5", "--command=echo hi")
    assert call.kwargs == {"timeout": 2.5, "command": "echo hi"}


def test_exec_takes_the_argv_after_the_double_dash_untouched():
    argv = ["printf", "%s|", "a b", "$HOME", "it's", "*", ";", "--help", "-h", "--", "-c"]
    [call] = parse("exec", "-c", "200", "--", *argv)
    assert call.kwargs["command"] == argv and call.kwargs["container"] == "200"
    [call] = parse("exec", "-c", "200", "echo $HOME; ls")  # the one word after exec: a shell string
    assert call.kwargs["command"] == "echo $HOME; ls"


def test_every_short_flag_has_one_meaning_and_h_is_only_help():
    meaning: dict[str, set[str]] = {}
    for spec in TASKS.values():
        for p in spec.params.values():
            if p.short:
                meaning.setdefault(p.short, set()).add(p.flag)
    assert "h" not in meaning
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}
    assert {s: next(iter(m)) for s, m in meaning.items()} == {v: k for k, v in SHORT_FLAGS.items()}


# -- exit statuses -----------------------------------------------------------------------------------------

def test_a_failed_steps_command_status_never_leaks_out(hosts, monkeypatch, capsys):
    from remote.errors import BusyError, CommandError, ConfigError

    def failing(exc):
        @cli.table.handled
        def fn(c, **k):
            raise exc
        return cliparse.Spec("deploy", fn, "Deploy.", TASKS["deploy"].params)

    for exc, code in ((CommandError("uv pip install", 127, "uv: not found"), 1), (BusyError(200, "busy"), 3),
                      (ConfigError("h.yaml", "k", "bad"), 2), (KeyboardInterrupt(), 130)):
        monkeypatch.setitem(TASKS, "deploy", failing(exc))
        assert cli.run(["deploy"]) == code, exc
        assert "Traceback" not in capsys.readouterr().err


def test_a_bug_is_one_line_and_exit_1_not_a_traceback(hosts, monkeypatch, capsys):
    def buggy(c, **k):
        return {}["missing"]

    monkeypatch.setitem(TASKS, "deploy", cliparse.Spec("deploy", buggy, "Deploy.", TASKS["deploy"].params))
    assert cli.run(["deploy"]) == 1
    err = capsys.readouterr().err
    assert "internal error in `remote deploy`: KeyError" in err and "Traceback" not in err



def test_a_local_file_error_naming_a_containers_path_is_escaped(hosts, monkeypatch, capsys):
    """An OSError that reaches the command line with a path a container chose prints it escaped, never raw."""
    def failing(c, **k):
        raise OSError(36, "File name too long", "/tmp/out/\x1b]0;owned\x07" + "n" * 300)

    monkeypatch.setitem(TASKS, "deploy", cliparse.Spec("deploy", failing, "Deploy.", TASKS["deploy"].params))
    assert cli.run(["deploy"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.startswith("error: File name too long: /tmp/out/\\x1b]0;owned\\x07nnn")

# -- config: the settings a container resolves to, without connecting ---------------------------------------

def test_config_prints_the_resolved_settings_without_connecting(tmp_path, monkeypatch, capsys):
    from remote.transport import session

    monkeypatch.setattr(session.Session, "__init__", lambda *a, **k: (_ for _ in ()).throw(AssertionError("session")))
    path = tmp_path / "hosts.yaml"
    text = UNREACHABLE.replace("  201: {host: nowhere}", "  201: {host: nowhere, train: {run_dir: /data/runs}}")
    path.write_text(text + "default_container: 201\ntrain: {command: python t.py, env: {TOKEN: s3cret}}\n")
    assert cli.run(["config", "--hosts", str(path)]) == 0
    out = capsys.readouterr().out
    assert "default_container" in out.splitlines()[0] and "container 201:" in out and "container 200:" not in out
    assert "run_dir: /data/runs" in out and "command: python t.py" in out and "TOKEN: (set, hidden)" in out
    assert "s3cret" not in out
    monkeypatch.setenv("REMOTE_CONTAINER", "200")
    assert cli.run(["config", "--hosts", str(path), "--json"]) == 0
    [got] = json.loads(capsys.readouterr().out)
    assert got["ctid"] == 200 and got["train"]["run_dir"] == "/root/runs" and got["groups"] == ["pair"]
    assert cli.run(["config", "--hosts", str(path), "-c", "all", "--json"]) == 0
    assert [c["ctid"] for c in json.loads(capsys.readouterr().out)] == [200, 201]


@pytest.mark.fault("remote config of a hosts file with a private index", promise="the index URLs' credentials are "
                   "never printed (text or JSON): user and password replaced by ***")
def test_config_never_prints_index_credentials(tmp_path, capsys):
    path = tmp_path / "hosts.yaml"
    path.write_text(UNREACHABLE + "venv:\n  index_url: https://bob:s3cretTOKEN@pypi.example/simple\n"
                    "  extra_index_urls: [https://tok3n@more.example/simple]\n  packages: [torch==2.11.0]\n")
    for argv in (["config", "--hosts", str(path), "-c", "200"], ["config", "--hosts", str(path), "-c", "200", "--json"]):
        assert cli.run(argv) == 0
        out = capsys.readouterr().out
        assert "s3cret" not in out and "tok3n" not in out and "bob" not in out, out
        assert "https://***@pypi.example/simple" in out and "https://***@more.example/simple" in out


def test_the_default_container_applies_where_c_is_absent(tmp_path, monkeypatch):
    path = tmp_path / "hosts.yaml"
    path.write_text(UNREACHABLE + "default_container: 201\n")
    config = cfg.load(str(path))
    assert config.container(None).ctid == 201 and config.container("200").ctid == 200
    monkeypatch.setenv("REMOTE_CONTAINER", "200")
    assert config.container(None).ctid == 200
    monkeypatch.setenv("REMOTE_CONTAINER", "7")
    with pytest.raises(cfg.ConfigError, match=r"\$REMOTE_CONTAINER: '7' is not a container of this file"):
        config.container(None)
    path.write_text(UNREACHABLE + "default_container: 555\n")
    with pytest.raises(cfg.ConfigError, match="default_container: container 555 is not in this file"):
        cfg.load(str(path))


@pytest.mark.fault("A key given twice in hosts.yaml", promise="refused with the key path and both lines; exit 2")
def test_a_key_given_twice_is_refused_with_its_path_and_lines(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  pve1:\n    address: a\n    port: 22\n    port: 2222\ncontainers:\n  200: {host: pve1}\n")
    r = remote("status", "--hosts", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{path}: hosts.pve1.port: given twice (lines 4 and 5)" in r.stderr, r.stderr
    path.write_text("hosts: {pve1: {address: a}}\ncontainers:\n  200: {host: pve1}\n  200: {host: pve1}\n")
    with pytest.raises(cfg.ConfigError, match=r"containers\.200: given twice \(lines 3 and 4\)"):
        cfg.load(str(path))


def test_a_local_host_needs_no_address(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: {here: {local: true}}\ncontainers: {200: {host: here}}\n")
    assert cfg.load(str(path)).hosts["here"].local
    path.write_text("hosts: {there: {port: 22}}\ncontainers: {200: {host: there}}\n")
    with pytest.raises(cfg.ConfigError, match="hosts.there.address: required key is missing"):
        cfg.load(str(path))


def test_an_unknown_run_is_named_with_the_latest_ids_the_container_gave():
    from remote.ops.jobs import parse_state, unknown_run

    st = parse_state("run=\nlatest=20261201-100000-aaaa 20261201-110000-bbbb ../x \x1b[2J \n")
    spec = cfg.parse({"hosts": {"h": {"address": "a"}}, "containers": {200: {"host": "h"}}}, "h.yaml").containers[200]
    message = str(unknown_run(spec, "nosuch", st.latest))
    assert message == ("container 200 has no run 'nosuch' in /root/runs; the latest: 20261201-100000-aaaa, "
                       "20261201-110000-bbbb (container(200).runs() lists them)")  # what is no run id is left out
    from remote.cli.table import cli_text

    assert cli_text(message).endswith("(`remote runs -c 200` lists them)")  # the command line says its task
    assert "has none" in str(unknown_run(spec, "nosuch", []))
    assert unknown_run(spec, "nosuch", []).exit_code == 2  # bad input, as the README's exit-status table says


def test_no_hint_the_tool_prints_says_invoke():
    import re

    tasks = "|".join(re.escape(n) for n in TASKS if " " not in n)
    hint = re.compile(rf"\binvoke (lab\.\w+|{tasks})\b")
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted((ROOT / "remote").rglob("*"))
             if p.suffix in (".py", ".sh") for i, line in enumerate(p.read_text().splitlines(), 1) if hint.search(line)]
    assert found == []


def test_cache_alone_lists_and_cache_copy_copies():
    (call,) = parse("cache", "-c", "200,201")
    assert call.spec.name == "cache list" and call.kwargs["container"] == "200,201"
    (call,) = parse("cache")
    assert call.spec.name == "cache list"
    (call,) = parse("cache", "copy", "--from", "200", "-c", "201,202")
    assert call.spec.name == "cache copy" and call.kwargs["from_"] == "200"
    with pytest.raises(cliparse.Usage, match="--from"):
        parse("cache", "copy", "--from", "x", "-c", "201")


def test_library_errors_speak_the_librarys_words_and_the_command_line_its_flags(tmp_path):
    """A library caller reads `force=True` and `container(200).stop()`; `remote` prints --force and `remote stop
    -c 200` for the same error (issue 40)."""
    from remote.cli.table import Exit, handled
    from remote.errors import BusyError, DeployError
    from remote.ops import code as codemod

    import subprocess

    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("1")
    subprocess.run(["git", "-C", str(repo), "add", "a"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], check=True)
    (repo / "a").write_text("2")
    with pytest.raises(DeployError) as dirty:
        codemod.resolve(str(repo), "HEAD")
    assert "pass allow_dirty=True to ship them" in str(dirty.value) and "--" not in str(dirty.value).split(":")[0]

    busy = BusyError(200, "container 200: run x (pid 1) is still running; a deploy would change its checkout and venv "
                          "under it. Stop it first (container(200).stop() stops every live run), or pass force=True")

    @handled
    def task():
        raise busy

    with pytest.raises(Exit) as said:
        task()
    assert said.value.code == 3
    assert said.value.message.endswith("Stop it first (`remote stop -c 200` stops every live run), or pass --force")
    for library in ("force=True", "container(200)", "allow_dirty"):
        assert library not in said.value.message
    from remote.cli.table import cli_text

    assert cli_text("pve1/200: snapshot=x: no such snapshot (there: a)") == "pve1/200: --snapshot x: no such snapshot (there: a)"
    assert cli_text("(container(200).snapshots() lists them; snapshot=NAME picks another's)") == \
        "(`remote snapshots -c 200` lists them; --snapshot NAME picks another's)"
    assert cli_text("make one with container.export_cache(FILE)") == "make one with `remote warmup --export FILE`"


def test_a_number_out_of_range_names_the_range_as_written():
    """`create --memory 0` said `expected 16 to 2.14748e+09 MiB`: the ends as whole numbers, a fraction as it is."""
    with pytest.raises(ValueError, match=r"^expected 16 to 2147483648 MiB, got '0'$"):
        cliparse.number(16, 2**31, integer=True, unit=" MiB")("0")
    with pytest.raises(ValueError, match=r"^expected 0\.5 to 10, got '11'$"):
        cliparse.number(0.5, 10)("11")
