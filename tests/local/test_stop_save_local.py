"""The container side of a run that survives, run for real on this machine (bash, the system python3 -I -S): job.sh
with the checkpoint tool (remote/sh/ckpt.py), the watch's keep, and `stop --save` as the controller sends it
(lib.sh + save.sh + stop.sh + saved.sh in one bash). The job is a small standard-library saver shaped like
nanoGPT: a torch.save-like zip (archive/data.pkl holding iter_num) overwritten IN PLACE, saved every few
iterations and on USR1, after a random "import" of up to half a second. The lab tier (tests/lab/test_resume_lab.py)
runs the same files in a container with real torch."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import wait_until

from remote import shell
from remote.ops import checkpoints

SH = Path(shell.__file__).with_name("sh")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

SAVER = r'''
import io, os, pickle, random, signal, sys, time, zipfile
out, iters, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = 0
if "--resume" in sys.argv:
    with zipfile.ZipFile(out) as z:
        start = pickle.loads(z.read("archive/data.pkl"))["iter_num"] + 1
time.sleep(random.uniform(0, 0.5))  # the import, the compile: no handler yet
want = False
def on_usr1(*_):
    global want
    want = True
signal.signal(signal.SIGUSR1, on_usr1)
os.makedirs(os.path.dirname(out), exist_ok=True)
for it in range(start, iters):
    print(f"iter {it}: loss {1 / (it + 1):.4f}", flush=True)
    if want or (it % every == 0 and it > start):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps({"model": {"w": it}, "iter_num": it}, protocol=2))
            z.writestr("archive/data/0", os.urandom(200_000))
        data = buf.getvalue()
        with open(out, "wb") as f:  # in place, as torch.save does: truncated, then written in pieces
            for i in range(0, len(data), 50_000):
                f.write(data[i:i + 50_000])
                f.flush()
                time.sleep(0.002)
        print(f"saved {out} at iter {it}", flush=True)
        want = False
    time.sleep(0.02)
print("done", flush=True)
'''


@pytest.fixture(scope="module")
def ck():
    spec = importlib.util.spec_from_file_location("ckpt_local", SH / "ckpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def conf(tmp_path, signal="USR1", grace=5):
    return {"path": str(tmp_path / "out" / "ckpt.pt"), "complete": None, "keep": str(tmp_path / "runs" / ".checkpoints"),
            "signal": signal, "grace": grace}


class Job:
    """job.sh started as launch.sh starts it (its own session, REMOTE_RUN_ID), with the checkpoint tool."""

    def __init__(self, tmp_path, command, settings, *, restarts=0):
        self.id = "local-" + secrets.token_hex(4)
        self.run = tmp_path / "runs" / self.id
        self.run.mkdir(parents=True)
        (self.run / "log").write_text("")
        (self.run / "manifest.json").write_text(json.dumps({"id": self.id, "restarts": restarts}))
        (self.run / "command").write_text(command + "\n")
        (self.run / "command-resume").write_text(command + " --resume\n")
        (self.run / "checkpoint.json").write_text(json.dumps(settings) + "\n")
        watch = {"stall": 0, "on_stall": "warn", "py_spy": None, "gpu_every": 60, "grace": 2, "metrics": [],
                 "metric_stall": False, "checkpoint": {**settings, "tool": str(SH / "ckpt.py")}}
        (self.run / "watch-settings.json").write_text(json.dumps(watch))
        env = {**os.environ, "REMOTE_RUN_ID": self.id}
        self.proc = subprocess.Popen(["setsid", "bash", str(SH / "job.sh"), str(self.run), str(tmp_path),
                                      str(restarts), "", str(SH / "watch.py"), str(SH / "ckpt.py")],
                                     env=env, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return (self.run / "log").read_text()

    def stop_save(self, settings) -> dict[str, str]:
        """What jobs.stop(save=True) runs in the container, with the same arguments."""
        r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + checkpoints.save_script(), "remote", str(self.run),
                            self.id, "5", shell.load_python("ckpt"), json.dumps(settings)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        self.proc.wait(10)
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@pytest.mark.fault("stop --save at any moment (during the import, mid-save, between saves)",
                   promise="20 of 20 leave a complete checkpoint, the one named, or say that none existed yet")
def test_twenty_stop_saves_at_random_moments(tmp_path, ck):
    settings = conf(tmp_path)
    rng = random.Random(44)
    saved = none_yet = 0
    (tmp_path / "saver.py").write_text(SAVER)
    for n in range(20):
        job = Job(tmp_path, f"{PY} saver.py {settings['path']} 100000 7", settings)
        time.sleep(rng.uniform(0, 1.2))
        fields = job.stop_save(settings)
        assert fields["left"] == "" and fields["signal"] in ("TERM", "KILL", "none"), fields
        got = checkpoints.saved_of(fields["saved"], job.log(), fields.get("restored"))
        there = ck.look(settings["path"], settle=False)
        if got.checkpoint is None:
            none_yet += 1
            assert got.outcome == "none-yet" and not there["complete"], (n, fields, there)
            continue
        saved += got.outcome == "saved"
        # What stop --save names is what the path holds now: complete, that step.
        assert there["complete"], (n, fields, there)
        assert there["step"] == got.checkpoint.step, (n, fields, there)
    assert saved >= 10, (saved, none_yet)  # most land after the import: a save each


@pytest.mark.fault("A job killed (SIGKILL) with train.restarts",
                   promise="the next attempt resumes from its last complete checkpoint by itself")
def test_a_killed_job_resumes_from_its_last_checkpoint(tmp_path, ck):
    settings = conf(tmp_path, signal=None)
    (tmp_path / "saver.py").write_text(SAVER)
    job = Job(tmp_path, f"{PY} saver.py {settings['path']} 60 4", settings, restarts=1)
    kept = Path(settings["keep"]) / "ckpt.pt.json"
    wait_until(lambda: kept.exists() and "iter 25:" in job.log(), timeout=30)
    pids = subprocess.run(["pgrep", "-f", f"saver.py {settings['path']}"], capture_output=True, text=True).stdout.split()
    subprocess.run(["kill", "-KILL", *pids], check=True)  # mid-save or not: either way a complete one is there
    kept_step = json.loads(kept.read_text())["step"]
    job.proc.wait(60)
    assert (job.run / "exit").read_text().strip() == "0", job.log()
    log = job.log()
    head, _, resumed = log.partition("-- attempt 2 of 2 resumes from ")
    saves = [int(line.rsplit(" ", 1)[1]) for line in head.splitlines() if line.startswith("saved ")]
    step = int(resumed.partition("(step ")[2].partition(")")[0])
    assert resumed.startswith(f"{settings['path']} (step {step})") and step in saves and step >= kept_step, log[-2000:]
    first = next(line for line in resumed.splitlines() if line.startswith("iter "))
    assert first.startswith(f"iter {step + 1}:") and resumed.rstrip().endswith("done"), log[-2000:]
    assert f"resume 2 {settings['path']} (step {step})" in (job.run / "attempts").read_text()


def test_the_watch_keeps_the_last_complete_in_place_checkpoint(tmp_path, ck):
    settings = conf(tmp_path, signal=None)
    (tmp_path / "saver.py").write_text(SAVER)
    job = Job(tmp_path, f"{PY} saver.py {settings['path']} 100000 5", settings)
    try:
        kept = Path(settings["keep"]) / "ckpt.pt"
        wait_until(lambda: kept.exists() and (kept.parent / "ckpt.pt.json").exists(), timeout=30)
        k = ck.look(str(kept), settle=False)
        assert k["complete"] and k["step"] is not None and k["step"] % 5 == 0
        assert (job.run / "watch.pid").read_text().strip().isdigit()
    finally:
        job.stop_save(settings)


LATE = r'''
import io, os, pickle, signal, sys, time, zipfile
out = sys.argv[1]
time.sleep(1.5)  # importing, compiling: no handler yet; a USR1 now would kill it unsaved
def save(*_):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"iter_num": 77}, protocol=2))
    with open(out, "wb") as f:
        f.write(buf.getvalue())
signal.signal(signal.SIGUSR1, save)
while True:
    time.sleep(0.05)
'''


@pytest.mark.fault("stop --save asked while the job still imports or compiles (its signal handler not installed)",
                   promise="the signal is held back until the job catches it, then sent: the job saves, never dies of "
                           "the save signal")
def test_the_save_signal_waits_for_the_jobs_handler(tmp_path, ck):
    settings = conf(tmp_path, grace=20)
    run_id = "local-" + secrets.token_hex(4)
    run = tmp_path / "runs" / run_id
    run.mkdir(parents=True)
    job = subprocess.Popen([PY, "-c", LATE, settings["path"]], env={**os.environ, "REMOTE_RUN_ID": run_id})
    try:
        (tmp_path / "out").mkdir()
        t0 = time.monotonic()
        r = subprocess.run([PY, "-I", "-S", str(SH / "ckpt.py"), "wait", json.dumps(settings), str(run), run_id],
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        got = json.loads(r.stdout)
        assert got["why"] == "saved" and got["saved"]["step"] == 77 and got["signals"] >= 1, got
        assert job.poll() is None and took >= 1.0, took  # alive: it was not signalled before its handler
        assert (run / "save-requested").exists()
    finally:
        job.kill()
        job.wait()


def save_or_refuse(job, settings) -> tuple[int, dict[str, str]]:
    """What jobs.stop(save=True, refuse=...) runs in the container: save.sh's `refuse` mode ($6)."""
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + checkpoints.save_script(), "remote", str(job.run),
                        job.id, "5", shell.load_python("ckpt"), json.dumps(settings), "refuse"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


