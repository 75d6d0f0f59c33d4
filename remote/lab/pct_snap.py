"""The snapshot half of the pct double (remote/lab/pct_double.py): `pct snapshot`, `listsnapshot`, `delsnapshot`
and `rollback`, by Proxmox's rules and messages over each container's storage (the storages themselves, and
`pvesm`, are the double's). The lab installs it beside the double, which loads it on demand and sets `pct` to
itself: the double's settings and helpers are read through it. Imports nothing from `remote`; runs on the
system Python.
"""

import os
import re
import shutil
import subprocess
import time
from typing import Any

pct: Any = None  # the running double's module, set by its snap_side()


def snap_dir(vmid, name=None):
    base = os.path.join(pct.vol(vmid) or os.path.join(pct.LXC_PATH, vmid), "snapshots")
    return base if name is None else os.path.join(base, name)


def btrfs(*args):
    r = subprocess.run(["btrfs", *args], capture_output=True, text=True)
    if r.returncode != 0:
        pct.die(f"btrfs {' '.join(args[:2])} failed: {r.stderr.strip()}\n")


def snapshots(vmid):
    """name -> {"time": epoch, "description": text, "parent": name or None}."""
    import json

    found = {}
    base = snap_dir(vmid)
    for name in (os.listdir(base) if os.path.isdir(base) else []):
        try:
            with open(os.path.join(base, name, "meta.json")) as f:
                found[name] = json.load(f)
        except (OSError, ValueError):
            continue
    return found


