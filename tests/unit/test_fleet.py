"""Fleets without a lab: selection against the hosts file, the runner's bounds, prefixes, summary and
exit status, and a multi-node run's per-node command."""

import re
import sys
import threading
import time

import pytest

from remote import config
from remote.ops import fleet, multinode
from remote.errors import ConfigError, JobError

HOSTS = """
hosts:
  a: {address: 10.0.0.1, max_parallel: 2}
  b: {address: 10.0.0.2}
groups: {drafters: [200, 201], lab: [300]}
train: {command: 'torchrun --nnodes {nnodes} --node-rank {node_rank} --rdzv-endpoint {master_addr}:{master_port} x.py --id {run_id} ${HOME}'}
containers:
  200: {host: a, address: 10.0.1.200}
  201: {host: a, address: 10.0.1.201}
  202: {host: a}
  300: {host: b, train: {master_port: 29612}}
"""


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "hosts.yaml"
    p.write_text(HOSTS)
    return config.load(str(p))


def test_selection_ids_lists_groups_and_all(cfg):
    assert fleet.select(cfg, "201") == [201]
    assert fleet.select(cfg, "300,200,300") == [300, 200]
    assert fleet.select(cfg, "drafters") == [200, 201]
    assert fleet.select(cfg, "lab,drafters") == [300, 200, 201]
    assert fleet.select(cfg, "all") == [200, 201, 202, 300]
    assert [fleet.is_selection(v) for v in (None, "200", 200, "200,201", "all", "lab")] == [
        False, False, False, True, True, True]
    with pytest.raises(ConfigError, match="'nope' is neither a container id nor a group"):
        fleet.select(cfg, "200,nope")
    with pytest.raises(ConfigError, match=r"container 999 is not in this file \(known: 200, 201, 202, 300\)"):
        fleet.select(cfg, "200,999")


def test_new_keys_are_read_and_validated(cfg, tmp_path):
    assert cfg.hosts["a"].max_parallel == 2 and cfg.hosts["b"].max_parallel == 4
    assert cfg.containers[200].address == "10.0.1.200" and cfg.containers[202].address is None
    assert cfg.containers[200].train.master_port == 29500 and cfg.containers[300].train.master_port == 29612
    assert cfg.containers[200].train.rendezvous_timeout == 300
    assert cfg.groups == {"drafters": (200, 201), "lab": (300,)}
    for bad, where in [("groups: {drafters: [200, 999]}", "groups.drafters[1]: unknown container 999"),
                       ("groups: {all: [200]}", "groups.all: group names are words"),
                       ("groups: {g: []}", "groups.g: expected a list of container ids"),
                       ("groups: {g: 200}", "groups.g: expected list"),
                       ("groups: {g: [two]}", "groups.g[0]: expected a container id")]:
        p = tmp_path / "bad.yaml"
        p.write_text(HOSTS.replace("groups: {drafters: [200, 201], lab: [300]}", bad))
        with pytest.raises(ConfigError, match=__import__("re").escape(where)):
            config.load(str(p))
    p = tmp_path / "bad2.yaml"
    p.write_text(HOSTS.replace("max_parallel: 2", "max_parallel: 0"))
    with pytest.raises(ConfigError, match="hosts.a.max_parallel: expected a value from 1 to 256"):
        config.load(str(p))


