"""Lab tier: a run that survives, through the command line and the library, with real torch on CPU in an LXC
container: a small resumable training script of its own (torch.save of model, optimizer and iter_num to ONE
file, overwritten in place, as nanoGPT does; USR1 asks it to save), in a git repository made here.

`stop --save` mid-run leaves a complete checkpoint and `train --resume` continues at its step to the end; a
plain `train` where a checkpoint exists is refused (exit 2) naming both flags; a torn checkpoint is put right
from the watch's kept copy, or refused, naming it, where there is none; `--fresh` moves the old ones aside and
deletes nothing; a job SIGKILLed with `restarts: 1` resumes from its last complete checkpoint by itself; a
rollback with a live run saves it, carries its checkpoint and the run folders across (the snapshot holds an OLDER
checkpoint and not the run) and resumes it at its step with the snapshot's environment, the stopped run's log and
record still there and named as the resumed run's parent; one whose run saves nothing within its grace is
refused, the run still running.
(20 `stop --save` at random moments: tests/local/test_stop_save_local.py, the same container scripts.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import lab_ids, wait_until

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = lab_ids(__file__)[0]
CKPT = "/root/rs/out/ckpt.pt"

TRAIN = '''"""A resumable toy: saves model, optimizer and iter_num to one file every --save-every iterations and on USR1."""
import argparse, os, signal, sys, time

want = False


def on_usr1(*_):
    global want
    want = True


signal.signal(signal.SIGUSR1, on_usr1)  # before torch's import: a USR1 that lands while it imports is kept

import torch  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=40)
p.add_argument("--save-every", type=int, default=5)
p.add_argument("--sleep", type=float, default=0.2)
p.add_argument("--out", default="out/ckpt.pt")
p.add_argument("--init-from", default="scratch")
p.add_argument("--grow-at", type=int, default=-1)
a = p.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
start = 0
if a.init_from == "resume":
    ck = torch.load(a.out, weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    start = ck["iter_num"] + 1
x = torch.randn(256, 64)
y = x.flip(1)
os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
for it in range(start, a.iters):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {it}: loss {loss.item():.4f}", flush=True)
    if it == a.grow_at and os.environ.get("REMOTE_RESTART") == "0":  # a leak the first attempt only has
        hog = torch.ones(1 << 29)  # 2 GiB written: past a 1 GiB container the kernel's OOM killer ends it here
    if want or (it > start and it % a.save_every == 0):
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": it}, a.out)
        print(f"saved {a.out} at iter {it}", flush=True)
        want = False
    time.sleep(a.sleep)
print("done", flush=True)
'''

HOSTS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/rs
train:
  command: python train.py --iters {iters} --sleep 0.2
  restarts: {restarts}
  checkpoint:
    path: out/ckpt.pt
    resume: --init-from resume
    signal: USR1
    grace: 60
"""


@pytest.fixture(scope="module")
def rs(lab, tmp_path_factory):
    """A container with the resumable toy deployed, and a hosts file for it."""
    lab.start_container(CT)
    d = tmp_path_factory.mktemp("resume")
    repo = d / "rs"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    (repo / "example.py").write_text(doc_example())  # resume.md's remote_checkpoint loop, as written
    (repo / ".gitignore").write_text("out/\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "toy"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    hosts = d / "hosts.yaml"
    state = {"hosts": hosts, "head": lab.hosts_yaml((CT,)), "wheels": lab.wheels, "repo": repo}
    configure(state)
    task(state, "deploy", "-c", str(CT))
    in_ct(state, f"rm -rf /root/rs/out /root/runs/.checkpoints {CKPT}.*")
    return state


def configure(rs, *, iters=40, restarts=0, helper=False, save_every=5, signal="USR1", grace=60, extra=""):
    text = HOSTS.format(wheels=rs["wheels"], repo=rs["repo"], iters=iters, restarts=restarts)
    text = text.replace("--sleep 0.2", f"--sleep 0.2 --save-every {save_every}" + (f" {extra}" if extra else "")).replace(
        "signal: USR1", f"signal: {signal}").replace("grace: 60", f"grace: {grace}")
    if helper:  # the example finds its checkpoint itself (remote_checkpoint.latest()): no resume words
        text = text.replace(f"python train.py --iters {iters} --sleep 0.2 --save-every {save_every}",
                            "python example.py").replace(
            "    resume: --init-from resume\n", "")
    rs["hosts"].write_text(rs["head"] + text)


def doc_example() -> str:
    section = (ROOT / "docs" / "guide" / "resume.md").read_text().split("## Code written for remote", 1)[1]
    return re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)[0]


