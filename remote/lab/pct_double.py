"""A `pct` test double that behaves like Proxmox's (as read from pve-container 6.1.10's source), over plain
LXC or (BACKEND "ns", where there is no LXC) over containers made of Linux namespaces (remote/lab/ns_init.py).

Installed by the lab as <lab>/bin/pct with LXC_PATH, LOCK_DIR, NODE and BACKEND filled in; it imports
nothing from `remote` and runs on the system Python. Option parsing, messages and exit codes
follow pve-container 6.1.10: Getopt permute mode until a bare `--`, boolean options that take
an optional value, no shell for exec (it becomes lxc-attach), PATH reset before anything runs,
push/pull under the config lock and exit 0 when the copy itself fails. Snapshots (snapshot, listsnapshot,
delsnapshot, rollback) follow Proxmox's rules and messages over each container's storage (below). Making
containers (create from a template volume, clone, set with devN/mpN/--delete, template, destroy, pveam list) and
what a start does with devN and mpN are its making half, pct_make.py; migrate and pvesh its cluster half,
pct_cluster.py; the snapshot verbs its snapshot half, pct_snap.py (each installed beside it, loaded on demand).
"""

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time

LXC_PATH = "/var/lib/remote-lab/lxc"
LOCK_DIR = "/var/lib/remote-lab/lock"
NODE = "lab"
BACKEND = "lxc"  # or "ns": <LXC_PATH>/<vmid>/init.pid is the container's PID 1, entered with setns
NS_INIT = "/var/lib/remote-lab/bin/ns-init"
STORAGE_DIR = "/var/lib/remote-lab/storage"  # the storages' folders: <name>/template/cache/ holds templates
GPU_SYSROOT = ""  # a fake NVIDIA driver's root (remote/lab/fakegpu.py); $REMOTE_GPU_SYSROOT overrides it
CLUSTER_DIR = ""  # a lab cluster's shared config tree (pmxcfs's /etc/pve); "": a node of its own (below)
CLEAR_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # lxc-attach --clear-env's

COMMANDS = ["clone", "config", "create", "delsnapshot", "destroy", "exec", "list", "listsnapshot", "migrate", "pull", "push",
            "rollback", "set", "shutdown", "snapshot", "start", "status", "stop", "template"]
USAGE = "USAGE: pct <COMMAND> [ARGS] [OPTIONS]\n"
BOOLEAN = {"exec": {"keep-env"}, "start": {"debug"}, "stop": {"skiplock", "overrule-shutdown"}, "list": set(),
           "status": {"verbose"}, "config": {"current"}, "shutdown": {"forceStop"}, "push": set(), "pull": set(),
           "snapshot": set(), "listsnapshot": set(), "delsnapshot": {"force"}, "rollback": {"start"},
           "migrate": {"online", "restart"}, "create": {"unprivileged", "start", "onboot", "protection", "force"},
           "set": {"onboot", "protection"}, "clone": {"full"}, "destroy": {"purge", "force"}, "template": set()}
VALUED = {"push": {"perms", "user", "group"}, "pull": {"perms", "user", "group"}, "shutdown": {"timeout"},
          "stop": set(), "config": {"snapshot"}, "snapshot": {"description"},
          "migrate": {"timeout", "target-storage", "bwlimit"},
          "create": {"hostname", "cores", "memory", "swap", "rootfs", "storage", "features", "ostype", "arch", "description",
                     "nameserver", "searchdomain", "tags", "password", "ssh-public-keys", "timezone"},
          "set": {"hostname", "cores", "memory", "swap", "features", "ostype", "arch", "description", "nameserver",
                  "searchdomain", "tags", "timezone", "delete", "digest"},
          "clone": {"hostname", "storage", "description", "snapname"}, "destroy": set(), "template": set()}
MAKING = ("create", "clone", "set", "template", "destroy")  # pct_make.py's verbs
SNAPSHOTS = ("snapshot", "listsnapshot", "delsnapshot", "rollback")  # pct_snap.py's verbs
INDEXED = re.compile(r"(dev|mp|net)(\d+)")  # devN, mpN, netN: options of create and set


def die(message, code=255):
    sys.stderr.write(message)
    sys.exit(code)


def param_error(param, message):
    die(f"400 Parameter verification failed.\n{param}: {message}\n" + USAGE)


