"""PID 1 of a namespace container (the lab's `ns` backend): builds the container's root, then reaps.

Installed by the lab as <lab>/bin/ns-init; run by the pct double's `start` as
    unshare --mount --pid --uts --ipc --fork --propagation private -- python3 ns-init CTDIR VMID
so it starts as PID 1 of a new PID namespace, in its own mount, UTS and IPC namespaces, on the host
network (as the LXC lab's containers are). It imports nothing from `remote` and runs on the system Python.

The root is an overlay over the machine's own `/` with CTDIR/upper as the upper layer (everything
written inside the container lands there and survives a restart); every other real filesystem
mounted on the host (a separate /opt, /usr/local/nvidia, a tmpfs /tmp, ...) gets an overlay of its own,
or a read-only bind where overlay refuses it (so /tmp is the host's as the LXC lab's is, writes kept in
the container); /run and /dev/shm are fresh tmpfs, /proc is the
container's own, /sys the host's (read-only, every mount below it too), /dev a tmpfs holding the host's standard character
devices and /dev/dri. Then what the pct double's start put in CTDIR/passthrough.json from the Proxmox config: each
mpN and raw lxc.mount.entry bound (read-only with ro=1), then each devN node made in /dev where no mount holds
its path (the host node's type and numbers, the uid, gid and mode asked: the GPUs come only this way, as on
Proxmox). Then pivot_root, the hostname, and
CTDIR/init.pid written (this process's PID on the host): from then on the container is running.
"""

import ctypes
import errno
import glob
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time

PSEUDO = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs", "securityfs", "pstore",
          "bpf", "fusectl", "configfs", "binfmt_misc", "autofs", "hugetlbfs", "nsfs", "devtmpfs", "rpc_pipefs",
          "efivarfs", "selinuxfs"}
SKIP = ("/proc", "/sys", "/dev", "/run")  # the container has its own
OWN_FILES = ("/etc/hosts", "/etc/hostname")  # the container's own, in its upper layer
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
MNT_DETACH = 2
SYS_PIVOT_ROOT = 155  # x86_64
SYS_MOUNT_SETATTR = 442  # the same on every architecture (Linux 5.12)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1

libc = ctypes.CDLL(None, use_errno=True)


def log(message):
    sys.stdout.write(f"ns-init: {message}\n")
    sys.stdout.flush()


def mount(*args):
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {r.stderr.strip()}")


def unescape(path):
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = "", 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1:i + 4].isdigit():
            out, i = out + chr(int(path[i + 1:i + 4], 8)), i + 4
        else:
            out, i = out + path[i], i + 1
    return out


