"""The making half of the pct double (remote/lab/pct_double.py): `pct create`, `clone`, `set`, `template`,
`destroy`, `pveam list`, and what `pct start` does with a config's devN and mpN keys. The lab installs it beside
the double, which loads it on demand and sets `pct` to itself: the double's settings and helpers are read
through it. Imports nothing from `remote`; runs on the system Python (the lab also imports it, for
lxc_base_config and INIT_SOURCE, which use nothing of `pct`).
"""

import os
import re
import shutil
import stat
import subprocess
import sys
from typing import Any

pct: Any = None  # the running double's module, set by its make_side()

# -- making containers: create, clone, set, destroy, template; pveam list --------------------------------------
# A container the double makes is made as the lab makes its own: this machine's root as its read-only lower
# layer and <LXC_PATH>/<vmid>/upper for what it writes (so python3 and git are there whatever the template),
# started by the backend's own means. The template volume must exist all the same: `STORAGE:vztmpl/NAME` is
# <STORAGE_DIR>/<STORAGE>/template/cache/NAME (what `pveam download` fetches; the lab puts one there; its
# content is not read). The Proxmox config is written as Proxmox writes /etc/pve/lxc/<vmid>.conf: the
# description as `#` lines, keys sorted, raw `lxc.*` keys last, snapshot sections after; never a cgroup-v1
# key. Options are checked as pve-container 6.x checks them, in its order: the schema (400), the permission
# (403: devN and bind mount points only for root@pam; pct over SSH is root@pam, as on a host; the lab's
# REMOTE_LAB_PVE_USER stands for another caller, an API token's), the id, the storages, the template, devices.
# At every start (pct start) the devN and mpN keys are applied (devices and bind mounts, below); a pending
# change of a running container takes effect at its next start (Proxmox's [pve:pending] is not modelled).

TEMPLATE_STORAGES = {"local", "nfs-share"}  # the storages with content vztmpl
OSTYPES = ("debian", "devuan", "ubuntu", "centos", "fedora", "opensuse", "archlinux", "alpine", "gentoo", "nixos",
           "unmanaged")