def task(rs, *args, check=True):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(rs["hosts"]), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stdout
    return r


def in_ct(rs, script) -> str:
    return task(rs, "exec", "-c", str(CT), script).stdout


def run_log(rs, run_id) -> str:
    return in_ct(rs, f"cat /root/runs/{run_id}/log")


def started(out: str) -> str:
    return re.search(r"==> run (\S+) started", out).group(1)


def first_iter(log: str) -> int:
    return int(re.search(r"^iter (\d+):", log, re.M).group(1))


@pytest.mark.fault("stop --save mid-run", promise="a complete checkpoint is left, named with its step; train --resume "
                   "continues at that step (the log's first iteration > 0) to the end; status and runs name the run "
                   "it continues")
def test_stop_save_then_resume_continues_at_the_saved_step(rs):
    configure(rs, iters=400)
    run_id = started(task(rs, "train", "-c", str(CT), "--detach").stdout)
    assert wait_until(lambda: "saved out/ckpt.pt at iter 5" in run_log(rs, run_id), timeout=180), run_log(rs, run_id)
    out = task(rs, "stop", "-c", str(CT), "--save").stdout
    m = re.search(rf"run {run_id}: saved checkpoint {CKPT} \(step (\d+)\)", out)
    assert m and "verified: no process of it is left" in out, out
    step = int(m.group(1))
    assert f"saved out/ckpt.pt at iter {step}" in run_log(rs, run_id)  # the job's own words agree

    import remote  # the library's view of the same checkpoint

    with remote.open(str(rs["hosts"])) as fleet:
        found = fleet.container(CT).checkpoints()
    assert found[0].path == CKPT and found[0].complete and found[0].step == step and found[0].kind == "torch"

    refused = task(rs, "train", "-c", str(CT), "--detach", check=False)
    assert refused.returncode == 2 and "--resume" in refused.stdout and "--fresh" in refused.stdout, refused.stdout
    assert CKPT in refused.stdout

    configure(rs, iters=step + 6)
    out = task(rs, "train", "-c", str(CT), "--resume").stdout
    assert f"resumes run {run_id} from {CKPT} (step {step})" in out, out
    new = started(out)
    log = run_log(rs, new)
    assert first_iter(log) == step + 1 and log.rstrip().endswith("done"), log
    manifest = json.loads(in_ct(rs, f"cat /root/runs/{new}/manifest.json"))
    assert manifest["checkpoint"] == {"path": CKPT, "step": step, "kind": "torch"} and manifest["parent"] == run_id
    with remote.open(str(rs["hosts"])) as fleet:
        run = fleet.container(CT).run(new)
        assert run.parent == run_id and run.checkpoint.step == step and run.checkpoint.path == CKPT
    lineage = f"(resumes {run_id} at step {step})"
    assert lineage in task(rs, "runs", "-c", str(CT)).stdout
    assert f"last run {new} {lineage}" in task(rs, "status", "-c", str(CT)).stdout


@pytest.mark.fault("A torn newest checkpoint at a resume", promise="never resumed from: the kept copy is put back "
                   "(the torn one renamed aside), or, with none, the resume is refused naming it")
def test_a_torn_checkpoint_is_put_right_from_the_kept_copy_or_refused(rs):
    good = in_ct(rs, f"sha256sum < {CKPT} | cut -c1-64").split()[-1]
    assert in_ct(rs, "ls /root/runs/.checkpoints").split() == ["ckpt.pt", "ckpt.pt.json"]
    in_ct(rs, f"truncate -s 1000 {CKPT}")
    configure(rs, iters=3)  # the resumed run ends at once: its first iteration is past --iters
    out = task(rs, "train", "-c", str(CT), "--resume").stdout
    assert f"checkpoint {CKPT} restored from the kept copy" in out and f"{CKPT}.incomplete-" in out, out
    assert in_ct(rs, f"sha256sum < {CKPT} | cut -c1-64").split()[-1] == good
    aside = in_ct(rs, f"ls {CKPT}.incomplete-*").split()
    assert len(aside) == 1 and in_ct(rs, f"stat -c %s {aside[0]}").split()[-1] == "1000"  # kept, not deleted
    # No kept copy: the torn checkpoint is refused, named.
    in_ct(rs, f"mv /root/runs/.checkpoints /root/runs/.checkpoints-away && truncate -s 1000 {CKPT}")
    try:
        refused = task(rs, "train", "-c", str(CT), "--resume", check=False)
        assert refused.returncode == 2, refused.stdout
        assert f"no complete checkpoint to resume from: {CKPT} is not complete" in refused.stdout, refused.stdout
        assert "--fresh" in refused.stdout
    finally:
        in_ct(rs, "rm -rf /root/runs/.checkpoints && mv /root/runs/.checkpoints-away /root/runs/.checkpoints")


