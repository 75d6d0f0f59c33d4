"""The `[id]` mark (remote.events.CONTAINER, set in each container's thread by the executor) follows the work into
the helper threads it starts: a local host's output readers, parallel warmup devices, pools."""
from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from remote import executor
from remote.events import CONTAINER
from remote.ops import warmup
from remote.threads import ContextThread, submit
from remote.transport import LocalTransport


def in_container(ctid: int, fn):
    """fn() in a fresh thread marked as container ctid's (as remote.executor's threads are): its return value."""
    got: list = []

    def work():
        CONTAINER.set(ctid)
        got.append(fn())

    t = threading.Thread(target=contextvars.Context().run, args=(work,))
    t.start()
    t.join()
    return got[0]


@pytest.mark.fault("A container's lines from helper threads",
                   promise="carry its `[id]` mark: a local host's command output, parallel warmup devices' lines and "
                   "pools run in a copy of the container thread's context")
def test_a_local_commands_output_is_marked_with_its_container():
    def work():
        marks: list = []
        r = LocalTransport().run(["sh", "-c", "echo out; echo err >&2"],
                                 on_output=lambda name, chunk: marks.append(CONTAINER.get()))
        return r.exit_code, marks

    code, marks = in_container(201, work)
    assert code == 0 and marks and set(marks) == {201}, marks


def test_parallel_warmup_devices_lines_are_marked(monkeypatch):
    """Each device's lines: events of its container, reported from a thread that still knows whose work it
    does (the command line's `[id] ` mark reads it)."""
    from remote import config
    from remote.target import resolve
    from remote.transport.session import Session

    def run_device(t, state, dev):
        t.output(f"device {dev} compiled")
        return warmup.DeviceResult(dev, 0.0, 0.0, {})

    monkeypatch.setattr(warmup, "run_device", run_device)

    def work():
        seen: list = []
        hosts = {"hosts": {"pve1": {"address": "10.0.0.1"}}, "containers": {202: {"host": "pve1"}}}
        s = Session(config.parse(hosts, "hosts.yaml"), events=lambda e: seen.append((e.container, CONTAINER.get())),
                    transport_factory=lambda host: pytest.fail("nothing connects"))
        warmup._warm_devices(resolve(s, 202), {}, ["0", "1", "2"], True)
        return seen

    seen = in_container(202, work)
    assert len(seen) == 4 and set(seen) == {(202, 202)}, seen


def test_context_threads_and_pools_carry_the_starters_context():
    def work():
        seen: list = []
        t = ContextThread(target=lambda: seen.append(CONTAINER.get()))
        t.start()
        t.join()
        with ThreadPoolExecutor(max_workers=1) as pool:
            seen.append(submit(pool, CONTAINER.get).result())
        return seen

    assert in_container(203, work) == [203, 203]
    # The executor's own threads too: a group call's marks, and nothing of them left in the caller's thread.
    assert executor.per_host(["a", "b"], lambda name: CONTAINER.get()) == [None, None]
