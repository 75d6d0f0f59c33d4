"""Lab tier: a training repository that never heard of remote, run through the tasks alone.

examples/plain: plain torch.compile, DDP under torchrun (gloo on CPU, 3 ranks), a dataset file that git
ignores (pushed with `remote push`), a checkpoint in out/ (pulled back with `remote pull --run`), and
log lines in its own format (`iter 10: loss 4.33, time 3.81ms`, lower is better). After every task,
nothing of torch's compile cache is under the container's /tmp. A secret in train.env never shows in
the host's process list, the run folder or any task's output.
"""

import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = 202
SECRET = "sekrit-7c1e4b9a"

HOSTS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/plain
warmup:
  command: torchrun --nproc-per-node 3 train.py --max-iters 2
train:
  command: torchrun --nproc-per-node 3 train.py --max-iters 40 --log-interval 10
  metric: {{pattern: 'time ([\\d.]+)ms', unit: ms/iter, higher_is_better: false}}
  baseline: 500
  tolerance: 0.5
  outputs: [out/]
  env: {{WANDB_API_KEY: {secret}}}
"""


@pytest.fixture(scope="module")
def plain(lab, tmp_path_factory):
    """Container 202 with a hosts file for the plain repository, and a local dataset made by its prepare.py."""
    lab.start_container(CT)
    d = tmp_path_factory.mktemp("plain")
    hosts = d / "hosts.yaml"
    hosts.write_text(lab.hosts_yaml((CT,)) + HOSTS.format(repo=lab.plain_repo(), secret=SECRET, wheels=lab.wheels))
    subprocess.run([sys.executable, str(ROOT / "examples/plain/prepare.py"), "--out", str(d / "data/tokens.bin")],
                   check=True, capture_output=True)
    return {"hosts": hosts, "data": d / "data", "dir": d, "outputs": []}


def task(plain, *args, check=True, record=True):
    """Run one task as a user would (the `remote` console script's code), output captured (and kept, to
    look for the secret in, unless record=False)."""
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(plain["hosts"]), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if record:
        plain["outputs"].append(r.stdout)
    if check:
        assert r.returncode == 0, r.stdout
    return r


def no_tmp_compile_cache(lab):
    found = sorted(str(p) for p in (lab.lxc / str(CT) / "upper" / "tmp").glob("torchinductor_*"))
    assert found == [], f"compile artifacts under the container's /tmp: {found}"


def in_ct(plain, script):
    return task(plain, "exec", "-c", str(CT), script).stdout


def test_deploy_and_push_the_dataset_git_ignores(lab, plain):
    task(plain, "deploy", "-c", str(CT))
    no_tmp_compile_cache(lab)
    task(plain, "push", "-c", str(CT), "--src", str(plain["data"]), "--dest", "/root/plain/data")
    assert in_ct(plain, "sha256sum < data/tokens.bin | cut -c1-64").strip().endswith(
        __import__("hashlib").sha256((plain["data"] / "tokens.bin").read_bytes()).hexdigest())
    # The venv's console scripts run (their shebangs name the real venv folder).
    assert "usage: torchrun" in in_ct(plain, "torchrun --help | head -1")
    no_tmp_compile_cache(lab)


def test_warmup_runs_the_repositorys_own_command_and_measures_the_cache(lab, plain):
    cold = task(plain, "warmup", "-c", str(CT)).stdout
    assert "device all:" in cold and "cache: +" in cold, cold
    assert all(f"[all] [rank{r}]: rank {r}/3" in cold for r in range(3)), cold
    warm = task(plain, "warmup", "-c", str(CT)).stdout
    assert "cache: nothing new (warm)" in warm, warm
    cache = in_ct(plain, 'echo "$TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_DIR $TMPDIR"').split()
    assert all(p.startswith("/root/.cache/torch-compile/torch-2.13.0+cpu-") for p in cache), cache
    no_tmp_compile_cache(lab)


def test_train_under_torchrun_marks_every_rank_and_judges_time_per_iter(lab, plain):
    out = task(plain, "train", "-c", str(CT)).stdout
    for r in range(3):
        assert f"[rank{r}]: rank {r}/3: " in out, out
    assert "[rank0]: iter 40: loss" in out and "[rank0]: saved out/ckpt.pt" in out
    assert "!! throughput" not in out  # a time per iteration far below the baseline is fast, never slow
    assert "vs baseline 500 ms/iter" in out and "(ok, lower is better)" in out, out
    no_tmp_compile_cache(lab)
    status = json.loads(task(plain, "status", "--json").stdout)
    run = next(c for c in status["containers"] if c["container"] == CT)["run"]
    assert run["unit"] == "ms/iter" and run["exit"] == 0 and run["throughput"] > 0


def test_pull_brings_back_the_runs_outputs_log_and_manifest(lab, plain):
    dest = plain["dir"] / "results"
    task(plain, "pull", "-c", str(CT), "--run", "latest", "--dest", str(dest))
    (run,) = list(dest.iterdir())
    ckpt = run / "outputs" / "out" / "ckpt.pt"
    assert ckpt.stat().st_size > 1000
    remote_sum = in_ct(plain, "sha256sum < out/ckpt.pt | cut -c1-64").strip().splitlines()[-1]
    assert __import__("hashlib").sha256(ckpt.read_bytes()).hexdigest() == remote_sum
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["outputs"] == ["out/"] and manifest["env"]["WANDB_API_KEY"] == "(train.env)"
    assert "[rank0]: iter 40" in (run / "log").read_text()


def marked(plain, run_id):
    """Pids in the container that carry the run's marker."""
    out = in_ct(plain, f"grep -lx 'REMOTE_RUN_ID={run_id}' --null-data /proc/[0-9]*/environ 2>/dev/null | "
                       "cut -d/ -f3 || true")
    return [int(p) for p in out.split()]