def host_mounts():
    """(mount point, fstype) of every mount this namespace inherited from the host, in mount order."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            found.append((unescape(left.split()[4]), right.split()[0]))
    return found


def under(path, prefix):
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def read_only_tree(path):
    """Make the mount at `path` and every mount below it read-only. A bind's `remount,ro` changes only the
    top one (MS_REC does not apply to a remount): mount_setattr(2) with AT_RECURSIVE does them all; on a
    kernel before 5.12, each mount at or below `path` is remounted, top first."""
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), ctypes.c_char_p(path.encode()),
                    ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0:
        return
    err = ctypes.get_errno()
    if err not in (errno.ENOSYS, errno.EINVAL):
        raise OSError(err, f"mount_setattr {path}: {os.strerror(err)}")
    for point, _ in host_mounts():
        if under(point, path):
            mount("-o", "remount,bind,ro", point)


def overlay(lower, target, layers):
    os.makedirs(f"{layers}/upper", exist_ok=True)
    os.makedirs(f"{layers}/work", exist_ok=True)
    mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={layers}/upper,workdir={layers}/work", target)


def submounts(root, ctdir, lab):
    """The host's other filesystems inside the new root (see the module's docstring)."""
    for n, (point, fstype) in enumerate(host_mounts()):
        if point == "/" or fstype in PSEUDO or any(under(point, s) for s in SKIP) or point in OWN_FILES:
            continue
        if under(point, lab) or under(point, root):
            continue
        target = root + point
        if os.path.isdir(point) and not os.path.islink(point):
            os.makedirs(target, exist_ok=True)
            try:
                overlay(point, target, f"{ctdir}/mnt/{n}")
                continue
            except OSError as exc:
                log(f"{point}: overlay refused ({exc}); bound read-only instead")
        elif not os.path.exists(target):
            continue
        try:
            mount("--bind", point, target)
            mount("-o", "remount,bind,ro", target)
        except OSError as exc:
            log(f"{point}: left out ({exc})")


def make_dev(root):
    dev = root + "/dev"
    mount("-t", "tmpfs", "-o", "mode=755,nosuid", "ns-dev", dev)
    nodes = [f"/dev/{d}" for d in DEVICES] + sorted(glob.glob("/dev/dri/*"))
    for node in nodes:
        if os.path.isdir(node):  # /dev/nvidia-caps
            os.makedirs(dev + node[4:], exist_ok=True)
            mount("--rbind", node, dev + node[4:])
            continue
        try:
            st = os.stat(node)
        except OSError:
            continue
        os.makedirs(os.path.dirname(dev + node[4:]), exist_ok=True)
        os.mknod(dev + node[4:], st.st_mode, st.st_rdev)
        os.chmod(dev + node[4:], st.st_mode & 0o7777)
    os.makedirs(dev + "/pts")
    mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620", "devpts", dev + "/pts")
    os.symlink("pts/ptmx", dev + "/ptmx")
    os.makedirs(dev + "/shm")
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "shm", dev + "/shm")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")


def passthrough(root, ctdir):
    """The config's devN nodes and mpN mounts, as the pct double's start checked and resolved them."""
    try:
        with open(f"{ctdir}/passthrough.json") as f:
            wanted = json.load(f)
    except FileNotFoundError:
        return
    for m in wanted.get("mounts", []):
        target = root + m["target"]
        if m["file"]:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                open(target, "a").close()
        else:
            os.makedirs(target, exist_ok=True)
        mount("--bind", m["source"], target)
        if m["ro"]:
            mount("-o", "remount,bind,ro", target)
    for d in wanted.get("devices", []):  # after the mounts, as LXC's autodev hook: a node bound over stays so
        node = root + d["path"]
        if os.path.lexists(node):
            continue
        os.makedirs(os.path.dirname(node), exist_ok=True)
        kind = stat.S_IFCHR if d["char"] else stat.S_IFBLK
        os.mknod(node, kind | 0o600, os.makedev(d["major"], d["minor"]))
        os.chown(node, d["uid"], d["gid"])
        os.chmod(node, d["mode"] & (0o7555 if d.get("deny_write") else 0o7777))


def build_root(ctdir, vmid, lab):
    root = f"{ctdir}/rootfs"
    os.makedirs(root, exist_ok=True)
    overlay("/", root, ctdir)  # ctdir/upper and ctdir/work
    submounts(root, ctdir, lab)
    mount("-t", "tmpfs", "-o", "mode=755", "nsrun", root + "/run")
    mount("-t", "proc", "-o", "nosuid,nodev,noexec", "proc", root + "/proc")
    mount("--rbind", "/sys", root + "/sys")
    read_only_tree(root + "/sys")
    make_dev(root)
    passthrough(root, ctdir)
    return root


def pivot(root):
    os.chdir(root)
    if libc.syscall(SYS_PIVOT_ROOT, b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    if libc.umount2(b".", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount of the old root failed")
    os.chdir("/")


def host_pid():
    """This process's PID as the host sees it: the first NSpid field, read before /proc is remounted."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    raise OSError("no NSpid line in /proc/self/status")


def main(ctdir, vmid):
    if os.getpid() != 1:
        sys.exit("ns-init must run as PID 1 of a new PID namespace (unshare --pid --fork)")
    config = dict(line.strip().split(": ", 1) for line in open(f"{ctdir}/config") if ": " in line)
    lab = os.path.dirname(os.path.dirname(os.path.abspath(ctdir)))
    pid = host_pid()
    here = os.open(ctdir, os.O_RDONLY | os.O_DIRECTORY)  # still reachable after pivot_root
    root = build_root(ctdir, vmid, lab)
    socket.sethostname(config.get("hostname", f"lab{vmid}"))
    pivot(root)
    fd = os.open("init.pid.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=here)
    os.write(fd, f"{pid}\n".encode())
    os.close(fd)
    os.rename("init.pid.tmp", "init.pid", src_dir_fd=here, dst_dir_fd=here)
    os.close(here)
    log(f"container {vmid} running, PID 1 is {pid} on the host")
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    signal.signal(signal.SIGPWR, lambda *a: os._exit(0))
    if config.get("reap", "1") == "0":  # an init that never reaps: orphans that exit stay zombies
        while True:
            time.sleep(3600)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.5)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
