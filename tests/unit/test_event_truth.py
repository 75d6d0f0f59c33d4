"""Issue 40 item 6, the user's check of the events: each event carries its container (one container's call
too, not only a group's), its kind is right (a note is a Note), and nothing is announced that did not
happen (a refused second train emits no StepStarted for a run that never existed). Through the library and
the command line both."""

from __future__ import annotations

import datetime

import pytest
from test_preflight import ready
from test_sudo import PctHost, PctSession

import remote
import remote.api as api
from remote import config
from remote.cli import program
from remote.events import Note, SnapshotTaken, StepStarted
from remote.ops import deploy as deploymod
from remote.ops import jobs
from remote.ops import snapshots as snaps
from remote.target import resolve
from remote.testing import Command, MockTransport, Reply

HOSTS = """
hosts: {h: {address: 10.0.0.1}}
containers: {200: {host: h}}
venv:
  index_url: https://download.pytorch.org/whl/cu128
  packages: [torch==2.11.0+cu128, numpy==2.2.6]
warmup: {command: 'python -m drafter.warmup --device {device}', devices: [5, 6]}
train: {command: 'python -m drafter.train --drafter-gpus 5,6', baseline: 21.5}
"""
LIVE = "20261202-010203-abcd"


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    """A ready container (its preflight passes) with a run of its own still running; every command answered
    as the launch wrapper answers a second train (busy, exit 5), so a launch that ran would be seen."""
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    raw = ready(config.load(str(path)).container(200))
    raw["jobs"] = {"current": LIVE, "runs": {LIVE: {"exists": True, "pid": 4242, "exit": None, "leader_alive": True,
                                                    "marked": [4242]}}}
    monkeypatch.setattr(jobs.facts, "read_raw", lambda t, parts, *a, **k: [raw])
    monkeypatch.setattr(jobs, "host_gpu", lambda session, spec: None)
    launched: list[Command] = []

    def handler(c: Command) -> Reply:
        if "launch" in c.inner:
            launched.append(c)
            return Reply(stderr=f"busy: run {LIVE} (pid 4242) is still running\n", status=5)
        return Reply()

    return path, MockTransport(handler), launched


def test_a_refused_second_train_announces_no_run_and_its_events_carry_the_container(hosts):
    path, mock, launched = hosts
    got: list = []
    with remote.open(path, events=got.append, transport=mock) as fleet:
        with pytest.raises(remote.JobRunning, match=f"container 200: busy: run {LIVE} \\(pid 4242\\) is still running"):
            fleet.container(200).train()
    assert not [e for e in got if isinstance(e, StepStarted)], [e.line for e in got]  # no run was started
    assert not launched  # refused on what preflight read: the wrapper was not asked
    assert got and all(e.container == 200 for e in got), [(e.container, e.line) for e in got]


@pytest.mark.fault("A train refused because a run is live", promise="the JobRunning it raises names the live run "
                   "in .holder (run, pid, every live run), as deploy's BusyError does")
def test_a_refused_second_train_carries_the_live_run_as_its_holder(hosts):
    path, mock, _ = hosts
    with remote.open(path, transport=mock) as fleet:
        with pytest.raises(remote.JobRunning) as refused:
            fleet.container(200).train()
    assert refused.value.holder == {"run": LIVE, "pid": 4242, "live": [{"run": LIVE, "pid": 4242}]}
    assert refused.value.ctid == 200


def test_a_refused_second_train_through_the_command_line_says_no_run_starting(hosts, monkeypatch, capsys):
    path, mock, launched = hosts
    real = api.open
    monkeypatch.setattr(api, "open", lambda *a, **k: real(*a, **k, transport=mock))
    code = program.run(["train", "--hosts", str(path), "-c", "200"], exit=False)
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "==> run " not in out + err and f"busy: run {LIVE} (pid 4242) is still running" in out + err
    assert not launched


def test_deploying_without_a_snapshot_is_a_note_of_its_container(tmp_path, monkeypatch):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    got: list = []
    with remote.open(path, events=got.append, transport=MockTransport(lambda c: Reply())) as fleet:
        t = resolve(fleet._session, 200)
        monkeypatch.setattr(snaps, "before_deploy", lambda t, what, today=None: snaps.Taken(note="no snapshot: dir"))
        deploymod._snapshot(t, "a" * 40, deploymod._Changes(200))
    assert [(type(e), e.container, e.line) for e in got] == [
        (Note, 200, "-- no snapshot: dir; deploying without one")]


