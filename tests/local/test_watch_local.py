"""The job wrapper and its watch (remote/sh/job.sh, watch.py) run for real on this machine (bash, the system
python3 -I -S), plus the pure readers of what they leave (state, timeline, config keys). The lab tier
(test_watch_lab.py) runs the same files in a container with py-spy."""

import dataclasses
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import wait_until

from remote import config, shell
from remote.cli.format import _watch_text
from remote.errors import ConfigError
from remote.facts.runs import Attempt, RunState
from remote.ops import jobs, logs
from remote.runs import timeline

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def settings(**kw):
    base = {"stall": 0, "on_stall": "warn", "py_spy": None, "gpu_every": 1, "grace": 2,
            "metrics": [m.describe() for m in logs.BUILTIN_METRICS], "metric_stall": False}
    return json.dumps({**base, **kw})


class Job:
    """job.sh started as launch.sh starts it: its own session, REMOTE_RUN_ID in its environment."""

    def __init__(self, tmp_path, command, *, restarts=0, restart_on="", path=None, **watch):
        self.id = "local-" + secrets.token_hex(4)
        self.run = tmp_path / self.id
        self.run.mkdir()
        (self.run / "log").write_text("")
        (self.run / "manifest.json").write_text(json.dumps({"id": self.id, "restarts": restarts}))
        env = {**os.environ, "REMOTE_RUN_ID": self.id, "PATH": path or os.environ["PATH"]}
        (self.run / "command").write_text(command + "\n")
        (self.run / "watch-settings.json").write_text(settings(**watch))
        sh = Path(shell.__file__).with_name("sh")  # started from their files, as launch.sh starts them
        watch = tmp_path / f"watch-{self.id}.py"  # the watch as launch installs it (ckpt.py's marked() inlined)
        watch.write_text(shell.load_python("watch"))
        self.proc = subprocess.Popen(["setsid", "bash", str(sh / "job.sh"), str(self.run), str(tmp_path),
                                      str(restarts), restart_on, str(watch)],
                                     env=env, stdin=subprocess.DEVNULL)

    def file(self, name) -> str:
        p = self.run / name
        return p.read_text() if p.exists() else ""

    def wait(self, timeout=60):
        self.proc.wait(timeout)
        return int(self.file("exit"))

    def stop(self):
        """What stop.sh does: the stop file first, then TERM to the session."""
        (self.run / "stop").write_text("")
        os.killpg(self.proc.pid, 15)


def test_a_stall_is_marked_dumped_and_cleared_when_output_resumes(tmp_path):
    cmd = f"echo one; sleep 4; echo two; exec {PY} -c 'import time; time.sleep(60)'"
    job = Job(tmp_path, cmd, stall=2)
    try:
        assert wait_until(lambda: "-- STALLED" in job.file("log"), 2 + 6)
        assert json.loads(job.file("watch.json"))["stalled"]["seconds"] == 2
        assert "py-spy is not available" in job.file("stacks-1.txt")  # said so; the kernel's view instead
        assert "waits in" in job.file("stacks-1.txt")
        # output resumes: the warn-stall clears; the next silence is stall 2
        assert wait_until(lambda: "two" in job.file("log"), 10)
        assert wait_until(lambda: json.loads(job.file("watch.json"))["stalled"] is None, 3)
        assert wait_until(lambda: job.file("stacks-2.txt"), 2 + 6)
        assert job.file("log").count("-- STALLED: no output for 2 s") == 2
    finally:
        job.stop()
    assert job.wait() == 143


def test_with_a_configured_metric_lines_without_a_value_are_not_progress(tmp_path):
    cmd = "echo '5 it/s'; for i in $(seq 40); do echo chatter; sleep 0.1; done"
    metric = {"pattern": r"([\d.]+) it/s", "flags": 0, "unit": "it/s", "scale": 1.0, "invert": False}
    job = Job(tmp_path, cmd, stall=2, metrics=[metric], metric_stall=True)
    assert job.wait() == 0
    assert "-- STALLED: no output for 2 s" in job.file("log")  # 4 s of chatter, no new value
    assert [json.loads(r)["value"] for r in job.file("metrics.jsonl").splitlines()] == [5.0]