def parse(cmd, args):
    """Getopt permute mode: options anywhere until a bare `--`; returns (options, positionals)."""
    opts, positional, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1:]
            break
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.lstrip("-").partition("=")
            if name in BOOLEAN.get(cmd, ()):
                if not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
                    value, i = args[i + 1], i + 1
                elif not eq:
                    value = "1"
                if value not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                    param_error(name, f"type check ('boolean') failed - got '{value}'")
                opts[name] = value in ("1", "true", "yes", "on")
            elif name in VALUED.get(cmd, ()) or (cmd in ("create", "set") and INDEXED.fullmatch(name)):
                if not eq:
                    if i + 1 >= len(args):
                        die(f"Option {name} requires an argument\n400 unable to parse option\n" + USAGE)
                    value, i = args[i + 1], i + 1
                opts[name] = value
            else:
                die(f"Unknown option: {name}\n400 unable to parse option\n" + USAGE)
        else:
            positional.append(arg)
        i += 1
    return opts, positional


def vmid_of(positional):
    if not positional:
        param_error("vmid", "property is missing and it is not optional")
    raw = positional[0]
    if not re.fullmatch(r"-?\d+", raw):
        param_error("vmid", f"type check ('integer') failed - got '{raw}'")
    if not re.fullmatch(r"[1-9][0-9]{2,8}", raw):
        param_error("vmid", "invalid format - value does not look like a valid VM ID")
    return raw


def conf_exists(vmid):
    if CLUSTER_DIR and not os.path.exists(cluster_conf(vmid)):
        return False  # another node's container (or none): pct sees only its own node's
    return os.path.exists(os.path.join(LXC_PATH, vmid, "config"))


def require_conf(vmid):
    if not conf_exists(vmid):
        die(f"Configuration file 'nodes/{NODE}/lxc/{vmid}.conf' does not exist\n")


def state(vmid):
    if BACKEND == "ns":
        return "running" if ns_pid(vmid) else "stopped"
    out = subprocess.run(["lxc-info", "-P", LXC_PATH, "-n", vmid, "-sH"], capture_output=True, text=True).stdout
    return "running" if out.strip() == "RUNNING" else "stopped"


def init_pid(vmid):
    if BACKEND == "ns":
        return ns_pid(vmid) or ""
    out = subprocess.run(["lxc-info", "-P", LXC_PATH, "-n", vmid, "-pH"], capture_output=True, text=True).stdout
    return out.strip()


HELD: list[int] = []


def lock(vmid):
    """The container's config lock, 10 s timeout for others, as push/pull hold it."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    path = os.path.join(LOCK_DIR, f"pve-config-{vmid}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline, told = time.monotonic() + 10, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            HELD.append(fd)  # held until the process ends (a test running the double in-process closes them)
            return fd
        except BlockingIOError:
            if not told:
                sys.stderr.write("trying to acquire lock...")
                sys.stderr.flush()
                told = True
            if time.monotonic() > deadline:
                die(f"\ncan't lock file '{path}' - got timeout\n")
            time.sleep(0.1)


def cmd_exec(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    if state(vmid) != "running":
        die(f"container '{vmid}' not running!\n")
    argv = positional[1:]
    if not argv:
        die("missing command at /usr/share/perl5/PVE/CLI/pct.pm line 213.\n")
    keep = opts.get("keep-env", True)
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        os.environ.pop(var, None)
    if BACKEND == "ns":
        ns_exec(vmid, argv, keep)
    lxc = ["lxc-attach", "-P", LXC_PATH, "-n", vmid, "--keep-env" if keep else "--clear-env", "--", *argv]
    os.execvp(lxc[0], lxc)


def cmd_status(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    print(f"status: {state(vmid)}")


def cmd_list(opts, positional):
    ids = sorted((d for d in os.listdir(LXC_PATH) if d.isdigit() and conf_exists(d)), key=int) \
        if os.path.isdir(LXC_PATH) else []
    if ids:
        print(f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}")
        for vmid in ids:
            name = make_side().read_conf(vmid)[0].get("hostname", f"CT{vmid}")
            print(f"{vmid:<10} {state(vmid):<10} {'':<12} {name:<20}")


def cmd_start(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    check_quorum()
    if state(vmid) == "running":
        die(f"CT {vmid} already running\n")
    make_side().start_backend(vmid)


def cmd_stop(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    if state(vmid) != "running":
        die(f"CT {vmid} not running\n")
    if BACKEND == "ns":
        ns_stop(vmid)
    else:
        subprocess.run(["lxc-stop", "-P", LXC_PATH, "-n", vmid, "-k"], capture_output=True)


def pve_conf(vmid):
    """The container's Proxmox config (/etc/pve/lxc/<vmid>.conf on a real host): <LXC_PATH>/<vmid>/pve.conf,
    in a lab cluster the shared tree's nodes/<node>/lxc/<vmid>.conf."""
    return cluster_conf(vmid) if CLUSTER_DIR else os.path.join(LXC_PATH, vmid, "pve.conf")


