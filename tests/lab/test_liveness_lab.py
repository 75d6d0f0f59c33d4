"""Lab tier: every run with no exit record and a live process counts as running, not only the latest
(`current`): after `train --force` starts B beside a live A, and for a run whose wrapper has not written
its pid file. Deploy's refusal, train's busy check, stop, status and doctor all ask about every run."""

import pytest
from support import lab_ids, target, wait_until

from remote import facts, shell
from remote.errors import BusyError, JobError
from remote.doctor import findings
from remote.ops import jobs
from remote.ops.deploy import deploy
from remote.facts.deployed import VenvRecord, Verify
from remote.ops.jobs import Preflight, launch, state, stop
from remote.results import LiveRun
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
CT = lab_ids(__file__)[0]
PRE = Preflight(commit="0" * 40, venv=VenvRecord(lock_sha256="x", verify=Verify(torch="2.13.0+cpu")), gpus=None, notes=[])


@pytest.fixture
def ct(lab_session):
    deploy(target_of(lab_session, CT))
    ct = lab_session.container(CT)
    ct.script("rm -rf /root/runs")
    yield ct
    ct.script("for e in /proc/[0-9]*/environ; do grep -qz '^REMOTE_RUN_ID=' \"$e\" 2>/dev/null && "
              "{ p=${e#/proc/}; kill -KILL \"${p%/environ}\" 2>/dev/null || true; }; done; rm -rf /root/runs")


def live_ids(t):
    return {r.run for r in state(t).live}


@pytest.mark.fault("A second run started with train --force beside a live one",
                   promise="deploy refuses, train is busy, stop stops both, status and doctor show both")
def test_a_live_run_that_is_not_the_latest_counts_everywhere(lab_session, ct):
    spec = lab_session.config.container(CT)
    t = target(lab_session, spec)
    a, pid_a = launch(t, PRE, command="sleep 600")
    b, pid_b = launch(t, PRE, command="sleep 600", force=True)
    assert live_ids(t) == {a, b}
    stop(t, b, grace=2)  # the latest ends; A, started first, runs on
    assert state(t).run == b and live_ids(t) == {a}

    with pytest.raises(BusyError, match=f"run {a} \\(pid {pid_a}\\)"):
        launch(t, PRE, command="sleep 600")  # train's busy check
    ct.script("echo '# an edit: deploy has something to do' >> /root/dflash/drafter/model.py")
    with pytest.raises(BusyError, match=f"run {a} \\(pid {pid_a}\\) is still running"):
        deploy(target_of(lab_session, CT))
    entry = jobs._container_job(lab_session, spec, "running")  # what `status` shows
    assert entry.run is not None and entry.run.id == b and list(entry.also_live) == [LiveRun(a, pid_a)]
    found = {f.code: f for f in findings(facts.gather(target_of(lab_session, CT), fresh=True), spec)}
    assert "orphan-processes" not in found and "run-lost" not in found
    got = facts.gather(target_of(lab_session, CT), fresh=True).jobs
    assert got.live == (a,) and not got.orphans and got.current == b

    result = stop(t, grace=2)  # no --run: every live run
    assert [o.run for o in result.others] == [a] and result.others[0].was_alive
    assert not live_ids(t) and ct.run(["kill", "-0", str(pid_a)], check=False).exit_code != 0


@pytest.mark.fault("A run whose wrapper writes its pid file late",
                   promise="launch waits for it while its processes live; it counts as running everywhere")
def test_a_run_whose_pid_file_is_late_is_started_and_counts_as_running(lab_session, ct, monkeypatch):
    spec = lab_session.config.container(CT)
    t = target(lab_session, spec)
    real = shell.load
    monkeypatch.setattr(shell, "load", lambda name: ("sleep 7\n" + real(name)) if name == "job" else real(name))
    run, pid = launch(t, PRE, command="sleep 600")  # the wrapper writes its pid file after 7 s
    monkeypatch.undo()
    assert pid > 0 and state(t).run == run and state(t).alive

    # Now one with no pid file at all, beside it and not the latest: as a wrapper that is still starting.
    ct.script("mkdir -p /root/runs/late && echo '{}' > /root/runs/late/manifest.json && : > /root/runs/late/log && "
              "REMOTE_RUN_ID=late setsid -f sleep 600 </dev/null >/dev/null 2>&1")
    assert wait_until(lambda: "late" in live_ids(t), 10)
    st = state(t, "late")
    assert st.alive and not st.lost, st
    ct.script("echo '# an edit: deploy has something to do' >> /root/dflash/drafter/model.py")
    with pytest.raises(BusyError, match=r"run late \(starting"):
        deploy(target_of(lab_session, CT))
    with pytest.raises(JobError, match=r"run late \(starting\)"):
        launch(t, PRE, command="sleep 600")
    got = facts.gather(target_of(lab_session, CT), fresh=True).jobs
    assert set(got.live) == {run, "late"} and not got.orphans
    assert "runs-concurrent" in {f.code for f in findings(facts.gather(target_of(lab_session, CT), fresh=True), spec)}
    result = stop(t, grace=2)
    assert {result.run, *(o.run for o in result.others)} == {run, "late"}
    assert not live_ids(t)