def test_runner_bounds_each_host_prefixes_lines_and_carries_failures_through(cfg, capsys):
    """remote.executor runs each container's part at once (bounded per host) and prints nothing itself; the
    command line's say() and its stream of a command's output mark each line with the container's id."""
    from remote import executor
    from remote.cli import format as fmt
    from remote.cli.table import say
    from remote.cli.tasks import Streamed

    active: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}
    lock = threading.Lock()

    def work(ctid):
        host = cfg.containers[ctid].host.name
        with lock:
            active[host] += 1
            peak[host] = max(peak[host], active[host])
        say("==> working")
        stream = Streamed(lines=True)  # exec's on_output, one container of several
        stream("stdout", b"partial")
        stream("stdout", " line\n".encode())
        stream("stdout", b"no newline at the end")
        stream.end()
        time.sleep(0.2)
        with lock:
            active[host] -= 1
        if ctid == 201:
            raise JobError("it broke")

    result = executor.each(cfg, [200, 201, 202, 300], work, on_done=lambda o: say(o.message) if o.error else None)
    out = capsys.readouterr().out
    assert peak["a"] == 2  # max_parallel of host a, although three of its containers were selected
    for ctid in (200, 201, 202, 300):
        assert f"[{ctid}] ==> working\n" in out and f"[{ctid}] partial line\n" in out
        assert f"[{ctid}] no newline at the end\n" in out
    assert "[201] it broke\n" in out
    assert [(c, o.ok) for c, o in result.items()] == [(200, True), (201, False), (202, True), (300, True)]
    assert fmt.group_exit_code(result) == 1
    table = fmt.group_table(result)
    assert table.splitlines()[0].split() == ["container", "host", "result", "time"]
    assert "201        a     FAILED (1)" in table and "it broke" in table and table.endswith("3 ok, 1 failed")

    quiet = executor.each(cfg, [200, 300], lambda ctid: ctid * 2)
    assert capsys.readouterr() == ("", "") and quiet.succeeded == {200: 400, 300: 600}
    assert executor.values(cfg, [300, 200], lambda ctid: ctid + 1) == [301, 201]


def test_fail_fast_starts_nothing_after_the_first_failure(cfg, capsys):
    from remote import executor
    from remote.cli import format as fmt

    def work(ctid):
        raise JobError("it broke")

    result = executor.each(cfg, [200, 201, 202], work, fail_fast=True)
    # host a runs two at once: the third is never started once one failed
    assert [o.skipped for o in result.values()].count(True) >= 1
    assert fmt.group_exit_code(result) == 1
    assert "skipped" in fmt.group_table(result)


def test_serial_each_runs_one_container_after_another_in_order_each_marked_with_its_own(cfg):
    """executor.each(..., serial=True) (a host's gpu fix, which shares the host's uvm nodes): one at a time in
    the order of ids though host a allows two, each in its own container's context, none left in the caller's;
    fail_fast skips the rest."""
    from remote import executor
    from remote.events import CONTAINER

    log, running = [], []

    def work(ctid):
        running.append(ctid)
        log.append((ctid, CONTAINER.get(), len(running)))
        time.sleep(0.02)
        running.remove(ctid)
        if ctid == 201:
            raise JobError("it broke")
        return ctid

    result = executor.each(cfg, [202, 200, 201, 300], work, serial=True)
    assert log == [(202, 202, 1), (200, 200, 1), (201, 201, 1), (300, 300, 1)]
    assert [o.ok for o in result.values()] == [True, True, False, True] and CONTAINER.get() is None
    log.clear()
    stopped = executor.each(cfg, [201, 200], work, serial=True, fail_fast=True)
    assert [c for c, *_ in log] == [201] and stopped[200].skipped


def test_later_runs_beside_the_caller_in_its_context_and_hands_back_its_value_error_or_a_timeout():
    """executor.later (preflight's host read beside its probe): the caller's context goes with it."""
    from remote import executor
    from remote.events import CONTAINER

    token = CONTAINER.set(207)
    try:
        assert executor.later(CONTAINER.get).result(timeout=5) == 207
    finally:
        CONTAINER.reset(token)
    gate = threading.Event()
    hung = executor.later(gate.wait)
    with pytest.raises(TimeoutError):
        hung.result(timeout=0.01)
    gate.set()

    def broken():
        raise JobError("host unreadable")

    with pytest.raises(JobError, match="host unreadable"):
        executor.later(broken).result(timeout=5)


def test_bounded_runs_at_most_its_limit_at_once_and_keeps_the_order():
    from remote import executor

    lock, now, most = threading.Lock(), [0], [0]

    def work(key):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        return key * 10

    assert executor.bounded(list(range(9)), work, 3) == [k * 10 for k in range(9)] and most[0] == 3


