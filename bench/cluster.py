"""Cluster benchmark (issue 32's goals), each side by side in one run:

1. `remote status` of 64 containers on 8 nodes of one cluster, over FakeCluster's counting transports
   (remote/lab/testing.py): SSH connections and round trips per node, next to the same 64 containers
   pinned to 8 unrelated hosts (what a cluster adds: the one guest-list read);
2. a container that moved: round trips of the first command after the move (the next command, and a move
   between the list read and the command) next to the same command on a container that did not move;
3. with --lab: `remote status` on a two-node lab cluster (remote/lab/cluster.py), 6 containers against 1,
   kept connections warm (a first status warms them), medians of --repeat runs taken alternately.

    python bench/cluster.py [--lab] [--repeat 5]     (--lab needs root and the lab's tools; ids 270-275)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from remote import config  # noqa: E402
from remote.api import Fleet  # noqa: E402
from remote.lab.testing import FakeCluster  # noqa: E402
from remote.transport.session import Session  # noqa: E402


def hosts_text(nodes: int, per_node: int, *, cluster: bool) -> str:
    lines = ["hosts:"]
    for n in range(nodes):
        lines.append(f"  pve{n + 1}: {{address: 10.0.0.{n + 1}" + (", cluster: c1}" if cluster else "}"))
    lines.append("containers:")
    for n in range(nodes):
        for i in range(per_node):
            ctid = 1000 + n * per_node + i
            lines.append(f"  {ctid}: {{cluster: c1}}" if cluster else f"  {ctid}: {{host: pve{n + 1}}}")
    return "\n".join(lines) + "\n"


def status_cost(nodes: int, per_node: int, *, cluster: bool, running: bool) -> dict:
    c = config.parse(yaml.safe_load(hosts_text(nodes, per_node, cluster=cluster)), "bench.yaml")
    placement = {ctid: f"pve{(ctid - 1000) // per_node + 1}" for ctid in c.containers}
    fake = FakeCluster(placement, running=None if running else set())
    fleet = Fleet(c, keep=False, transport=fake.transport)
    start = time.perf_counter()
    fleet.status()
    took = time.perf_counter() - start
    fleet.close()
    calls, conns = fake.calls(), fake.connections()
    pvesh = sum(1 for t in fake.transports.values() for a in t.calls if a[0].endswith("pvesh"))
    return {"cluster": cluster, "running": running, "nodes": nodes, "containers": nodes * per_node,
            "connections_per_node_max": max(conns.values()), "round_trips_per_node_max": max(calls.values()),
            "round_trips_total": sum(calls.values()), "guest_list_reads": pvesh, "seconds": round(took, 4)}


def moved_cost() -> dict:
    text = hosts_text(2, 1, cluster=True).replace("1000: {cluster: c1}", "1000: {host: pve1}")
    c = config.parse(yaml.safe_load(text), "bench.yaml")

    def one_command(fake: FakeCluster, move_after_list: bool = False) -> int:
        with Session(c, transport_factory=fake.transport) as s:
            ct = s.container(1000)  # the list read: the command's first round trip
            if move_after_list:
                fake.placement[1000] = "pve2"
            ct.run(["true"])
        return sum(fake.calls().values())

    still = one_command(FakeCluster({1000: "pve1", 1001: "pve2"}))
    moved = one_command(FakeCluster({1000: "pve2", 1001: "pve2"}))  # moved before this command
    racing = one_command(FakeCluster({1000: "pve1", 1001: "pve2"}), move_after_list=True)
    return {"unmoved": still, "moved_before_the_command": moved, "moved_after_the_list_read": racing,
            "extra_after_a_move": moved - still, "extra_when_moved_mid_command": racing - still}


def lab_status(repeat: int) -> dict:
    from remote.lab.cluster import ClusterLab

    placement = {270: "pve1", 271: "pve1", 272: "pve1", 273: "pve2", 274: "pve2", 275: "pve2"}
    d = Path(tempfile.mkdtemp(prefix="remote-bench-cluster-", dir="/var/tmp"))
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lab = ClusterLab(dir=d, port=port)
    hosts = d / "hosts.yaml"
    try:
        lab.up(placement, wheels=False)
        hosts.write_text(lab.hosts_yaml({c: None for c in placement}))
        env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT),
               "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="rt-", dir="/tmp")}

        def status(*args: str) -> float:
            start = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "status",
                                "--json", *args], env=env, capture_output=True, text=True, cwd=d)
            took = time.perf_counter() - start
            assert r.returncode == 0, r.stderr
            data = json.loads(r.stdout)
            assert len(data["containers"]) == (1 if args else 6), data
            return took

        status()  # the kept connections of both nodes, started
        one, six = [], []
        for _ in range(repeat):
            one.append(status("-c", "270"))
            six.append(status())
        m1, m6 = statistics.median(one), statistics.median(six)
        subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "disconnect"],
                       env=env, capture_output=True)
        return {"one_container_s": round(m1, 3), "six_containers_two_nodes_s": round(m6, 3),
                "ratio": round(m6 / m1, 2), "goal": "<= 2.5", "repeat": repeat}
    finally:
        lab.down(purge=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lab", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    out: dict = {"status_64_on_8": [status_cost(8, 8, cluster=cl, running=r) for r in (True, False)
                                    for cl in (True, False)],
                 "moved": moved_cost()}
    if args.lab:
        out["lab_status"] = lab_status(args.repeat)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
