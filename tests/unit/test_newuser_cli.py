"""Small command-line edges a new user met (issue 46): `remote exec -- 'a && b'` (the words after `--` run with no
shell: a first word that is a shell command line is refused before anything connects, pointing to --command), and
`status` showing the rolling throughput the run's own line says."""

from __future__ import annotations

import pytest

from remote.cli.table import Exit, no_shell_after_dashes


@pytest.mark.fault("`remote exec -- 'a && b'` answered in the wrapper's words", promise="a first word after `--` "
                   "that is a shell command line is refused (exit 2) before anything connects, saying there is no "
                   "shell after `--` and giving the --command form")
@pytest.mark.parametrize("argv, hint", [
    (["nproc && hostname"], "remote exec --command 'nproc && hostname'"),
    (["ls -la"], "or split it: remote exec -- ls -la"),
    (["cat x | wc -l"], "--command 'cat x | wc -l'"),
    (["echo $(date)"], "--command 'echo $(date)'"),
])
def test_a_shell_line_after_the_dashes_is_refused_with_the_form_that_works(argv, hint):
    with pytest.raises(Exit) as caught:
        no_shell_after_dashes(argv)
    assert caught.value.code == 2 and "no shell" in str(caught.value) and hint in str(caught.value)


@pytest.mark.parametrize("argv", [["nproc"], ["python", "-c", "print(1 && 2)"], ["/opt/my tool/bin/x"],
                                  ["bash", "-c", "a && b"], ["./run it.sh"]])
def test_an_argv_runs_as_it_is(argv):
    no_shell_after_dashes(argv)  # nothing raised


@pytest.mark.fault("status shows the last interval's throughput", promise="`remote status` shows a run's rolling "
                   "throughput, the figure its own log line says, not the last interval's alone")
def test_status_shows_the_rolling_throughput_the_runs_line_says():
    from remote.cli.format import _job_line

    run = {"id": "r1", "alive": True, "uptime_s": 60, "throughput": 9.0, "rolling": 20.0, "unit": "Ktok/s",
           "baseline": 21.5, "low": True, "spark": "", "stalled": None, "gpu": None, "problems": [], "compile": None}
    assert ", 20 Ktok/s vs baseline 21.5 Ktok/s SLOW" in _job_line({"run": run})
    ended = {**run, "alive": False, "lost": False, "stopped": True, "exit": 143}
    assert "last throughput 20 Ktok/s" in _job_line({"run": ended})
    assert ", 9 Ktok/s" in _job_line({"run": {**run, "rolling": None}})  # before a rolling figure: the last
