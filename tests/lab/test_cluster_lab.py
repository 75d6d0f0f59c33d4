"""Lab tier: a two-node Proxmox cluster (remote/lab/cluster.py: two sshd, two host keys, two pct nodes over
one shared config tree). Containers found by `cluster:` only, a stale `host:` hint, a node the hosts file
lacks, `pct migrate` with Proxmox's checks, a restart migration under a live run, quorum lost around a
deploy's snapshot, a two-node run stopped with --save and resumed at one step (and restarted as a whole). Each
task runs as the `remote` command does, in its own process.
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
PLACEMENT = {270: "pve1", 271: "pve2", 272: "pve2", 273: "pve1"}  # ids of this module's own

# An empty venv on purpose (nothing to download): deploy refuses one unless forced, so these deploys pass --force
# (no run is live at any of them).
SECTIONS = """
venv:
  packages: []
code:
  repo: {repo}
  path: /root/plain
train:
  command: python3 -c "import time; time.sleep(900)"
  run_dir: /root/runs
"""


def task(hosts: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=hosts.parent)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.fixture(scope="module")
def cl():
    from remote.lab.cluster import ClusterLab

    lab = ClusterLab(dir=Path(tempfile.mkdtemp(prefix="remote-cluster-lab-", dir="/var/tmp")), port=free_port(),
                     wheels_dir=LAB_WHEELS)
    (lab.lxc / "273").mkdir(parents=True)
    (lab.lxc / "273" / "storage").write_text("local-zfs\n")  # snapshots by copy: the quorum test takes them
    try:
        lab.up(PLACEMENT, wheels=False)
        yield lab
    finally:
        from remote.transport import keeper

        for f in lab.dir.glob("hosts*.yaml"):
            keeper.disconnect(str(f))
        lab.down(purge=True)


def hosts_file(cl, name: str, containers: dict, *, nodes=None, extra: str = "", **names) -> Path:
    path = cl.dir / name
    repo = cl.node("pve1").plain_repo()
    path.write_text(cl.hosts_yaml(containers, nodes=nodes, **names) + SECTIONS.format(repo=repo) + extra)
    return path


def test_pct_migrate_and_pvesh_answer_as_proxmox_does(cl):
    pve1, pve2 = cl.node("pve1"), cl.node("pve2")
    assert pve1.pct("exec", "271", "--", "true").stderr == "Configuration file 'nodes/pve1/lxc/271.conf' does not exist\n"
    r = cl.migrate(270, "pve2")
    assert r.returncode == 255 and r.stderr == "can't migrate running container without --online or --restart\n"
    r = cl.migrate(270, "pve2", "--online")
    assert r.returncode == 255 and "lxc live migration is currently not implemented" in r.stdout
    assert "target is local node." in cl.migrate(270, "pve1", "--restart").stderr
    assert cl.migrate(270, "pve9", "--restart").stderr == "no such cluster node 'pve9'\n"
    cl.set_quorum("pve1", False)
    try:
        assert cl.migrate(270, "pve2", "--restart").stderr == "cluster not ready - no quorum?\n"
        assert pve1.pct("snapshot", "270", "x").stderr == "cluster not ready - no quorum?\n"
        assert pve1.pct("exec", "270", "--", "true").returncode == 0  # exec needs no write to /etc/pve
    finally:
        cl.set_quorum("pve1", True)
    assert cl.owner(270) == "pve1" and pve1.pct("status", "270").stdout == "status: running\n"
    listed = json.loads(subprocess.run([str(pve2.dir / "bin" / "pvesh"), "get", "/cluster/resources", "--type", "vm",
                                        "--output-format", "json"], capture_output=True, text=True).stdout)
    assert {g["vmid"]: g["node"] for g in listed} == PLACEMENT
    vmlist = json.loads((cl.tree / ".vmlist").read_text())["ids"]
    assert {int(k): v["node"] for k, v in vmlist.items()} == PLACEMENT


def test_found_by_cluster_only_and_a_stale_hint_followed_with_one_line(cl):
    hosts = hosts_file(cl, "hosts-found.yaml", {270: None, 271: "pve1"})
    r = task(hosts, "exec", "-c", "270", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "lab270", r.stdout + r.stderr
    r = task(hosts, "exec", "-c", "271", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "lab271", r.stdout + r.stderr
    assert "271 is on pve2, not pve1 (the hosts file's host): using pve2" in r.stderr
    r = task(hosts, "status", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    where = {ctid: h["node"] for h in data["hosts"] for ctid in h["containers"]}
    assert where == {"270": "pve1", "271": "pve2"}, data
    assert {e["container"]: e["node"] for e in data["containers"]} == {270: "pve1", 271: "pve2"}
    cl.move_config(270, "pve2")  # an admin moving a config off a dead node (or HA recovery): found there
    try:
        r = task(hosts, "exec", "-c", "270", "--", "hostname")
        assert r.returncode == 0 and r.stdout.strip() == "lab270" and "is on" not in r.stderr, r.stdout + r.stderr
    finally:
        cl.move_config(270, "pve1")


def test_a_node_the_hosts_file_lacks_is_named_with_the_key_to_add(cl):
    hosts = hosts_file(cl, "hosts-one-node.yaml", {271: None}, nodes=("pve1",))
    r = task(hosts, "exec", "-c", "271", "--", "true")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "node pve2 of cluster 'labcluster'" in r.stderr and "`cluster: labcluster`" in r.stderr


@pytest.mark.fault("host entries not named after their nodes (an SSH alias pve1 for node pvelab)", "on the lab "
                   "cluster, entries gpu-a and gpu-b without node: keys: each node asked its name, the containers of "
                   "the other node found there; status names the real nodes")
def test_entries_not_named_after_their_nodes_learn_the_node_from_the_host(cl):
    hosts = hosts_file(cl, "hosts-aliases.yaml", {270: None, 271: "pve1"}, names={"pve1": "gpu-a", "pve2": "gpu-b"},
                       node_keys=False)
    assert "node:" not in hosts.read_text()
    r = task(hosts, "exec", "-c", "271", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "lab271", r.stdout + r.stderr
    assert "271 is on pve2, not pve1 (the hosts file's host): using gpu-b" in r.stderr, r.stderr
    r = task(hosts, "status", "--json")  # the second command: the names come from the kept connections
    assert r.returncode == 0, r.stdout + r.stderr
    from remote import config
    from remote.transport.keeper import KeptTransport

    entries = config.load(str(hosts)).hosts
    assert {n: (KeptTransport(entries[n], str(hosts)).info() or {}).get("remembered") for n in entries} == {
        "gpu-a": 1, "gpu-b": 1}  # each host's `uname -n`, kept by its keeper for the next command
    data = json.loads(r.stdout)
    assert {h["host"]: h["node"] for h in data["hosts"]} == {"gpu-a": "pve1", "gpu-b": "pve2"}, data
    assert {e["container"]: e["node"] for e in data["containers"]} == {270: "pve1", 271: "pve2"}


@pytest.mark.fault("a cluster node whose cluster service is down, or whose pvesh fails otherwise", "on the lab "
                   "cluster, pve1's pvesh failing as root with ipcc_send_rec's Connection refused: the guest list read "
                   "on pve2, the command goes on, no 'needs root'")
def test_a_node_whose_cluster_service_is_down_is_passed_over(cl):
    hosts = hosts_file(cl, "hosts-service.yaml", {271: "pve1"})
    cl.set_service("pve1", False)
    try:
        r = subprocess.run([str(cl.node("pve1").dir / "bin" / "pvesh"), "get", "/cluster/resources", "--type", "vm",
                            "--output-format", "json"], capture_output=True, text=True)
        assert r.returncode == 255 and "ipcc_send_rec[1] failed: Connection refused" in r.stderr, r.stderr
        r = task(hosts, "exec", "-c", "271", "--", "hostname")
        assert r.returncode == 0 and r.stdout.strip() == "lab271", r.stdout + r.stderr
        assert "needs root" not in r.stderr and "using pve2" in r.stderr, r.stderr
    finally:
        cl.set_service("pve1", True)


def test_a_restart_migration_under_a_live_run_is_reported_lost_on_the_new_node(cl):
    hosts = hosts_file(cl, "hosts-migrate.yaml", {272: "pve2"})
    r = task(hosts, "deploy", "-c", "272", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    r = task(hosts, "train", "-c", "272", "--detach")
    assert r.returncode == 0, r.stdout + r.stderr

    def alive() -> bool:
        d = json.loads(task(hosts, "status", "-c", "272", "--json").stdout)
        return bool(d["containers"] and (d["containers"][0].get("run") or {}).get("alive"))

    assert wait_until(alive, 60)
    m = cl.migrate(272, "pve1", "--restart")
    assert m.returncode == 0 and "migration finished successfully" in m.stdout, m.stdout + m.stderr
    r = task(hosts, "status", "-c", "272", "--json")
    data = json.loads(r.stdout)
    assert "272 is on pve1, not pve2 (the hosts file's host): using pve1" in r.stderr
    entry = data["containers"][0]
    assert entry["node"] == "pve1" and entry["run"]["alive"] is False and entry["run"]["lost"], entry
    assert entry["run"]["moved_from"] == "pve2", entry  # the migration named: the run started on pve2
    r = task(hosts, "status", "-c", "272")
    assert "LOST (no exit record: the container moved from node pve2 since it started" in r.stdout, r.stdout
    r = task(hosts, "deploy", "-c", "272", "--force")  # venv and checkout travelled with the rootfs: nothing to do
    assert r.returncode == 0 and "nothing to do, everything verified" in r.stdout, r.stdout + r.stderr


def test_quorum_lost_snapshot_always_refuses_auto_goes_on_and_exec_works(cl):
    always = hosts_file(cl, "hosts-always.yaml", {273: None}, extra="deploy:\n  snapshot: always\n")
    auto = hosts_file(cl, "hosts-auto.yaml", {273: None})
    cl.set_quorum("pve1", False)
    try:
        r = task(always, "deploy", "-c", "273", "--force")
        assert r.returncode == 1 and "no quorum" in r.stderr and "nothing was changed" in r.stderr, r.stdout + r.stderr
        assert task(always, "exec", "-c", "273", "--", "test", "-e", "/root/plain").returncode == 1  # nothing shipped
        r = task(auto, "deploy", "-c", "273", "--force")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no snapshot: the cluster has no quorum on node pve1" in r.stdout, r.stdout
        assert task(auto, "exec", "-c", "273", "--", "test", "-e", "/root/plain").returncode == 0
    finally:
        cl.set_quorum("pve1", True)


@pytest.mark.fault("an evacuation: several containers moved while one command or one open Fleet runs", "on the lab "
                   "cluster: an open Fleet's two containers of pve1, both restart-migrated to pve2, each found on "
                   "pve2 by its next host-side pct command (listsnapshot) and exec")
def test_an_evacuation_under_an_open_fleet_follows_every_moved_container(cl):
    from remote import api, config

    hosts = hosts_file(cl, "hosts-evacuate.yaml", {270: None, 273: None})
    fleet = api.Fleet(config.load(str(hosts)), keep=False)
    try:
        cts = [fleet.container(ctid) for ctid in (270, 273)]
        assert [ct.exec(["hostname"], job_env=False).out.strip() for ct in cts] == ["lab270", "lab273"]
        for ctid in (270, 273):  # HA evacuating pve1
            m = cl.migrate(ctid, "pve2", "--restart")
            assert m.returncode == 0, m.stdout + m.stderr
        # Host-side pct commands (listsnapshot) through each container's handle, made when both were on pve1.
        assert [isinstance(ct.snapshots(), list) for ct in cts] == [True, True]
        assert [ct.exec(["hostname"], job_env=False).out.strip() for ct in cts] == ["lab270", "lab273"]
    finally:
        fleet.close()
        for ctid in (270, 273):
            if cl.owner(ctid) != "pve1":
                cl.migrate(ctid, "pve1", "--restart")


def test_init_on_a_cluster_node_writes_every_node_and_container(cl):
    out = cl.dir / "hosts-init.yaml"
    r = task(out, "init", "--address", cl.ip("pve1"), "--port", str(cl.port), "--key-file", str(cl.key_file),
             "--known-hosts", str(cl.known_hosts), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    from remote import config

    c = config.load(str(out))
    assert {h.node_name: (h.address, h.cluster) for h in c.hosts.values()} == {
        "pve1": (cl.ip("pve1"), "labcluster"), "pve2": (cl.ip("pve2"), "labcluster")}
    assert {ctid: s.host.node_name for ctid, s in c.containers.items()} == {ctid: cl.owner(ctid) for ctid in PLACEMENT}
    r = task(out, "exec", "-c", "271", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "lab271" and "is on" not in r.stderr, r.stdout + r.stderr


PLANT = """import json, sys
path = "/root/venv/remote-venv.json"
record = json.load(open(path))
record["verify"]["dists"]["nvidia-nccl-cu12"] = sys.argv[1]
json.dump(record, open(path, "w"))
"""


def test_a_multi_node_launch_across_nodes_is_refused_on_a_planted_nccl_difference(cl):
    hosts = hosts_file(cl, "hosts-gate.yaml", {270: None, 271: None})
    r = task(hosts, "deploy", "-c", "270,271", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    for ctid, version in ((270, "2.26.2"), (271, "2.21.5")):  # what two venvs built apart can hold
        assert task(hosts, "exec", "-c", str(ctid), "--", "python3", "-c", PLANT, version).returncode == 0
    r = task(hosts, "train", "-c", "270,271", "--detach")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing was started" in r.stderr
    assert "NCCL: nvidia-nccl-cu12 2.26.2 on 270 (pve1); nvidia-nccl-cu12 2.21.5 on 271 (pve2)" in r.stderr, r.stderr
    runs = task(hosts, "exec", "-c", "271", "--", "sh", "-c", "ls /root/runs 2>/dev/null | wc -l")
    assert runs.stdout.strip() == "0", runs.stdout


def test_create_on_any_node_checks_the_whole_cluster(cl):
    """Issue 37 item 4: a CT id is unique in the cluster (Proxmox's words name the node that has it); a container
    made on pve2 is pve2's (the shared tree and .vmlist say so), and destroyed there it is gone from the list."""
    pve1, pve2 = cl.node("pve1"), cl.node("pve2")
    r = pve2.pct("create", "270", pve2.template)
    assert r.returncode == 255 and r.stderr == "unable to create CT 270 - CT 270 already exists on node 'pve1'\n"
    assert pve2.pct("create", "274", pve2.template, "--hostname", "made-on-pve2").returncode == 0
    try:
        assert cl.owner(274) == "pve2" and (cl.tree / "nodes" / "pve2" / "lxc" / "274.conf").exists()
        assert json.loads((cl.tree / ".vmlist").read_text())["ids"]["274"]["node"] == "pve2"
        assert pve1.pct("create", "274", pve1.template).stderr == \
            "unable to create CT 274 - CT 274 already exists on node 'pve2'\n"
        assert pve1.pct("status", "274").stderr == "Configuration file 'nodes/pve1/lxc/274.conf' does not exist\n"
    finally:
        assert pve2.pct("destroy", "274").returncode == 0
    assert cl.owner(274) is None and "274" not in json.loads((cl.tree / ".vmlist").read_text())["ids"]


# A two-rank job without torch (the lab's venv is empty): it counts steps, prints `iter N`, saves a torch.save-shaped
# zip (archive/data.pkl holding iter_num) every 5 steps and at once on SIGUSR1, atomically; rank 0 only unless
# --all saves; --resume starts at the checkpoint's step; --max N ends at step N; rank 1 dies (exit 3) at step 9
# once where /root/die-once is. What DDP code such as nanoGPT does, step for step.
FAKE_DDP = r"""import io, os, pickle, signal, sys, time, zipfile
rank, out = int(sys.argv[1]), "/root/out"
last = int(sys.argv[sys.argv.index("--max") + 1]) if "--max" in sys.argv else 100000
path, asked = out + "/ckpt.pt", []
signal.signal(signal.SIGUSR1, lambda *a: asked.append(1))
step = 0
if "--resume" in sys.argv:
    with zipfile.ZipFile(path) as z:
        step = pickle.loads(z.read("archive/data.pkl"))["iter_num"]
    print(f"rank {rank} resumed at iter {step}", flush=True)
def save(i):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"iter_num": i}, protocol=2))
    os.makedirs(out, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(buf.getvalue())
    os.replace(path + ".tmp", path)
while step < last:
    step += 1
    time.sleep(0.2)
    print(f"iter {step}", flush=True)
    if rank == 1 and step == 9 and os.path.exists("/root/die-once"):
        os.unlink("/root/die-once")
        sys.exit(3)
    if (rank == 0 or "--all" in sys.argv) and (step % 5 == 0 or asked):
        save(step)
        asked.clear()
"""

RESUMABLE = """venv:
  packages: []
code:
  repo: {repo}
  path: /root/plain
train:
  command: python3 /root/fake_ddp.py {{node_rank}}{args}
  run_dir: /root/runs
  restarts: {restarts}
  checkpoint:
    path: /root/out/ckpt.pt
    resume: --resume
    signal: USR1
    grace: 30
"""


PLANT_STEP = r"""import io, json, os, pickle, sys, time, zipfile
path, step = sys.argv[1], int(sys.argv[2])
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({"iter_num": step}, protocol=2))
os.makedirs(os.path.dirname(path), exist_ok=True)
open(path, "wb").write(buf.getvalue())
when = time.time() - 60 + step  # a later step, a later file
os.utime(path, (when, when))
if len(sys.argv) > 3:  # the watch's kept copy of /root/out/ckpt.pt: its record beside it
    meta = {"source": sys.argv[3], "mtime": when, "size": len(buf.getvalue()), "step": step}
    json.dump(meta, open(path + ".json", "w"))
"""


def plant(hosts: Path, ctid: int, step: int, *, kept: bool = False) -> None:
    """A checkpoint of the node's own at `step`, as FAKE_DDP saves it (kept: as the watch keeps a copy of it)."""
    args = ("/root/runs/.checkpoints/ckpt.pt", str(step), "/root/out/ckpt.pt") if kept else \
        ("/root/out/ckpt.pt", str(step))
    r = task(hosts, "exec", "-c", str(ctid), "--", "python3", "-c", PLANT_STEP, *args)
    assert r.returncode == 0, r.stderr


@pytest.mark.fault("stop --save of a multi-node run, then train --resume over its nodes (no shared storage)",
                   promise="on the lab cluster, 2 nodes where rank 0 saves: stop --save asks every rank, stops both "
                           "and names the step; the resume gives node 271 the master's checkpoint (verified) and "
                           "both ranks' logs start at that same step; a plain train is refused naming both flags")
@pytest.mark.fault("A multi-node run's nodes hold checkpoints of different steps (no step in common)",
                   promise="on the lab cluster: train -c 270,271 --resume refused (exit 2) naming each node's step; "
                           "nothing started")
@pytest.mark.fault("A multi-node run whose nodes each save their own checkpoint, one node's newest torn or missing",
                   promise="on the lab cluster: 270 at step 25 (kept copy 20), 271 at 20: --resume brings 270 to 20 "
                           "(its 25 renamed aside, the kept copy put back) and both ranks' logs start at 20")
@pytest.mark.fault("A rank of a multi-node run with train.restarts dies (exit 3)",
                   promise="on the lab cluster, followed: every node stopped, then the run restarted as a whole, both "
                           "ranks at the master's checkpoint's step (its log's first line says so on each node), to "
                           "its end; --fresh moved the old checkpoints aside first")
def test_a_multi_node_run_stops_with_save_and_resumes_every_rank_at_one_step(cl):
    hosts = cl.dir / "hosts-resume.yaml"
    hosts.write_text(cl.hosts_yaml({270: None, 271: None}) + RESUMABLE.format(repo=cl.node("pve1").plain_repo(),
                                                                                  args="", restarts=0))
    r = task(hosts, "deploy", "-c", "270,271", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    for ctid in (270, 271):  # one NCCL on both (the gate test planted two), the job, no checkpoint yet
        assert task(hosts, "exec", "-c", str(ctid), "--", "python3", "-c", PLANT, "2.26.2").returncode == 0
        w = task(hosts, "exec", "-c", str(ctid), "--", "python3", "-c",
                 "import sys, shutil; open('/root/fake_ddp.py', 'w').write(sys.argv[1]); "
                 "shutil.rmtree('/root/out', ignore_errors=True)", FAKE_DDP)
        assert w.returncode == 0, w.stderr

    def log(ctid: int) -> str:  # the latest run's log as the container has it (cheaper than `remote logs`)
        return task(hosts, "exec", "-c", str(ctid), "--", "sh", "-c",
                    "cat /root/runs/$(ls -t /root/runs | grep -v '^\\.' | head -1)/log").stdout

    try:
        r = task(hosts, "train", "-c", "270,271", "--detach")
        assert r.returncode == 0, r.stdout + r.stderr
        assert wait_until(lambda: "iter 7\n" in log(270) and "iter 7\n" in log(271), 90)
        began = time.monotonic()
        r = task(hosts, "stop", "-c", "270,271", "--save")
        assert r.returncode == 0, r.stdout + r.stderr
        assert time.monotonic() - began < 25, "271 never saves: its wait must end with the master's (grace 30)"
        m = re.search(r"every rank resumes at step (\d+) from the master's checkpoint", r.stdout + r.stderr)
        assert m, r.stdout + r.stderr
        step = int(m.group(1))
        assert step >= 7 and "node 270: run" in r.stdout and "saved checkpoint /root/out/ckpt.pt" in r.stdout
        assert "271: log at step" in r.stdout + r.stderr, r.stdout
        r = task(hosts, "train", "-c", "270,271", "--detach")  # a new run would overwrite the checkpoint
        assert r.returncode == 2 and "--resume" in r.stderr and "--fresh" in r.stderr, r.stdout + r.stderr
        r = task(hosts, "train", "-c", "270,271", "--resume", "--dry")  # says the copy, makes none
        assert r.returncode == 0 and "pulled here, pushed to /root/out/ckpt.pt.remote-tmp-copy" in r.stdout, \
            r.stdout + r.stderr
        assert task(hosts, "exec", "-c", "271", "--", "test", "-e", "/root/out/ckpt.pt").returncode == 1
        r = task(hosts, "train", "-c", "270,271", "--resume", "--detach")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"every rank resumes at step {step}: the master's checkpoint, given to 271" in r.stdout + r.stderr
        assert "copied and verified" in r.stdout + r.stderr
        assert wait_until(lambda: f"rank 0 resumed at iter {step}\n" in log(270)
                          and f"rank 1 resumed at iter {step}\n" in log(271), 60), (log(270), log(271))
        latest = "cat /root/runs/$(ls -t /root/runs | grep -v '^\\.' | head -1)/manifest.json"
        manifest = json.loads(task(hosts, "exec", "-c", "271", "--", "sh", "-c", latest).stdout)
        assert manifest["checkpoint"]["step"] == step and manifest["parent"], manifest
        assert task(hosts, "stop", "-c", "270").returncode == 0  # a multi-node run: every node stopped
        # 271 now holds a checkpoint of its own at another step: which saves is unclear, no common step
        plant(hosts, 271, 3)
        r = task(hosts, "train", "-c", "270,271", "--resume", "--detach")
        assert r.returncode == 2, r.stdout + r.stderr
        assert re.search(r"271 \(node rank 1\): step [\d, ]*\b3\)", r.stderr), r.stderr  # 3, and the copy's kept
        assert "270 (node rank 0): step" in r.stderr, r.stderr
        assert "no step in common" in r.stderr
        # train.restarts: rank 1 dies once; the run restarts as a whole, both ranks at the master's step
        again = cl.dir / "hosts-restart.yaml"
        again.write_text(cl.hosts_yaml({270: None, 271: None}) + RESUMABLE.format(
            repo=cl.node("pve1").plain_repo(), args=" --max 16", restarts=1))
        assert task(hosts, "exec", "-c", "271", "--", "touch", "/root/die-once").returncode == 0
        r = task(again, "train", "-c", "270,271", "--fresh")  # followed: the controller restarts it
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert "moved aside to /root/out/ckpt.pt.old-" in out and "restart 1 of 1, every node from" in out, out
        m = re.search(r"every rank resumes at step (\d+): the master's checkpoint, given to 271", out)
        assert m and f"rank 0 resumed at iter {m.group(1)}" in out and f"rank 1 resumed at iter {m.group(1)}" in out
        assert "iter 16" in log(270) and "iter 16" in log(271)
        # every node its own: 270 at step 25 (its kept copy at 20), 271 at 20: both brought to 20, 270's 25 aside
        plant(hosts, 270, 20, kept=True)
        plant(hosts, 270, 25)
        plant(hosts, 271, 20)
        r = task(hosts, "train", "-c", "270,271", "--resume", "--detach")
        out = r.stdout + r.stderr
        assert r.returncode == 0 and "every rank resumes at step 20: each node's own at that step" in out, out
        assert "newer than the run's common step 20: moved aside to /root/out/ckpt.pt.old-" in out, out
        assert wait_until(lambda: "rank 0 resumed at iter 20\n" in log(270) and "rank 1 resumed at iter 20\n"
                          in log(271), 60), (log(270), log(271))
    finally:
        task(hosts, "stop", "-c", "270,271")
