"""A chain checks every task's settings before the first runs (issue 45 item 20): `deploy warmup train` with no
warmup.command says so at once, exit 2, and deploy never starts (here it would meet a host that refuses)."""

from __future__ import annotations

import pytest

from remote.cli import run as cli_run

HOSTS = """hosts:
  pve1: {address: 127.0.0.1, port: 1, connect_timeout: 2}
containers:
  200: {host: pve1}
  201: {host: pve1, warmup: {command: python w.py}}
"""


@pytest.fixture
def hosts(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return path


@pytest.mark.fault("chained tasks", promise="a chain (`remote deploy warmup train`) checks every task's settings "
                   "before the first runs: a warmup or train without its command is refused at once, exit 2, naming "
                   "the key, the task and the containers, before deploy connects or changes anything")
@pytest.mark.parametrize("argv, key, lacking", [
    (["deploy", "warmup", "train", "-c", "200"], "warmup.command", "container 200"),
    (["deploy", "warmup", "-c", "200,201"], "warmup.command", "container 200)"),
    (["deploy", "train", "-c", "201"], "train.command", "container 201"),
])
def test_a_chain_refuses_a_missing_setting_before_its_first_task(hosts, capsys, argv, key, lacking):
    assert cli_run([*argv, "--hosts", str(hosts)]) == 2
    err = capsys.readouterr().err
    assert f"{key}: not set ({lacking}" in err and "nothing of `remote " in err, err
    assert "cannot connect" not in err and "Traceback" not in err  # deploy never started


def test_a_chain_whose_settings_are_there_starts_its_first_task(hosts, capsys):
    hosts.write_text(HOSTS.replace("  200: {host: pve1}\n", "") + "train: {command: python t.py}\n")
    assert cli_run(["deploy", "warmup", "train", "-c", "201", "--hosts", str(hosts)]) == 1
    assert "cannot connect" in capsys.readouterr().err  # deploy ran (and met the refusing host)