def test_a_snapshot_taken_is_a_snapshot_taken_event_of_its_container():
    session = PctSession(PctHost())
    taken = snaps.before_deploy(resolve(session, 200), "0123456789ab", today=datetime.date(2026, 12, 1))
    shot = [e for e in session.events if isinstance(e, SnapshotTaken)]
    assert [(e.container, e.name) for e in shot] == [(200, taken.name)] and taken.name
    assert shot[0].line.startswith(f"==> snapshot {taken.name} (")


def test_one_containers_call_marks_each_event_with_it_also_a_dry_runs_commands(tmp_path):
    """Outside a group (no executor thread to set remote.events.CONTAINER): each event still names its
    container, a dry run's command lines (what the container would run) among them."""
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    got: list = []
    with remote.open(path, dry=True, events=got.append, transport=MockTransport(lambda c: Reply())) as fleet:
        fleet.container(200).exec(["nvidia-smi", "-L"])
    assert got and all(e.container == 200 for e in got), [(e.container, e.line) for e in got]
    from remote.events import DryCommand

    dry = [e for e in got if isinstance(e, DryCommand)]  # typed: a command it would have run, argv whole
    assert len(dry) == 1 and dry[0].argv[-2:] == ("nvidia-smi", "-L") and "nvidia-smi -L" in dry[0].line


def test_a_follow_that_resumes_after_a_lost_connection_is_a_resumed_event_of_its_container(tmp_path):
    """The log's reader loses its connection once, part way: the follow goes on at the byte it had reached,
    and says so as a Resumed event (its offset and why), marked with the container; not a line to parse."""
    from remote.errors import ConnectError
    from remote.events import Resumed
    from remote.ops import logs

    class Flaky:
        calls = 0

        def script(self, *args, on_output, **kwargs):
            Flaky.calls += 1
            if Flaky.calls == 1:
                on_output("stdout", b"first line\n")
                raise ConnectError("h", "connection reset")
            on_output("stdout", b"second line\n")
            return type("R", (), {"exit_code": 0, "err": ""})()

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    got: list = []
    with remote.open(path, events=got.append, transport=MockTransport(lambda c: Reply())) as fleet:
        t = resolve(fleet._session, 200)
        end = logs.follow(Flaky(), "/r", "r", on_bytes=lambda chunk: None, follow_=False, sleep=lambda s: None,
                          on_resume=t.resumed)
    assert end == len(b"first line\nsecond line\n")
    assert [(type(e), e.container, e.offset) for e in got] == [(Resumed, 200, len(b"first line\n"))]
    assert "connection reset" in got[0].reason and got[0].line.startswith("-- connection lost (")


def test_the_stall_watchs_py_spy_install_is_a_step_and_its_absence_a_warning_of_the_container(tmp_path, monkeypatch):
    """pyspy.ensure(t): installing py-spy is a StepStarted of its container, a py-spy that cannot be had a
    warning Note of it; nothing is a line to parse."""
    from remote.events import Note
    from remote.ops import pyspy

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    pushed: list = []
    monkeypatch.setattr(pyspy, "local_binary", lambda machine, venv=None: (tmp_path / "py-spy", "new-digest"))
    monkeypatch.setattr(pyspy.files, "push_file", lambda ct, local, dest, mode: pushed.append(dest))
    got: list = []
    mock = MockTransport(lambda c: Reply(stdout=f"x86_64\nold-digest  {pyspy.container_path()}\n"))
    with remote.open(path, events=got.append, transport=mock) as fleet:
        t = resolve(fleet._session, 200)
        assert pyspy.ensure(t) == pyspy.container_path() and pushed == [pyspy.container_path()]
        monkeypatch.setattr(pyspy, "local_binary", lambda machine, venv=None: (_ for _ in ()).throw(OSError("offline")))
        assert pyspy.ensure(t) is None
    assert [(type(e), e.container) for e in got] == [(StepStarted, 200), (Note, 200)]
    assert got[0].step.startswith(f"installing py-spy {pyspy.PY_SPY_VERSION} in the container") and "sha256 differs" in got[0].step
    assert got[1].level == "warning" and "offline" in got[1].line and got[1].line.startswith("!! py-spy")
