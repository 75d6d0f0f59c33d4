"""Lab tier: issue 44's proof on unmodified nanoGPT (examples/nanogpt, upstream 3adf61e1 byte for byte), through
the command line and the library: `stop --save` mid-run leaves a complete checkpoint, `train --resume` continues
at its iteration and reaches max_iters with a final loss within 5% of an uninterrupted run's, and a job killed
with SIGKILL under `restarts: 1` resumes by itself from its last complete checkpoint. Then HF Trainer (a real
Trainer, `checkpoint-N` folders) the same way: docs/guide/resume.md's second tested recipe.

The lab of this module is its own (container 344; support.SELF_MADE_LAB_MODULES). The data is
prepare_offline.py's, made in the container with `remote exec` (nothing here downloads).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support import LAB_WHEELS, new_lab

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parents[2]
CT = 344
CODE = "/root/nanogpt"
MAX_ITERS = 400
# A small model that learns in ~15 s on 2 idle cores (examples/nanogpt/README.md): a checkpoint every 50 iterations
# (nanoGPT evaluates, then torch.saves out/ckpt.pt in place), the last eval at MAX_ITERS.
NANOGPT = (f"python train.py config/train_shakespeare_char.py --device=cpu --compile=False --dtype=float32 "
           f"--block_size=64 --batch_size=16 --n_layer=2 --n_head=2 --n_embd=64 --dropout=0.0 --warmup_iters=20 "
           f"--max_iters={MAX_ITERS} --lr_decay_iters={MAX_ITERS} --eval_interval=50 --eval_iters=20 "
           f"--log_interval=10 --always_save_checkpoint=True --out_dir=out")
HF = ("python hf_train.py --output_dir hf-out --max_steps 120 --save_steps 30 --logging_steps 10 "
      "--per_device_train_batch_size 16 --learning_rate 1e-3 --report_to none --use_cpu --disable_tqdm true")
HF_PINS = "transformers==5.25.0, accelerate==1.16.0"
HF_STEPS_PER_EPOCH = 352  # 360,000 training ids in windows of 64, batches of 16

HOSTS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6, {hf}]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: {code}
train:
  run_dir: /root/runs
  env: {{OMP_NUM_THREADS: '1'}}
"""
NANOGPT_TRAIN = f"""  command: {NANOGPT}
  checkpoint:
    path: out/ckpt.pt
    resume: --init_from=resume
    signal: none
    grace: 120
"""
HF_TRAIN = f"""  command: {HF}
  checkpoint:
    path: hf-out/checkpoint-*
    resume: --resume_from_checkpoint {{checkpoint}}
    grace: 120
"""


