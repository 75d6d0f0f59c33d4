"""A run that survives, measured in a real container (the lab's, or a GPU container): fault to the first step
after the resume, on the same container (goal: <= 30 s each).

  - kill: the job's processes SIGKILLed (not its wrapper or watch) with train.restarts: 1; latency = the
    first step line the resumed attempt logs - the kill (the wrapper's backoff of 1 s, the restore, the job's
    own start and checkpoint load included);
  - stop --save, then train --resume: latency = the first step line of the new run - the moment stop(save=True)
    was called (the save, the stop, the preflight and launch, the job's start and load).

    python bench/resume.py [--container ID] [--rounds 3]

Uses the hosts file as the tasks do ($REMOTE_HOSTS_FILE or ./hosts.yaml): the container's train.command and
train.checkpoint as they are (e.g. nanoGPT's --init_from=resume; tests/lab/test_resume_lab.py's toy), deployed
and warmed up, with train.restarts: 1 or more. Each round starts fresh (the old checkpoints moved aside, never deleted). Times are this
machine's (the log is polled every 0.2 s: each latency is late by up to that much).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import remote  # noqa: E402

STEP = re.compile(r"\b(?:iter(?:ation)?|step|global_step)[\s:=#]+(\d+)", re.I)  # as stop --save reads a log


def last_step(text: str) -> int | None:
    found = STEP.findall(text)
    return int(found[-1]) if found else None

# The job's own processes: every one marked with the run's id but its wrapper (pid), its watch and a shell.
KILL = r'''run=$1 id=$2
skip=" $(cat "$run/pid" 2>/dev/null) $(cat "$run/watch.pid" 2>/dev/null) "
for e in /proc/[0-9]*/environ; do
  p=${e#/proc/}; p=${p%/environ}
  case $skip in *" $p "*) continue ;; esac
  tr '\0' '\n' < "$e" 2>/dev/null | grep -qx "REMOTE_RUN_ID=$id" || continue
  case $(cat "/proc/$p/comm" 2>/dev/null) in bash|sh|dash) continue ;; esac
  kill -KILL "$p" 2>/dev/null && echo "$p"
done
'''


def wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def saved_once(ct, run) -> None:
    """Until the run has a complete checkpoint and has stepped past it."""
    wait(lambda: any(c.complete and not c.kept for c in ct.checkpoints()), 600, "a first checkpoint")
    wait(lambda: last_step(run.text()) is not None, 60, "a step after it")


def first_step_after(run, marker: str) -> float:
    """When (this machine's time) the first step line after `marker`'s line appears in the run's log."""
    def seen():
        text = run.text()
        at = text.find(marker)
        after = text[at:].partition("\n")[2] if marker else text  # the lines after the marker's own
        return at >= 0 and last_step(after) is not None
    wait(seen, 600, "the first step after the resume")
    return time.time()


def kill_round(ct) -> float:
    run = ct.train(fresh=True)
    saved_once(ct, run)
    path = f"{ct.spec.train.run_dir}/{run.id}"
    t0 = time.time()
    ct.exec(["bash", "-c", KILL, "kill", path, run.id], check=True, job_env=False)
    took = first_step_after(run, "resumes from ") - t0
    run.stop()
    return took


def stop_save_round(ct) -> float:
    run = ct.train(fresh=True)
    saved_once(ct, run)
    t0 = time.time()
    got = ct.stop(save=True)
    if got.saved is None or got.saved.checkpoint is None:
        raise SystemExit(f"stop --save left no checkpoint: {got.saved}")
    new = ct.train(resume=True)
    took = first_step_after(new, "") - t0
    new.stop()
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--container", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with remote.open(keep=True) as fleet:
        ct = fleet.container(a.container)
        if ct.spec.train.checkpoint is None or not ct.spec.train.restarts:
            raise SystemExit(f"container {ct.id}: set train.checkpoint and train.restarts: 1 (or more) in the hosts "
                             "file: the job's checkpoints and the restart that resumes")
        kills = [kill_round(ct) for _ in range(a.rounds)]
        saves = [stop_save_round(ct) for _ in range(a.rounds)]
    out = {"container": ct.id, "command": ct.spec.train.command, "kill_to_first_step_s": [round(x, 2) for x in kills],
           "stop_save_to_first_step_s": [round(x, 2) for x in saves],
           "median_kill_s": round(statistics.median(kills), 2), "median_stop_save_s": round(statistics.median(saves), 2),
           "goal_s": 30}
    print(json.dumps(out, indent=1))
    return 0 if max(kills + saves) <= 30 else 1


if __name__ == "__main__":
    sys.exit(main())
