"""The agent's protocol and failure handling without the lab: the real AGENT program run locally
(LocalStream), and stream doubles for the faults a real link produces (no answer, a dead write)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from support import wait_until

from remote import config
from remote.transport.agent import AGENT, AGENT_SOURCE, Agent, agent_argv
from remote.errors import ConnectError
from remote.transport.session import Session
from remote.transport import LocalTransport

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}


def local_agent(agent_silence: str = "60", **kwargs) -> Agent:
    stream = LocalTransport().open_stream(agent_argv(sys.executable, agent_silence))
    return Agent(stream, "here", source=AGENT_SOURCE, **kwargs)


def run(agent: Agent, argv, timeout=None, deadline=30.0, **kw):
    return agent.run(argv, env=ENV, cwd="/tmp", timeout=timeout, stdin=None, on_output=None, deadline=deadline, **kw)


def background(agent: Agent, argv) -> list:
    """Run argv in a thread; the list gets its result or the exception it raised."""
    outcome: list = []

    def work():
        try:
            outcome.append(run(agent, argv, deadline=None))
        except Exception as exc:
            outcome.append(exc)

    threading.Thread(target=work, daemon=True).start()
    return outcome


def gone(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 1


class Silent:
    """A stream double whose other end never says anything (a command that hangs before the agent starts)."""

    def __init__(self):
        self.closed = threading.Event()
        self.written = []

    def read(self, n):
        self.closed.wait()
        return b""

    def write(self, data):
        self.written.append(data)

    def error_text(self):
        return ""

    def alive(self):
        return not self.closed.is_set()

    def close(self):
        self.closed.set()


class Scripted(Silent):
    """Says hello like the agent, then hands writes to `on_write` (which may raise, as a dead link does)."""

    def __init__(self, on_write):
        super().__init__()
        import json
        import struct

        hello = json.dumps({"i": 0, "ready": 1}).encode()
        self.pending = struct.pack(">I", len(hello)) + hello
        self.on_write = on_write

    def read(self, n):
        if self.pending:
            chunk, self.pending = self.pending[:n], self.pending[n:]
            return chunk
        return super().read(n)

    def write(self, data):
        self.on_write(data)


@pytest.mark.fault("Agent never answers its handshake",
                   promise="ConnectError, the stream closed; plain pct exec is used instead")
def test_a_handshake_that_never_completes_is_a_connect_error_and_closes_the_stream():
    stream = Silent()
    start = time.monotonic()
    with pytest.raises(ConnectError, match="did not start: no answer in 0.5s"):
        Agent(stream, "here", handshake_timeout=0.5)
    assert stream.closed.is_set() and time.monotonic() - start < 10


@pytest.mark.fault("Write on a dead agent stream", promise="ConnectError whatever the stream raised; the stream closed")
@pytest.mark.parametrize("error", [ValueError("I/O operation on closed file"), EOFError(),
                                   BrokenPipeError(32, "Broken pipe"), RuntimeError("Socket is closed")],
                         ids=["ValueError", "EOFError", "BrokenPipe", "other"])
def test_a_write_on_a_dead_stream_is_a_connect_error(error):
    def dead(data):
        raise error

    stream = Scripted(dead)
    agent = Agent(stream, "here", ping_every=3600)
    with pytest.raises(ConnectError, match="agent gone"):
        run(agent, ["true"])
    assert agent.dead and stream.closed.is_set() and not agent.alive()
    with pytest.raises(ConnectError):  # and stays so
        run(agent, ["true"])


@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_a_silent_agent_is_declared_lost_and_wakes_every_waiting_command():
    stream = Scripted(lambda data: None)  # takes requests, never answers anything, pings included
    agent = Agent(stream, "here", ping_every=0.2, silence=1.0)
    errors = []

    def wait():
        try:
            run(agent, ["sleep", "100"], deadline=None)
        except ConnectError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait) for _ in range(3)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 3 and all("went silent" in str(e) for e in errors)
    assert agent.silent and stream.closed.is_set() and time.monotonic() - start < 15


def test_the_agent_answers_pings_and_stays_alive_while_idle():
    agent = local_agent(ping_every=0.1, silence=1.0)
    try:
        time.sleep(2.5)  # idle far past `silence`: only the pongs keep it alive
        assert agent.alive(), agent.dead
        assert run(agent, ["echo", "hi"]).stdout == b"hi\n"
    finally:
        agent.close()


@pytest.mark.fault("A command closes its pipes and runs on",
                   promise="other commands' results are not held up; its timeout still kills it")
def test_a_child_that_closes_its_pipes_does_not_block_other_results_and_still_times_out():
    agent = local_agent()
    tag = f"agent-closed-pipes-{os.getpid()}"
    try:
        results = []
        t = threading.Thread(target=lambda: results.append(run(
            agent, ["bash", "-c", f"exec >&- 2>&-; exec -a {tag} sleep 20"], timeout=2)))
        t.start()
        time.sleep(0.5)
        start = time.monotonic()
        assert run(agent, ["echo", "other"], deadline=15).stdout == b"other\n"
        assert time.monotonic() - start < 5
        t.join(timeout=30)
        assert results and results[0].exit_code == 124  # reported by its timeout, not at its own end
        assert wait_until(lambda: gone(tag), 10)
        # and one that closes its pipes, then exits by itself, is reported with its status
        assert run(agent, ["bash", "-c", "exec >&- 2>&-; sleep 0.3; exit 3"], deadline=15).exit_code == 3
    finally:
        agent.close()


@pytest.mark.fault("SSH dropped mid-command",
                   promise="the command's processes are killed in the container; the next command reconnects")
def test_the_agent_kills_its_children_when_the_controller_stops_reading():
    """A controller gone mid-send: the agent's writes fail (EPIPE) and it must still kill its children."""
    tag = f"agent-orphan-{os.getpid()}"
    stream = LocalTransport().open_stream([sys.executable, "-c", AGENT, "60"])
    agent = Agent(stream, "here")
    # A quiet process beside a chatty one: the chatty one dies of SIGPIPE by itself, the quiet one only if killed.
    outcome = background(agent, ["bash", "-c", f"(exec -a {tag} sleep 100) & while :; do echo output; done"])
    assert wait_until(lambda: not gone(tag), 10)
    stream.proc.stdout.close()  # the controller's end of the agent's stdout: the next write gets EPIPE
    assert wait_until(lambda: gone(tag), 15), "the agent's child outlived the controller"
    assert stream.proc.wait(timeout=15) == 0
    assert wait_until(lambda: outcome, 10) and isinstance(outcome[0], ConnectError)
    agent.close()


