"""The cluster half of the pct double (remote/lab/pct_double.py): `pct migrate` and `pvesh get`, over the
shared config tree of a lab cluster (remote/lab/cluster.py). The lab installs it beside the double, which
loads it on demand and sets `pct` to itself: everything here reads the double's settings and helpers
through it. Imports nothing from `remote`; runs on the system Python.

The double's CLUSTER_DIR is the shared tree every node's double reads, as pmxcfs's /etc/pve on each node:
  nodes/<node>/lxc/<vmid>.conf   the container's config: the node whose folder holds it owns it
  .vmlist                        {"version": N, "ids": {"<vmid>": {"node", "type": "lxc", "version"}}}
  .members                       {"cluster": {"name", "nodes", "quorate", "version"}, "nodelist": {<node>: {"id", "online", "ip"}}}
  .noquorum-<node>               the lab's quorum switch: that node is cut off (no writes to /etc/pve)
  .nocluster-<node>              that node's cluster service is down: its pvesh fails (ipcc_send_rec ... refused)
"""

import os
import subprocess
import sys
import time
from typing import Any

pct: Any = None  # the running double's module, set by its cluster_side()


def quorate(node=None):
    return not pct.CLUSTER_DIR or not os.path.exists(os.path.join(pct.CLUSTER_DIR, f".noquorum-{node or pct.NODE}"))


def service_up(node=None):
    """Whether this node's cluster service (pve-cluster, pmxcfs) runs: the lab's switch is .nocluster-<node>."""
    return not pct.CLUSTER_DIR or not os.path.exists(os.path.join(pct.CLUSTER_DIR, f".nocluster-{node or pct.NODE}"))


def members():
    import json

    if not pct.CLUSTER_DIR:  # a node of its own: no cluster, itself its only node
        return {"nodelist": {pct.NODE: {"id": 0, "online": 1, "ip": "127.0.0.1"}}}
    try:
        with open(os.path.join(pct.CLUSTER_DIR, ".members")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"cluster": {"name": "", "nodes": 0, "quorate": 0, "version": 0}, "nodelist": {}}


def guests():
    """vmid -> owning node, from the tree (what pmxcfs's .vmlist says)."""
    if not pct.CLUSTER_DIR:
        return {d: pct.NODE for d in (os.listdir(pct.LXC_PATH) if os.path.isdir(pct.LXC_PATH) else []) if d.isdigit() and pct.conf_exists(d)}
    found = {}
    base = os.path.join(pct.CLUSTER_DIR, "nodes")
    for node in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        folder = os.path.join(base, node, "lxc")
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            if name.endswith(".conf") and name[:-5].isdigit():
                found[name[:-5]] = node
    return found


def write_vmlist():
    """The cluster-wide .vmlist, rewritten whole (atomically) after every change of owner."""
    import json

    path = os.path.join(pct.CLUSTER_DIR, ".vmlist")
    try:
        with open(path) as f:
            version = int(json.load(f).get("version", 0)) + 1
    except (OSError, ValueError):
        version = 1
    data = {"version": version, "ids": {vmid: {"node": node, "type": "lxc", "version": version}
                                        for vmid, node in sorted(guests().items(), key=lambda kv: int(kv[0]))}}
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def stamp(text):
    sys.stdout.write(time.strftime("%Y-%m-%d %H:%M:%S ") + text + "\n")
    sys.stdout.flush()


def cmd_migrate(opts, positional):
    """`pct migrate <vmid> <target> [--restart] [--online] [--timeout N]`: API2/LXC.pm's migrate_vm checks
    (local target, quorum, target node, config, running without --online/--restart), then
    PVE::LXC::Migrate (live migration refused; --restart: shut down, move the config, start on the target).
    The rootfs is shared in the lab (one pct.LXC_PATH): it travels, as on shared storage or after a copy."""
    if len(positional) < 2:
        pct.param_error("target", "property is missing and it is not optional")
    vmid, target = pct.vmid_of(positional), positional[1]
    if not pct.CLUSTER_DIR:
        pct.die("you can't migrate a container on a single node (no cluster)\n")
    if target == pct.NODE:
        pct.param_error("target", "target is local node.")
    pct.check_quorum()
    nodelist = members().get("nodelist", {})
    if target not in nodelist:
        pct.die(f"no such cluster node '{target}'\n")
    pct.require_conf(vmid)
    running = pct.state(vmid) == "running"
    if running and not opts.get("online") and not opts.get("restart"):
        pct.die("can't migrate running container without --online or --restart\n")
    started = time.monotonic()

    def abort(message):
        took = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - started))
        stamp(f"ERROR: {message}")
        stamp(f"ERROR: migration aborted (duration {took}): {message}")
        pct.die("migration aborted\n")

    if running and opts.get("online"):
        abort("lxc live migration is currently not implemented")
    if not nodelist[target].get("online", 1):
        abort(f"migration aborted: node '{target}' is not online")
    pct.lock(vmid)
    if running:
        stamp(f"shutdown CT {vmid}")
        if pct.BACKEND == "ns":
            pct.ns_stop(vmid)
        else:
            subprocess.run(["lxc-stop", "-P", pct.LXC_PATH, "-n", vmid, "-k"], capture_output=True)
    ip = nodelist[target].get("ip", "")
    stamp(f"starting migration of CT {vmid} to node '{target}' ({ip})")
    dest = pct.cluster_conf(vmid, target)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.rename(pct.cluster_conf(vmid), dest)  # pmxcfs's rename: the owner changes in one step
    write_vmlist()
    if running:
        stamp("start container on target node")
        r = pct.ns_start(vmid) if pct.BACKEND == "ns" else subprocess.run(["lxc-start", "-P", pct.LXC_PATH, "-n", vmid],
                                                                  capture_output=True, text=True)
        if r.returncode != 0:
            abort(f"startup for container '{vmid}' failed on {target}: {r.stderr.strip()}")
    took = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - started))
    stamp(f"migration finished successfully (duration {took})")


