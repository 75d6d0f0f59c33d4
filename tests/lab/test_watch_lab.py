"""Lab tier: the watch beside a job (stalls, stacks, on_stall), bounded restarts, metrics.jsonl and gpu.csv.

Real container (the lab's LXC), real job wrapper and watch (remote/sh/job.sh, watch.py), real py-spy pushed
by `launch` as uv is. Container ids come from support.lab_ids.
"""

import dataclasses
import json
import re
import time

import pytest
from support import lab_ids, target, wait_until

from remote.ops import pyspy
from remote.ops.jobs import (EXIT_STALLED, Preflight, describe_end, final_status, launch, pull_run, state,
                             stop)
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
CT = lab_ids(__file__)[0]  # on conftest's own_lab (support.OWN_LAB_MODULES)
PRE = Preflight(commit="0" * 40, venv={"verify": {"torch": "2.13.0+cpu"}, "lock_sha256": "x"}, gpus=None, notes=[])

def staller(stall_until=99):
    """A job whose attempts 0..stall_until-1 stall; later ones finish."""
    return ("python3 -c 'import os, time\n"
            "k = int(os.environ[\"REMOTE_RESTART\"])\n"
            "print(\"attempt\", k, flush=True)\n"
            "for i in range(3): print(f\"step {i} {1000 + i} tok/s\", flush=True); time.sleep(0.2)\n"
            "def wait_for_the_rendezvous_forever():\n"
            "    time.sleep(3600)\n"
            f"if k < {stall_until}: wait_for_the_rendezvous_forever()\n"
            "print(\"done\", flush=True)'")


# Attempt 0 stalls as staller() does; attempt 1 is bash's own echo, which no load makes look like a stall (a
# second python, slow to start on a busy machine, once went 3 s without output and was ended too).
STALL_ONCE = ('if [ "$REMOTE_RESTART" = 0 ]; then ' + staller() +
              '; else echo "attempt $REMOTE_RESTART"; echo done; fi')


@pytest.fixture(scope="module")
def tool_cache(tmp_path_factory):
    """One controller cache for the module: py-spy is fetched from the index once."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def ct(lab_session):
    return lab_session.container(CT)


@pytest.fixture
def spec(lab_session, request, tool_cache, monkeypatch):
    """The lab container's spec with a run folder of this test's own, the job run in /root."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tool_cache))
    base = lab_session.config.container(CT)
    return dataclasses.replace(base, code=dataclasses.replace(base.code, path="/root"),
                               train=dataclasses.replace(base.train, run_dir=f"/root/runs-{request.node.name}",
                                                         baseline=None))


def with_train(spec, **train):
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **train))


def cat(ct, path) -> str:
    return ct.run(["cat", path], check=False, mutates=False).out


def ended(t, run_id, timeout=60.0) -> dict:
    assert wait_until(lambda: not state(t, run_id).alive, timeout), f"run {run_id} did not end"
    return state(t, run_id)


@pytest.mark.fault("Job hangs (no output)",
                   promise="noticed within train.stall + 5 s, every process's stacks dumped, status says STALLED; on_stall: stop ends it (exit 124, nothing left), restart starts it again")
def test_a_stalled_job_is_caught_and_its_stacks_name_the_function_it_waits_in(lab_session, ct, spec):
    spec = with_train(spec, stall=4.0)
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=staller())
    try:
        assert wait_until(lambda: state(t, run_id).stalled, 4 + 15)
        st = state(t, run_id)
        assert st.alive  # warn (the default) leaves it running
        event = json.loads(cat(ct, f"{st.path}/events.jsonl").splitlines()[0])
        assert 4 <= event["at"] - event["since"] <= 4 + 5  # detected within stall + 5 s of the last line
        stacks = cat(ct, f"{st.path}/stacks-1.txt")
        assert "wait_for_the_rendezvous_forever" in stacks, stacks
        assert "py-spy" not in stacks.split("\n", 2)[1]  # no 'py-spy is not available' line: it attached
        log = cat(ct, f"{st.path}/log")
        quiet = event["seconds"]  # 4, or 5 where the watch's 1 s tick came late on a busy machine
        assert quiet >= 4 and f"-- STALLED: no output for {quiet} s; stacks in {st.path}/stacks-1.txt" in log
        assert describe_end(st).startswith(f"STALLED: no output for {quiet} s")
        # the pinned py-spy is in the container outside every venv, byte for byte ours
        binary, digest = pyspy.local_binary("x86_64")
        assert ct.run(["sha256sum", pyspy.container_path()]).out.split()[0] == digest
    finally:
        stop(t, run_id, grace=2)