def test_together_runs_calls_of_different_kinds_at_once_and_raises_the_first_error_after_all_ended():
    """doctor --gpu's host probes beside its container probes: each call in a thread of its own, all at once."""
    from remote import executor

    both = threading.Barrier(2, timeout=5)  # each call waits for the other: run one after the other, it breaks
    assert executor.together({"hosts": lambda: both.wait() * 0 + 1, "containers": lambda: both.wait() * 0 + 2}) == \
        {"hosts": 1, "containers": 2}
    ended = []

    def slow():
        time.sleep(0.05)
        ended.append("slow")
        return 3

    def broken():
        raise JobError("it broke")

    with pytest.raises(JobError, match="it broke"):
        executor.together({"broken": broken, "slow": slow})
    assert ended == ["slow"]


def test_per_node_command_and_the_master(cfg):
    specs = [cfg.containers[200], cfg.containers[201]]
    values = multinode.plan_nodes(specs, "R1")
    assert [v["node_rank"] for v in values] == [0, 1]
    assert {v["master_addr"] for v in values} == {"10.0.1.200"} and values[0]["master_port"] == 29500
    cmd = multinode.node_command(specs[1].train.command, values[1])
    assert cmd == "torchrun --nnodes 2 --node-rank 1 --rdzv-endpoint 10.0.1.200:29500 x.py --id R1 ${HOME}"
    assert [v["node_addr"] for v in values] == ["10.0.1.200", "10.0.1.201"]
    assert multinode.node_command("--local-addr {node_addr}", values[1]) == "--local-addr 10.0.1.201"
    with pytest.raises(ConfigError, match="containers.202.address: every container of a multi-node run needs"):
        multinode.plan_nodes([cfg.containers[200], cfg.containers[202]], "R2")


def test_each_node_publishes_its_own_address_and_uses_its_interface(cfg):
    env = multinode.node_env(cfg.containers[201], "eth1", master=False)
    assert env == {"PET_LOCAL_ADDR": "10.0.1.201", "GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1",
                   "PET_RDZV_CONF": "join_timeout=300,timeout=300,is_host=0"}
    # The master serves the rendezvous store: its hostname resolves to 127.0.1.1, so c10d cannot tell.
    assert multinode.node_env(cfg.containers[200], "eth0", master=True)["PET_RDZV_CONF"].endswith(",is_host=1")


def test_a_lock_that_differs_from_its_siblings_is_named(cfg):
    from remote.ops.jobs import lock_outliers
    from remote.results import ContainerStatus

    entries = [ContainerStatus(ctid, "h", "running", probed=True, venv_lock=lock)
               for ctid, lock in ((200, "aaa"), (201, "aaa"), (202, "bbb"), (300, "ccc"))]
    # all four have the same venv settings here: the lock most of them have is the siblings'
    assert lock_outliers(entries, cfg) == {202: "aaa", 300: "aaa"}
    assert lock_outliers(entries[:2], cfg) == {}


def test_status_shows_a_multi_node_run_once_with_its_nodes():
    from remote.cli.format import _multinode_lines

    run = {"id": "R", "nodes": [200, 300], "alive": True, "exit": None}
    jobs = [{"container": 200, "run": {**run, "node_rank": 0}}, {"container": 300, "run": {**run, "node_rank": 1,
                                                                                            "alive": False, "exit": 1}},
            {"container": 201, "run": {"id": "S", "alive": False, "exit": 0}}]
    assert _multinode_lines(jobs) == ["multi-node run R running on 2 nodes: 200 (node 0, master): running; "
                                      "300 (node 1): exited 1"]


@pytest.mark.fault("A host's `pct list` past its deadline", "status shows that host unreachable with the reason "
                   "and its containers unknown; the other hosts as usual, never a KeyError")