def start_long_run(plain):
    out = task(plain, "train", "-c", str(CT), "--detach").stdout
    run_id = next(l.split()[2] for l in out.splitlines() if l.startswith("==> run "))
    end = time.monotonic() + 300
    while "iter 10:" not in in_ct(plain, f"cat /root/runs/{run_id}/log"):
        assert time.monotonic() < end, "the run did not reach iteration 10"
        time.sleep(1)
    return run_id


@pytest.mark.fault("Secrets", promise="train.env values reach the job and no argv, file or output")
def test_a_secret_in_train_env_reaches_the_job_but_no_argv_file_or_output(lab, plain):
    # A slower, longer run to look at while it runs.
    plain["hosts"].write_text(plain["hosts"].read_text().replace("--max-iters 40 --log-interval 10",
                                                                 "--max-iters 100000 --log-interval 10 --sleep 0.01"))
    run_id = start_long_run(plain)
    try:
        ranks = [p for p in marked(plain, run_id)
                 if "RANK=" in in_ct(plain, f"tr '\\0' '\\n' < /proc/{p}/environ | grep '^RANK=' || true")]
        assert len(ranks) == 3
        job_env = task(plain, "exec", "-c", str(CT), f"tr '\\0' '\\n' < /proc/{ranks[0]}/environ", record=False)
        assert f"WANDB_API_KEY={SECRET}" in job_env.stdout.splitlines()  # the job has it
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout  # host and containers
        assert SECRET not in ps
        assert SECRET not in in_ct(plain, f"grep -r {SECRET[:6]} /root/runs/{run_id} || echo none")
        # Dry runs read what they need and print the rest, even where nvidia-smi exists: no traceback.
        in_ct(plain, "printf '#!/bin/sh\\necho 0, NVIDIA H200, 580.1, 1, 143771\\n' > /usr/local/bin/nvidia-smi; "
                     "chmod +x /usr/local/bin/nvidia-smi")
        try:
            for args in (("train", "--force"), ("stop",)):
                dry = task(plain, *args, "-c", str(CT), "--dry")
                assert "Traceback" not in dry.stdout and "pct exec" in dry.stdout, dry.stdout
                # Nothing was started or checked: no pid 0, no word about the GPUs.
                assert "(pid 0" not in dry.stdout and "none on a GPU" not in dry.stdout, dry.stdout
            assert re.search(r"==> \(dry run\) run \S+ would start in container", dry_train := task(
                plain, "train", "--force", "-c", str(CT), "--dry").stdout), dry_train
        finally:
            in_ct(plain, "rm -f /usr/local/bin/nvidia-smi")
    finally:
        stopped = task(plain, "stop", "-c", str(CT), "--run", run_id).stdout
    assert "verified: no process of it is left" in stopped
    assert "none on a GPU" not in stopped  # the lab has no nvidia-smi: the GPUs were not checked
    assert marked(plain, run_id) == []  # no rank, no torchrun left
    assert not any(SECRET in out for out in plain["outputs"])
    no_tmp_compile_cache(lab)


@pytest.mark.fault("A torchrun rank dies", promise="the run fails with the rank's lines and a hint")
def test_a_rank_that_dies_fails_the_run_with_a_hint(lab, plain):
    run_id = start_long_run(plain)
    rank1 = next(p for p in marked(plain, run_id)
                 if "RANK=1" in in_ct(plain, f"tr '\\0' '\\n' < /proc/{p}/environ | grep -x 'RANK=1' || true"))
    in_ct(plain, f"kill -KILL {rank1}")
    r = task(plain, "logs", "-c", str(CT), "--follow", check=False)
    assert r.returncode != 0, r.stdout
    assert "!! a torchrun rank failed:" in r.stdout and "exited with status 1" in r.stdout, r.stdout[-3000:]
    assert marked(plain, run_id) == []