def test_without_py_spy_the_stacks_file_says_so_and_holds_the_kernels_view(lab_session, ct, spec, monkeypatch):
    t = target(lab_session, spec)
    monkeypatch.setattr(pyspy, "container_path", lambda version=None: "/nonexistent/py-spy")
    monkeypatch.setattr(pyspy, "local_binary", lambda machine, **kw: (_ for _ in ()).throw(OSError("offline")))
    notes = []
    run_id, _ = launch(target(lab_session, with_train(spec, stall=3.0), notes), PRE, command=staller())
    try:
        assert any("py-spy 0.4.3 cannot be had" in n for n in notes), notes
        assert wait_until(lambda: state(t, run_id).stalled, 3 + 15)
        stacks = cat(ct, f"{state(t, run_id).path}/stacks-1.txt")
        assert "py-spy is not available" in stacks
        assert "waits in" in stacks and "thread " in stacks  # every thread's wait channel instead
    finally:
        stop(t, run_id, grace=2)


@pytest.mark.fault("Job hangs (no output)",
                   promise="noticed within train.stall + 5 s, every process's stacks dumped, status says STALLED; on_stall: stop ends it (exit 124, nothing left), restart starts it again")
def test_on_stall_stop_ends_it_with_nothing_left_and_a_status_saying_stalled(lab_session, spec):
    spec = with_train(spec, stall=3.0, on_stall="stop")
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=staller())
    st = ended(t, run_id, 3 + 30)
    assert st.exit == EXIT_STALLED and final_status(st) == EXIT_STALLED
    assert st.orphans == ()
    assert "STALLED" in describe_end(st) and "ended by the stall watch" in describe_end(st)


@pytest.mark.fault("Job hangs (no output)",
                   promise="noticed within train.stall + 5 s, every process's stacks dumped, status says STALLED; on_stall: stop ends it (exit 124, nothing left), restart starts it again")
def test_on_stall_restart_restarts_it(lab_session, ct, spec):
    spec = with_train(spec, stall=3.0, on_stall="restart", restarts=1)
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=STALL_ONCE)
    st = ended(t, run_id, 180)  # a hang guard: the run's course depends on no timing
    log = cat(ct, f"{st.path}/log")
    assert st.exit == 0, log
    quiet = re.search(r"^-- STALLED: no output for (\d+) s;.*ending this attempt", log, re.M)
    assert quiet and int(quiet.group(1)) >= 3, log  # the watch's 1 s tick may see 3.5 s and say 4
    assert "-- attempt 2 of 2 (previous exit 143)" in log
    assert "attempt 0\n" in log and "attempt 1\n" in log and log.rstrip().endswith("done")
    assert [a.exit for a in st.attempts] == [143, 0]


FLAKY = "python3 -c 'import os, sys; k = os.environ[\"REMOTE_RESTART\"]; print(\"REMOTE_RESTART=\" + k); sys.exit({})'"


