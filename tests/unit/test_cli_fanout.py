"""`-c all` maps one remote.api call per container (remote/cli/table.py each_container over Group.map): the task's
own function runs once per command line, whatever -c names, on one fleet; each container's result and error
are rendered by remote/cli/format.py, marked `[id] `, then the summary table and the exit status."""

from __future__ import annotations

import inspect
import re
import sys
import threading

import pytest

import remote.api as api
from remote.cli import TASKS, program
from remote.testing import Command, MockTransport, Reply

HOSTS = ("hosts: {pve1: {address: pve1.example}}\ncontainers: {200: {host: pve1}, 201: {host: pve1}}\n"
         "train: {command: python train.py}\n")


def handler(c: Command) -> Reply:
    if c.inner[-2:] == ("echo", "hi"):
        return Reply(stdout=f"hello from {c.container}\n", status=0 if c.container == 200 else 4)
    return Reply()  # anything else: empty and 0 (each operation then does what it does with that)


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    """Run `remote ARGV --hosts FILE` against a MockTransport: (exit status, stdout, stderr, {what was counted})."""
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    (tmp_path / "f.txt").write_text("x")
    mock = MockTransport(handler)
    counted: dict = {"open": 0, "api": [], "body": 0}
    real_open = api.open

    def opened(*args, **kwargs):
        counted["open"] += 1
        return real_open(*args, **kwargs, transport=mock)

    monkeypatch.setattr(api, "open", opened)

    def run(*argv: str, method: str) -> tuple[int, str, str, dict]:
        real = getattr(api.Container, method)

        def spy(self, *args, **kwargs):
            with lock:
                counted["api"].append(self.id)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(api.Container, method, spy)
        body = inspect.unwrap(TASKS[argv[0]].fn).__code__  # the task's own function, under @handled
        lock = threading.Lock()

        def profile(frame, event, arg):  # every thread's calls: the task's body entered, how often
            if event == "call" and frame.f_code is body:
                with lock:
                    counted["body"] += 1

        sys.setprofile(profile)
        threading.setprofile(profile)
        try:
            code = program.run([argv[0], "--hosts", str(path), *[a.replace("TMP", str(tmp_path)) for a in argv[1:]]],
                               exit=False)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        out, err = capsys.readouterr()
        return code, out, err, counted

    return run


CASES = [  # (argv, the remote.api.Container method it calls once per container)
    (("exec", "-c", "all", "--", "echo", "hi"), "exec"),
    (("deploy", "-c", "all"), "deploy"),
    (("deploy", "-c", "all", "--check"), "deploy"),
    (("stop", "-c", "all"), "stop"),
    (("logs", "-c", "all", "--follow"), "stream_log"),
    (("runs", "-c", "all"), "runs"),
    (("runs", "-c", "all", "--json"), "runs"),
    (("push", "-n", "-c", "all", "--src", "TMP/f.txt", "--dest", "/root/f.txt"), "push"),
    (("pull", "-c", "all", "--src", "/root/f.txt", "--dest", "TMP/got"), "pull"),
    (("pull", "-c", "all", "--run", "latest", "--dest", "TMP/got"), "pull_run"),
    (("warmup", "-c", "all", "--devices", "0"), "warmup"),
    (("warmup", "-c", "all", "--import", "TMP/cache.tar.gz"), "import_cache"),
]


@pytest.mark.parametrize("argv,method", CASES, ids=[" ".join(a[:4]) for a, _ in CASES])
def test_dash_c_all_calls_the_api_once_per_container_and_runs_the_task_once(cli, argv, method):
    code, out, err, counted = cli(*argv, method=method)
    assert sorted(counted["api"]) == [200, 201], out + err  # one API call per container
    assert counted["body"] == 1 and counted["open"] == 1  # the task itself once, on one fleet
    assert re.search(r"^container\s+host\s+result\s+time$", out, re.M) and re.search(r"^\d ok, \d failed", out.splitlines()[-1])
    rows = dict(re.findall(r"^(20[01])\s+pve1\s+(ok|FAILED \(\d+\))", out, re.M))
    assert set(rows) == {"200", "201"}, out
    assert (code == 0) == all(r == "ok" for r in rows.values())


def test_a_failing_containers_error_is_said_in_the_command_lines_words_and_sets_the_status(cli):
    code, out, err, _ = cli("deploy", "-c", "all", method="deploy")  # the mock answers no facts: both fail
    for ctid in (200, 201):
        assert re.search(rf"^\[{ctid}\] error: container {ctid}: ", out, re.M), out
        assert re.search(rf"^{ctid}\s+pve1\s+FAILED \(1\)\s+\S+\s+error: container {ctid}: ", out, re.M), out
    assert code == 1 and out.rstrip().endswith("0 ok, 2 failed")


def test_a_commands_own_status_fails_its_container_and_is_the_exit_status(cli):
    code, out, err, _ = cli("exec", "-c", "all", "--", "echo", "hi", method="exec")
    assert "[200] hello from 200\n" in out and "[201] hello from 201\n" in out, out + err
    assert "[201] exited with status 4\n" in err  # a failure's line, as a single exec's, on stderr
    assert re.search(r"^201\s+pve1\s+FAILED \(4\)\s+\S+\s+exited with status 4$", out, re.M), out
    assert code == 4 and out.rstrip().endswith("1 ok, 1 failed")


def test_each_containers_result_is_marked_in_the_tables_order_before_it(cli):
    code, out, err, _ = cli("runs", "-c", "201,200", "--json", method="runs")
    lines = out.splitlines()
    assert lines[:3] == ["[201] []", "[200] []", "container  host  result  time"], out  # --json's own, marked
    assert lines[3].startswith("201 ") and lines[4].startswith("200 ")
    code, out, err, _ = cli("runs", "-c", "all", method="runs")
    assert out.index("[200] container 200: no runs") < out.index("[201] container 201: no runs") < out.index("container  ")
    assert code == 0


def test_pull_puts_each_containers_files_in_a_folder_of_its_own(cli, tmp_path, monkeypatch):
    got = []
    monkeypatch.setattr(api.Container, "pull", lambda self, src, dest, **kw: got.append((self.id, str(dest))))
    cli("pull", "-c", "all", "--src", "/root/f.txt", "--dest", "TMP/got", method="pull")
    assert sorted(got) == [(200, str(tmp_path / "got" / "200")), (201, str(tmp_path / "got" / "201"))]


def test_export_to_one_file_from_several_containers_is_refused_before_anything_runs(cli):
    code, out, err, counted = cli("warmup", "-c", "all", "--export", "TMP/cache.tar.gz", method="export_cache")
    assert code == 2 and "a bundle holds one container's cache: give -c ID" in err and counted["api"] == []
