"""Local tier: the run state that state.sh prints counts every live run, not only the latest."""

import pytest

from remote.facts.runs import RunState, parse_state
from remote.ops.jobs import live_text
from remote.results import LiveRun


@pytest.mark.fault("A run whose wrapper writes its pid file late",
                   promise="launch waits for it while its processes live; it counts as running everywhere")
def test_a_run_with_live_processes_and_no_pid_file_is_alive_not_lost():
    text = ("live=a:12 b:- \nrun=b\npath=/root/runs/b\npid=\nalive=0\nexit=\nlog_size=0\nnow=1\nmarked=60 \n"
            "--manifest--\nnull\n--tail--\n")
    st = parse_state(text)
    assert st.alive and not st.lost and st.orphans == ()
    assert st.live == (LiveRun("a", 12), LiveRun("b", None))
    assert live_text(st.live) == "run a (pid 12), run b (starting: no pid file yet)"
    assert parse_state("live=a:12 \nrun=\n") == RunState(None, live=(LiveRun("a", 12),))
    ended = parse_state(text.replace("exit=\n", "exit=0\n"))
    assert not ended.alive and ended.orphans == (60,)  # an exit record: its processes are leftovers
