"""Lab tier: a run of unmodified nanoGPT (examples/nanogpt, the offline data) that survives a move and a host's
maintenance, on a two-node lab cluster of its own (remote/lab/cluster.py, ids 360-361), real torch on CPU in an
LXC container, the code in a git repository made here as a user has it.

`remote move` of the running nanoGPT to the other node: it continues there from its checkpoint (its log's first
`iter N` is the checkpoint's iteration, N > 0; its record names the run it continues); a driver upgrade as
docs/guide/cluster.md gives it: `remote host drain` without --to, the host's reboot (its containers stopped, then
started as Proxmox starts them at boot), `remote host resume`: the run continues at its checkpoint's iteration;
a move the GPU check refuses changes nothing. Each task runs as the `remote` command does, in its own process.
The time from a move's start to the first step after it: bench/move.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support import LAB_WHEELS, free_port, wait_until

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
CT = 360
PLACEMENT = {CT: "pve1"}  # ids 360-369 are this module's own
CKPT = "/root/mv/out/ckpt.pt"

# nanoGPT's smallest useful shape (examples/nanogpt/README.md), long enough to live through the module: it saves
# out/ckpt.pt in place after each eval (every 20 iterations: a save-stop waits for the next one). `nice`: it
# trains without pause for minutes, beside the suite's other work on a small machine; train.py is unmodified.
NANOGPT = ("nice -n 10 python train.py config/train_shakespeare_char.py --device=cpu --compile=False "
           "--dtype=float32 --block_size=64 --batch_size=16 --n_layer=2 --n_head=2 --n_embd=64 --dropout=0.0 "
           "--warmup_iters=20 --max_iters=100000 --lr_decay_iters=100000 --eval_interval=20 --eval_iters=5 "
           "--log_interval=10 --always_save_checkpoint=True --out_dir=out")

SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/mv
train:
  command: {command}
  run_dir: /root/runs
  env: {{OMP_NUM_THREADS: '1'}}
  checkpoint:
    path: out/ckpt.pt
    resume: --init_from=resume
    signal: none
    grace: 120
"""


def nanogpt_repo(folder: Path) -> Path:
    """examples/nanogpt's tracked files at the root of a git repository of their own (the vendored ones unchanged)."""
    repo = folder / "mv"
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "examples/nanogpt"], capture_output=True,
                             text=True, check=True).stdout.split()
    for rel in tracked:
        dest = repo / Path(rel).relative_to("examples/nanogpt")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, dest)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "nanoGPT 3adf61e1, unmodified"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return repo


@pytest.fixture(scope="module")
def mv():
    from remote.lab.cluster import ClusterLab

    lab = ClusterLab(dir=Path(tempfile.mkdtemp(prefix="remote-move-lab-", dir="/var/tmp")), port=free_port(),
                     wheels_dir=LAB_WHEELS, name="movecluster", subnet="127.0.36.")
    try:
        lab.up(PLACEMENT, wheels=False)
        hosts = lab.dir / "hosts.yaml"
        hosts.write_text(lab.hosts_yaml({CT: None}) + SECTIONS.format(wheels=LAB_WHEELS, repo=nanogpt_repo(lab.dir),
                                                                      command=NANOGPT))
        state = {"lab": lab, "hosts": hosts, "xdg": lab.dir / "state"}
        r = task(state, "deploy", "-c", str(CT), timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "vocab size: 54" in in_ct(state, "cd /root/mv && python prepare_offline.py")  # nothing downloads
        yield state
    finally:
        from remote.transport import keeper

        for f in lab.dir.glob("hosts*.yaml"):
            keeper.disconnect(str(f))
        lab.down(purge=True)


def task(mv, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(mv["hosts"]), "PYTHONPATH": str(ROOT),
           "XDG_STATE_HOME": str(mv["xdg"])}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=mv["hosts"].parent)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def in_ct(mv, script: str) -> str:
    r = task(mv, "exec", "-c", str(CT), script)
    return r.stdout