@pytest.mark.fault("train --fresh where checkpoints exist", promise="the old checkpoints and the kept copy are moved "
                   "aside (renamed, named in the output), never deleted")
def test_fresh_moves_the_old_checkpoints_aside(rs):
    before = in_ct(rs, f"sha256sum < {CKPT} | cut -c1-64").split()[-1]
    configure(rs, iters=3)
    out = task(rs, "train", "-c", str(CT), "--fresh").stdout
    moved = re.findall(r"checkpoint (\S+) moved aside to (\S+) \(nothing deleted\)", out)
    assert (CKPT, moved[0][1]) == moved[0] and ".old-" in moved[0][1], out
    assert any(src == "/root/runs/.checkpoints/ckpt.pt" for src, _ in moved), out
    assert in_ct(rs, f"sha256sum < {moved[0][1]} | cut -c1-64").split()[-1] == before
    assert "done" in run_log(rs, started(out))


@pytest.mark.fault("A job killed (SIGKILL) with train.restarts, in a container",
                   promise="its next attempt resumes from the last complete checkpoint by itself and runs to the end")
def test_a_sigkilled_job_resumes_by_itself(rs):
    configure(rs, iters=40, restarts=1)
    run_id = started(task(rs, "train", "-c", str(CT), "--fresh", "--detach").stdout)
    assert wait_until(lambda: "saved out/ckpt.pt at iter 10" in run_log(rs, run_id), timeout=180)
    assert wait_until(lambda: "ckpt.pt.json" in in_ct(rs, "ls /root/runs/.checkpoints"), timeout=30)
    in_ct(rs, "pkill -KILL -f '^python train[.]py'")  # the job's python, not its wrapper (nor this shell)
    end = time.monotonic() + 300
    while "exit=" not in (st := in_ct(rs, f"cat /root/runs/{run_id}/exit 2>/dev/null | sed 's/^/exit=/' || true")):
        assert time.monotonic() < end, run_log(rs, run_id)
        time.sleep(2)
    log = run_log(rs, run_id)
    assert st.strip().endswith("exit=0"), log
    head, _, resumed = log.partition("-- attempt 2 of 2 resumes from ")
    step = int(resumed.partition("(step ")[2].partition(")")[0])
    assert resumed.startswith(f"{CKPT} (step {step})") and f"saved out/ckpt.pt at iter {step}" in head, log
    assert first_iter(resumed) == step + 1 and resumed.rstrip().endswith("done"), log