def config_lines(text):
    """`pct config`'s answer from a Proxmox config's text: the current section's `key: value` lines sorted by
    key (no digest), then its raw `lxc.*` lines in file order; snapshot sections (`[name]`) are not shown."""
    keys: list[tuple[str, str]] = []
    raw: list[tuple[str, str]] = []
    desc: list[str] = []
    for line in text.splitlines():
        if line.startswith("["):
            break
        if line.startswith("#"):  # the description's lines: pct config prints them as one key, encode_text'd
            desc.append(line[1:])
            continue
        key, sep, value = line.partition(":")
        if not sep or key.strip() == "digest":
            continue
        (raw if key.startswith("lxc.") else keys).append((key.strip(), f"{key.strip()}: {value.strip()}"))
    if desc:
        from urllib.parse import quote

        keys.append(("description", "description: " + quote("\n".join(desc), safe=" -_.!~*'()")))
    return [line for _, line in sorted(keys, key=lambda kv: kv[0])] + [line for _, line in raw]


def cmd_config(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    try:
        with open(pve_conf(vmid)) as f:
            text = f.read()
    except FileNotFoundError:  # a container made before the lab wrote Proxmox configs
        text = f"arch: amd64\nhostname: lab{vmid}\nostype: debian\n"
    # The rootfs volume is on the storage the lab set for the container (snapshot support follows from it).
    text = rootfs_line(vmid) + "\n" + "\n".join(line for line in text.splitlines() if not line.startswith("rootfs:"))
    print("\n".join(config_lines(text)))


def transfer_args(positional, second, not_running):
    """push and pull's (src, dest, the running container's root), its lock taken; Proxmox's words and exit else."""
    if len(positional) < 3:
        param_error("destination" if len(positional) == 2 else second, "property is missing and it is not optional")
    vmid, src, dest = vmid_of(positional), positional[1], positional[2]
    if not conf_exists(vmid) or state(vmid) != "running":
        die(not_running)
    lock(vmid)
    return src, dest, f"/proc/{init_pid(vmid)}/root"


def cmd_push(opts, positional):
    src, dest, root = transfer_args(positional, "file", "can only push files to a running CT\n")
    # From here on, pct has no exit handler: a failed copy is printed and the status stays 0.
    try:
        with open(src, "rb") as fin:
            data = fin.read()
    except OSError:
        sys.stderr.write(f"failed to open {src} for reading\n")
        sys.exit(0)
    try:
        with open(root + dest, "wb") as fout:
            fout.write(data)
        os.chmod(root + dest, int(opts.get("perms", "644"), 8))
    except OSError as exc:
        sys.stderr.write(f"failed to create file: {dest}: {exc.strerror}\n")
        sys.exit(0)


def cmd_pull(opts, positional):
    src, dest, root = transfer_args(positional, "path", "can only pull files from a running VM at "
                                    "/usr/share/perl5/PVE/API2/LXC.pm line 2145.\n")
    try:
        shutil.copyfile(root + src, dest)
    except OSError as exc:
        sys.stderr.write(f"failed to open {src}: {exc.strerror}\n")
        sys.exit(0)


# -- storages and snapshots -------------------------------------------------------------------------------
# Each container's rootfs lives on one storage: <LXC_PATH>/<vmid>/storage names it (default "local", a
# directory storage, as a fresh Proxmox VE install's). On "local-btrfs" the container's writable layer is a
# real btrfs subvolume (<LXC_PATH>/<vmid>/vol/layer, on a btrfs image the lab mounts at vol/): a snapshot is
# `btrfs subvolume snapshot -r`, as Proxmox's btrfs storage takes it, and a rollback a writable snapshot of
# it put in the layer's place while the container is stopped. On the other snapshot-capable storages
# (zfspool, lvmthin, rbd) the layer is copied (`cp -a`: the same result, slower). Run as `pvesm` (the lab
# installs it under that name too) it answers `pvesm status` from the same table.

STORAGES = {  # name -> type, as /etc/pve/storage.cfg would say
    "local": "dir", "local-zfs": "zfspool", "local-lvm": "lvmthin", "local-btrfs": "btrfs", "ceph": "rbd",
    "nfs-share": "nfs",
}
SNAPSHOT_TYPES = {"zfspool", "lvmthin", "rbd", "btrfs"}
RESERVED = {"current", "vzdump"}


def storage_of(vmid):
    try:
        with open(os.path.join(LXC_PATH, vmid, "storage")) as f:
            return f.read().strip() or "local"
    except OSError:
        return "local"


def rootfs_line(vmid):
    """The rootfs line: the volume on the container's storage, the size its config says (8G by default)."""
    make = make_side()
    size = re.search(r"size=(\d+(?:\.\d+)?)G", make.read_conf(vmid)[0].get("rootfs", ""))
    return f"rootfs: {make.rootfs_volume(vmid, storage_of(vmid), size.group(1) if size else '8')}"


def vol(vmid):
    """The btrfs volume of a container on local-btrfs (the lab mounts it), else None."""
    path = os.path.join(LXC_PATH, vmid, "vol")
    return path if os.path.ismount(path) else None


def upper_of(vmid):
    """The writable layer. On local-btrfs it is vol/layer/upper: the subvolume vol/layer holds it and the
    overlay's work folder beside it (LXC puts that in the layer's parent; a rename between two subvolumes
    is a cross-device one, which overlayfs cannot do)."""
    v = vol(vmid)
    return os.path.join(v, "layer", "upper") if v else os.path.join(LXC_PATH, vmid, "upper")


def _copy_tree(src, dest):
    r = subprocess.run(["cp", "-a", "--reflink=auto", src, dest], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"snapshot copy failed: {r.stderr.strip()}\n")


def pvesm(argv):
    """`pvesm status`: Name, Type, Status, Total, Used, Available, % of each storage."""
    if argv[:1] != ["status"]:
        die(f"ERROR: unknown command 'pvesm {' '.join(argv[:1])}'\nUSAGE: pvesm <COMMAND> [ARGS] [OPTIONS]\n")
    print(f"{'Name':<14}{'Type':>9}{'Status':>11}{'Total':>17}{'Used':>17}{'Available':>17}{'%':>9}")
    for name, kind in STORAGES.items():
        print(f"{name:<14}{kind:>9}{'active':>11}{'102626232':>17}{'10485760':>17}{'92140472':>17}{'10.22%':>9}")


# -- a lab cluster: the shared tree's paths and the quorum switch; the rest in pct_cluster.py ------------------

def cluster_conf(vmid, node=None):
    return os.path.join(CLUSTER_DIR, "nodes", node or NODE, "lxc", f"{vmid}.conf")


def check_quorum():
    """PVE::Cluster::check_cfs_quorum: /etc/pve is read-only on a node without quorum (the lab's switch:
    <tree>/.noquorum-<node>)."""
    if CLUSTER_DIR and os.path.exists(os.path.join(CLUSTER_DIR, f".noquorum-{NODE}")):
        die("cluster not ready - no quorum?\n")


def make_side():
    """The making half of the double (pct_make.py, installed beside this script): create, clone, set, template,
    destroy, pveam, and the devN/mpN part of a start."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pct_make  # type: ignore[import-not-found]  # beside the installed script, not a package module

    pct_make.pct = sys.modules[__name__]
    return pct_make


def snap_side():
    """The snapshot half of the double (pct_snap.py, installed beside this script): snapshot, listsnapshot,
    delsnapshot, rollback."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pct_snap  # type: ignore[import-not-found]  # beside the installed script, not a package module

    pct_snap.pct = sys.modules[__name__]
    return pct_snap


def cluster_side():
    """The cluster half of the double (pct_cluster.py, installed beside this script): pct migrate and pvesh."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pct_cluster  # type: ignore[import-not-found]  # beside the installed script, not a package module

    pct_cluster.pct = sys.modules[__name__]
    return pct_cluster


# -- the namespace backend ---------------------------------------------------------------------------------

def ns_pid(vmid):
    """The host PID of the container's PID 1 when it runs (a live process that is PID 1 of its own PID
    namespace: a recycled PID is not mistaken for it), else None."""
    try:
        with open(os.path.join(LXC_PATH, vmid, "init.pid")) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/status") as f:
            nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
    except (OSError, ValueError):
        return None
    return pid if len(nspid) == 2 and nspid[0] == pid and nspid[1] == "1" else None


def ns_start(vmid):
    """PID 1 of a new mount/PID/UTS/IPC namespace (ns-init), detached; returns once it wrote init.pid."""
    ct = os.path.join(LXC_PATH, vmid)
    for stale in ("init.pid", "init.pid.tmp"):
        if os.path.exists(os.path.join(ct, stale)):
            os.unlink(os.path.join(ct, stale))
    console = os.path.join(ct, "console.log")
    with open(console, "ab") as out:
        proc = subprocess.Popen(["unshare", "--mount", "--pid", "--uts", "--ipc", "--fork", "--propagation", "private",
                                 "--", sys.executable, NS_INIT, ct, vmid], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=out, start_new_session=True, env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ns_pid(vmid):
            return subprocess.CompletedProcess(proc.args, 0, "", "")
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    with open(console, errors="replace") as f:
        tail = "".join(f.readlines()[-15:])
    return subprocess.CompletedProcess(proc.args, 1, "", f"ns-init did not start the container ({console}):\n{tail}")


def ns_stop(vmid):
    """SIGKILL to PID 1 kills every process of the container's PID namespace (lxc-stop -k)."""
    pid = ns_pid(vmid)
    if not pid:
        return
    os.kill(int(pid), 9)
    deadline = time.monotonic() + 30
    while ns_pid(vmid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.unlink(os.path.join(LXC_PATH, vmid, "init.pid"))
    except OSError:
        pass


def ns_exec(vmid, argv, keep):
    """lxc-attach for a namespace container: join its IPC, UTS, PID and mount namespaces and its root, fork
    (the child is in the container's PID namespace; orphans go to its PID 1), exec without a shell; the
    exit status is the command's, 128+N for a signal, 126/127 with lxc-attach's message when it cannot run."""
    import ctypes

    pid = ns_pid(vmid)
    if not pid:
        die(f"container '{vmid}' not running!\n")
    libc = ctypes.CDLL(None, use_errno=True)
    env = ({k: v for k, v in os.environ.items()} if keep else {"PATH": CLEAR_PATH})
    env.update(container="lxc", TERM="linux")
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    fds = [os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("ipc", "uts", "pid", "mnt")]
    root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    for fd in fds:
        if libc.setns(fd, 0) != 0:
            die(f"lxc-attach: {vmid}: setns failed: {os.strerror(ctypes.get_errno())}\n", 1)
        os.close(fd)
    os.fchdir(root)
    os.chroot(".")
    os.close(root)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; an exec'd command must not
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            sys.stderr.write(f"lxc-attach: {vmid}: ../src/lxc/attach.c: lxc_attach_run_command: 1841 "
                             f"{exc.strerror} - Failed to exec \"{argv[0]}\"\n")
            sys.stderr.flush()
            os._exit(126 if exc.errno == 13 else 127)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # lxc-attach forwards no signal: the command decides
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    sys.exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def main(argv):
    os.environ["PATH"] = "/sbin:/bin:/usr/sbin:/usr/bin"
    if os.path.basename(sys.argv[0]) == "pvesh":
        return cluster_side().pvesh(argv)
    if os.geteuid() != 0:
        die("please run as root\n")
    if os.path.basename(sys.argv[0]) == "pvesm":
        return pvesm(argv)
    if os.path.basename(sys.argv[0]) == "pveam":
        return make_side().pveam(argv)
    if not argv:
        die("ERROR: no command specified\n" + USAGE)
    matches = [c for c in COMMANDS if c.startswith(argv[0])]
    if argv[0] in COMMANDS:
        matches = [argv[0]]
    if len(matches) != 1:
        die(f"ERROR: unknown command 'pct {argv[0]}'\n" + USAGE)
    cmd = matches[0]
    opts, positional = parse(cmd, argv[1:])
    handler = {"shutdown": cmd_stop, "migrate": lambda o, p: cluster_side().cmd_migrate(o, p)}.get(cmd) \
        or (getattr(make_side(), f"cmd_{cmd}") if cmd in MAKING else getattr(snap_side(), f"cmd_{cmd}")
            if cmd in SNAPSHOTS else globals()[f"cmd_{cmd}"])
    handler(opts, positional)


if __name__ == "__main__":
    main(sys.argv[1:])