def run_log(mv, run_id: str) -> str:
    return in_ct(mv, f"cat /root/runs/{run_id}/log 2>/dev/null || true")


def first_iter(log: str) -> int | None:
    m = re.search(r"^iter (\d+):", log, re.M)
    return int(m.group(1)) if m else None


def saved_at(log: str) -> list[int]:
    """The iterations nanoGPT saved out/ckpt.pt at (its eval line, then `saving checkpoint to out`)."""
    return [int(n) for n in re.findall(r"^step (\d+): train loss .*\nsaving checkpoint to out$", log, re.M)]


def ckpt_iter(mv) -> int:
    """iter_num of the checkpoint in the container, as nanoGPT's resume reads it."""
    out = in_ct(mv, "cd /root/mv && python -c \"import torch; print('iter_num', torch.load('out/ckpt.pt', "
                    "map_location='cpu', weights_only=False)['iter_num'])\"")
    return int(re.search(r"iter_num (\d+)", out).group(1))


def start_run(mv) -> str:
    r = task(mv, "train", "-c", str(CT), "--detach", "--fresh")
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = re.search(r"run (\S+) started", r.stdout + r.stderr).group(1)
    assert wait_until(lambda: saved_at(run_log(mv, run_id)), timeout=240), run_log(mv, run_id)
    return run_id


def latest_run(mv) -> str:
    data = json.loads(task(mv, "status", "-c", str(CT), "--json").stdout)
    return data["containers"][0]["run"]["id"]


@pytest.mark.fault("remote move of a container with a live run to another node of its cluster", promise="the run "
                   "(unmodified nanoGPT) is save-stopped, the container migrated (pct migrate --restart) and runs on "
                   "the new node, the run continues there from its checkpoint (its log's first `iter N` is the "
                   "checkpoint's iteration, N > 0; its record names the run it continues); every step timed")
def test_a_move_continues_the_run_on_the_other_node_from_its_checkpoint(mv):
    lab = mv["lab"]
    old = start_run(mv)
    dry = task(mv, "move", "-c", str(CT), "--node", "pve2", "--dry")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"pve1: pct migrate {CT} pve2 --restart" in dry.stdout and "--resume" in dry.stdout, dry.stdout
    assert lab.owner(CT) == "pve1" and latest_run(mv) == old  # the dry run changed nothing
    t0 = time.monotonic()
    r = task(mv, "move", "-c", str(CT), "--node", "pve2", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout)
    assert lab.owner(CT) == "pve2" and got["source"] == "pve1" and got["node"] == "pve2", got
    assert got["stopped"] == old and got["checkpoint"] == CKPT and got["parent"] == old, got
    assert [s["name"] for s in got["steps"]] == ["check", "save-stop", "migrate", "wait", "resume"], got
    new = got["resumed"]
    assert wait_until(lambda: first_iter(run_log(mv, new)) is not None, timeout=120), run_log(mv, new)
    took = time.monotonic() - t0
    log = run_log(mv, new)
    first = first_iter(log)
    assert "Resuming training from out" in log and first is not None and first > 0, log
    assert first == saved_at(run_log(mv, old))[-1], run_log(mv, old)[-2000:]  # the save-stop's checkpoint
    manifest = json.loads(in_ct(mv, f"cat /root/runs/{new}/manifest.json"))
    assert manifest["parent"] == old and manifest["checkpoint"]["path"] == CKPT, manifest
    print(f"move: fault to first step after resume {took:.1f} s")  # bench/move.py measures it


@pytest.mark.fault("a move the GPU check refuses (the node lacks what the container's GPU lines need)", promise="exit "
                   "2 naming the finding; nothing changed: the run still live, the container on its node")