def memory_limit(lab, mib: int | None) -> None:
    """Proxmox's `memory` option set (MiB) and the container restarted: the pct double's start writes it as the
    container's cgroup memory limit; or deleted while it runs: applied at once (unlimited), as Proxmox does."""
    pct = str(lab.dir / "bin" / "pct")
    change = ["set", str(CT), "--memory", str(mib)] if mib else ["set", str(CT), "--delete", "memory"]
    for argv in (change, ["stop", str(CT)]) if mib else (change,):
        r = subprocess.run([pct, *argv], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    lab.start_container(CT)


def limit_seen(rs) -> str:
    """The memory limit the container sees on itself (cgroup v2's memory.max, or v1's limit_in_bytes)."""
    out = in_ct(rs, "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || true")
    return (out.split() or ["none"])[0]


@pytest.mark.fault("A job the kernel's OOM killer ends (the container's memory limit) with train.restarts",
                   promise="the next attempt resumes from the last complete checkpoint by itself and runs to the "
                           "end; the log, the run record and status name the OOM kill (exit 137)")
def test_a_job_the_kernel_oom_kills_resumes_from_its_checkpoint(rs, lab):
    memory_limit(lab, 1024)
    try:
        assert limit_seen(rs) == str(1024 << 20)
        configure(rs, iters=16, restarts=1, extra="--grow-at 12")
        run_id = started(task(rs, "train", "-c", str(CT), "--fresh", "--detach").stdout)
        assert wait_until(lambda: "exit=" in in_ct(rs, f"cat /root/runs/{run_id}/exit 2>/dev/null | sed 's/^/exit=/'"
                                                    " || true"), timeout=300), run_log(rs, run_id)
        log = run_log(rs, run_id)
        assert in_ct(rs, f"cat /root/runs/{run_id}/exit").strip() == "0", log
        head, _, resumed = log.partition("-- attempt 1 was killed by the kernel's OOM killer (exit 137)")
        assert resumed and "iter 12:" in head and "iter 13:" not in head, log  # killed where it grew
        assert f"-- attempt 2 of 2 (previous exit 137)\n-- attempt 2 of 2 resumes from {CKPT} (step 10)" in resumed, log
        assert first_iter(resumed) == 11 and resumed.rstrip().endswith("done"), log
        manifest = json.loads(in_ct(rs, f"cat /root/runs/{run_id}/manifest.json"))
        assert [(a["exit"], a.get("killed")) for a in manifest["attempts"]] == [(137, "oom"), (0, None)], manifest
        assert "attempt 1 was killed by the kernel's OOM killer (exit 137)" in task(rs, "status", "-c", str(CT)).stdout
    finally:
        memory_limit(lab, None)
    assert limit_seen(rs) != str(1024 << 20)


@pytest.mark.fault("stop --save of a job written with remote_checkpoint, in a container",
                   promise="deploy installs the helper; the job is asked through it, saves a complete checkpoint "
                           "and exits 0; train --resume continues after that step")
def test_the_remote_checkpoint_example_through_the_cli(rs):
    configure(rs, helper=True)
    run_id = started(task(rs, "train", "-c", str(CT), "--fresh", "--detach").stdout)
    assert wait_until(lambda: "step 200:" in run_log(rs, run_id), timeout=180), run_log(rs, run_id)
    out = task(rs, "stop", "-c", str(CT), "--save").stdout
    m = re.search(rf"run {run_id}: saved checkpoint {CKPT} \(step (\d+)\)", out)
    assert m, out
    # 0: it saved on the request and exited by itself; 143: a periodic save landed first, stop --save took it
    # as the new checkpoint and stopped the job (TERM) as it does any job (the request's save is atomic: at worst
    # it is not there). (The local tier checks the job's own exit 0: tests/local/test_checkpoint_helper_local.py.)
    assert in_ct(rs, f"cat /root/runs/{run_id}/exit").strip() in ("0", "143"), run_log(rs, run_id)
    step = int(in_ct(rs, f"/root/venv/bin/python -c 'import torch; print(torch.load(\"{CKPT}\")[\"step\"])'").split()[-1])
    assert step >= int(m.group(1)), (step, out)
    new = started(task(rs, "train", "-c", str(CT), "--resume", "--detach").stdout)
    assert wait_until(lambda: "starting at" in run_log(rs, new), timeout=180), run_log(rs, new)
    assert f"starting at step {step + 1}" in run_log(rs, new)
    assert re.search(rf"run {new}: saved checkpoint {CKPT}", task(rs, "stop", "-c", str(CT), "--save").stdout)


# -- rollback: it reverts the environment, never the training progress -----------------------------------------
SNAP = "carry-test"
MARKER = "/root/env-marker"


@pytest.fixture(scope="module")
def snap(rs, lab):
    """A snapshot of the deployed container whose rootfs holds an OLDER complete checkpoint (step 2) where the job
    saves, and an environment marker `snapshot`; the container's storage one that snapshots (the double copies)."""
    lab.set_storage(CT, "local-lvm")
    in_ct(rs, f"mkdir -p /root/rs/out && /root/venv/bin/python -c 'import torch; torch.save({{\"iter_num\": 2}}, "
              f"\"{CKPT}\")' && echo snapshot > {MARKER}")
    assert step_in_ct(rs) == 2
    made = subprocess.run([str(lab.dir / "bin" / "pct"), "snapshot", str(CT), SNAP], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    in_ct(rs, f"echo after > {MARKER}")
    yield SNAP
    subprocess.run([str(lab.dir / "bin" / "pct"), "delsnapshot", str(CT), SNAP], capture_output=True)
    lab.set_storage(CT, "local")
    # The lab's host is this machine: the carry's folders, where they are empty now, go too.
    for folder in (Path(f"/var/lib/remote/carry/{CT}"), Path("/var/lib/remote/carry"), Path("/var/lib/remote")):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def step_in_ct(rs) -> int:
    """The step the checkpoint at CKPT holds, read by torch in the container."""
    return int(in_ct(rs, f"/root/venv/bin/python -c 'import torch; print(torch.load(\"{CKPT}\")[\"iter_num\"])'")
               .split()[-1])


@pytest.mark.fault("rollback, gpu fix, move or drain of a run that saves nothing new within its grace",
                   promise="refused (exit 3), nothing changed, naming the grace, the last complete checkpoint (or "
                   "that there is none) and --force; the run is STILL RUNNING after")
@pytest.mark.fault("rollback with a live run and train.checkpoint",
                   promise="the run saves, its checkpoint is carried across the rollback (through the host, verified) "
                   "and the run resumes at the checkpoint's step with the snapshot's environment, never from the "
                   "older checkpoint the snapshot held; the stopped run's folder (log, record) is carried too, and the "
                   "resumed run's record names it as its parent")
def test_a_rollback_refuses_a_run_that_does_not_save_and_carries_and_resumes_one_that_does(rs, snap):
    """One job, saving only on USR1: with `signal: none` it saves nothing within the grace (the rollback refused,
    the job still running), with `signal: USR1` it saves at once (carried, rolled back, resumed). (--force, and a
    rollback after `stop --save`, carry the same way: tests/unit/test_carry.py.)"""
    configure(rs, iters=400, save_every=100000, signal="none", grace=2)
    run_id = started(task(rs, "train", "-c", str(CT), "--fresh", "--detach").stdout)  # the step-2 one set aside
    assert wait_until(lambda: "iter 12:" in run_log(rs, run_id), timeout=180), run_log(rs, run_id)
    refused = task(rs, "rollback", "-c", str(CT), "--snapshot", snap, check=False)
    assert refused.returncode == 3, refused.stdout
    said = refused.stdout
    assert "the rollback to carry-test refused, nothing was changed" in said and "grace (2 s)" in said, said
    assert "it has no complete checkpoint at all" in said and "--force" in said and "still running" in said, said
    # STILL RUNNING: no exit record, its python alive, training on; and nothing rolled back
    assert in_ct(rs, f"cat /root/runs/{run_id}/exit 2>/dev/null || echo none").strip() == "none"
    n = run_log(rs, run_id).count("\niter ")
    assert wait_until(lambda: run_log(rs, run_id).count("\niter ") > n + 2, timeout=60), run_log(rs, run_id)
    assert in_ct(rs, f"cat {MARKER}").strip() == "after"
    dry = task(rs, "rollback", "-c", str(CT), "--snapshot", snap, "--dry").stdout
    assert "pct rollback" in dry and in_ct(rs, f"cat {MARKER}").strip() == "after", dry
    assert in_ct(rs, f"cat /root/runs/{run_id}/exit 2>/dev/null || echo none").strip() == "none"  # dry: untouched

    configure(rs, iters=400, save_every=100000, signal="USR1", grace=60)
    out = task(rs, "rollback", "-c", str(CT), "--snapshot", snap).stdout
    m = re.search(rf"carried:  checkpoint {CKPT} \(step (\d+)\) across the rollback", out)
    assert m and int(m.group(1)) >= 12, out
    step = int(m.group(1))
    new = re.search(rf"resumed:  run (\S+) continues run {run_id}", out).group(1)
    assert in_ct(rs, f"cat {MARKER}").strip() == "snapshot"  # the snapshot's environment
    assert wait_until(lambda: re.search(r"^iter \d+:", run_log(rs, new), re.M), timeout=180), run_log(rs, new)
    assert first_iter(run_log(rs, new)) == step + 1, run_log(rs, new)  # not the snapshot's step 2
    assert in_ct(rs, f"ls /var/lib/remote/carry/{CT} 2>/dev/null || true").strip() == ""  # the host's copy removed
    # The training history too: the stopped run's folder (made after the snapshot) is back, its log and record
    # whole, the snapshot's runs left as they were, and the resumed run's record continues it.
    assert re.search(rf"carried:  run folders (\S+, )*{run_id}\b", out) and "differ" not in out, out
    assert "restored: run folders" not in out, out
    assert "iter 12:" in run_log(rs, run_id) and f"saved out/ckpt.pt at iter {step}" in run_log(rs, run_id)
    assert json.loads(in_ct(rs, f"cat /root/runs/{new}/manifest.json"))["parent"] == run_id
    listed = task(rs, "runs", "-c", str(CT)).stdout
    assert run_id in listed and f"(resumes {run_id} at step {step})" in listed, listed
    assert "iter 12:" in task(rs, "logs", "-c", str(CT), "--run", run_id, check=False).stdout  # its exit status: 143
    task(rs, "stop", "-c", str(CT))
