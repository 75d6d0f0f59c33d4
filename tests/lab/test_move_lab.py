"""Lab tier: a run that survives a move and a host's maintenance, on a two-node lab cluster of its own
(remote/lab/cluster.py, ids 360-361) with real torch on CPU in an LXC container: a small resumable script
(torch.save of model, optimizer and iter_num to one file, often; resumes from it), in a git repository made here.

`remote move` of a running job to the other node: it continues there from its checkpoint (its log's first step
> 0, its record naming the run it continues); `remote host drain` without --to, the container stopped (a reboot),
then `remote host resume`: the run continues; a move the GPU check refuses changes nothing. Each task runs as the
`remote` command does, in its own process. The time from a move's start to the first step after it: bench/move.py.
"""

from __future__ import annotations

import json
import os
import re
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

TRAIN = '''"""A resumable toy: model, optimizer and iter_num saved to one file every --save-every iterations."""
import argparse, os, time

import torch

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=100000)
p.add_argument("--save-every", type=int, default=3)
p.add_argument("--sleep", type=float, default=0.1)
p.add_argument("--out", default="out/ckpt.pt")
p.add_argument("--init-from", default="scratch")
a = p.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
start = 0
if a.init_from == "resume":
    ck = torch.load(a.out, weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    start = ck["iter_num"] + 1
x = torch.randn(64, 32)
os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
for it in range(start, a.iters):
    loss = torch.nn.functional.mse_loss(model(x), x.flip(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {it}: loss {loss.item():.4f}", flush=True)
    if it > start and it % a.save_every == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": it}, a.out + ".tmp")
        os.replace(a.out + ".tmp", a.out)
        print(f"saved {a.out} at iter {it}", flush=True)
    time.sleep(a.sleep)
print("done", flush=True)
'''

SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/mv
train:
  command: python train.py
  run_dir: /root/runs
  checkpoint:
    path: out/ckpt.pt
    resume: --init-from resume
    signal: none
    grace: 30
"""


@pytest.fixture(scope="module")
def mv():
    from remote.lab.cluster import ClusterLab

    lab = ClusterLab(dir=Path(tempfile.mkdtemp(prefix="remote-move-lab-", dir="/var/tmp")), port=free_port(),
                     wheels_dir=LAB_WHEELS, name="movecluster", subnet="127.0.36.")
    try:
        lab.up(PLACEMENT, wheels=False)
        repo = lab.dir / "mv"
        repo.mkdir()
        (repo / "train.py").write_text(TRAIN)
        (repo / ".gitignore").write_text("out/\n")
        git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "toy"]):
            subprocess.run([*git, *args], check=True, capture_output=True)
        hosts = lab.dir / "hosts.yaml"
        hosts.write_text(lab.hosts_yaml({CT: None}) + SECTIONS.format(wheels=LAB_WHEELS, repo=repo))
        state = {"lab": lab, "hosts": hosts, "xdg": lab.dir / "state"}
        r = task(state, "deploy", "-c", str(CT), timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
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


def start_run(mv) -> str:
    r = task(mv, "train", "-c", str(CT), "--detach", "--fresh")
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = re.search(r"run (\S+) started", r.stdout + r.stderr).group(1)
    assert wait_until(lambda: "saved out/ckpt.pt at iter 6" in run_log(mv, run_id), timeout=180), run_log(mv, run_id)
    return run_id


def latest_run(mv) -> str:
    data = json.loads(task(mv, "status", "-c", str(CT), "--json").stdout)
    return data["containers"][0]["run"]["id"]


@pytest.mark.fault("remote move of a container with a live run to another node of its cluster", promise="the run is "
                   "save-stopped, the container migrated (pct migrate --restart) and runs on the new node, the run "
                   "continues there from its checkpoint (its log's first step > 0; its record names the run it "
                   "continues); every step timed")
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
    first = first_iter(run_log(mv, new))
    assert first is not None and first > 0, run_log(mv, new)
    assert f"saved out/ckpt.pt at iter {first - 1}" in run_log(mv, old)  # where the checkpoint was taken
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
                   "run, which continues from its checkpoint (its log's first step > 0)")
def test_a_drain_to_another_node_moves_each_container_and_continues_its_run(mv):
    lab = mv["lab"]
    node = lab.owner(CT)
    other = "pve1" if node == "pve2" else "pve2"
    run = latest_run(mv)
    assert wait_until(lambda: "saved out/ckpt.pt" in run_log(mv, run), timeout=120)
    r = task(mv, "host", "drain", node, "--to", other)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"container {CT} moved from {node} to {other}" in r.stdout, r.stdout
    new = re.search(rf"run (\S+) resumes run {run} on {other}", r.stdout).group(1)
    assert lab.owner(CT) == other
    assert wait_until(lambda: first_iter(run_log(mv, new)) is not None, timeout=120), run_log(mv, new)
    assert first_iter(run_log(mv, new)) > 0


@pytest.mark.fault("remote host drain without --to, the host rebooted (its containers stopped), remote host resume",
                   promise="drain save-stops the run and prints the command that resumes it; resume starts the "
                   "stopped container and the run continues from its checkpoint (its log's first step > 0)")
def test_a_drain_then_a_reboot_then_resume_continues_the_run(mv):
    lab = mv["lab"]
    node = lab.owner(CT)
    run = latest_run(mv)
    assert wait_until(lambda: "saved out/ckpt.pt" in run_log(mv, run), timeout=120)
    r = task(mv, "host", "drain", node)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"container {CT}: run {run} stopped, checkpoint {CKPT}" in r.stdout, r.stdout
    assert f"resume it with: remote train -c {CT} --resume" in r.stdout and f"remote host resume {node}" in r.stdout
    stop = lab.node(node).pct("stop", str(CT))  # the host's reboot: its containers stopped
    assert stop.returncode == 0, stop.stderr
    r = task(mv, "host", "resume", node)
    assert r.returncode == 0, r.stdout + r.stderr
    new = re.search(rf"container {CT}: run (\S+) resumed", r.stdout).group(1)
    assert wait_until(lambda: first_iter(run_log(mv, new)) is not None, timeout=120), run_log(mv, new)
    assert first_iter(run_log(mv, new)) > 0
    assert json.loads(in_ct(mv, f"cat /root/runs/{new}/manifest.json"))["parent"] == run
    again = task(mv, "host", "resume", node)  # the record is spent: nothing to resume, named
    assert again.returncode == 2 and f"no drain of host {node} to resume" in again.stderr, again.stderr
    task(mv, "stop", "-c", str(CT))