def test_gpu_rows_from_nvidia_smi_go_to_gpu_csv_with_their_time(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    # nvidia-smi's loop mode, as the watch asks for it: one row per GPU every -l seconds, until TERM.
    (fake / "nvidia-smi").write_text('#!/bin/bash\n[[ "$*" == *"--query-gpu=index,utilization.gpu,memory.used,'
                                     'memory.total,power.draw,temperature.gpu --format=csv,noheader,nounits -l 1"* ]]'
                                     ' || exit 9\nwhile :; do echo "0, 97, 1000, 80000, 300.5, 61"; '
                                     'echo "1, 95, 3000, 80000, 290.1, 60"; sleep 1; done\n')
    (fake / "nvidia-smi").chmod(0o755)
    job = Job(tmp_path, "sleep 3.5", path=f"{fake}:{os.environ['PATH']}")
    assert job.wait() == 0
    rows = job.file("gpu.csv").splitlines()
    assert rows[0] == "t,index,util_pct,mem_used_mib,mem_total_mib,power_w,temp_c"
    assert len(rows) >= 1 + 2 * 2
    t, index, util = rows[1].split(",")[:3]
    assert abs(float(t) - time.time()) < 30 and (index, util) == ("0", "97")
    gpu = json.loads(job.file("watch.json"))["gpu"]
    assert gpu["gpus"] == 2 and gpu["util_pct"] == 96 and gpu["mem_used_mib"] == 4000
    assert job.file("watch.log") == ""
    assert not [p for p in subprocess.run(["pgrep", "-f", str(fake)], capture_output=True, text=True).stdout.split()]


def test_stop_during_the_backoff_starts_nothing(tmp_path):
    job = Job(tmp_path, "echo failing; exit 3", restarts=5)
    assert wait_until(lambda: job.file("attempts").count("end ") == 2, 20)  # in the 2 s backoff before attempt 3
    job.stop()
    assert job.wait() == 3
    time.sleep(2.5)
    assert job.file("attempts").count("start ") == 2
    assert "stopped during the backoff: no attempt 3" in job.file("log")


def test_every_value_of_a_chatty_job_reaches_metrics_jsonl(tmp_path):
    """250 lines in 5 s, each with a value: none lost between reads (its CPU cost is bench/watchdog.py's)."""
    cmd = f"{PY} -c 'import time\nfor i in range(250): print(i, \"10 it/s\", flush=True); time.sleep(0.02)'"
    job = Job(tmp_path, cmd, stall=30)
    assert wait_until(lambda: (job.run / "watch.json").exists(), 10)
    assert job.wait() == 0
    assert len(job.file("metrics.jsonl").splitlines()) == 250


def test_state_reads_the_watch_and_the_attempts_and_distrusts_them():
    head = ("run=r1\npath=/root/runs/r1\npid=12\nalive=0\nexit=124\nlog_size=10\nnow=100\nmarked=\n"
            'watch={"stalled": {"seconds": 300, "stacks": "/root/runs/r1/stacks-1.txt", "action": "stop", "at": 5},'
            ' "stalls": 1, "gpu": {"util_pct": 97, "mem_used_mib": 2048, "gpus": 1, "evil": "x"}}\n'
            f"attempts=start 1 10.5 {'a' * 40};end 1 20.5 3;start 2 22 \x1b[2J;end 2 40 124;junk;\n")
    st = jobs.parse_state(head + '--manifest--\n{"restarts": 1}\n--tail--\n')
    assert st.attempt == 2 and st.attempts_max == 2 and st.stalls == 1
    assert st.manifest.raw["attempts"][0] == {"attempt": 1, "started": 10.5, "ended": 20.5, "exit": 3, "commit": "a" * 40,
                                              "killed": None}  # no OOM kill counted for it
    assert st.attempts[1].commit is None  # what is no commit is not kept
    assert st.gpu == {"util_pct": 97, "mem_used_mib": 2048, "gpus": 1}
    assert jobs.describe_end(st) == ("STALLED: no output for 300 s; stacks in /root/runs/r1/stacks-1.txt; ended by "
                                     "the stall watch (exit 124) (attempt 2 of 2)")
    assert jobs.final_status(st) == 124
    line = _watch_text(dataclasses.asdict(jobs.run_status(dataclasses.replace(st, alive=True))))
    assert "GPU util 97%" in line and "attempt 2 of 2" in line and "STALLED: no output for 300 s" in line
    st = jobs.parse_state('run=r1\npath=/x\nalive=1\nwatch={"stalled": {"seconds": 1, "stacks": "a\\u001b[2Jb"}}\n'
                          "--manifest--\nnull\n--tail--\n")
    assert st.stalled.stacks == "a\\x1b[2Jb"  # no terminal escape reaches the screen: shown visibly
    for bad in ("watch=[1]\n", "watch={not json\n", 'watch={"stalled": {"seconds": "x"}, "gpu": 3}\n'):
        st = jobs.parse_state("run=r1\npath=/x\nalive=1\n" + bad + "--manifest--\nnull\n--tail--\n")
        assert st.stalled is None and st.gpu is None and st.attempt is None


def test_timeline_draws_throughput_gpu_stalls_and_restarts():
    metrics = "\n".join(json.dumps({"t": 100 + i, "value": 20 + i, "unit": "Ktok/s"}) for i in range(5)) + "\n{bad\n"
    gpu = "t,index,util_pct,mem_used_mib,mem_total_mib,power_w,temp_c\n100,0,90,1024,80000,300,60\n" \
          "100,1,80,1024,80000,300,60\n105,0,[N/A],2048,80000,300,60\ntorn,"
    events = json.dumps({"event": "stall", "at": 103, "seconds": 300}) + "\n"
    tl = timeline.parse(metrics, gpu, events, (Attempt(1, 99), Attempt(2, 104)))
    assert tl.gpu == [(100.0, 85.0, 2.0), (105.0, None, 2.0)] and tl.unit == "Ktok/s" and len(tl.metrics) == 5
    svg = timeline.svg(tl, baseline=21.5)
    assert "STALLED: no output for 300 s" in svg and "attempt 2" in svg and "GPU utilisation %" in svg
    assert "baseline 21.5" in svg
    assert "No metrics.jsonl" in timeline.svg(timeline.parse())


def _cfg(**train):
    data = {"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}}, "train": train}
    return config.parse(data, "hosts.yaml").containers[200].train


def test_the_watch_keys_are_read_and_bad_values_named():
    t = _cfg(stall=300, on_stall="restart", restarts=3, restart_on=[3, 4])
    assert (t.stall, t.on_stall, t.restarts, t.restart_on) == (300.0, "restart", 3, (3, 4))
    assert (_cfg().stall, _cfg().on_stall, _cfg().restarts, _cfg().restart_on) == (None, "warn", 0, ())
    for train, key, words in [({"on_stall": "kill", "stall": 5}, "train.on_stall", "one of warn, stop, restart"),
                              ({"on_stall": "restart", "stall": 5}, "train.on_stall", "train.restarts"),
                              ({"on_stall": "stop"}, "train.on_stall", "train.stall"),
                              ({"restart_on": [0]}, "train.restart_on[0]", "from 1 to 255"),
                              ({"stall": 0}, "train.stall", "from 1"),
                              ({"restarts": -1}, "train.restarts", "from 0")]:
        with pytest.raises(ConfigError) as exc:
            _cfg(**train)
        assert key in str(exc.value) and words in str(exc.value), str(exc.value)


def test_the_watch_runs_with_the_standard_library_only():
    r = subprocess.run([PY, "-I", "-S", "-c", "import sys; src = sys.stdin.read(); compile(src, 'watch', 'exec'); "
                        "exec(src.replace('if __name__ == \"__main__\"', 'if False'))"],
                       input=shell.load_python("watch"), text=True,
                       capture_output=True)
    assert r.returncode == 0, r.stderr


def test_the_report_page_shows_the_run_over_time():
    from remote.runs.report import render

    spec = config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}},
                         "train": {"baseline": 21.5}}, "hosts.yaml").containers[200]
    tl = timeline.parse(json.dumps({"t": 1, "value": 20, "unit": "Ktok/s"}) + "\n"
                        + json.dumps({"t": 9, "value": 22, "unit": "Ktok/s"}),
                        "5,0,99,70000,80000,600,70\n", json.dumps({"event": "stall", "at": 8, "seconds": 300}),
                        (Attempt(1, 0), Attempt(2, 7)))
    run = RunState("r1", exit=0)
    page = render(spec, run, "step 20 Ktok/s\n", None, None, [], tl)
    assert "Over time" in page and "GPU utilisation %" in page and "STALLED: no output for 300 s" in page
    assert "attempt 2" in page and "<script" not in page
    assert "No metrics.jsonl" in render(spec, run, "", None, None, [])