def pvesh(argv):
    """`pvesh get /cluster/resources [--type vm|lxc|node] --output-format json` and `pvesh get /cluster/status
    --output-format json`, as root (pvesh reads the access control list first)."""
    import json

    if os.geteuid() != 0:
        pct.die("Unable to load access control list: Permission denied\n")
    if not service_up():  # pmxcfs down on this node: pvesh's IPC to it fails, as root too
        pct.die("".join(f"ipcc_send_rec[{i}] failed: Connection refused\n" for i in (1, 2, 3)) +
                "Unable to load access control list: Connection refused\n")
    if len(argv) < 2 or argv[0] != "get":
        pct.die("ERROR: unknown command 'pvesh " + " ".join(argv[:1]) + "'\nUSAGE: pvesh <COMMAND> [ARGS] [OPTIONS]\n")
    path, opts, rest = argv[1].rstrip("/"), {}, argv[2:]
    while rest:
        name = rest[0].lstrip("-")
        if name not in ("type", "output-format") or len(rest) < 2:
            pct.die(f"Unknown option: {name}\n400 unable to parse option\n")
        opts[name], rest = rest[1], rest[2:]
    info = members()
    if path == "/cluster/resources":
        kind = opts.get("type")
        if kind not in (None, "vm", "lxc", "qemu", "node", "storage", "sdn", "pool"):
            pct.die(f"400 Parameter verification failed.\ntype: value '{kind}' does not have a value in the enumeration "
                "'vm, storage, node, sdn, pool'\n")
        data = []
        if kind in (None, "node"):
            for node, n in sorted(info.get("nodelist", {}).items()):
                data.append({"id": f"node/{node}", "type": "node", "node": node,
                             "status": "online" if n.get("online", 1) else "offline"})
        if kind in (None, "vm", "lxc"):
            for vmid, node in sorted(guests().items(), key=lambda kv: int(kv[0])):
                online = info.get("nodelist", {}).get(node, {}).get("online", 1)
                running = online and pct.state(vmid) == "running"
                data.append({"id": f"lxc/{vmid}", "type": "lxc", "vmid": int(vmid), "node": node, "name": f"lab{vmid}",
                             "status": ("running" if running else "stopped") if online else "unknown",
                             "template": 0, "maxmem": 1 << 30, "maxcpu": 2})
    elif path == "/cluster/status":
        cluster = info.get("cluster")
        data = [{"type": "cluster", "id": "cluster", "name": cluster.get("name", ""),
                 "nodes": len(info.get("nodelist", {})), "quorate": 1 if quorate() else 0,
                 "version": cluster.get("version", 1)}] if cluster else []  # a node of its own: no cluster entry
        for node, n in sorted(info.get("nodelist", {}).items(), key=lambda kv: kv[1].get("id", 0)):
            data.append({"type": "node", "id": f"node/{node}", "name": node, "ip": n.get("ip", ""),
                         "nodeid": n.get("id", 0), "online": n.get("online", 1), "local": 1 if node == pct.NODE else 0,
                         "level": ""})
    else:
        pct.die(f"No '{argv[0]}' handler defined for '{path}'\n")
    if opts.get("output-format", "text") not in ("json", "json-pretty"):
        for row in data:
            print("  ".join(f"{k}={v}" for k, v in row.items()))
        return
    print(json.dumps(data, indent=1 if opts.get("output-format") == "json-pretty" else None))
