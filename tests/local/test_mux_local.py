"""The host's stream mux without the lab: the real MUX program run locally, the agents it starts, and a
Session whose host pays a login shell per command (so its agents share one mux)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from support import wait_until

from remote import config
from remote.errors import CommandTimeout, ConnectError
from remote.transport import LocalTransport
from remote.transport import session as session_mod
from remote.transport.agent import AGENT, Agent
from remote.transport.hostmux import MUX, Mux
from remote.transport.session import Session

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}


def local_mux() -> Mux:
    return Mux(LocalTransport().open_stream([sys.executable, "-I", "-S", "-c", MUX, "60"]), "here")


def read_all(stream) -> bytes:
    out = b""
    while chunk := stream.read(1 << 16):
        out += chunk
    return out


def ps() -> str:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_the_mux_relays_stdin_stdout_stderr_and_the_exit_status():
    mux = local_mux()
    try:
        s = mux.open_stream(["sh", "-c", "cat; echo note >&2; exit 3"])
        data = os.urandom(3 << 20)  # more than one frame and than any pipe holds
        writer = threading.Thread(target=lambda: (s.write(data), s.close_stdin()), daemon=True)
        writer.start()
        assert read_all(s) == data
        assert s.wait(10) == 3 and s.error_text() == "note"
        missing = mux.open_stream(["/nonexistent/program"])
        assert read_all(missing) == b"" and missing.wait(10) == 127
        assert "No such file" in missing.error_text()
        assert mux.run(["sh", "-c", "echo out; echo err >&2; exit 4"]).stdout == b"out\n"
        with pytest.raises(CommandTimeout):
            mux.run(["sleep", "30"], deadline=0.5)
    finally:
        mux.close()


def test_a_child_that_does_not_read_its_stdin_holds_up_no_other_stream(tmp_path):
    mux = local_mux()
    go = tmp_path / "go"
    try:
        # It reads nothing until `go` exists, which is only after the other command has answered.
        slow = mux.open_stream(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; cat >/dev/null"])
        slow.write(b"x" * (4 << 20))  # far more than its pipe holds: the mux keeps the rest
        # Blocked behind the child that reads nothing, this would never answer and run past its deadline.
        assert mux.run(["echo", "quick"], deadline=20).stdout == b"quick\n"
        go.touch()
        slow.close_stdin()
        assert slow.wait(20) == 0
    finally:
        mux.close()


@pytest.mark.fault("SSH dropped mid-command",
                   promise="the command's processes are killed in the container; the next command reconnects")
def test_agents_over_one_mux_run_at_once_and_a_lost_mux_kills_every_agents_children():
    transport = LocalTransport()
    stream = transport.open_stream([sys.executable, "-I", "-S", "-c", MUX, "60"])
    mux = Mux(stream, "here")
    agents = [Agent(mux.open_stream([sys.executable, "-I", "-S", "-c", AGENT, "60"]), f"here/{i}") for i in range(3)]
    tag = f"mux-lost-{os.getpid()}"
    outcomes: list = []

    def sleep_in(agent):
        try:
            outcomes.append(agent.run(["bash", "-c", f"exec -a {tag} sleep 100"], env=ENV, cwd="/tmp", timeout=None,
                                      stdin=None, on_output=None, deadline=None))
        except Exception as exc:
            outcomes.append(exc)

    for a in agents[:2]:
        threading.Thread(target=sleep_in, args=(a,), daemon=True).start()
    r = agents[2].run(["cat"], env=ENV, cwd="/tmp", timeout=None, stdin=b"in", on_output=None, deadline=10)
    assert r.stdout == b"in"
    assert wait_until(lambda: ps().count(tag) == 2)
    agents[2].close()  # one agent closed: the others and their commands go on
    time.sleep(0.5)
    assert agents[0].alive() and agents[1].alive() and not outcomes
    stream.proc.kill()  # the mux dies at once (as when its SSH session is killed): its pipes close
    assert wait_until(lambda: tag not in ps(), 15), "an agent's child outlived the mux"
    assert wait_until(lambda: len(outcomes) == 2, 20)
    assert all(isinstance(o, ConnectError) for o in outcomes), outcomes
    mux.close()


class ShellHost(LocalTransport):
    """A local transport that says each command pays a login shell, as SSH's does: the session uses a mux."""

    login_shell = True

    def __init__(self):
        super().__init__("lab")
        self.streams, self.runs = [], []

    def open_stream(self, argv):
        self.streams.append(list(argv))
        return super().open_stream(["sh", "-c", 'exec "$@"', "sh", *argv])  # a missing program: 127, as over SSH

    def run(self, argv, **kwargs):
        self.runs.append(list(argv))
        return super().run(argv, **kwargs)


