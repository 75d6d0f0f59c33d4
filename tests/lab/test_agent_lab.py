"""Lab tier: the in-container agent when the link fails under it (a dropped or a silent connection),
and a child that closes its pipes but runs on. Each test has its own session, so stopping or killing
the sshd process that serves it touches no other test's connection."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from support import lab_ids, sshd_serving, target, wait_until

from remote import config
from remote.errors import CommandTimeout, ConnectError
from remote.transport.session import Session

pytestmark = pytest.mark.lab
CT = lab_ids(__file__)[0]  # on conftest's own_lab (support.OWN_LAB_MODULES)


@pytest.fixture
def session(lab_hosts):
    with Session(config.load(str(lab_hosts)), agent=True) as s:
        yield s


def in_container(session, tag) -> bool:
    """Whether a process whose argv carries `tag` runs in container CT (asked over a fresh agent)."""
    # ps, not pgrep: the lab's pgrep misses processes whose argv[0] was rewritten (`exec -a`)
    return tag in session.container(CT).run(["ps", "-eo", "args"]).out


def background(ct, argv, **kw) -> list:
    outcome: list = []

    def work():
        try:
            outcome.append(ct.run(argv, check=False, **kw))
        except Exception as exc:
            outcome.append(exc)

    threading.Thread(target=work, daemon=True).start()
    return outcome


@pytest.mark.fault("SSH dropped mid-command",
                   promise="the command's processes are killed in the container; the next command reconnects")
def test_a_dropped_connection_leaves_none_of_the_commands_processes(session, lab):
    ct = session.container(CT)
    tag = f"agent-drop-{os.getpid()}-{time.monotonic_ns()}"
    streamed = []
    # A quiet process beside a chatty one: the agent is busy writing when the connection goes.
    outcome = background(ct, ["bash", "-c", f"(exec -a {tag} sleep 300) & while :; do echo output; done"],
                         on_output=lambda k, b: streamed.append(len(b)))
    assert wait_until(lambda: sum(streamed) > 1 << 20)
    for pid in sshd_serving(session, lab):
        os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: outcome, 30) and isinstance(outcome[0], ConnectError), outcome
    assert wait_until(lambda: not in_container(session, tag), 20), "the command's processes outlived the connection"


@pytest.mark.fault("A command closes its pipes and runs on",
                   promise="other commands' results are not held up; its timeout still kills it")
def test_a_child_that_closes_its_pipes_neither_blocks_others_nor_escapes_its_timeout(session):
    ct = session.container(CT)
    tag = f"agent-closed-{os.getpid()}-{time.monotonic_ns()}"
    ct.run(["true"])  # the agent is up
    outcome = background(ct, ["bash", "-c", f"exec >&- 2>&-; exec -a {tag} sleep 60"], timeout=3)
    time.sleep(0.5)
    start = time.monotonic()
    assert ct.run(["echo", "other"], timeout=10).out == "other\n"
    assert time.monotonic() - start < 5, "another command's result waited for the closed-pipes child"
    assert wait_until(lambda: outcome, 40) and isinstance(outcome[0], CommandTimeout), outcome
    assert not in_container(session, tag)


@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_a_silent_link_is_noticed_within_30s_and_the_next_command_reconnects(session, lab):
    ct = session.container(CT)
    tag = f"agent-silent-{os.getpid()}-{time.monotonic_ns()}"
    ct.run(["true"])
    outcome = background(ct, ["bash", "-c", f"exec -a {tag} sleep 300"])
    assert wait_until(lambda: in_container(session, tag), 10)
    stopped = sshd_serving(session, lab)
    for pid in stopped:  # the TCP connection stays up (the kernel answers), nothing passes: a half-open link
        os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        assert wait_until(lambda: outcome, 60), "a silent link was never noticed"
        noticed = time.monotonic() - start
        assert isinstance(outcome[0], ConnectError) and "silent" in str(outcome[0]), outcome
        assert noticed <= 30, f"noticed after {noticed:.1f}s"
        assert ct.run(["echo", "back"]).out == "back\n"  # a new connection, a new agent
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    # Resumed, the old sshd finds its client gone; the old agent gets EOF and kills what it ran.
    assert wait_until(lambda: not in_container(session, tag), 30), "the old agent's command was left running"


@pytest.mark.fault("SSH dropped mid-follow", promise="following resumes at the byte it reached: every line once")
@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_logs_follow_over_a_silent_link_resumes_and_shows_every_line_once(session, lab):
    follow_over_a_silent_link(session, lab, "silent")


@pytest.mark.fault("SSH dropped mid-follow", promise="following resumes at the byte it reached: every line once")
@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_logs_follow_without_the_agent_over_a_silent_link_shows_every_line_once(plain_session, lab):
    follow_over_a_silent_link(plain_session, lab, "connection lost")


def follow_over_a_silent_link(session, lab, why: str) -> None:
    import dataclasses

    from remote.facts.deployed import VenvRecord

    from remote.ops.jobs import Preflight, launch, show_log, stop

    base = session.config.container(CT)
    spec = dataclasses.replace(base, code=dataclasses.replace(base.code, path="/root"),
                               train=dataclasses.replace(base.train, run_dir=f"/root/runs-silent-{os.getpid()}"))
    t = target(session, spec)
    pre = Preflight(commit="0" * 40, venv=VenvRecord(), gpus=None, notes=[])
    n = 1500
    run_id, _ = launch(t, pre, command=f"for i in $(seq 0 {n - 1}); do echo $i; sleep 0.02; done")
    lines: list[str] = []
    follower = threading.Thread(target=lambda: show_log(target(session, spec, lines), run_id, follow=True),
                                daemon=True)
    follower.start()
    try:
        assert wait_until(lambda: len(lines) > 100)
        stopped = sshd_serving(session, lab)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            assert wait_until(lambda: any("connection lost" in line for line in lines), 60), "silent link not noticed"
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        follower.join(timeout=120)
        assert not follower.is_alive()
    finally:
        stop(t, run_id, grace=2)
    numbers = [int(line) for line in lines if line.isdigit()]
    assert numbers == list(range(n))  # nothing lost, nothing repeated
    assert any("connection lost" in line and why in line for line in lines)
    assert lines[-1].startswith(f"-- run {run_id}: exited with status 0")


@pytest.fixture
def plain_session(lab_hosts):
    with Session(config.load(str(lab_hosts))) as s:  # a `pct exec` per command: no agent, no agent heartbeat
        yield s


@pytest.mark.fault("Silent link (half-open connection)",
                   promise="noticed within 30 s, reconnected; nothing lost or repeated")
def test_a_silent_link_is_noticed_without_the_agent_too(plain_session, lab):
    ct = plain_session.container(CT)
    ct.run(["true"])
    # A plain `pct exec` is not killed with its connection (lxc-attach forwards nothing): removed below.
    outcome = background(ct, ["sleep", "120.5"])
    time.sleep(1)
    stopped = sshd_serving(plain_session, lab)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        assert wait_until(lambda: outcome, 60), "a silent link was never noticed"
        noticed = time.monotonic() - start
        assert isinstance(outcome[0], ConnectError), outcome
        assert noticed <= 30, f"noticed after {noticed:.1f}s"
        assert ct.run(["echo", "back"]).out == "back\n"  # a new connection
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        ct.run(["pkill", "-f", "^sleep 120.5$"], check=False)
