"""The command line is a client of the library's events: it opens its fleet with `events=` and renders each
event (remote/cli/format.py: `[id] ` inside a `-c all` task, progress on stderr); a group's ticker is a typed
Progress event, not a line somebody parses."""

from __future__ import annotations

import threading

import pytest
from test_layers_seams import event_kinds  # every kind remote/events.py defines

import remote
import remote.api as api
from remote.cli import format as fmt
from remote.cli import program, table
from remote.events import (
    CONTAINER,
    Done,
    DryCommand,
    Failed,
    Note,
    Output,
    Progress,
    Resumed,
    SnapshotTaken,
    StepStarted,
)
from remote.testing import Command, MockTransport, Reply

HOSTS = {"hosts": {"pve1": {"address": "pve1.example"}},
         "containers": {200: {"host": "pve1"}, 201: {"host": "pve1"}}}


def test_each_event_kind_is_rendered_by_format_and_progress_goes_to_stderr(capsys):
    table.show(StepStarted(200, "==> venv: build", "venv: build"))
    table.show(Note(200, "!! careful", "warning"))
    table.show(Resumed(200, "-- connection lost (reset); resuming at byte 512", 512, "reset"))
    table.show(SnapshotTaken(200, "==> snapshot remote-1 (before a deploy)", "remote-1", "before a deploy"))
    table.show(Progress(None, "-- in progress: 200: venv: build (31s)", ((200, "venv: build", 31.0),)))
    table.show(Done(200, "container 200: done in 1.0s", 1.0))
    table.show(Failed(201, "it broke", 1, 1.0))
    table.show(DryCommand(200, "h: pct exec 200 -- rm <text, 3 lines>", ("pct", "exec", "200", "--", "rm", "a\nb\nc")))
    table.show(Output(200, "a line"), data_on_stdout=True)
    out, err = capsys.readouterr()
    assert out == ("==> venv: build\n!! careful\n-- connection lost (reset); resuming at byte 512\n"
                   "==> snapshot remote-1 (before a deploy)\nh: pct exec 200 -- rm <text, 3 lines>\n")
    assert err == "-- in progress: 200: venv: build (31s)\na line\n"  # Done, Failed: the summary table's


def test_inside_a_containers_part_of_a_group_each_line_is_marked_with_its_container(capsys):
    assert fmt.event_text(Output(201, "one\r\ntwo"), group=201) == "[201] one\n[201] two"
    assert fmt.event_text(Output(201, "one"), group=None) == "one"  # one container's task: as it is
    assert fmt.event_text(Failed(201, "it broke", 1, 0.1), group=201) is None
    got = []
    thread = threading.Thread(target=lambda: (CONTAINER.set(200), table.show(Note(200, "-- hi", "info")),
                                              got.append(True)))
    thread.start()
    thread.join()
    assert got == [True] and capsys.readouterr().out == "[200] -- hi\n"


def test_a_groups_ticker_is_a_typed_progress_event_and_a_failure_an_output_of_its_container(monkeypatch):
    monkeypatch.setattr("remote.api.base.PROGRESS_EVERY", 0.0)  # each tick says it: no waiting on a clock
    seen: list = []
    ticked = threading.Event()

    def sink(event):
        seen.append(event)
        if isinstance(event, Progress):
            ticked.set()

    def work(ct):
        ct.fleet._emit.event(StepStarted(ct.id, f"==> step of {ct.id}", f"step of {ct.id}"))
        assert ticked.wait(60), "no Progress event while the group ran"
        if ct.id == 201:
            raise remote.JobError("it broke")

    with remote.open(HOSTS, events=sink, transport=MockTransport(lambda c: Reply())) as fleet:
        result = fleet.containers("all").map(work, prefix_output=True)
    assert list(result.failed) == [201]
    ticks = [e for e in seen if isinstance(e, Progress)]
    assert ticks and ticks[0].container is None and ticks[0].line.startswith("-- in progress: ")
    assert {c for c, _, _ in ticks[-1].running} <= {200, 201} and ticks[-1].running
    assert all(step in ("started", f"step of {c}") for c, step, _ in ticks[-1].running)
    assert [(e.container, e.line) for e in seen if type(e) is Output] == [(201, "it broke")]
    assert not [e for e in seen if isinstance(e, Note)]  # nothing parsed back out of a line


def test_dash_c_list_through_the_command_line_marks_each_containers_output(monkeypatch, capsys, tmp_path):
    """`remote exec -c 200,201`: each container's output marked `[id] `, the summary table, nothing parsed."""
    def handler(c: Command) -> Reply:
        return Reply(stdout=f"hello from {c.container}\n", status=0 if c.container == 200 else 4)

    mock = MockTransport(handler)
    real = api.open
    monkeypatch.setattr(api, "open", lambda *a, **k: real(*a, **k, transport=mock))
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: {pve1: {address: pve1.example}}\ncontainers: {200: {host: pve1}, 201: {host: pve1}}\n")
    code = program.run(["exec", "--hosts", str(path), "-c", "200,201", "--", "echo", "hi"], exit=False)
    out, err = capsys.readouterr()
    assert "[200] hello from 200\n" in out and "[201] hello from 201\n" in out, out + err
    assert "201        pve1  FAILED (4)" in out and out.rstrip().endswith("1 ok, 1 failed")
    assert code == 4 and {c.inner for c in mock.calls} == {("echo", "hi")}


@pytest.mark.parametrize("kind", event_kinds(), ids=lambda k: k.__name__)  # read from remote/events.py
def test_every_event_kind_has_its_container_and_line(kind):
    assert {"container", "line"} <= set(kind.__dataclass_fields__)
