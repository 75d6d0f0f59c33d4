"""A run's state as data: state.sh's answers (captured from remote/sh/state.sh, and hostile ones) in, the typed
RunState out (remote/facts/runs.py). Everything there is the container's and the job's: nothing it says crashes
the parser, and a wrong field is that field's None or a named problem."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from remote.facts.runs import Attempt, RunState, Stall, parse_state
from remote.ops import jobs
from remote.results import LiveRun

DATA = Path(__file__).resolve().parent.parent / "data" / "runstate"
HEAD = "live=\nrun=r1\npath=/root/runs/r1\npid=12\nalive=0\nexit=0\nstopped=0\nlog_size=10\nnow=100\nmarked=\n"


def test_a_captured_state_of_a_restarted_run_that_ended_is_read_whole():
    st = parse_state((DATA / "ended-restarted.txt").read_text())
    assert (st.run, st.path, st.pid, st.alive, st.exit, st.lost, st.stopped, st.orphans) == \
        ("20261205-101500-ab12", "/root/runs/20261205-101500-ab12", 4242, False, 0, False, False, ())
    assert st.log_size == 47 and st.tail == "step 1 | 20.0 Ktok/s\nstep 2 | 21.5 Ktok/s\ndone\n"
    assert st.attempts == (Attempt(1, 1764929700.5, 1764929760.25, 3, "a" * 40), Attempt(2, 1764929762.0, 1764929820.0, 0, "b" * 40))
    assert (st.attempt, st.attempts_max, st.stalls) == (2, 2, 1)
    assert st.stalled == Stall(300, "/root/runs/20261205-101500-ab12/stacks-1.txt", "restart", 1764929750)
    assert st.gpu is not None and st.gpu["mem_peak_mib"] == 4096
    m = st.manifest
    assert (m.commit, m.command, m.node, m.outputs, m.started_epoch, m.restarts, m.nodes, m.node_rank) == \
        ("c" * 40, "python train.py", "pve1", ("out/model.pt",), 1764929700.0, 1, (200, 201), 0)
    assert m.metric is None and m.raw is not None and m.raw["attempts"][1]["commit"] == "b" * 40  # shown as is
    # The public value built from it, without dicts in between.
    status = jobs.run_status(st)
    assert (status.run, status.state, status.exit_code, status.attempt, status.attempts_max) == \
        ("20261205-101500-ab12", "exited", 0, 2, 2)
    assert status.stalled == {"seconds": 300, "stacks": "/root/runs/20261205-101500-ab12/stacks-1.txt",
                              "action": "restart", "at": 1764929750}


@pytest.mark.fault("A run's manifest.json rewritten by its job into another shape",
                   promise="the run's state is read; each field remote reads of it is None and its problem named")
@pytest.mark.parametrize("manifest, key, said", [
    ("[1, 2]", "commit", "manifest.json is a list, not an object"),
    ('{"nodes": "200,201"}', "nodes", "has nodes '200,201', not a list of container ids"),
    ('{"nodes": [200, true]}', "nodes", "not a list of container ids"),
    ('{"started_epoch": "yesterday"}', "started_epoch", "not a number"),
    ('{"started_epoch": 1e999}', "started_epoch", "not a number"),
    ('{"outputs": "model.pt"}', "outputs", "not a list of paths"),
    ('{"restarts": "3"}', "restarts", "not an integer"),
])
def test_a_manifest_of_the_wrong_shape_is_refused_field_by_field(manifest, key, said):
    st = parse_state(HEAD + f"--manifest--\n{manifest}\n--tail--\n")
    assert st.run == "r1" and getattr(st.manifest, key) in (None, ())
    assert said in (st.manifest.problem(key) or "")
    assert st.attempts_max is None or key != "restarts"


@pytest.mark.fault("Garbled text in state.sh's answer (a pid, an exit record, marks that are not numbers)",
                   promise="each such field reads as unknown; no ValueError from the run's state")
def test_garbled_fields_are_unknown_not_a_crash():
    text = ("live=a:12 b:x :7 \nrun=r1\npath=/x\npid=twelve\nalive=0\nexit=\x1b[2J\nlog_size=lots\nnow=\n"
            "marked=60 sixty 61\nwatch=[1]\nattempts=start x 1;end 1 2 3;start 2 nan;start 3 5 zz;\n"
            "--manifest--\n{not json\n--tail--\n")
    st = parse_state(text)
    assert (st.pid, st.exit, st.log_size, st.now) == (None, None, 0, 0)
    assert not st.lost and not st.alive  # an exit record that is not a number is still a record
    assert st.orphans == (60, 61) and st.live == (LiveRun("a", 12), LiveRun("b", None))
    assert st.attempts == (Attempt(3, 5.0),) and st.stalled is None and st.gpu is None
    assert st.manifest.raw is None and st.manifest.commit is None and st.manifest.problem("commit") is None
    assert jobs.describe_end(st).startswith("exited") and st.final_status == 0  # words, not a TypeError


def test_a_huge_tail_is_bounded_and_marker_lines_in_the_log_are_the_logs():
    tail = "x" * (3 << 20) + "\n--manifest--\n--tail--\nrun=evil\n"
    st = parse_state(HEAD + "--manifest--\nnull\n--tail--\n" + tail)
    assert st.run == "r1" and len(st.tail) == 1 << 20 and st.tail.endswith("run=evil\n")
    assert st.manifest.raw is None and st.manifest.shape == "missing"


def test_no_run_and_an_unknown_run_carry_the_live_and_the_latest():
    assert parse_state("live=\nrun=\n") == RunState(None)
    st = parse_state("live=a:5 \nrun=\nlatest=r1 r2 ../x \n")
    assert st == RunState(None, live=(LiveRun("a", 5),), latest=("r1", "r2", "../x"))


def test_a_field_is_added_in_one_line_each_and_fakes_are_built_typed():
    # A test fake builds the value itself: a field it leaves out is its default, a misspelt one fails here.
    assert RunState("r1", exit=3).final_status == 3 and RunState("r1").final_status == 0
    assert RunState("r1", lost=True).final_status == 1
    with pytest.raises(TypeError):
        RunState("r1", alvie=True)  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunState("r1").alive = True  # type: ignore[misc]


@pytest.mark.fault("A job OOM-killed by the kernel under train.restarts (job.sh's `killed K oom` record)",
                   promise="the run's state names the attempt the OOM killer ended, with its exit 137; status "
                           "and the end of `train` say it, beside the attempt that resumed")
def test_an_attempt_the_oom_killer_ended_is_named():
    text = (HEAD.replace("alive=0\nexit=0", "alive=1\nexit=") + "attempts=start 1 10.0;end 1 20.0 137;killed 1 oom;"
            "start 2 22.0;killed 9 oom;killed 2 other;\n--manifest--\n{\"restarts\": 1}\n--tail--\n")
    st = parse_state(text)
    assert st.attempts == (Attempt(1, 10.0, 20.0, 137, killed="oom"), Attempt(2, 22.0))  # stray lines ignored
    assert jobs.describe_end(st) == ("still running (attempt 2 of 2; attempt 1 was killed by the kernel's OOM "
                                     "killer (exit 137))")