def test_inventory_carries_a_host_whose_pct_list_timed_out(cfg):
    from remote.errors import CommandTimeout
    from remote.testing import Command, MockTransport, Reply
    from remote.transport.session import Session

    def host(command: Command) -> Reply:  # remote.testing's MockTransport: each host's `pct list` answered
        assert command.container is None and command.argv[-2:] == ("pct", "list")
        if command.host == "b":
            raise CommandTimeout("pct list", 60, "", "b")
        return Reply(stdout="VMID Status Lock Name\n200 running lab200\n")

    mock = MockTransport(host)
    session = Session(cfg, transport_factory=mock, agent=False)
    states = {h.host: h for h in fleet.inventory(session)}
    assert states["a"].reachable and states["a"].containers == {200: "running", 201: "missing", 202: "missing"}
    assert not states["b"].reachable and states["b"].containers == {300: "unknown"}
    assert states["b"].error == "`pct list` on b: b: timed out after 60s and was killed: pct list"
    assert sorted(c.host for c in mock.calls) == ["a", "b"]  # one `pct list` per host


@pytest.mark.fault("A fleet command that failed without output", "its row names the exit status, never an empty "
                   "reason (`FAILED (1) ... Exit:`)")
def test_a_failure_without_a_message_names_its_exit_status(cfg):
    from invoke import Exit

    def work(ctid):
        raise Exit(code=3)  # exec's way out after a command that printed nothing

    from remote import executor
    from remote.cli import format as fmt

    result = executor.each(cfg, [200], work)
    assert (result[200].exit_code, result[200].message) == (3, "exited with status 3")
    assert re.search(r"FAILED \(3\)\s+[\d.]+s\s+exited with status 3$", fmt.group_table(result).splitlines()[1])
    assert executor.failure(JobError("it broke")) == (1, "it broke")


def test_status_and_runs_json_keep_their_keys_in_order_from_the_typed_values():
    """`status --json` and `runs --json` print the same keys, in the same order, as when the API returned dicts."""
    import json

    from remote.cli import format as fmt
    from remote.results import ContainerStatus, FleetStatus, HostStatus, JobStatus, LiveRun, RunSummary

    job = JobStatus("R", True, False, (), None, 12, False, 30, 3.0, 2.5, "Ktok/s", True, 20.0, True, ("oom",), "▁▂",
                    None, None, None, {"util_pct": 50}, nodes=(200, 300), node_rank=0)
    status = FleetStatus((HostStatus("h", True, None, "kept", {200: "running", 201: "missing"}),), (
        ContainerStatus(200, "h", "running", run=job, also_live=(LiveRun("S", None),), probed=True,
                        venv_lock="abc", venv_lock_differs="def"),
        ContainerStatus(201, "h", "missing", error="container 201 does not exist")))
    data = json.loads(fmt.status_json(fmt.status_dict(status)))
    assert list(data["hosts"][0]) == ["host", "reachable", "error", "kept", "containers"]
    assert data["hosts"][0]["containers"] == {"200": "running", "201": "missing"}
    first, second = data["containers"]
    assert list(first) == ["container", "host", "state", "also_live", "run", "venv_lock", "venv_lock_differs"]
    assert first["also_live"] == [{"run": "S", "pid": None}]
    assert list(first["run"]) == ["id", "alive", "lost", "orphans", "exit", "pid", "stopped", "uptime_s", "throughput",
                                  "rolling", "unit", "higher_is_better", "baseline", "low", "problems", "spark",
                                  "stalled", "attempt", "attempts_max", "gpu", "nodes", "node_rank"]
    assert first["run"]["nodes"] == [200, 300] and first["run"]["problems"] == ["oom"]
    assert second == {"container": 201, "host": "h", "state": "missing", "error": "container 201 does not exist"}
    single = dict(fmt.status_dict(FleetStatus((), (ContainerStatus(202, "h", "running", run=JobStatus(
        *astuple_of(job)[:20]), probed=True),)))["containers"][0])
    assert "nodes" not in single["run"] and "node_rank" not in single["run"] and single["venv_lock"] is None

    runs = json.loads(fmt.runs_json([RunSummary("A", None, None, "lost", None, None, None, None, None, "/r/A"),
                                     RunSummary("B", "x", 1.5, "stopped", 137, 2.0, "it/s", "python t.py", (1, 2),
                                                "/r/B")]))
    assert [list(r) for r in runs] == [["id", "started", "started_epoch", "state", "exit", "throughput", "unit",
                                        "command", "nodes", "path"]] * 2
    assert runs[0]["state"] == "LOST" and runs[1]["state"] == "stopped" and runs[1]["nodes"] == [1, 2]
    table = fmt.runs_text([RunSummary("A\x1b[2J", None, None, "lost", None, None, None, None, None, "/r/A"),
                           RunSummary("B", "x", None, "exited", 0, 2.0, "it/s", "python t.py", None, "/r/B")], 200, "/r")
    head, lost, ended = table.splitlines()
    assert head.split() == ["RUN", "STARTED", "STATE", "EXIT", "THROUGHPUT", "COMMAND"]
    assert "\x1b" not in lost and lost.split()[2:4] == ["LOST", "-"] and ended.split()[1:] == \
        ["x", "exited", "0", "2", "it/s", "python", "t.py"]
    assert fmt.runs_text([], 200, "/r") == "container 200: no runs in /r (start one with `remote train`)"


