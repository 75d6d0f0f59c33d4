"""The task collection: flags mean the same in every task, and bad input exits cleanly."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.cli import SHORT_FLAGS, ns

ROOT = Path(__file__).resolve().parent.parent.parent


def all_tasks(collection=ns):
    for task in collection.tasks.values():
        yield task
    for sub in collection.collections.values():
        yield from all_tasks(sub)


def test_every_short_flag_means_one_thing_and_h_is_only_help():
    meaning: dict[str, set[str]] = {}
    for task in all_tasks():
        for arg in task.get_arguments():
            long, *short = arg.names
            for s in short:
                meaning.setdefault(s, set()).add(long)
    assert "h" not in meaning, meaning["h"]
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}
    for task in all_tasks():
        names = {a.names[0]: a.names[1:] for a in task.get_arguments()}
        if "container" in names:
            assert list(names["container"]) == ["c"], task.name
        if "dry" in names:
            assert list(names["dry"]) == ["n"], task.name
    assert set(SHORT_FLAGS.values()) == {s for s in meaning}  # no stale entries


def test_a_bad_hosts_file_exits_2_with_the_key_and_no_traceback(tmp_path):
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\n"
                   "warmup: {command: 'w --device {device}'}\n")
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "warmup", "--hosts", str(bad)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{bad}: warmup.devices: warmup.command uses {{device}}" in r.stderr


def test_the_invoke_collection_has_one_home():
    """`from remote.cli import collection` (docs/reference/library.md); the 0.1 alias remote.tasks is gone."""
    import importlib

    from remote.cli import collection

    made = collection()
    assert {"deploy", "exec", "lab.up", "cache.copy"} <= set(made.task_names)
    assert made.configuration()["remote"] == {"hosts": None, "container": None}
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("remote.tasks")