@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_the_agent_kills_its_children_when_the_controller_goes_silent():
    tag = f"agent-silence-{os.getpid()}"
    stream = LocalTransport().open_stream([sys.executable, "-c", AGENT, "1.5"])
    agent = Agent(stream, "here", ping_every=3600)  # no pings: the agent hears nothing after the request
    outcome = background(agent, ["bash", "-c", f"exec -a {tag} sleep 100"])
    assert wait_until(lambda: not gone(tag), 10)
    assert wait_until(lambda: gone(tag), 15), "the agent did not notice the silent controller"
    assert wait_until(lambda: outcome, 10) and isinstance(outcome[0], ConnectError)
    agent.close()


class AgentHere(LocalTransport):
    """A local transport whose streams run the agent on this machine instead of through pct."""

    def __init__(self):
        super().__init__("lab")
        self.streams = []

    def open_stream(self, argv):
        stream = super().open_stream([sys.executable, *argv[argv.index("--") + 2:]])
        self.streams.append(stream)
        return stream


@pytest.mark.fault("SSH dropped mid-command",
                   promise="the command's processes are killed in the container; the next command reconnects")
def test_a_dead_agent_is_closed_when_it_is_replaced(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  lab: {address: 127.0.0.1, local: true}\ncontainers:\n  200: {host: lab}\n")
    transport = AgentHere()
    with Session(config.load(str(hosts)), agent=True, transport_factory=lambda h: transport) as s:
        spec = s.config.container(200)
        first = s._agent_for(spec)
        first._lost("killed for the test")  # as the reader does when the stream ends
        closed = []
        first.stream.close = lambda orig=first.stream.close: (closed.append(True), orig())
        second = s._agent_for(spec)
        assert second is not first and closed == [True]
        assert s.container(200).run(["echo", "ok"], cwd="/tmp").out == "ok\n"


class Throttled:
    """A real agent's stream behind a slow link: every write passes at `rate` bytes per second."""

    def __init__(self, inner, rate: float):
        self.inner, self.rate = inner, rate

    def write(self, data):
        view = memoryview(data)
        for start in range(0, len(view), 64 << 10):
            piece = view[start:start + (64 << 10)]
            time.sleep(len(piece) / self.rate)
            self.inner.write(piece)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.fault("Large stdin through the agent", "the heartbeat does not declare a link dead while a large "
                   "request (deploy's code bundle) is still passing: the command completes")
def test_a_large_stdin_slower_than_the_silence_limit_passes():
    stream = Throttled(LocalTransport().open_stream([sys.executable, "-c", AGENT, "60"]), rate=2 << 20)
    agent = Agent(stream, "here", ping_every=0.2, silence=1.0)
    try:
        data = os.urandom(3 << 20)  # 4 MiB as base64 in JSON: about 2 s at 2 MiB/s, twice the silence limit
        start = time.monotonic()
        r = agent.run(["wc", "-c"], env=ENV, cwd="/tmp", timeout=None, stdin=data, on_output=None, deadline=60)
        assert time.monotonic() - start > 1.5  # it did take longer than the silence limit
        assert r.exit_code == 0 and r.out.strip() == str(len(data)) and not agent.dead
    finally:
        agent.close()


def test_a_large_write_that_stops_moving_is_still_a_silent_link():
    taken = []

    def write(data):  # the link's buffers take 1 MiB, then nothing moves any more
        if sum(map(len, taken)) >= 1 << 20:
            threading.Event().wait(30)
        taken.append(bytes(data))

    agent = Agent(Scripted(write), "here", ping_every=0.2, silence=1.0)
    outcome = []
    threading.Thread(target=lambda: outcome.append(pytest.raises(ConnectError, agent.run, ["wc", "-c"], env=ENV,
                     cwd="/tmp", timeout=None, stdin=os.urandom(3 << 20), on_output=None, deadline=None)),
                     daemon=True).start()
    assert wait_until(lambda: agent.dead is not None, timeout=10), "the stalled write kept the link alive"
    assert "went silent" in agent.dead


@pytest.mark.fault("The in-container agent's command line",
                   promise="the agent's program travels on its stdin: its command line (`ps` in the container) is a "
                   "loader of a few hundred characters, none of the program's text")
def test_the_agents_program_travels_on_stdin_not_its_command_line():
    stream = LocalTransport().open_stream(agent_argv(sys.executable, "60"))
    agent = Agent(stream, "here", source=AGENT_SOURCE)
    try:
        r = run(agent, ["sh", "-c", "cat /proc/$PPID/cmdline"])  # the agent is the command's parent
        assert r.exit_code == 0 and r.out.split("\0")[1:3] == ["-I", "-S"], r.out
        assert len(r.out) < 400 and "def send" not in r.out and "SILENCE" not in r.out, r.out
        assert run(agent, ["sh", "-c", "echo hi"]).out == "hi\n"  # the frames follow the program on the same stdin
    finally:
        agent.close()