@pytest.mark.fault("Job exits non-zero", promise="started again up to train.restarts times (REMOTE_RESTART=k, after a backoff); ends 0 once an attempt succeeds, given up after 1 + N")
def test_a_job_failing_once_then_succeeding_ends_0_and_its_second_attempt_sees_REMOTE_RESTART_1(lab_session, ct, spec):
    spec = with_train(spec, restarts=2)
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=FLAKY.format("3 if k == \"0\" else 0"))
    st = ended(t, run_id)
    log = cat(ct, f"{st.path}/log")
    assert st.exit == 0, log
    assert log.splitlines() == ["REMOTE_RESTART=0", "-- attempt 2 of 3 (previous exit 3)", "REMOTE_RESTART=1"]
    manifest = json.loads(cat(ct, f"{st.path}/manifest.json"))  # the watch wrote them into the file too
    assert [(a["attempt"], a["exit"]) for a in manifest["attempts"]] == [(1, 3), (2, 0)]
    assert all(a["started"] <= a["ended"] for a in manifest["attempts"])
    assert "attempt 2 of 3" in describe_end(st)


@pytest.mark.fault("Job exits non-zero")
def test_an_always_failing_job_is_given_up_after_1_plus_N_attempts(lab_session, ct, spec):
    spec = with_train(spec, restarts=2)
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=FLAKY.format(3))
    st = ended(t, run_id)
    assert st.exit == 3
    assert [a.exit for a in st.attempts] == [3, 3, 3]
    assert cat(ct, f"{st.path}/log").count("REMOTE_RESTART=") == 3


def test_restart_on_restarts_only_the_listed_statuses(lab_session, spec):
    spec = with_train(spec, restarts=2, restart_on=(5,))
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=FLAKY.format(3))
    st = ended(t, run_id)
    assert st.exit == 3 and len(st.attempts) == 1


@pytest.mark.fault("stop during a restart's backoff", promise="stop is final: nothing runs, no attempt starts after it")
def test_stop_during_a_backoff_leaves_nothing_and_starts_nothing(lab_session, ct, spec):
    spec = with_train(spec, restarts=5)
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command=FLAKY.format(3))
    # attempts 1 and 2 fail at once; the backoff before attempt 3 is 2 s
    assert wait_until(lambda: len(state(t, run_id).attempts) == 2 and
                      state(t, run_id).attempts[-1].exit == 3, 30)
    result = stop(t, run_id, grace=2)  # raises where a process of it is left after KILL
    assert result.run == run_id and result.was_alive
    time.sleep(4 + 1)  # longer than the backoff it interrupted
    st = state(t, run_id)
    assert not st.alive and st.orphans == ()
    assert len(st.attempts) == 2, st.attempts
    assert "stopped during the backoff: no attempt 3" in cat(ct, f"{st.path}/log")


def test_metrics_jsonl_holds_the_values_the_log_printed_and_no_gpu_csv_on_a_cpu_container(ct, spec, lab_session,
                                                                                           tmp_path):
    cmd = "for i in 1 2 3 4 5; do echo \"step $i $((i * 100)) samples/s\"; sleep 0.1; done; echo \"12.5 s/it\""
    run_id, _ = launch(target(lab_session, spec), PRE, command=cmd)
    st = ended(target(lab_session, spec), run_id)
    # complete once the run has ended (the watch reads the log's end before the exit record is written)
    rows = [json.loads(line) for line in cat(ct, f"{st.path}/metrics.jsonl").splitlines()]
    # the first metric that matches fixes the run's (as `logs` reads it): samples/s; s/it is another one
    assert [(r["value"], r["unit"]) for r in rows] == [(100.0 * i, "samples/s") for i in range(1, 6)]
    assert all(abs(r["t"] - time.time()) < 120 for r in rows)
    assert ct.run(["test", "-e", f"{st.path}/gpu.csv"], check=False).exit_code == 1
    assert cat(ct, f"{st.path}/watch.log") == ""  # no error either
    saved = lab_session.config.containers[CT]
    lab_session.config.containers[CT] = spec
    try:
        got = pull_run(target_of(lab_session, CT), run_id, str(tmp_path), progress=False)
    finally:
        lab_session.config.containers[CT] = saved
    assert "metrics.jsonl" in got.pulled and "gpu.csv" not in got.pulled
    assert (tmp_path / run_id / "metrics.jsonl").read_text() == cat(ct, f"{st.path}/metrics.jsonl")