def test_where_py_spy_cannot_attach_the_stacks_file_says_so_and_falls_back(tmp_path):
    spy = tmp_path / "py-spy"  # attaching fails as py-spy does without ptrace rights
    spy.write_text("#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\n"
                   "exit 1\n")
    spy.chmod(0o755)
    job = Job(tmp_path, f"echo one; exec {PY} -c 'import time; time.sleep(60)'", stall=2, py_spy=str(spy))
    try:
        assert wait_until(lambda: job.file("stacks-1.txt"), 2 + 6)
        stacks = job.file("stacks-1.txt")
        assert "py-spy could not attach: Error: Permission Denied" in stacks and "the kernel's view instead" in stacks
        assert "waits in" in stacks
    finally:
        job.stop()
    job.wait()


@pytest.mark.parametrize("module", ["remote.ops.deploy", "remote.ops.pyspy", "remote.ops.runwatch", "remote.ops.jobs",
                                    "remote.runs.report", "remote.runs.timeline", "remote.cli"])
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    """No import cycle bites whichever module a task imports first (deploy -> jobs -> pyspy -> deploy did)."""
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent.parent)
    assert r.returncode == 0, r.stderr


def test_the_watch_keeps_the_most_gpu_memory_in_use_at_once(tmp_path):
    """known-good records it (gpu_mem_peak_mib) and train's preflight refuses a launch where less is free."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text('#!/bin/bash\necho "0, 97, 1000, 80000, 300.5, 61"; echo "1, 95, 3000, 80000, '
                                     '290.1, 60"\nwhile :; do sleep 1; echo "0, 10, 500, 80000, 90, 50"; '
                                     'echo "1, 10, 500, 80000, 90, 50"; done\n')
    (fake / "nvidia-smi").chmod(0o755)
    job = Job(tmp_path, "sleep 3.5", path=f"{fake}:{os.environ['PATH']}")
    assert job.wait() == 0
    gpu = json.loads(job.file("watch.json"))["gpu"]
    assert gpu["mem_peak_mib"] == 4000 and gpu["mem_used_mib"] == 1000
    from remote.facts.runs import read_watch

    assert read_watch(job.file("watch.json")).gpu["mem_peak_mib"] == 4000