def parent_of_current(vmid):
    try:
        with open(os.path.join(pct.LXC_PATH, vmid, "snapparent")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def set_parent(vmid, name):
    with open(os.path.join(pct.LXC_PATH, vmid, "snapparent"), "w") as f:
        f.write(name or "")


def snapname_of(positional):
    if len(positional) < 2:
        pct.param_error("snapname", "property is missing and it is not optional")
    name = positional[1]
    if len(name) > 40:
        pct.param_error("snapname", "value may only be 40 characters long")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        pct.param_error("snapname", f"invalid format - invalid configuration ID '{name}'")
    return name


def cmd_snapshot(opts, positional):
    import json

    vmid = pct.vmid_of(positional)
    name = snapname_of(positional)
    pct.require_conf(vmid)
    if name in pct.RESERVED:
        pct.die(f"unable to use snapshot name '{name}' (reserved name)\n")
    pct.check_quorum()
    pct.lock(vmid)
    if pct.STORAGES.get(pct.storage_of(vmid)) not in pct.SNAPSHOT_TYPES:
        pct.die("snapshot feature is not available\n")
    if name in snapshots(vmid):
        pct.die(f"snapshot name '{name}' already used\n")
    target = snap_dir(vmid, name)
    os.makedirs(target + ".partial", exist_ok=True)
    upper = pct.upper_of(vmid)
    if pct.vol(vmid):
        btrfs("subvolume", "snapshot", "-r", os.path.dirname(upper), os.path.join(target + ".partial", "layer"))
    elif os.path.isdir(upper):
        pct._copy_tree(upper, os.path.join(target + ".partial", "upper"))
    meta = {"time": int(time.time()), "description": opts.get("description"), "parent": parent_of_current(vmid)}
    with open(os.path.join(target + ".partial", "meta.json"), "w") as f:
        json.dump(meta, f)
    os.rename(target + ".partial", target)
    set_parent(vmid, name)


def cmd_listsnapshot(opts, positional):
    vmid = pct.vmid_of(positional)
    pct.require_conf(vmid)
    snaps = snapshots(vmid)
    current = parent_of_current(vmid)
    children: dict[str | None, list[str]] = {}
    for name, meta in sorted(snaps.items(), key=lambda kv: (kv[1].get("time", 0), kv[0])):
        children.setdefault(meta.get("parent") if meta.get("parent") in snaps else None, []).append(name)
    children.setdefault(current if current in snaps else None, []).append("current")
    width = max([len(n) for n in snaps] + [len("current")]) + 1

    def show(name, depth):
        pad = " " * depth
        if name == "current":
            print(f"{pad}`-> {'current':<{width - depth}}  You are here!")
            return
        meta = snaps[name]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(meta.get("time", 0)))
        text = (meta.get("description") or "no-description").splitlines()[0]
        print(f"{pad}`-> {name:<{width - depth}}  {when}  {text}")
        for child in children.get(name, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


def cmd_delsnapshot(opts, positional):
    vmid, name, snaps = _existing_snapshot(positional)
    for other, meta in snaps.items():  # its children now hang from its parent
        if meta.get("parent") == name:
            _set_meta_parent(vmid, other, snaps[name].get("parent"))
    if parent_of_current(vmid) == name:
        set_parent(vmid, snaps[name].get("parent"))
    for layer in ("layer", "upper"):
        _remove_layer(os.path.join(snap_dir(vmid, name), layer))
    shutil.rmtree(snap_dir(vmid, name))


def _existing_snapshot(positional):
    """`pct delsnapshot|rollback ID NAME`'s checks, in Proxmox's order: (vmid, name, the snapshots), locked."""
    vmid = pct.vmid_of(positional)
    name = snapname_of(positional)
    pct.require_conf(vmid)
    pct.check_quorum()
    pct.lock(vmid)
    snaps = snapshots(vmid)
    if name not in snaps:
        pct.die(f"snapshot '{name}' does not exist\n")
    return vmid, name, snaps


def _remove_layer(path):
    if os.path.isdir(path) and os.stat(path).st_ino == 256:  # a btrfs subvolume's root
        btrfs("subvolume", "delete", path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _set_meta_parent(vmid, name, parent):
    import json

    path = os.path.join(snap_dir(vmid, name), "meta.json")
    with open(path) as f:
        meta = json.load(f)
    meta["parent"] = parent
    with open(path, "w") as f:
        json.dump(meta, f)


def cmd_rollback(opts, positional):
    vmid, name, snaps = _existing_snapshot(positional)
    store = pct.storage_of(vmid)
    if pct.STORAGES.get(store) == "zfspool":  # zfs rolls back only to the most recent snapshot
        newest = max(snaps, key=lambda n: (snaps[n].get("time", 0), n))
        if newest != name:
            pct.die(f"can't rollback, '{name}' is not most recent snapshot on '{pct.rootfs_line(vmid).split()[1].split(',')[0]}'\n")
    if pct.state(vmid) == "running":  # a kill, not a shutdown
        if pct.BACKEND == "ns":
            pct.ns_stop(vmid)
        else:
            subprocess.run(["lxc-stop", "-P", pct.LXC_PATH, "-n", vmid, "-k"], capture_output=True)
    upper = pct.upper_of(vmid)
    if pct.vol(vmid):  # the whole subvolume (the layer and the overlay's work folder) from the snapshot's
        upper = os.path.dirname(upper)
        saved = os.path.join(snap_dir(vmid, name), "layer")
    else:
        saved = os.path.join(snap_dir(vmid, name), "upper")
    _remove_layer(upper + ".old")
    if os.path.isdir(upper):
        os.rename(upper, upper + ".old")
    if pct.vol(vmid):
        btrfs("subvolume", "snapshot", saved, upper)
    elif os.path.isdir(saved):
        pct._copy_tree(saved, upper)
    else:
        os.makedirs(upper)
    _remove_layer(upper + ".old")
    # A Proxmox container's /run is a tmpfs: no snapshot holds what was there, and it starts empty. The lab's
    # /run is in the writable layer, so it is emptied here (an operation lease or kept answer of the
    # moment the snapshot was taken is gone, as on a host).
    shutil.rmtree(os.path.join(pct.upper_of(vmid), "run"), ignore_errors=True)
    set_parent(vmid, name)
    if opts.get("start"):
        pct.make_side().start_backend(vmid)
