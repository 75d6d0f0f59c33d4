"""A caller's callback (a group call's on_done/on_tick, a fleet's progress/events) is the caller's code: what it
raises is caught, logged and returned, never a worker thread's death (printed, the outcome lost) nor the end of
an operation between two of its steps."""
from __future__ import annotations

import logging
import threading

import pytest

from remote import config as cfg
from remote import executor
from remote.api.base import _Emitter
from remote.events import Done, StepStarted

CONFIG = cfg.parse({"hosts": {"a": {"address": "a"}}, "containers": {200: {"host": "a"}, 201: {"host": "a"}}},
                   "hosts.yaml")


@pytest.mark.fault("A raising on_done/on_tick or events callback",
                   promise="caught and reported (logged with its traceback; GroupResult.callback_errors): no worker "
                   "thread dies, every container's outcome is returned, an operation reporting a step goes on")
def test_a_raising_on_done_or_on_tick_neither_kills_a_worker_nor_loses_an_outcome(monkeypatch, caplog):
    died: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    ticked = threading.Event()

    def fn(ctid):
        assert ticked.wait(60), "no tick"  # runs until the caller's on_tick has been called (and raised)
        return ctid * 2

    def on_done(o):
        raise RuntimeError(f"my on_done broke on {o.container}")

    def on_tick(running):
        ticked.set()
        raise ValueError("my on_tick broke")

    with caplog.at_level(logging.WARNING, logger="remote"):
        result = executor.each(CONFIG, [200, 201], fn, on_done=on_done, on_tick=on_tick)
    assert died == []
    assert result.ok and result.succeeded == {200: 400, 201: 402}
    assert set(result.callback_errors) == {200, 201, None}
    assert "my on_done broke on 200" in str(result.callback_errors[200])
    assert "on_done callback raised" in caplog.text and "on_tick callback raised" in caplog.text


def test_a_raising_events_callback_does_not_stop_the_operation_that_reports(caplog):
    seen: list = []

    def events(event):
        seen.append(event)
        raise RuntimeError("my sink broke")

    lines: list = []
    emit = _Emitter(lines.append, events)
    with caplog.at_level(logging.WARNING, logger="remote"):
        # an operation reports a step, then carries on to its next
        emit.event(StepStarted(200, "==> snapshot remote-20261201-1", "snapshot remote-20261201-1"))
        emit.event(StepStarted(200, "==> swap the venv", "swap the venv"))
        emit.ended(executor.Outcome(200, "a", None, None, 1.0))
    assert lines == ["==> snapshot remote-20261201-1", "==> swap the venv"]
    assert [type(e) for e in seen] == [StepStarted, StepStarted, Done] and len(emit.errors) == 3
    assert "progress/events callback raised" in caplog.text
