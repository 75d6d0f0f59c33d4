"""Hints that can be typed as printed (issue 46 item 7): a next-step command keeps the --hosts FILE and the
container of the command that printed it, and a stopped container's hint names what starts it."""

import contextlib

import pytest
from test_library import HOSTS

from remote import cli
from remote.cli import format as fmt

TYPED = ("a next-step hint after `create --hosts FILE` or Ctrl-C in `train -c ID --hosts FILE`",
         "the printed command carries --hosts FILE and -c ID (and the run), so it does what it says when typed")


@pytest.mark.fault(*TYPED)
def test_train_interrupted_names_the_container_the_run_and_the_hosts_file(tmp_path, monkeypatch, capsys):
    from remote.ops import jobs

    path = tmp_path / "my hosts.yaml"
    path.write_text(HOSTS)
    monkeypatch.setattr(jobs, "preflight", lambda t, host_gpu=None, force=False: jobs.Preflight("abc", {}, None, []))
    monkeypatch.setattr(jobs, "launch", lambda t, p, force=False, held=None, command=None, env=None, **ckpt: ("run-1", 42))
    monkeypatch.setattr(jobs.oplock, "hold", lambda ct, what: contextlib.nullcontext(None))

    def following(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "show_log", following)
    assert cli.run(["train", "-c", "201", "--hosts", str(path)]) == 130
    out = capsys.readouterr().out
    q = f"'{path}'"
    assert f"`remote logs -c 201 --run run-1 --follow --hosts {q}` resumes" in out, out
    assert f"`remote stop -c 201 --run run-1 --hosts {q}` ends it" in out


@pytest.mark.fault(*TYPED)
def test_the_create_hint_keeps_a_hosts_file_that_is_not_the_default(tmp_path, monkeypatch):
    from remote.results import Created

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REMOTE_HOSTS_FILE", raising=False)
    for file, hint in (("lab/hosts.yaml", "`remote deploy -c 210 --hosts lab/hosts.yaml`"),
                       ("hosts.yaml", "`remote deploy -c 210`")):
        got = Created(210, "pve", True, False, "local:vztmpl/x.tar.zst", (), None, (), (), (), file, 1.0, ())
        assert fmt.created_lines(got)[-1] == f"added containers.210 to {file}; next: {hint}"


def test_typed_leaves_the_default_file_exec_argv_init_and_lab_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REMOTE_HOSTS_FILE", raising=False)
    assert fmt.typed("`remote status -c 2`", None) == "`remote status -c 2`"
    assert fmt.typed("`remote status -c 2`", "hosts.yaml") == "`remote status -c 2`"
    assert fmt.typed("`remote exec -c 2 -- ls -l`", "x.yaml") == "`remote exec -c 2 --hosts x.yaml -- ls -l`"
    assert fmt.typed("`remote status --hosts y.yaml`", "x.yaml") == "`remote status --hosts y.yaml`"
    assert fmt.typed("`remote init --sudoers u` and `remote lab up`", "x.yaml") == \
        "`remote init --sudoers u` and `remote lab up`"
    monkeypatch.setenv("REMOTE_HOSTS_FILE", "x.yaml")  # found without --hosts: the hint needs none
    assert fmt.typed("`remote status -c 2`", "x.yaml") == "`remote status -c 2`"
    from remote import config  # the rule typed copies (the command line may not import config)

    assert config.find_file() == "x.yaml"
    monkeypatch.delenv("REMOTE_HOSTS_FILE")
    assert config.find_file() == "hosts.yaml"


def test_a_stopped_containers_hint_names_pct_start_not_lab_up():
    from remote.transport.pct import classify

    exc = classify("container '200' not running!\n", 255, 200, "pve1")
    assert "`pct start 200` on the host" in str(exc) and "lab up" not in str(exc)