@pytest.fixture
def hosts(tmp_path):
    """Three containers on one host whose `pct exec ... -- argv` runs argv here."""
    pct = tmp_path / "pct"
    pct.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    pct.chmod(0o755)
    path = tmp_path / "hosts.yaml"
    path.write_text(f"hosts:\n  lab: {{address: 127.0.0.1, pct: {pct}}}\n"
                    "containers:\n  200: {host: lab}\n  201: {host: lab}\n  202: {host: lab}\n")
    return str(path)


MUX_LOST = "A host's mux lost (its session dropped, or its idle exit)"
MUX_PROMISE = "the next command starts a new mux and agent; a host command it did not answer runs on a session of its own"


@pytest.mark.fault(MUX_LOST, promise=MUX_PROMISE)
def test_the_agents_and_host_commands_of_a_host_share_one_mux(hosts):
    transport = ShellHost()
    with Session(config.load(hosts), agent=True, transport_factory=lambda h: transport) as s:
        for ctid in (200, 201, 202):
            assert s.container(ctid).run(["echo", str(ctid)], cwd="/tmp").out == f"{ctid}\n"
        assert s.host_run(s.config.hosts["lab"], ["echo", "host"]).out == "host\n"
        assert len(transport.streams) == 1 and "-S" in transport.streams[0] and transport.runs == []
        s._muxes["lab"].stream.proc.kill()  # a lost connection: the next command starts a new mux and agent
        assert wait_until(lambda: not s._muxes["lab"].alive(), 10)
        assert s.container(200).run(["echo", "again"], cwd="/tmp").out == "again\n"
        assert len(transport.streams) == 2


def test_without_the_mux_each_agent_has_its_own_session(hosts, monkeypatch):
    monkeypatch.setattr(session_mod, "MUX_PYTHON", "/nonexistent/python3")
    transport = ShellHost()
    with Session(config.load(hosts), agent=True, transport_factory=lambda h: transport) as s:
        for ctid in (200, 201):
            assert s.container(ctid).run(["echo", "ok"], cwd="/tmp").out == "ok\n"
        assert s.host_run(s.config.hosts["lab"], ["echo", "host"]).out == "host\n"
        # one failed mux start (not retried at once), then a stream per agent and a session for the host command
        assert transport.streams[0][0] == "/nonexistent/python3" and len(transport.streams) == 3
        assert transport.runs == [["echo", "host"]]


@pytest.mark.fault(MUX_LOST, promise=MUX_PROMISE)
def test_a_host_command_whose_mux_ends_before_answering_runs_on_a_session_of_its_own(hosts, monkeypatch):
    transport = ShellHost()
    with Session(config.load(hosts), agent=True, transport_factory=lambda h: transport) as s:
        host = s.config.hosts["lab"]
        assert s.host_run(host, ["echo", "one"]).out == "one\n" and transport.runs == []  # through the mux
        real = Mux.run

        def ends_first(self, argv, **kwargs):  # the mux goes between being chosen and answering
            self.stream.proc.kill()
            assert wait_until(lambda: not self.alive(), 10)
            return real(self, argv, **kwargs)

        monkeypatch.setattr(Mux, "run", ends_first)
        assert s.host_run(host, ["echo", "two"]).out == "two\n"
        assert transport.runs == [["echo", "two"]]


@pytest.mark.fault("Mux lost while a host command runs", promise="a host command that started is never run again by "
                   "itself (a `pct create` or `pct set` twice is not what was asked): ConnectError saying it may have "
                   "run; one whose start never reached the mux runs on a session of its own")
def test_a_host_command_that_started_before_its_mux_was_lost_is_not_run_again(hosts, tmp_path):
    transport = ShellHost()
    marker = tmp_path / "ran"
    with Session(config.load(hosts), agent=True, transport_factory=lambda h: transport) as s:
        host = s.config.hosts["lab"]
        assert s.host_run(host, ["true"]).exit_code == 0  # the mux is up
        mux = s._muxes[host.name]
        killer = threading.Thread(target=lambda: (wait_until(marker.exists, 30), mux.stream.proc.kill()))
        killer.start()
        with pytest.raises(ConnectError, match="it may have run: it is not run again by itself"):
            s.host_run(host, ["sh", "-c", 'echo x >> "$1"; sleep 30', "sh", str(marker)], deadline=60)
        killer.join()
    assert marker.read_text() == "x\n" and transport.runs == []  # once, through the mux, never on a session
