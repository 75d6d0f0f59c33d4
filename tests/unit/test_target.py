"""The Target: resolved once, its pct Container made once, its reports typed at the source (no prefix parsed)."""

from __future__ import annotations

import pytest

from remote import config
from remote.errors import ConfigError
from remote.events import Note, Output, StepStarted
from remote.target import resolve, resolve_host
from remote.transport.session import Session

FILE = {"hosts": {"pve1": {"address": "10.0.0.1"}, "pve2": {"address": "10.0.0.2"}},
        "containers": {200: {"host": "pve1"}, 201: {"host": "pve2"}}}


def session(events):
    return Session(config.parse(FILE, "hosts.yaml"), events=events.append,
                   transport_factory=lambda host: pytest.fail("a report connects nothing"))


def test_reports_arrive_typed_and_marked_with_their_container_without_parsing_any_prefix():
    got: list = []
    t = resolve(session(got), 201)
    t.step("venv: build")
    t.note("==> not a step, only a note")  # text that the old prefix parser would have misread
    t.warn("slow")
    t.output("!! a line of the job's own output")
    assert [type(e) for e in got] == [StepStarted, Note, Note, Output]
    assert {e.container for e in got} == {201}
    assert got[0].step == "venv: build" and got[0].line == "==> venv: build"
    assert (got[1].level, got[1].line) == ("info", "-- ==> not a step, only a note")
    assert got[2].level == "warning"
    assert got[3].line == "!! a line of the job's own output"


def test_without_an_event_sink_each_event_goes_to_the_line_reporter():
    lines: list[str] = []
    s = Session(config.parse(FILE, "hosts.yaml"), events=lambda e: lines.append(e.line))
    resolve(s, 200).step("code: sync")
    assert lines == ["==> code: sync"]


def test_the_pct_container_is_made_once():
    made = []

    class Counting(Session):
        def container_for(self, spec, venv_on_path=True):
            made.append((spec.ctid, venv_on_path))
            return object()

    t = resolve(Counting(config.parse(FILE, "hosts.yaml")), 200)
    assert t.ct is t.ct and t.system is t.system
    assert made == [(200, True), (200, False)]


def test_a_host_target_marks_what_it_reports_with_the_container_it_makes():
    got: list = []
    h = resolve_host(session(got), "pve2", ctid=300)
    h.step("pct create 300")
    assert got == [StepStarted(300, "==> pct create 300", "pct create 300")]
    with pytest.raises(ConfigError, match="unknown host 'pve9'.*pve1, pve2"):
        resolve_host(session(got), "pve9")