def test_a_move_refused_by_the_gpu_check_changes_nothing(mv):
    lab = mv["lab"]
    node = lab.owner(CT)
    other = "pve1" if node == "pve2" else "pve2"
    before = latest_run(mv)
    conf = lab.tree / "nodes" / node / "lxc" / f"{CT}.conf"
    text = conf.read_text()
    conf.write_text(text + "dev0: /dev/nvidia0,gid=44\n")  # a GPU line: the other node has no NVIDIA module
    try:
        r = task(mv, "move", "-c", str(CT), "--node", other)
    finally:
        conf.write_text(text)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refused, nothing changed" in r.stderr and "no NVIDIA module loaded" in r.stderr, r.stderr
    assert lab.owner(CT) == node and latest_run(mv) == before
    data = json.loads(task(mv, "status", "-c", str(CT), "--json").stdout)
    assert data["containers"][0]["run"]["alive"], data


@pytest.mark.fault("remote host drain --to another node", promise="each container of the host moved there with its "
                   "run, which continues from its checkpoint (its log's first step is the checkpoint's iteration)")
def test_a_drain_to_another_node_moves_each_container_and_continues_its_run(mv):
    lab = mv["lab"]
    node = lab.owner(CT)
    other = "pve1" if node == "pve2" else "pve2"
    run = latest_run(mv)
    assert wait_until(lambda: saved_at(run_log(mv, run)), timeout=240)
    r = task(mv, "host", "drain", node, "--to", other)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"container {CT} moved from {node} to {other}" in r.stdout, r.stdout
    new = re.search(rf"run (\S+) resumes run {run} on {other}", r.stdout).group(1)
    assert lab.owner(CT) == other
    assert wait_until(lambda: first_iter(run_log(mv, new)) is not None, timeout=120), run_log(mv, new)
    assert first_iter(run_log(mv, new)) == saved_at(run_log(mv, run))[-1] > 0


@pytest.mark.fault("A driver upgrade as cluster.md gives it: remote host drain without --to, the host rebooted "
                   "(its containers stopped, then started as Proxmox starts them at boot), remote host resume",
                   promise="drain save-stops the run and prints the command that resumes it; resume resumes it in the "
                   "started container and the run continues at its checkpoint's iteration (its log's first step)")
def test_a_drain_then_a_reboot_then_resume_continues_the_run(mv):
    lab = mv["lab"]
    node = lab.owner(CT)
    run = latest_run(mv)
    assert wait_until(lambda: saved_at(run_log(mv, run)), timeout=240)
    r = task(mv, "host", "drain", node)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"container {CT}: run {run} stopped, checkpoint {CKPT}" in r.stdout, r.stdout
    assert f"resume it with: remote train -c {CT} --resume" in r.stdout and f"remote host resume {node}" in r.stdout
    saved = ckpt_iter(mv)
    assert saved == saved_at(run_log(mv, run))[-1] > 0  # the drain's save-stop left the job's last save
    # The reboot: every container of the node stopped, then started as pve-guests starts them at boot (the
    # driver's boot unit runs then too; this lab has no GPU, so there is nothing for it to do).
    for verb in ("stop", "start"):
        done = lab.node(node).pct(verb, str(CT))
        assert done.returncode == 0, done.stderr
    assert wait_until(lambda: lab.state(CT) == "RUNNING", timeout=60)
    after_boot = json.loads(task(mv, "status", "-c", str(CT), "--json").stdout)["containers"][0]["run"]
    assert after_boot["id"] == run and not after_boot["alive"], after_boot  # the boot started no run by itself
    r = task(mv, "host", "resume", node)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resume: start container" not in r.stdout + r.stderr  # it was running: only its run was resumed
    new = re.search(rf"container {CT}: run (\S+) resumed", r.stdout).group(1)
    assert wait_until(lambda: first_iter(run_log(mv, new)) is not None, timeout=120), run_log(mv, new)
    log = run_log(mv, new)
    assert "Resuming training from out" in log and first_iter(log) == saved, log[:3000]
    assert json.loads(in_ct(mv, f"cat /root/runs/{new}/manifest.json"))["parent"] == run
    again = task(mv, "host", "resume", node)  # the record is spent: nothing to resume, named
    assert again.returncode == 2 and f"no drain of host {node} to resume" in again.stderr, again.stderr
    task(mv, "stop", "-c", str(CT))