@pytest.mark.fault("save-or-refuse (gpu fix, move, drain, rollback) of a job that saves nothing new within the grace",
                   promise="the job is LEFT RUNNING (not signalled unless it handles the signal; the save request taken "
                   "back), and the script says so (`kept=running`) instead of stopping it")
def test_save_or_refuse_leaves_a_job_that_does_not_save_running(tmp_path, ck):
    settings = conf(tmp_path, signal=None, grace=1)
    (tmp_path / "saver.py").write_text(SAVER)
    job = Job(tmp_path, f"{PY} saver.py {settings['path']} 100000 5", settings)
    try:
        assert wait_until(lambda: "saved" in job.log(), timeout=20), job.log()
        # Told to look where the job never saves: no new complete checkpoint can come within the grace.
        rc, fields = save_or_refuse(job, {**settings, "path": str(tmp_path / "nowhere" / "ckpt.pt")})
        assert rc == 0 and fields.get("kept") == "running", fields
        assert "signal" not in fields and job.proc.poll() is None  # no stop ran: the job still runs
        assert not (job.run / "save-requested").exists()
        n = job.log().count("iter ")
        assert wait_until(lambda: job.log().count("iter ") > n, timeout=10)  # it goes on training
        # The same mode where a new checkpoint comes: it is saved, then stopped, as stop --save does.
        rc, fields = save_or_refuse(job, settings)
        assert rc == 0 and "kept" not in fields and json.loads(fields["saved"])["why"] == "saved", fields
        assert fields["left"] == "" and job.proc.wait(10) is not None
    finally:
        if job.proc.poll() is None:
            job.stop_save(settings)