def astuple_of(value):
    import dataclasses

    return tuple(getattr(value, f.name) for f in dataclasses.fields(value))


@pytest.mark.fault("Threads asking a session for a host's transport at once", "one transport is made and shared: "
                   "no second SSH connection that nothing closes")
def test_threads_asking_for_a_hosts_transport_at_once_get_the_one_transport(cfg):
    from remote.transport.session import Session

    made = []

    def factory(host):
        time.sleep(0.05)  # a connection takes a while: every thread asks before the first is made
        made.append(host.name)
        return object()

    session = Session(cfg, transport_factory=factory)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(session.transport(cfg.hosts["a"]))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == ["a"] and len({id(t) for t in got}) == 1


def test_a_multi_node_runs_events_are_typed_each_nodes_marked_with_it(cfg, monkeypatch):
    """A multi-node train reports through each node's Target and the session's reporter, typed at the source:
    a node's preflight note is that node's, the run's start a StepStarted and its end a Note of no one node."""
    from remote.events import Note, Output, StepStarted
    from remote.facts.deployed import VenvRecord
    from remote.facts.runs import RunState
    from remote.ops import jobs
    from remote.testing import MockTransport, Reply
    from remote.transport.session import Session

    pre = jobs.Preflight("c" * 40, VenvRecord(), None, ["GPU 0: H200"])
    monkeypatch.setattr(jobs, "preflight", lambda *a, **k: pre)
    monkeypatch.setattr(jobs, "launch", lambda *a, **k: ("R", 4242))
    monkeypatch.setattr(jobs, "state", lambda *a, **k: RunState("R", exit=0))
    monkeypatch.setattr(jobs, "show_log", lambda *a, **k: jobs.Followed("R", exit=0))
    monkeypatch.setattr(jobs, "describe_end", lambda st: "exited with status 0")
    monkeypatch.setattr(multinode, "node_iface", lambda session, spec, file: "eth0")
    got: list = []
    with Session(cfg, events=got.append, transport_factory=MockTransport(lambda c: Reply())) as s:
        result = multinode.train(s, [200, 201])
    assert result is not None and multinode.final_status(result) == 0
    notes = [(type(e), e.container, e.line) for e in got if "preflight" in e.line]
    assert notes == [(Output, 200, "[200] preflight: GPU 0: H200"), (Output, 201, "[201] preflight: GPU 0: H200")]
    started = [e for e in got if isinstance(e, StepStarted)]
    assert len(started) == 1 and started[0].container is None
    assert re.fullmatch(r"run \S+ started on 2 nodes: 200 \(pid 4242\), 201 \(pid 4242\); master 10.0.1.200:29500",
                        started[0].step), started[0].step
    end = got[-1]
    assert isinstance(end, Note) and end.level == "info" and end.container is None
    assert re.fullmatch(r"-- multi-node run \S+: 200: exited with status 0; 201: exited with status 0", end.line)
