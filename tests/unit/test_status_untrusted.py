"""`remote status` reads each container's run state from files the job itself may rewrite: a malformed
manifest.json or probe part is that container's error, never a crash of the whole fleet's status."""
from __future__ import annotations

import json
import types

import pytest

from remote import config as cfg
from remote.ops import jobs

STATE = "run=20261201-100000-aaaa\npath=/root/runs/20261201-100000-aaaa\npid=5\nalive=1\nnow=1000\n--manifest--\n{}\n--tail--\n"


def status_of(monkeypatch, manifest, compile_part=None):
    config = cfg.parse({"hosts": {"a": {"address": "a"}}, "containers": {200: {"host": "a"}}}, "hosts.yaml")
    raw = {"run": {"rc": 0, "out": STATE.replace("{}", manifest)}, "venv": {"record": {"lock_sha256": "ab"}}}
    if compile_part is not None:
        raw["compile"] = compile_part
    monkeypatch.setattr(jobs.facts, "read_raw", lambda t, parts: (raw, (0.0, 0.0)))
    session = types.SimpleNamespace(container_for=lambda spec: None, config=config)
    return jobs._container_job(session, config.containers[200], "running")


def test_a_well_formed_run_is_read_with_its_fields_in_place(monkeypatch):
    entry = status_of(monkeypatch, json.dumps({"started_epoch": 900, "nodes": [200, 201], "node_rank": 1}))
    assert entry.error is None and entry.probed and entry.venv_lock == "ab"
    run = entry.run
    assert run is not None and run.id == "20261201-100000-aaaa" and run.alive and run.pid == 5
    assert run.uptime_s == 100 and run.nodes == (200, 201) and run.node_rank == 1 and run.compile is None


@pytest.mark.parametrize("manifest, compile_part, said", [
    ("[1, 2]", None, "manifest.json is a list"),
    ('{"started_epoch": "yesterday"}', None, "started_epoch"),
    ('{"started_epoch": 900, "nodes": "200,201"}', None, "nodes"),
    ('{"started_epoch": 900, "nodes": [200, "x"]}', None, "nodes"),
    ("{}", ["run"], "compile part is a list"),
])
def test_a_malformed_answer_is_that_containers_error(monkeypatch, manifest, compile_part, said):
    entry = status_of(monkeypatch, manifest, compile_part)
    assert entry.run is None and entry.error is not None and said in entry.error and "container 200" in entry.error


@pytest.mark.fault("A GPU process of no run holding 130 GiB (status)", promise="status shows the container's GPU "
                   "memory in use now, every process's, and names the process of no run (pid, MiB, command)")
def test_status_shows_the_containers_gpu_memory_in_use_by_every_process(monkeypatch):
    from remote.cli import format as cli_format
    from remote.results import FleetStatus, HostStatus

    config = cfg.parse({"hosts": {"a": {"address": "a"}}, "containers": {200: {"host": "a"}}}, "hosts.yaml")
    raw = {"run": {"rc": 0, "out": STATE.replace("alive=1", "alive=0\nexit=0")}, "venv": {"record": {}},
           "gpus": {"rc": 0, "out": "0, H200, 580.95.05, 133300, 143771\n", "err": ""},
           "apps": {"rc": 0, "out": "4242, python, 133120\n77, python, 100\n", "err": ""},
           "apps_cmdline": {"4242": "python hog.py \x1b[2J"},
           "jobs": {"runs": {"20261201-100000-aaaa": {"marked": [77]}}}}
    monkeypatch.setattr(jobs.facts, "read_raw", lambda t, parts: (raw, (0.0, 0.0)))
    session = types.SimpleNamespace(container_for=lambda spec: None, config=config)
    entry = jobs._container_job(session, config.containers[200], "running")
    assert entry.gpu_memory["used_mib"] == 133300 and [p["pid"] for p in entry.gpu_memory["foreign"]] == [4242]
    data = cli_format.status_dict(FleetStatus((HostStatus("a", True, None, None, {200: "running"}),), (entry,)))
    [line] = [x for x in cli_format.status_lines(data) if x.startswith("  200:")]
    assert line.startswith("  200: running, GPU mem 130.2 of 140.4 GiB in use (!! no run's: pid 4242 (133120 MiB): "
                           "python hog.py")
    assert "\x1b" not in line
    assert json.loads(cli_format.status_json(data))["containers"][0]["gpu_memory"]["used_mib"] == 133300