def code_repo(folder: Path) -> Path:
    """A git repository of the example code as a user has it: nanoGPT's tracked files at its root (the vendored
    ones unchanged), and the HF Trainer script beside them."""
    repo = folder / "code"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "examples/nanogpt"], capture_output=True,
                             text=True, check=True).stdout.split()
    for rel in tracked:
        dest = repo / Path(rel).relative_to("examples/nanogpt")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, dest)
    shutil.copyfile(ROOT / "examples/hf-trainer/train.py", repo / "hf_train.py")
    git = ["git", "-C", str(repo), "-c", "user.name=lab", "-c", "user.email=lab@remote.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "nanoGPT 3adf61e1, unmodified"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return repo


@pytest.fixture(scope="module")
def nano():
    folder = Path(tempfile.mkdtemp(prefix="remote-resume-lab-", dir="/var/tmp"))
    lab = new_lab(folder / "lab", (CT,))
    try:
        base = lab.hosts_yaml((CT,)) + HOSTS.format(hf=HF_PINS, wheels=LAB_WHEELS, repo=code_repo(folder), code=CODE)
        files = {}
        for name, train in (("nanogpt", NANOGPT_TRAIN), ("kill", NANOGPT_TRAIN + "  restarts: 1\n"),
                            ("hf", HF_TRAIN)):
            files[name] = folder / f"hosts-{name}.yaml"
            files[name].write_text(base + train)
        env = {"folder": folder, "lab": lab, "hosts": files, "ref": {}}
        task(env, "nanogpt", "deploy", "-c", str(CT))
        out = task(env, "nanogpt", "exec", "-c", str(CT), "python prepare_offline.py").stdout
        assert "vocab size: 54" in out, out
        yield env
    finally:
        lab.down(purge=True)
        shutil.rmtree(folder, ignore_errors=True)


def task(env, hosts: str, *args: str, check=True, timeout=600) -> subprocess.CompletedProcess:
    """One task as a user runs it (the `remote` console script's code, its own process), output captured."""
    e = {**os.environ, "REMOTE_HOSTS_FILE": str(env["hosts"][hosts]), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"remote {' '.join(args)}: exit {r.returncode}\n{r.stdout[-4000:]}"
    return r


def in_ct(env, script: str) -> str:
    return task(env, "nanogpt", "exec", "-c", str(CT), script).stdout


def run_log(env, run_id: str) -> str:
    return in_ct(env, f"cat /root/runs/{run_id}/log")


def run_id_of(out: str) -> str:
    return next(line.split()[2] for line in out.splitlines() if line.startswith("==> run "))


def first_iter(log: str) -> int:
    return int(re.search(r"^(?:\S+ )?iter (\d+):", log, re.M).group(1))


def iters(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"^iter (\d+):", log, re.M)]


def final_val_loss(log: str) -> float:
    m = re.findall(rf"^step {MAX_ITERS}: train loss [\d.]+, val loss ([\d.]+)", log, re.M)
    assert m, f"no eval at iteration {MAX_ITERS} in the log:\n{log[-2000:]}"
    return float(m[-1])


def wait_for_log(env, run_id: str, pattern: str, timeout: float = 240) -> str:
    end = time.monotonic() + timeout
    while True:
        log = run_log(env, run_id)
        if re.search(pattern, log, re.M):
            return log
        assert time.monotonic() < end, f"{pattern!r} not in the run's log within {timeout} s:\n{log[-2000:]}"
        time.sleep(1)


def test_an_uninterrupted_run_is_the_reference(nano):
    out = task(nano, "nanogpt", "train", "-c", str(CT)).stdout
    log = run_log(nano, run_id_of(out))
    assert first_iter(log) == 0 and iters(log)[-1] == MAX_ITERS, log[-2000:]
    nano["ref"]["nanogpt"] = final_val_loss(log)
    # A complete checkpoint is there now: a plain train refuses to start over it, naming both ways on.
    plain = task(nano, "nanogpt", "train", "-c", str(CT), check=False)
    assert plain.returncode == 2 and "--resume" in plain.stdout and "--fresh" in plain.stdout, plain.stdout


@pytest.mark.fault("Resume of unmodified nanoGPT", promise="stop --save leaves a complete checkpoint; train "
                   "--resume continues at its iteration to max_iters, final loss within 5% of an uninterrupted run")
def test_stop_save_then_resume_continues_at_the_checkpoint_through_the_cli(nano):
    out = task(nano, "nanogpt", "train", "-c", str(CT), "--fresh", "--detach").stdout
    run_id = run_id_of(out)
    wait_for_log(nano, run_id, r"^iter 2[0-4]0:")  # past four checkpoints (every 50 iterations): mid-run
    stopped = task(nano, "nanogpt", "stop", "-c", str(CT), "--save").stdout
    assert "verified: no process of it is left" in stopped, stopped
    m = re.search(r"ckpt\.pt\D+?step (\d+)", stopped)
    assert m, f"stop --save did not name the checkpoint it left and its step:\n{stopped}"
    saved = int(m.group(1))
    assert saved >= 250 and saved % 50 == 0, stopped
    # The checkpoint is complete: nanoGPT's own torch.load reads it, at that iteration.
    probe = in_ct(nano, "python -c \"import torch; print('iter_num', torch.load('out/ckpt.pt', "
                         "map_location='cpu', weights_only=False)['iter_num'])\"")
    assert f"iter_num {saved}" in probe, probe
    resumed = task(nano, "nanogpt", "train", "-c", str(CT), "--resume").stdout
    log = run_log(nano, run_id_of(resumed))
    assert "Resuming training from out" in log, log[:2000]
    assert first_iter(log) == saved, f"the resumed run's first iteration is not the checkpoint's ({saved}):\n{log[:3000]}"
    assert iters(log)[-1] == MAX_ITERS
    ref, got = nano["ref"]["nanogpt"], final_val_loss(log)
    assert abs(got - ref) <= 0.05 * ref, f"final val loss {got} against {ref} uninterrupted (more than 5% apart)"


def test_the_library_saves_and_resumes_the_same_way(nano):
    import remote

    with remote.open(str(nano["hosts"]["nanogpt"])) as fleet:
        c = fleet.container(CT)
        run = c.train(fresh=True)  # detached
        wait_for_log(nano, run.id, r"^iter 1[0-4]0:")
        saved = c.stop(save=True).saved
        assert saved is not None and saved.outcome == "saved", saved
        k = saved.checkpoint
        assert k.complete and k.kind == "torch" and k.step is not None and k.step >= 150 and k.step % 50 == 0, k
        assert saved.steps_lost is not None and saved.steps_lost < 50, saved  # less than one interval: the stop follows the save
        mine = [x for x in c.checkpoints() if not x.kept]
        assert mine and mine[0].complete and mine[0].step == k.step, c.checkpoints()
        again = c.train(resume=True)
        assert again.wait(timeout=400) == 0
        log = again.text()
    assert first_iter(log) == k.step and iters(log)[-1] == MAX_ITERS, log[-2000:]


@pytest.mark.fault("A nanoGPT job SIGKILLed with restarts: 1", promise="it resumes by itself from its last "
                   "complete checkpoint and reaches max_iters")
def test_a_sigkilled_job_resumes_by_itself_from_its_last_checkpoint(nano):
    out = task(nano, "kill", "train", "-c", str(CT), "--fresh", "--detach").stdout
    run_id = run_id_of(out)
    log = wait_for_log(nano, run_id, r"^iter 1[6-9]0:")
    last_saved = max(int(n) for n in re.findall(r"^step (\d+):", log, re.M) if int(n) > 0)
    pids = in_ct(nano, f"grep -lx 'REMOTE_RUN_ID={run_id}' --null-data /proc/[0-9]*/environ 2>/dev/null | "
                        "cut -d/ -f3 | while read p; do tr '\\0' ' ' < /proc/$p/cmdline | grep -q '^python train.py' "
                        "&& echo $p; done || true").split()
    assert len(pids) == 1, pids
    in_ct(nano, f"kill -KILL {pids[0]}")
    followed = task(nano, "kill", "logs", "-c", str(CT), "--run", run_id, "--follow", check=False)
    log = run_log(nano, run_id)
    assert followed.returncode == 0, followed.stdout[-3000:]
    assert re.search(r"^-- attempt 2 of 2 resumes from \S*ckpt\.pt", log, re.M), log[-4000:]
    second = log[log.index("-- attempt 2 of 2"):]
    assert first_iter(second) >= last_saved and first_iter(second) > 0, second[:2000]
    assert iters(second)[-1] == MAX_ITERS


def hf_steps(log: str) -> list[int]:
    """The step of each of the Trainer's loss lines (it prints the epoch: 352 steps an epoch here)."""
    return [round(float(e) * HF_STEPS_PER_EPOCH) for e in re.findall(r"'loss': '[\d.]+'.*'epoch': '([\d.e-]+)'", log)]


@pytest.mark.fault("Resume of an HF Trainer job", promise="stop --save waits for its next checkpoint-N folder "
                   "(trainer_state.json); train --resume passes it to --resume_from_checkpoint")
def test_hf_trainer_stop_save_and_resume(nano):
    out = task(nano, "hf", "train", "-c", str(CT), "--detach").stdout
    run_id = run_id_of(out)
    wait_for_log(nano, run_id, r"'loss'.*'epoch': '0\.0[6-9]", timeout=300)  # past step 20 of 120
    stopped = task(nano, "hf", "stop", "-c", str(CT), "--save").stdout
    m = re.search(r"checkpoint-(\d+)", stopped)
    assert m, f"stop --save did not name the checkpoint it left:\n{stopped}"
    saved = int(m.group(1))
    assert saved % 30 == 0 and saved >= 30, stopped
    assert in_ct(nano, f"test -f hf-out/checkpoint-{saved}/trainer_state.json && echo marker").strip() == "marker"
    resumed = task(nano, "hf", "train", "-c", str(CT), "--resume").stdout
    log = run_log(nano, run_id_of(resumed))
    steps = hf_steps(log)
    assert steps and steps[0] == saved + 10 and steps[-1] == 120, f"resumed at {saved}: steps {steps}\n{log[-3000:]}"