ARCHES = ("amd64", "i386", "arm64", "armhf", "riscv32", "riscv64")
FEATURES = ("force_rw_sys", "fuse", "keyctl", "mknod", "mount", "nesting")
DEV_KEYS = ("path", "deny-write", "gid", "mode", "uid")
MP_KEYS = ("volume", "acl", "backup", "mountoptions", "mp", "quota", "replicate", "ro", "shared", "size")
MAX_INDEX = {"dev": 256, "mp": 256, "net": 32}
PASSTHROUGH_MARK = "# pct start: devN and mpN of the Proxmox config (regenerated at every start)"  # memory too
INIT_SOURCE = """import os, signal, time
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
signal.signal(signal.SIGPWR, lambda *a: os._exit(0))
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""


def authuser():
    return os.environ.get("REMOTE_LAB_PVE_USER") or "root@pam"


def gpu_sysroot():
    """The root every devN path is read under (a fake NVIDIA driver's, remote/lab/fakegpu.py); "" on a host."""
    return os.environ.get("REMOTE_GPU_SYSROOT", pct.GPU_SYSROOT).rstrip("/")


def host_path(path):
    return gpu_sysroot() + path


def parse_conf(text):
    """(keys, raw lxc.* pairs, description lines, the sections after the current one) of a Proxmox config."""
    keys: dict[str, str] = {}
    raw: list[tuple[str, str]] = []
    desc: list[str] = []
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("["):
            return keys, raw, desc, "".join(lines[i:])
        if line.startswith("#"):
            desc.append(line[1:].rstrip("\n"))
            continue
        key, sep, value = line.partition(":")
        if sep:
            (raw.append((key.strip(), value.strip())) if key.strip().startswith("lxc.")
             else keys.__setitem__(key.strip(), value.strip()))
    return keys, raw, desc, ""


def read_conf(vmid):
    try:
        with open(pct.pve_conf(vmid)) as f:
            return parse_conf(f.read())
    except FileNotFoundError:
        return {}, [], [], ""


def conf_text(keys, raw=(), desc=(), rest=""):
    text = "".join(f"#{d}\n" for d in desc) + "".join(f"{k}: {keys[k]}\n" for k in sorted(keys))
    text += "".join(f"{k}: {v}\n" for k, v in raw)
    return text + ("\n" + rest.lstrip("\n") if rest else "")


def write_file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def props(key, value, default_key, allowed):
    """A property string (`/dev/nvidia0,gid=44`) as a dict, or pve's 400."""
    found = {}
    for part in value.split(","):
        name, eq, v = part.partition("=")
        if not eq:
            name, v = default_key, part
        if name not in allowed:
            pct.param_error(key, f"invalid format - format error\n{key}.{name}: property is not defined in schema and "
                             "the schema does not allow additional properties")
        if name in found:
            pct.param_error(key, f"invalid format - duplicate key in comma-separated list property: {name}")
        found[name] = v
    return found


def prop_string(found, default_key):
    """As pve's print_property_string: the default key's value first, the others sorted."""
    return ",".join([found[default_key]] + [f"{k}={found[k]}" for k in sorted(found) if k != default_key])


def integer(key, value, lo=None, hi=None):
    if not re.fullmatch(r"-?\d+", value):
        pct.param_error(key, f"type check ('integer') failed - got '{value}'")
    if lo is not None and int(value) < lo:
        pct.param_error(key, f"value must have a minimum value of {lo}")
    if hi is not None and int(value) > hi:
        pct.param_error(key, f"value must have a maximum value of {hi}")
    return str(int(value))


def boolean(key, value):
    if value not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        pct.param_error(key, f"type check ('boolean') failed - got '{value}'")
    return "1" if value in ("1", "true", "yes", "on") else "0"


def dev_value(key, value):
    found = props(key, value, "path", DEV_KEYS)
    path = found.get("path")
    if not path:
        pct.param_error(key, f"invalid format - format error\n{key}.path: property is missing and it is not optional")
    if not path.startswith("/dev/") or re.search(r"/\.\.?(/|$)", path):
        pct.param_error(key, f"invalid format - {path} is not a valid device path")
    for name in ("gid", "uid"):
        if name in found:
            found[name] = integer(f"{key}.{name}", found[name], 0)
    if "mode" in found and not re.fullmatch(r"0?[0-7]{3}", found["mode"]):
        pct.param_error(key, f"invalid format - format error\n{key}.mode: value does not match the regex pattern")
    if "deny-write" in found:
        found["deny-write"] = boolean(f"{key}.deny-write", found["deny-write"])
    return prop_string(found, "path")


def mp_value(key, value):
    found = props(key, value, "volume", MP_KEYS)
    for name in ("volume", "mp"):
        if not found.get(name):
            pct.param_error(key, f"invalid format - format error\n{key}.{name}: property is missing and it is not optional")
    if not found["mp"].startswith("/") or re.search(r"/\.\.?(/|$)", found["mp"]) or found["mp"] == "/":
        pct.param_error(key, f"invalid format - format error\n{key}.mp: invalid format - invalid path: {found['mp']}")
    for name in ("ro", "backup", "acl", "quota", "replicate", "shared"):
        if name in found:
            found[name] = boolean(f"{key}.{name}", found[name])
    return prop_string(found, "volume")


def option_value(key, value):
    """A create/set option's value as Proxmox writes it to the config, or its 400."""
    indexed = pct.INDEXED.fullmatch(key)
    if indexed and int(indexed.group(2)) >= MAX_INDEX[indexed.group(1)]:
        pct.die(f"Unknown option: {key}\n400 unable to parse option\n" + pct.USAGE)
    if key == "cores":
        return integer(key, value, 1, 8192)
    if key == "memory":
        return integer(key, value, 16)
    if key == "swap":
        return integer(key, value, 0)
    if key in ("onboot", "protection", "unprivileged"):
        return boolean(key, value)
    if key == "hostname":
        if not re.fullmatch(r"(?=.{1,255}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*", value):
            pct.param_error(key, "invalid format - value does not look like a valid DNS name")
        return value
    if key in ("ostype", "arch"):
        allowed = OSTYPES if key == "ostype" else ARCHES
        if value not in allowed:
            pct.param_error(key, f"value '{value}' does not have a value in the enumeration '{', '.join(allowed)}'")
        return value
    if key == "features":
        found = props(key, value, "nesting", FEATURES)
        return ",".join(f"{k}={boolean(f'{key}.{k}', v)}" for k, v in sorted(found.items()))
    if indexed and indexed.group(1) == "dev":
        return dev_value(key, value)
    if indexed and indexed.group(1) == "mp":
        return mp_value(key, value)
    if indexed and indexed.group(1) == "net" and "name=" not in value:
        pct.param_error(key, f"invalid format - format error\n{key}.name: property is missing and it is not optional")
    return value


CREATE_ONLY = ("storage", "password", "ssh-public-keys", "start", "force", "rootfs")


def config_options(opts, deleting=()):
    """The config keys a create or set gives (validated, as written), after pve's permission check."""
    keys = {k: v if isinstance(v, str) else ("1" if v else "0") for k, v in opts.items() if k not in CREATE_ONLY}
    keys = {k: option_value(k, v) for k, v in keys.items()}
    if authuser() != "root@pam":
        for key in [*keys, *deleting]:
            if key.startswith("dev") and pct.INDEXED.fullmatch(key):
                pct.die("403 Permission check failed (configuring device passthrough is only allowed for root@pam)\n")
            if key.startswith("mp") and pct.INDEXED.fullmatch(key) and keys.get(key, "").startswith("/"):
                pct.die("403 Permission check failed (mount point type bind is only allowed for root@pam)\n")
    return keys


def check_devices(keys):
    """Every devN's device exists on the host (under the GPU sysroot where one is set) and is one."""
    for key in sorted(keys):
        if key.startswith("dev") and pct.INDEXED.fullmatch(key):
            device_stat(keys[key].split(",")[0])


def device_stat(path):
    """The stat of a devN line's device on the host; Proxmox's words and exit where it is missing or no device."""
    try:
        st = os.stat(host_path(path))
    except OSError:
        pct.die(f"Device {path} does not exist\n")
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        pct.die(f"Path {path} is not a device\n")
    return st


def owner_of(vmid):
    """The node whose container `vmid` is (in a lab cluster: any node's), else None."""
    if pct.CLUSTER_DIR:
        return pct.cluster_side().guests().get(vmid)
    return pct.NODE if pct.conf_exists(vmid) else None


def check_free(vmid):
    node = owner_of(vmid)
    if node:
        pct.die(f"unable to create CT {vmid} - CT {vmid} already exists on node '{node}'\n")


def check_storage(store):
    if store not in pct.STORAGES:
        pct.die(f"storage '{store}' does not exist\n")


def template_file(volid):
    """The file of a `STORAGE:vztmpl/NAME` volume (None when the volume id names none)."""
    store, _, rest = volid.partition(":")
    if not rest.startswith("vztmpl/") or "/" in rest[7:] or store not in TEMPLATE_STORAGES:
        return None
    return os.path.join(pct.STORAGE_DIR, store, "template", "cache", rest[7:])


def rootfs_volume(vmid, store, size):
    kind = pct.STORAGES.get(store, "dir")
    volume = {"zfspool": f"subvol-{vmid}-disk-0", "lvmthin": f"vm-{vmid}-disk-0", "rbd": f"vm-{vmid}-disk-0",
              "btrfs": f"{vmid}/subvol-{vmid}-disk-0.subvol"}.get(kind, f"{vmid}/vm-{vmid}-disk-0.raw")
    return f"{store}:{volume},size={size}G"


def lxc_base_config(ct, vmid, hostname, python=None):
    """The LXC config of a lab container before its passthrough part (the lab's own containers use it too)."""
    upper = os.path.join(ct, "vol", "layer", "upper") if os.path.ismount(os.path.join(ct, "vol")) \
        else os.path.join(ct, "upper")
    return "\n".join([
        f"lxc.uts.name = {hostname}",
        f"lxc.rootfs.path = overlay:/:{upper}",
        "lxc.net.0.type = none",
        # The container's own cgroups mounted (:force: LXC skips them for a container that keeps CAP_SYS_ADMIN),
        # as a Proxmox container sees its memory.events: job.sh reads the OOM killer's count there.
        "lxc.mount.auto = proc:mixed sys:ro cgroup:mixed:force",
        "lxc.autodev = 1",
        "lxc.apparmor.profile = unconfined",
        "lxc.tty.max = 0",
        "lxc.pty.max = 64",
        f"lxc.init.cmd = {python or sys.executable} {os.path.join(ct, 'init.py')}",
        f"lxc.log.file = {os.path.join(ct, 'lxc.log')}",
        "",
    ])


def backend_files(ct, vmid, hostname):
    """What the backend needs to start a container in folder `ct` (the LXC config and its init, or ns-init's)."""
    if pct.BACKEND == "ns":
        write_file(os.path.join(ct, "config"), f"hostname: {hostname}\nbackend: ns\nreap: 1\n")
    else:
        write_file(os.path.join(ct, "init.py"), INIT_SOURCE)
        write_file(os.path.join(ct, "config"), lxc_base_config(ct, vmid, hostname))
    os.makedirs(os.path.join(ct, "upper"), exist_ok=True)


def install(vmid, build, keys, desc=(), raw=()):
    """Move a container built in folder `build` into place, its config last (then it exists)."""
    ct = os.path.join(pct.LXC_PATH, vmid)
    os.makedirs(ct, exist_ok=True)
    for name in os.listdir(build):
        target = os.path.join(ct, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.rename(os.path.join(build, name), target)
    os.rmdir(build)
    if pct.BACKEND != "ns":  # its lxc.init.cmd and rootfs paths name the final folder
        write_file(os.path.join(ct, "config"), lxc_base_config(ct, vmid, keys.get("hostname", f"CT{vmid}")))
    write_file(pct.pve_conf(vmid), conf_text(keys, raw, desc))
    if pct.CLUSTER_DIR:
        pct.cluster_side().write_vmlist()


def build_folder(vmid):
    build = os.path.join(pct.LXC_PATH, f".{vmid}.new")
    shutil.rmtree(build, ignore_errors=True)
    os.makedirs(build)
    return build


def cmd_create(opts, positional):
    vmid = pct.vmid_of(positional)
    if len(positional) < 2:
        pct.param_error("ostemplate", "property is missing and it is not optional")
    volid = positional[1]
    if "rootfs" in opts and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*:\d+(\.\d+)?(,.*)?", opts["rootfs"]):
        pct.param_error("rootfs", f"invalid format - format error\nrootfs.volume: unable to parse volume ID '{opts['rootfs']}'")
    keys = config_options(opts)
    pct.check_quorum()
    pct.lock(vmid)
    check_free(vmid)
    store = opts["rootfs"].split(":")[0] if "rootfs" in opts else opts.get("storage", "local")
    size = opts["rootfs"].split(":")[1].split(",")[0] if "rootfs" in opts else "4"
    check_storage(volid.partition(":")[0])
    path = template_file(volid)
    if not path or not os.path.isfile(path):
        pct.die(f"unable to create CT {vmid} - volume '{volid}' does not exist\n")
    check_storage(store)
    check_devices(keys)
    name = os.path.basename(path)
    keys.setdefault("arch", "amd64")
    keys.setdefault("ostype", next((o for o in OSTYPES if name.startswith(o)), "unmanaged"))
    keys["rootfs"] = rootfs_volume(vmid, store, size.rstrip("0").rstrip(".") if "." in size else size)
    desc = opts.get("description", "").splitlines()
    keys.pop("description", None)
    build = build_folder(vmid)
    backend_files(build, vmid, keys.get("hostname", f"CT{vmid}"))
    write_file(os.path.join(build, "storage"), store + "\n")
    print(f"extracting archive '{path}'")
    print(f"Total bytes read: {os.path.getsize(path)} ({os.path.getsize(path) >> 20}MiB, 1.0GiB/s)")
    print(f"Detected container architecture: {keys['arch']}")
    install(vmid, build, keys, desc)
    if opts.get("start"):
        start_backend(vmid)


def cmd_clone(opts, positional):
    vmid = pct.vmid_of(positional)
    if len(positional) < 2:
        pct.param_error("newid", "property is missing and it is not optional")
    newid = positional[1]
    if not re.fullmatch(r"[1-9][0-9]{2,8}", newid):
        pct.param_error("newid", "invalid format - value does not look like a valid VM ID")
    if "hostname" in opts:
        option_value("hostname", opts["hostname"])
    locked_for_change(vmid)
    keys, raw, desc, _ = read_conf(vmid)
    template = keys.get("template") == "1"
    if not template and pct.state(vmid) == "running":
        pct.die(f"unable to clone CT {vmid}: it is running (the lab clones a stopped container or a template)\n")
    check_free(newid)
    store = opts.get("storage", pct.storage_of(vmid))
    check_storage(store)
    source = pct.rootfs_line(vmid).split()[1].split(",")[0]
    full = opts.get("full", not template)
    if not full and pct.STORAGES[store] not in pct.SNAPSHOT_TYPES:
        pct.die(f"Linked clone feature for '{source}' is not available\n")
    print(f"create {'full' if full else 'linked'} clone of drive rootfs ({source})")
    build = build_folder(newid)
    upper = pct.upper_of(vmid)
    if os.path.isdir(upper):
        pct._copy_tree(upper, os.path.join(build, "upper"))
    new = {k: v for k, v in keys.items() if k not in ("template", "lock")}
    if "hostname" in opts:
        new["hostname"] = opts["hostname"]
    size = re.search(r"size=(\d+(?:\.\d+)?)G", keys.get("rootfs", ""))
    new["rootfs"] = rootfs_volume(newid, store, size.group(1) if size else "8")
    backend_files(build, newid, new.get("hostname", f"CT{newid}"))
    write_file(os.path.join(build, "storage"), store + "\n")
    install(newid, build, new, opts.get("description", "").splitlines() or desc, raw)  # raw lxc.* keys too


def locked_for_change(vmid: str) -> None:
    """What Proxmox checks before it changes a container, in its order: its config is there, the cluster has
    quorum, and the container's lock is taken (clone, set, template, destroy)."""
    pct.require_conf(vmid)
    pct.check_quorum()
    pct.lock(vmid)


def cmd_set(opts, positional):
    vmid = pct.vmid_of(positional)
    delete = [k for k in re.split(r"[,;\s]+", opts.pop("delete", "")) if k]
    opts.pop("digest", None)
    keys = config_options(opts, delete)
    if not keys and not delete:
        pct.die("no options specified\n")
    for key in delete:
        if key == "rootfs":
            pct.die("unable to delete required option 'rootfs'\n")
        if key in keys:
            pct.die(f"unable to delete '{key}' - option is also set\n")
    locked_for_change(vmid)
    check_devices(keys)
    current, raw, desc, rest = read_conf(vmid)
    if "rootfs" not in current:
        current["rootfs"] = pct.rootfs_line(vmid).split(" ", 1)[1]
    if "description" in keys:
        desc = keys.pop("description").splitlines()
    current.update(keys)
    for key in delete:
        if key == "description":
            desc = []
        current.pop(key, None)
    write_file(pct.pve_conf(vmid), conf_text(current, raw, desc, rest))
    if {"memory", "swap"} & {*keys, *delete} and pct.BACKEND != "ns" and pct.state(vmid) == "running":
        hot_memory(vmid, current)


def hot_memory(vmid, keys):
    """A running container's new memory and swap applied to its cgroup at once, as Proxmox does (none: unlimited)."""
    lines = memory_lines(keys) or [line.split(" = ")[0] + (" = max" if ".cgroup2." in line else " = -1")
                                   for line in memory_lines({"memory": "1"})]
    values = [(line.split(" = ")[0].split(".", 2)[2], line.split(" = ")[1]) for line in lines]
    for key, value in [kv for kv in values if "memsw" in kv[0]] + values:  # v1: memsw >= the limit, both ways
        subprocess.run(["lxc-cgroup", "-P", pct.LXC_PATH, "-n", vmid, "--", key, value], capture_output=True)


def cmd_template(opts, positional):
    vmid = pct.vmid_of(positional)
    locked_for_change(vmid)
    if pct.state(vmid) == "running":
        pct.die("you can't convert a CT to template if the CT is running\n")
    keys, raw, desc, rest = read_conf(vmid)
    keys.setdefault("rootfs", pct.rootfs_line(vmid).split(" ", 1)[1])
    keys["template"] = "1"
    write_file(pct.pve_conf(vmid), conf_text(keys, raw, desc, rest))


def cmd_destroy(opts, positional):
    vmid = pct.vmid_of(positional)
    locked_for_change(vmid)
    if read_conf(vmid)[0].get("protection") == "1":
        pct.die(f"can't remove CT {vmid} - protection mode enabled\n")
    if pct.state(vmid) == "running":
        if not opts.get("force"):
            pct.die(f"CT {vmid} is running - destroy failed\n")
        stop_backend(vmid)
    ct = os.path.join(pct.LXC_PATH, vmid)
    if pct.vol(vmid):
        subprocess.run(["umount", os.path.join(ct, "vol")], capture_output=True)
    if pct.CLUSTER_DIR:
        os.unlink(pct.cluster_conf(vmid))
        pct.cluster_side().write_vmlist()
    # The config first (from then on the container does not exist), then its files.
    os.rename(ct, os.path.join(pct.LXC_PATH, f".{vmid}.destroyed"))
    shutil.rmtree(os.path.join(pct.LXC_PATH, f".{vmid}.destroyed"), ignore_errors=True)


# -- what pct start does with devN and mpN ------------------------------------------------------------------
# Proxmox makes each devN node in the container's /dev at every start (the host node's type and numbers, the
# gid, uid and mode asked; the host's mode where none is) and fails the start when the host has no such
# device; each mpN is mounted (a host path bound, read-only with ro=1; a storage volume the lab keeps as a
# folder <ct>/volumes/<key>); the config's raw lxc.mount.entry lines are applied as LXC does. The lab does the
# same from <ct>/passthrough.json, which pct start writes: the LXC backend binds the mounts (lxc.mount.entry
# lines after PASSTHROUGH_MARK in the generated LXC config) and makes the nodes in lxc.hook.autodev (this
# file, run as `pct_make.py autodev JSON`: after the mounts, so a raw entry bound over a node stays); no
# cgroup device rule (the lab's containers have no device cgroup to open). ns-init does the same in that order.

def passthrough(vmid):
    """(devices, mounts) the config asks for at start, checked; dicts ns-init and the LXC config both read."""
    keys = read_conf(vmid)[0]
    devices, mounts = [], []
    indexed = sorted((int(m.group(2)), m.group(1), k) for k in keys if (m := pct.INDEXED.fullmatch(k)))
    for _, kind, key in indexed:
        if kind == "dev":
            found = props(key, keys[key], "path", DEV_KEYS)
            path = found["path"]
            st = device_stat(path)
            mode = int(found["mode"], 8) if "mode" in found else st.st_mode & 0o7777
            devices.append({"key": key, "path": path, "source": host_path(path), "char": stat.S_ISCHR(st.st_mode),
                            "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev), "mode": mode,
                            "uid": int(found.get("uid", 0)), "gid": int(found.get("gid", 0)),
                            "deny_write": found.get("deny-write") == "1"})
        elif kind == "mp":
            found = props(key, keys[key], "volume", MP_KEYS)
            source = found["volume"]
            if not source.startswith("/"):
                source = os.path.join(pct.LXC_PATH, vmid, "volumes", key)
                os.makedirs(source, exist_ok=True)
            elif gpu_sysroot() and os.path.exists(host_path(source)):
                source = host_path(source)  # a host path of the simulated driver's (its user-space folder)
            elif not os.path.exists(source):
                pct.die(f"{key}: bind mount source path '{source}' does not exist\n")
            mounts.append({"key": key, "source": source, "target": found["mp"], "ro": found.get("ro") == "1",
                           "file": not os.path.isdir(source)})
    return devices, mounts + raw_mounts(vmid)


def raw_mounts(vmid):
    """The config's raw `lxc.mount.entry` bind lines, as LXC applies them after Proxmox's own (so one can bind
    over a devN node): a /dev source read under the GPU sysroot, a missing source skipped with `optional` and
    failing the start without it. Other raw keys do nothing in the lab (no device cgroup; cgroup-v1 keys are
    ignored by LXC 7 anyway)."""
    found = []
    for key, value in read_conf(vmid)[1]:
        fields = value.split()
        if key != "lxc.mount.entry" or len(fields) < 4 or "bind" not in fields[3].split(","):
            continue
        source = host_path(fields[0]) if fields[0].startswith("/dev/") else fields[0]
        options = fields[3].split(",")
        if not os.path.exists(source):
            if "optional" in options:
                continue
            pct.die(f"startup for container '{vmid}' failed\nlxc-start: {vmid}: mount_entry: No such file or "
                    f"directory - Failed to mount \"{fields[0]}\" on \"{fields[1]}\"\n")
        found.append({"key": key, "source": source, "target": "/" + fields[1].lstrip("/"), "ro": "ro" in options,
                      "file": "create=file" in options or not os.path.isdir(source), "options": fields[3]})
    return found


def prepare_start(vmid):
    """Everything pct start does before the backend starts the container: the template check, the hostname,
    /etc/hosts, the devices and mount points."""
    import json

    keys = read_conf(vmid)[0]
    if keys.get("template") == "1":
        pct.die("you can't start a CT if it's a template\n")
    ct = os.path.join(pct.LXC_PATH, vmid)
    hostname = keys.get("hostname", f"CT{vmid}")
    devices, mounts = passthrough(vmid)
    write_etc_hosts(vmid, hostname)
    write_file(os.path.join(ct, "passthrough.json"), json.dumps({"devices": devices, "mounts": mounts}, indent=1))
    if pct.BACKEND == "ns":
        with open(os.path.join(ct, "config")) as f:
            lines = [line for line in f.read().splitlines() if not line.startswith("hostname:")]
        write_file(os.path.join(ct, "config"), "\n".join([f"hostname: {hostname}", *lines]) + "\n")
        return
    with open(os.path.join(ct, "config")) as f:
        base = f.read().split(PASSTHROUGH_MARK)[0].rstrip("\n").splitlines()
    base = [f"lxc.uts.name = {hostname}" if line.startswith("lxc.uts.name") else line for line in base]
    entries = []
    for m in mounts:
        options = m.get("options") or f"bind,create={'file' if m['file'] else 'dir'}{',ro' if m['ro'] else ''}"
        entries.append(f"lxc.mount.entry = {_lxc_path(m['source'])} {_lxc_path(m['target'][1:])} none {options} 0 0")
    if devices:
        here = os.path.join(os.path.dirname(os.path.abspath(pct.__file__)), "pct_make.py")
        entries.append(f"lxc.hook.autodev = {sys.executable} {here} autodev {os.path.join(ct, 'passthrough.json')}")
    lines = [*base, PASSTHROUGH_MARK, *entries, *memory_lines(keys)]
    write_file(os.path.join(ct, "config"), "\n".join(lines) + "\n")


def memory_lines(keys, cgroup="/sys/fs/cgroup"):
    """The config's `memory` and `swap` (MiB) as the LXC keys Proxmox writes at start, so the kernel's OOM killer
    acts at the container's limit: memory.max and memory.swap.max on cgroup v2, limit_in_bytes and (memory + swap)
    memsw.limit_in_bytes on a host whose memory controller is still v1 (memsw only with swap accounting). None
    where the config sets no memory (Proxmox's default is 512 MiB; the lab's containers run unlimited)."""
    if "memory" not in keys:
        return []
    mem, swap = int(keys["memory"]) << 20, int(keys.get("swap", "512")) << 20
    for controllers in (os.path.join(cgroup, "cgroup.controllers"), os.path.join(cgroup, "unified", "cgroup.controllers")):
        try:
            with open(controllers) as f:
                if "memory" in f.read().split():
                    return [f"lxc.cgroup2.memory.max = {mem}", f"lxc.cgroup2.memory.swap.max = {swap}"]
        except OSError:
            continue
    v1 = os.path.join(cgroup, "memory")
    if not os.path.isdir(v1):
        return []
    memsw = [f"lxc.cgroup.memory.memsw.limit_in_bytes = {mem + swap}"] \
        if os.path.exists(os.path.join(v1, "memory.memsw.limit_in_bytes")) else []
    return [f"lxc.cgroup.memory.limit_in_bytes = {mem}", *memsw]


def make_nodes(dev, devices):
    """The devN nodes in a starting container's /dev (`dev`: its path from here), as Proxmox's autodev hook
    makes them: the host node's type and numbers, the uid, gid and mode asked. A path a mount entry already
    holds (a raw lxc.mount.entry bound over it) is left to that mount."""
    for d in devices:
        node = dev + d["path"][len("/dev"):]
        if os.path.lexists(node):
            continue
        os.makedirs(os.path.dirname(node), exist_ok=True)
        os.mknod(node, (stat.S_IFCHR if d["char"] else stat.S_IFBLK) | 0o600, os.makedev(d["major"], d["minor"]))
        os.chown(node, d["uid"], d["gid"])
        os.chmod(node, d["mode"] & (0o7555 if d.get("deny_write") else 0o7777))


def _lxc_path(path):
    return path.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")


def write_etc_hosts(vmid, hostname):
    """As Proxmox does at every start: the container's own hostname on 127.0.1.1 and /etc/hostname."""
    etc = os.path.join(pct.upper_of(vmid), "etc")
    os.makedirs(etc, exist_ok=True)
    hosts = os.path.join(etc, "hosts")
    try:
        with open(hosts) as f:
            keep = [line for line in f.read().splitlines() if line.split()[:1] != ["127.0.1.1"]]
    except FileNotFoundError:
        keep = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    write_file(hosts, "\n".join([*keep, f"127.0.1.1 {hostname}"]) + "\n")
    write_file(os.path.join(etc, "hostname"), hostname + "\n")


def start_backend(vmid):
    """Start a stopped container as pct start does (prepare_start, then the backend); dies as pct does."""
    prepare_start(vmid)
    if pct.BACKEND == "ns":
        r = pct.ns_start(vmid)
    else:
        r = subprocess.run(["lxc-start", "-P", pct.LXC_PATH, "-n", vmid], capture_output=True, text=True)
    if r.returncode != 0:
        pct.die(f"startup for container '{vmid}' failed\n{r.stderr}")


def stop_backend(vmid):
    if pct.BACKEND == "ns":
        pct.ns_stop(vmid)
    else:
        subprocess.run(["lxc-stop", "-P", pct.LXC_PATH, "-n", vmid, "-k"], capture_output=True)


def pveam(argv):
    """`pveam list STORAGE`: the storage's templates (`%-70s %-9s`, NAME and SIZE; nothing when it has none)."""
    if argv[:1] != ["list"]:
        pct.die(f"ERROR: unknown command 'pveam {' '.join(argv[:1])}'\nUSAGE: pveam <COMMAND> [ARGS] [OPTIONS]\n")
    if len(argv) < 2:
        pct.die("400 not enough arguments\npveam list <storage> [OPTIONS]\n")
    check_storage(argv[1])
    folder = os.path.join(pct.STORAGE_DIR, argv[1], "template", "cache")
    names = sorted(n for n in os.listdir(folder) if re.search(r"\.tar(\.(gz|xz|zst))?$", n)) \
        if argv[1] in TEMPLATE_STORAGES and os.path.isdir(folder) else []
    if names:
        print(f"{'NAME':<70} {'SIZE':<9}")
        for name in names:
            size = os.path.getsize(os.path.join(folder, name))
            print(f"{argv[1] + ':vztmpl/' + name:<70} {f'{size / 1048576:.2f}MB':<9}")


if __name__ == "__main__" and sys.argv[1:2] == ["autodev"]:  # LXC's lxc.hook.autodev (see prepare_start)
    import json

    with open(sys.argv[2]) as f:
        make_nodes(os.environ["LXC_ROOTFS_MOUNT"] + "/dev", json.load(f)["devices"])
