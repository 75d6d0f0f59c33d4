"""invoke binds a flag to the task it follows; remote's collection makes the shared flags (--container,
--hosts, --dry, --fail-fast) apply to every task of an invoke line, as `remote` does, or refuses the line
naming the flag before its first task runs (the lab tier: tests/test_local_tasks_lab.py runs a dry line)."""

import pytest
from invoke import Collection, Executor, Program, task

from remote.cli import collection

HOSTS = """\
hosts:
  h: {address: 127.0.0.1, port: 1}
containers:
  200: {host: h}
  201: {host: h}
"""
ran: list[str] = []


@task
def mine(c):
    """A task of the user's own, without --dry: it would change things."""
    ran.append("mine")


def invoke(tmp_path, monkeypatch, capsys, *argv: str, extra: bool = False) -> tuple[int, str, str]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    monkeypatch.setenv("REMOTE_HOSTS_FILE", str(hosts))
    monkeypatch.delenv("REMOTE_CONTAINER", raising=False)
    ns = collection()
    if extra:
        ns = Collection(mine)
        ns.add_collection(collection(), "gpu")
    ran.clear()
    try:
        Program(namespace=ns, name="invoke", binary="invoke").run(["invoke", *argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.fault("--dry or --container once on an invoke line",
                   promise="applies to every task of the line, as with `remote`; a line a task of which has no --dry, or "
                   "that names two containers for a task given none, is refused naming the flag, nothing run")
def test_container_given_once_applies_to_every_task_of_the_line(tmp_path, monkeypatch, capsys):
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "config", "--container", "201", "config")
    assert code == 0, err
    assert out.count("container 201:") == 2 and "container 200:" not in out, out
    # Without the line's binding, the first `config` would have no container: "several containers configured".
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "config", "config", "--container", "200")
    assert code == 0 and out.count("container 200:") == 2, out + err


def test_a_dry_line_with_a_task_without_dry_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    for argv in (["deploy", "known-good", "--dry"], ["deploy", "--dry", "known-good", "-c", "200"],
                 ["known-good", "-c", "200", "deploy", "--dry"]):
        code, out, err = invoke(tmp_path, monkeypatch, capsys, *argv)
        assert code == 2 and "--dry: known-good has no --dry; run it on its own" in err, (argv, out, err)
        assert "cannot connect" not in err  # refused before the first task connected
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "gpu.deploy", "--dry", "mine", extra=True)
    assert code == 2 and "--dry: mine has no --dry" in err and ran == [], err


def test_two_containers_for_a_task_given_none_is_refused(tmp_path, monkeypatch, capsys):
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "config", "-c", "200", "config", "config", "-c", "201")
    assert code == 2 and "config: which --container? 200 or 201" in err and out == "", out + err
    # Each task given its own: each keeps it.
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "config", "-c", "200", "config", "-c", "201")
    assert code == 0 and "container 200:" in out and "container 201:" in out, out + err


@task
def web(c, hosts=None, dry=False):
    """A task of the user's own whose parameters share names with remote's shared flags."""
    ran.append(f"web {hosts} {dry}")


@pytest.mark.fault("A user's invoke task whose parameter shares a shared flag's name",
                   promise="its value stays that task's: remote's tasks of the line never read it (`--hosts web1,web2` "
                   "is not taken for a hosts file)")
def test_a_users_task_flags_are_never_read_as_the_lines(tmp_path, monkeypatch, capsys):
    def line(*argv):
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(HOSTS)
        monkeypatch.setenv("REMOTE_HOSTS_FILE", str(hosts))
        ns = Collection(web)
        ns.add_collection(collection(), "gpu")
        ran.clear()
        try:
            Program(namespace=ns, name="invoke", binary="invoke").run(["invoke", *argv])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = line("web", "--hosts", "web1,web2", "gpu.config", "-c", "200")
    assert code == 0 and ran == ["web web1,web2 False"] and "container 200:" in out, out + err
    # The user's own --dry is that task's: a dry line of remote's is still refused, as a task that could not be made dry.
    code, out, err = line("gpu.deploy", "--dry", "web", "--dry")
    assert code == 2 and "--dry: web has no --dry" in err and "not of remote's" in err and ran == [], err


class TupleExecutor(Executor):
    """An Executor whose execute holds the line's calls otherwise than as a list (another invoke, one's own)."""

    def execute(self, *tasks):
        calls = tuple(self.normalize(tasks))
        for call in calls:
            call.task(call.make_context(self.config), *call.args, **call.kwargs)
        return {}


@pytest.mark.fault("An invoke whose Executor frame is not as remote reads it",
                   promise="the line is refused, naming the Executor, before its first task runs: a --dry given "
                   "once never silently stops applying to the line's other tasks")
def test_an_executor_without_a_list_of_calls_is_refused(tmp_path, monkeypatch, capsys):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    monkeypatch.setenv("REMOTE_HOSTS_FILE", str(hosts))
    monkeypatch.delenv("REMOTE_CONTAINER", raising=False)
    program = Program(namespace=collection(), name="invoke", binary="invoke", executor_class=TupleExecutor)
    with pytest.raises(SystemExit) as e:
        program.run(["invoke", "deploy", "known-good", "--dry", "-c", "200"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and "TupleExecutor.execute holds no list of the line's calls" in err, out + err
    assert "cannot connect" not in err


@pytest.mark.fault("chained tasks", promise="an invoke line (`invoke deploy warmup train -c 200`) checks every task's "
                   "settings before its first task runs, as `remote` does: no warmup.command is exit 2 naming it")
def test_an_invoke_line_refuses_a_missing_setting_before_its_first_task(tmp_path, monkeypatch, capsys):
    code, out, err = invoke(tmp_path, monkeypatch, capsys, "deploy", "warmup", "train", "-c", "200")
    assert code == 2, out + err
    assert "warmup.command: not set (container 200)" in err and "cannot connect" not in err, err
