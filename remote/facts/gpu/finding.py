"""GPU findings: the host's and each container's facts turned into remote.results.Findings with a stable code
(a `kind` of KINDS), a one-line message (`what`), why it matters (WHY) and a fix a user can paste, computed from what the host reports (majors, paths, versions). Pure.

A container with no NVIDIA line in its config, no /dev/nvidia* node and no driver library is a CPU
container: it gives no finding at all.
"""

from __future__ import annotations

import re

from ...results import Finding
from .container import CtGpu
from .host import NVIDIA_MAJOR, REQUIRED, CtConfig, HostGpu, Node, _allow_major

CUDA_ERRORS = {0: "CUDA_SUCCESS", 3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
               35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
               304: "CUDA_ERROR_OPERATING_SYSTEM", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
               804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN"}
MISMATCH_TEXT = "Driver/library version mismatch"
NO_DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"
SEVERITY = {"host-no-driver": "error", "host-reboot-pending": "warning", "host-uvm-not-loaded": "error",
            "host-gpu-vfio": "error", "driver-lib-mismatch": "error", "container-uvm-missing": "error",
            "device-not-passed": "error", "cgroup-major-stale": "error", "mount-optional-missing": "error",
            "no-driver-libs": "error", "cuda-init-failed": "error", "device-permission": "error",
            "mig-caps-missing": "error", "persistence-off": "warning", "container-node-missing": "error",
            "container-node-wrong": "error", "gpu-foreign-processes": "warning", "move-node-missing": "error",
            "move-no-driver": "error", "move-driver-differs": "warning"}
KINDS = tuple(SEVERITY)


WHY = {"host-no-driver": "no container on this host can use a GPU",
       "host-reboot-pending": "a reboot or a driver reload brings another module: a long run can die then, and "
                              "libraries upgraded with it no longer match the loaded one",
       "host-uvm-not-loaded": "CUDA needs /dev/nvidia-uvm; nvidia-smi works without it",
       "host-gpu-vfio": "a GPU bound to vfio-pci is kept for a VM; nvidia-smi cannot see it",
       "driver-lib-mismatch": "NVML and CUDA refuse to run when the libraries and the module differ",
       "container-uvm-missing": "without it cuInit returns 999 and torch sees no GPU",
       "device-not-passed": "CUDA opens every GPU node; a node the container lacks is a GPU it cannot use",
       "cgroup-major-stale": "the nvidia-uvm major is dynamic: a line written for another boot denies the node",
       "mount-optional-missing": "`optional` skips a node that is missing at start, without a word",
       "no-driver-libs": "torch and nvidia-smi load libcuda and libnvidia-ml from the container",
       "cuda-init-failed": "no CUDA program can start",
       "device-permission": "a node that cannot be opened is a GPU the job cannot use",
       "mig-caps-missing": "MIG instances are opened through /dev/nvidia-caps",
       "persistence-off": "without persistence the driver is torn down between jobs",
       "container-node-missing": "CUDA opens /dev/nvidiactl and the GPU's node; a node the container lacks fails "
                                 "cuInit, whatever nvidia-smi says",
       "container-node-wrong": "a node with other numbers than the host's (a bind of /dev/null, a stale major) "
                               "is another device: CUDA fails on it",
       "gpu-foreign-processes": "they hold GPU memory and compute a run expects to have: a run that needs the memory "
                                "fails with CUDA out of memory",
       "move-node-missing": "Proxmox checks a devN node at start: HA and migration look at affinity, not devices",
       "move-no-driver": "no container on that node can use a GPU",
       "move-driver-differs": "NVML and CUDA refuse to run when the libraries and the module differ"}


def _finding(kind: str, message: str, fix: str, ctid: int | None = None, host: str | None = None,
            node: str | None = None) -> Finding:
    """A GPU finding: `kind` (one of KINDS) its code, with its severity and why; `message` one line, `fix` what
    to paste or do; `ctid` None where it is about the host itself; `node` the device node it is about."""
    return Finding(kind, SEVERITY[kind], message, None, WHY[kind], fix, ctid, host, node)


def _allowed(allows: tuple[str, ...], node: Node) -> bool:
    for a in allows:
        if a.strip() == "a":
            return True
        m = re.fullmatch(r"\s*([abc])\s+(\*|\d+):(\*|\d+)\s+\S+\s*", a)
        if m and m.group(1) in ("a", "c") and m.group(2) in ("*", str(node.major)) and m.group(3) in ("*", str(node.minor)):
            return True
    return False


def _passed(cfg: CtConfig, path: str) -> str | None:
    """How the config passes a host node: 'dev' (devN), 'mount' (an lxc.mount.entry), or None."""
    if any(p == path for _, p, _ in cfg.devs):
        return "dev"
    if any(src == path or path.startswith(src.rstrip("/") + "/") for src, _, _ in cfg.mounts):
        return "mount"
    return None


def _free_dev(cfg: CtConfig, n: int = 0) -> str:
    used = {int(k[3:]) for k, _, _ in cfg.devs}
    free = [i for i in range(256) if i not in used]
    return f"dev{free[min(n, len(free) - 1)]}"


def _conf(ctid: int) -> str:
    return f"/etc/pve/lxc/{ctid}.conf"


def host_findings(host: HostGpu, name: str | None = None) -> list[Finding]:
    """What is wrong on the host itself; nothing when no container there is configured for a GPU and the host
    has no driver loaded (a CPU host)."""
    out: list[Finding] = []
    wanted = [c for c in host.configs.values() if c.gpu]
    if not wanted and not host.loaded:
        return out
    add = lambda kind, message, fix: out.append(_finding(kind, message, fix, None, name))  # noqa: E731
    ids = ", ".join(str(c.ctid) for c in wanted) or "none"
    vfio = [p for p in host.pci if p.driver == "vfio-pci"]
    on_nvidia = [p for p in host.pci if p.driver == "nvidia"]
    if vfio and wanted and not on_nvidia:  # a GPU kept for a VM beside one for the containers is no finding
        slot = vfio[0].slot if vfio[0].slot.count(":") == 2 else "0000:" + vfio[0].slot
        add("host-gpu-vfio", f"GPU {', '.join(p.slot for p in vfio)} is bound to vfio-pci (set up for a VM), not to "
            f"nvidia: containers {ids} cannot use it",
            "stop the VM that uses it and drop its id from the vfio-pci options (`grep -r vfio /etc/modprobe.d`), "
            f"`update-initramfs -u -k all` and reboot the host; or now: `echo {slot} > "
            "/sys/bus/pci/drivers/vfio-pci/unbind && modprobe nvidia`")
    if not host.loaded and wanted and not (vfio and not on_nvidia):
        if host.on_disk:
            fix = f"`modprobe nvidia && modprobe nvidia-uvm` on the host (module {host.on_disk} is installed for " \
                  f"kernel {host.kernel}), then pct reboot each container"
        else:
            fix = f"install the NVIDIA driver's kernel module for the running kernel {host.kernel or '(uname -r)'} " \
                  "(`apt install pve-headers-$(uname -r)` then `dkms autoinstall`, or the driver's .run installer), " \
                  "then reboot the host"
        add("host-no-driver", f"no NVIDIA kernel module is loaded on the host (containers {ids} are configured for a "
            "GPU): nvidia-smi says it couldn't communicate with the NVIDIA driver", fix)
    if host.loaded and host.on_disk and host.loaded != host.on_disk:
        add("host-reboot-pending", f"the host runs NVIDIA module {host.loaded} but {host.on_disk} is installed: a "
            "reboot is pending (the container's libraries may already be the new version)",
            "plan a reboot of the host (`reboot`), or with no GPU process running: `rmmod nvidia_uvm nvidia_drm "
            "nvidia_modeset nvidia && modprobe nvidia && modprobe nvidia-uvm`; then `remote gpu fix --host "
            f"{name or 'HOST'} --all` (each container's user space to the new module; `remote host setup` does it at "
            "every boot)")
    if host.loaded and wanted and ("nvidia_uvm" not in host.modules or host.uvm_major is None
                                   or not host.node("/dev/nvidia-uvm") or not host.node("/dev/nvidia-uvm-tools")):
        why = ("module nvidia_uvm is not loaded" if "nvidia_uvm" not in host.modules else
               "/dev/nvidia-uvm does not exist (nothing created the node since the module loaded)"
               if not host.node("/dev/nvidia-uvm") else
               # CUDA run as root makes /dev/nvidia-uvm by itself, never -tools: a container whose devN line names
               # it then cannot start (Proxmox: `Device /dev/nvidia-uvm-tools does not exist`)
               "/dev/nvidia-uvm-tools does not exist (a container whose devN line names it cannot start)")
        add("host-uvm-not-loaded", f"{why} on the host: CUDA needs it (cuInit fails with 999)",
            "on the host: `modprobe nvidia-uvm && nvidia-modprobe -u -c=0`, and `echo nvidia-uvm > "
            "/etc/modules-load.d/nvidia-uvm.conf` so it loads at boot; then pct reboot each GPU container")
    if host.loaded and wanted and host.smi and not host.persistenced and any(
            (g.get("persistence") or "").lower() == "disabled" for g in host.smi):
        add("persistence-off", "persistence mode is off and nvidia-persistenced is not running: the driver is "
            "torn down between jobs (slow starts, lost clocks and ECC state)",
            "on the host: `systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1`)")
    return out


def config_findings(host: HostGpu, cfg: CtConfig, ct: CtGpu | None = None, name: str | None = None) -> list[Finding]:
    """What a container's config does wrong against the host's nodes now (needs the host's facts)."""
    out: list[Finding] = []
    if not cfg.gpu or not host.loaded:
        return out
    c = cfg.ctid
    add = lambda kind, message, fix, node=None: out.append(  # noqa: E731
        _finding(kind, message, fix, c, name, node))
    required = [n for n in host.nodes if REQUIRED.match(n.path)]
    # The control nodes are needed by every container; of the GPUs, at least one (a host's GPUs are often
    # shared out between containers: one that gets GPU 0 of 8 lacks nothing).
    gpus = [n.path for n in required if re.fullmatch(r"/dev/nvidia\d+", n.path)]
    missing = [n.path for n in required if n.path not in gpus and not _passed(cfg, n.path)]
    if gpus and not any(_passed(cfg, p) for p in gpus):
        missing.insert(0, gpus[0])
    for i, path in enumerate(missing):  # one finding per node, each with a devN of its own
        n = host.node(path)
        dev = _free_dev(cfg, i)
        add("device-not-passed", f"{path} ({_what(n, host.drivers)}) exists on the host but {_conf(c)} neither passes "
            "nor mounts it", f"pct set {c} -{dev} {path} (PVE >= 8.1, as root@pam), then pct reboot {c}; or add "
            f"`{_mount_line(path)}` and `lxc.cgroup2.devices.allow: c {n.major if n else '<major>'}:* rwm`",
            node=path)
    # Raw lxc keys: every node passed by a mount entry must be allowed by a cgroup line with today's major.
    mounted = [n for n in required + [n for n in host.nodes if n.path.startswith("/dev/nvidia-caps/")]
               if _passed(cfg, n.path) == "mount" and not _allowed(cfg.allows, n)]
    for n in mounted:
        stale = [a for a in cfg.allows if _stale_allow(a, host, ct)]
        if stale:
            old = stale[0].strip()
            owner = host.drivers.get(_allow_major(old) or -1)
            add("cgroup-major-stale", f"the cgroup allows `{old}` but {n.path} is major {n.major} on this host now "
                f"(majors change at a reboot or a driver update; major {_allow_major(old)} belongs to "
                + (f"{', '.join(owner)} now, the container's NVIDIA node still carries it)" if owner else
                   "no driver now)"),
                f"in {_conf(c)} replace `lxc.cgroup2.devices.allow: {old}` with `lxc.cgroup2.devices.allow: "
                f"c {n.major}:* rwm`, or use `{_free_dev(cfg)}: {n.path}` (PVE >= 8.1, set as root@pam), then "
                f"pct reboot {c}", node=n.path)
        else:
            add("cgroup-major-stale", f"{n.path} (major {n.major}) is mounted into the container but no "
                "lxc.cgroup2.devices.allow line allows its major: opening it fails with EPERM",
                f"add `lxc.cgroup2.devices.allow: c {n.major}:* rwm` to {_conf(c)}, or use "
                f"`{_free_dev(cfg)}: {n.path}` (PVE >= 8.1, set as root@pam), then pct reboot {c}", node=n.path)
        break  # one line fixes every node of that major; the next probe names what is left
    for src, _, opts in cfg.mounts:
        if "optional" in opts and not host.node(src) and REQUIRED.match(src) and not src.startswith("/dev/nvidia-caps"):
            add("mount-optional-missing", f"`lxc.mount.entry: {src} ...` is optional and {src} does not exist on the "
                "host: the container starts without it, silently",
                ("on the host `nvidia-modprobe -u -c=0` (it creates /dev/nvidia-uvm)" if "uvm" in src else
                 "load the driver on the host (`modprobe nvidia`)") + f", then pct reboot {c}; `devN: {src}` is "
                "refused when the node is missing, so it never fails silently")
    if host.mig and host.majors.get("nvidia-caps") is not None and not any(
            _passed(cfg, n.path) for n in host.nodes if n.path.startswith("/dev/nvidia-caps/")):
        caps = host.majors["nvidia-caps"]
        add("mig-caps-missing", "MIG is on but /dev/nvidia-caps is not passed to the container: CUDA cannot open "
            "the MIG instances", f"add to {_conf(c)}: `lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none "
            f"bind,optional,create=dir` and `lxc.cgroup2.devices.allow: c {caps}:* rwm`, then pct reboot {c}")
    if cfg.unprivileged:
        for n in required:
            how = _passed(cfg, n.path)
            if how == "mount" and n.mode & 0o006 != 0o006:
                add("device-permission", f"{n.path} is mode {n.mode:o} on the host and {c} is unprivileged: its owner "
                    f"{n.uid}:{n.gid} is not mapped into the container, so opening it is denied",
                    f"use `{_free_dev(cfg)}: {n.path},mode=0666` in {_conf(c)} (PVE >= 8.1), or make the host's nodes "
                    "0666 (`options nvidia NVreg_DeviceFileMode=0666` in /etc/modprobe.d/nvidia.conf, then "
                    "`update-initramfs -u` and reboot)")
                break
    return out


GPU_NODE = re.compile(r"/dev/nvidia(\d+)")
KNOWN_NODES = {(1, 3): "/dev/null", (1, 5): "/dev/zero", (1, 7): "/dev/full", (1, 8): "/dev/random",
               (1, 9): "/dev/urandom", (5, 0): "/dev/tty"}
ERRNO = {1: "EPERM", 2: "ENOENT", 6: "ENXIO", 13: "EACCES", 19: "ENODEV", 30: "EROFS"}
PURPOSE = {"/dev/nvidiactl": "the driver's control node: nvidia-smi and CUDA open it first",
           "/dev/nvidia-uvm": "nvidia-smi works without it but CUDA does not (cuInit 999, torch.cuda.is_available() "
                              "False)",
           "/dev/nvidia-uvm-tools": "profilers (CUPTI, Nsight) open it"}


def _what(node: Node | None, drivers: dict[int, tuple[str, ...]]) -> str:
    """A node's numbers and whose they are: `195:255, nvidia`, `1:3, /dev/null`, `511:0, a major no driver has`."""
    if node is None:
        return "missing"
    if not node.char:
        return "not a character device"
    names = drivers.get(node.major)
    who = KNOWN_NODES.get((node.major, node.minor)) or (names[0] if names else
                                                         "a major no driver has now" if drivers else None)
    return node.numbers + (f", {who}" if who else "")


def _mount_line(path: str) -> str:
    return f"lxc.mount.entry: {path} {path[1:]} none bind,optional,create=file"


def _stale_allow(value: str, host: HostGpu, ct: CtGpu | None) -> bool:
    """Whether a cgroup allow line is a stale NVIDIA one: its major belongs to no driver now (/proc/devices
    read in full), or it was an NVIDIA major (the container's own /dev/nvidia* node still carries it while
    the host's has another). A line for any other live device (hidraw, tun, a serial adapter) is never stale."""
    major = _allow_major(value)
    if major is None or major == NVIDIA_MAJOR or not host.drivers:
        return False
    names = host.drivers.get(major)
    if names is None:
        return True
    if any(n.startswith("nvidia") for n in names):
        return False  # an NVIDIA major now: it allows that node
    return any(x.path.startswith("/dev/nvidia") and x.major == major and (h := host.node(x.path)) is not None
               and h.major != major for x in (ct.nodes if ct else ()))


def _want(path: str, host: HostGpu | None, ct: CtGpu) -> Node | None:
    """What a container's node should be: the host's node; without the host's facts, NVIDIA's fixed numbers
    (195:N, 195:255) and nvidia-uvm's major from the container's /proc/devices."""
    if host is not None and host.nodes:
        return host.node(path)
    m = GPU_NODE.fullmatch(path)
    if m or path == "/dev/nvidiactl":
        return Node(path, NVIDIA_MAJOR, int(m.group(1)) if m else 255)
    uvm = next((major for major, names in ct.drivers.items() if "nvidia-uvm" in names), None)
    if uvm is not None and path in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        return Node(path, uvm, int(path.endswith("-tools")))
    return None


def _node_fix(ctid: int, cfg: CtConfig | None, path: str, want: Node | None, have: Node | None, i: int = 0) -> str:
    """The fix for one wrong or missing node, computed from the host's node and the container's config: the
    config line that makes the node at start (then pct reboot), or the line to add, with today's major."""
    major = str(want.major) if want else "<its major in the host's /proc/devices>"
    allow = f"lxc.cgroup2.devices.allow: c {major}:* rwm"
    how = _passed(cfg, path) if cfg else None
    numbers = f" ({want.numbers})" if want else ""
    if cfg and how == "dev":
        key = next(k for k, p, _ in cfg.devs if p == path)
        fix = f"pct reboot {ctid}: its config's `{key}: {path}` makes the host's node{numbers} at start"
    elif cfg and how == "mount":
        src, tgt, opts = next(m for m in cfg.mounts if m[0] == path or path.startswith(m[0].rstrip("/") + "/"))
        fix = (f"pct reboot {ctid}: its config's `lxc.mount.entry: {src} {tgt} none {','.join(opts)}` binds the host's "
               f"node{numbers} at start, with `{allow}`")
    else:
        dev = _free_dev(cfg, i) if cfg else f"dev{i}"
        fix = (f"pass the host's node{numbers} in {_conf(ctid)}: `{dev}: {path}` (`pct set {ctid} -{dev} {path}`, "
               f"PVE >= 8.1, as root@pam), or `{_mount_line(path)}` with `{allow}`; then pct reboot {ctid}")
    if have is not None and have.mount is not None:
        fix = f"in the container `umount {path}` (what is mounted on it hides the node), or " + fix
    return fix


def node_findings(ct: CtGpu, ctid: int, host: HostGpu | None = None, cfg: CtConfig | None = None,
                  name: str | None = None) -> list[Finding]:
    """Each node the container needs against the host's (major:minor, character device, opens): one finding
    per wrong or missing node, naming it, what it is and what it should be. Needed: /dev/nvidiactl,
    /dev/nvidia-uvm, every GPU node the container has or its config passes (one at least),
    /dev/nvidia-uvm-tools and /dev/nvidia-caps/* where it has them or its config passes them."""
    out: list[Finding] = []
    have = {n.path for n in ct.nodes}
    passed = {p for _, p, _ in cfg.devs} | {src for src, _, _ in cfg.mounts} if cfg else set()
    if not any(p.startswith("/dev/nvidia") for p in have) and not (cfg and cfg.gpu):
        return out
    drivers = (host.drivers if host and host.drivers else ct.drivers)
    gpus = sorted({p for p in have | passed if GPU_NODE.fullmatch(p)}, key=lambda p: int(p[11:]))
    if not gpus:
        first = next((n.path for n in (host.nodes if host else ()) if GPU_NODE.fullmatch(n.path)), "/dev/nvidia0")
        gpus = [first]
    needed = ["/dev/nvidiactl", "/dev/nvidia-uvm", *gpus]
    needed += [p for p in ("/dev/nvidia-uvm-tools",) if p in have or p in passed]
    needed += sorted(p for p in have if p.startswith("/dev/nvidia-caps/"))
    missing_fix = 0
    for path in needed:
        want, node = _want(path, host, ct), ct.node(path)
        purpose = PURPOSE.get(path) or ("the GPU itself: CUDA sees no device without it" if GPU_NODE.fullmatch(path)
                                        else "MIG instances are opened through it")
        should = (f"the host's is {_what(want, drivers)}" if host is not None and host.nodes else
                  f"it should be {_what(want, drivers)}") if want else None
        if node is None:
            if want is None and (path != "/dev/nvidia-uvm" or host is not None):
                continue  # the host lacks it too: its own finding says so
            kind = "container-uvm-missing" if path == "/dev/nvidia-uvm" else "container-node-missing"
            out.append(_finding(kind, f"{path} is not in the container" +
                                  (f" ({should})" if should else "") + f": {purpose}",
                                  _node_fix(ctid, cfg, path, want, None, missing_fix), ctid, name, path))
            missing_fix += 1
            continue
        wrong = not node.char or (want is not None and (node.major, node.minor) != (want.major, want.minor))
        if not wrong:
            continue
        opens = f"; opening it fails with {ERRNO.get(node.open_errno, f'errno {node.open_errno}')}" \
            if node.open_errno is not None else ""
        over = f", with {node.mount} mounted on it" if node.mount is not None else ""
        out.append(_finding("container-node-wrong",
                              f"{path} in the container is {_what(node, drivers)}{over}"
                              + (f"; {should}" if should else "") + f"{opens}: {purpose}",
                              _node_fix(ctid, cfg, path, want, node), ctid, name, path))
    return out


CUDA_CAUSE = {999: "usually /dev/nvidia-uvm missing, not the host's, or not allowed",
              803: "the libraries and the module differ", 34: "a stub libcuda is found first",
              35: "the driver is older than this libcuda"}
CUDA_FIX = {999: "on the host: `dmesg | grep -iE 'NVRM|Xid'` names the driver's error; with no GPU process running, "
                 "reload it (`rmmod nvidia_uvm && modprobe nvidia-uvm`); then pct reboot {ctid}",
            100: "on the host: `nvidia-smi -L` must list the GPU this container's node names; check that nothing "
                 "sets CUDA_VISIBLE_DEVICES to an empty or unknown id in the container; then pct reboot {ctid}",
            34: "remove the stub libcuda (a CUDA toolkit's stubs/ folder on LD_LIBRARY_PATH or in "
                "/etc/ld.so.conf.d), then `ldconfig`",
            803: "install the driver's user space of the host module's version in the container, then `ldconfig`"}


def container_findings(ct: CtGpu, ctid: int, host: HostGpu | None = None, cfg: CtConfig | None = None,
                       name: str | None = None) -> list[Finding]:
    """What a container sees wrong; with the host's facts the fixes name the host's versions and majors.
    Nothing at all for a CPU container (no node, no driver library, no NVIDIA line in its config)."""
    out: list[Finding] = []
    if not ct.gpu and not (cfg and cfg.gpu):
        return out
    add = lambda kind, message, fix, node=None: out.append(  # noqa: E731
        _finding(kind, message, fix, ctid, name, node))
    module = (host.loaded if host else None) or ct.proc_version
    if host is not None and not host.loaded:
        return out  # host-no-driver says it all
    out += node_findings(ct, ctid, host, cfg, name)
    named = {f.node for f in out}
    libs = ct.lib_versions
    # libcuda.so.1 alone missing counts too: nvidia-smi (libnvidia-ml) still works, CUDA cannot start (torch falls
    # back to the CPU), as seen on the H200 machine with the machine's own libnvidia-ml left on the loader's path.
    if (ct.nodes or (cfg and cfg.gpu)) and ("libcuda.so.1" in ct.libs or not any(ct.libs.values())) \
            and not ct.libs.get("libcuda.so.1"):
        v = module or "<the host's module version>"
        what = ("no NVIDIA driver library (libcuda.so.1, libnvidia-ml.so.1) is found by the container's loader: "
                "couldn't find libnvidia-ml.so" if not any(ct.libs.values()) else
                "libcuda.so.1 is not found by the container's loader (libnvidia-ml.so.1 is): nvidia-smi works, "
                "CUDA cannot start")
        add("no-driver-libs", what, f"`remote gpu fix -c {ctid}` (the host's own files of {v}, mounted "
            f"read-only); or by hand: install the driver's user space of version {v} in the container "
            f"without its kernel module: `sh NVIDIA-Linux-x86_64-{v}.run --no-kernel-module` (or the distribution's "
            f"packages of {v}), then `ldconfig`")
    other = {k: v for k, v in libs.items() if module and v != module}
    if other or (ct.smi_error and MISMATCH_TEXT in ct.smi_error):
        have = ", ".join(f"{(ct.libs[k] or {}).get('file') or k}" for k in other) or \
            ", ".join(f"{k} {v}" for k, v in libs.items())
        if host and host.on_disk and host.on_disk != host.loaded and all(v == host.on_disk for v in libs.values()):
            fix = (f"reboot the host: driver {host.on_disk} was installed while module {host.loaded} stays loaded "
                   "(or unload and load the module with no GPU process running)")
        else:
            fix = (f"`remote gpu fix -c {ctid}` (the host's own files of {module}, mounted read-only); or by hand: "
                   f"install the driver's user space of version {module} in the container (`sh NVIDIA-Linux-x86_64-"
                   f"{module}.run --no-kernel-module`, or the distribution's {module} packages), remove the other "
                   "version's libraries, then `ldconfig`")
        add("driver-lib-mismatch", f"the container's driver libraries ({have}) are not the host's loaded module "
            f"{module}: Failed to initialize NVML: Driver/library version mismatch", fix)
    denied = [n for n in ct.nodes if n.open_errno in (1, 13) and REQUIRED.match(n.path) and n.path not in named]
    if denied:
        n = denied[0]
        if n.open_errno == 1:
            fix = (f"allow its major in {_conf(ctid)}: `lxc.cgroup2.devices.allow: c {n.major}:* rwm`, or pass it as "
                   f"`{_free_dev(cfg) if cfg else 'dev0'}: {n.path}` (PVE >= 8.1), then pct reboot {ctid}")
            what = "the device cgroup denies it (EPERM)"
        else:
            fix = (f"use `{_free_dev(cfg) if cfg else 'dev0'}: {n.path},mode=0666` in {_conf(ctid)} (PVE >= 8.1), or "
                   "make the host's nodes 0666 (`options nvidia NVreg_DeviceFileMode=0666`)")
            what = f"its mode {n.mode:o}, owner {n.uid}:{n.gid} (unmapped in an unprivileged container) deny it (EACCES)"
        if not any(f.code == "device-permission" for f in out):
            add("device-permission", f"permission denied opening {n.path} in the container: {what}", fix, n.path)
    if ct.cuda_loaded and ct.cuda_init not in (None, 0):
        code = ct.cuda_init
        nodes = [f"{f.node} {'wrong' if f.code == 'container-node-wrong' else 'missing'}" for f in out
                 if f.node and f.code in ("container-node-wrong", "container-node-missing", "container-uvm-missing")]
        if nodes:  # the node findings above are the cause: name them, never a guess
            cause = ", ".join(nodes) + " (above)"
        elif code == 100:
            cause = ("no GPU node (/dev/nvidia0..) in the container" if not any(GPU_NODE.fullmatch(n.path)
                                                                               for n in ct.nodes)
                     else "the container's GPU nodes are the host's, yet CUDA sees no device")
        else:
            cause = CUDA_CAUSE.get(code) or ("see the other findings" if out else
                                             "the container's nodes and libraries match the host's")
        fix = ("fix the findings above: they are its cause" if out else
               CUDA_FIX.get(code, "on the host: `dmesg | grep -iE 'NVRM|Xid'` names the driver's error; then pct "
                                  "reboot {ctid}").format(ctid=ctid))
        add("cuda-init-failed", f"cuInit(0) returned {code} ({CUDA_ERRORS.get(code, 'CUDA error')}): {cause}", fix)
    foreign = [a for a in ct.processes if not a.get("run")]
    if foreign:
        held = sum(a.get("used_mib") or 0 for a in foreign)
        add("gpu-foreign-processes", f"GPU processes of no run hold {held / 1024:.1f} GiB: " + "; ".join(
            f"pid {a['pid']} ({a.get('used_mib')} MiB): {a.get('command') or a.get('name') or '?'}" for a in foreign[:5]),
            f"end them (`remote exec -c {ctid} 'kill PID'`) or find who started them; train refuses to start where "
            "less GPU memory is free than its last good run used")
    return out


def findings(host: HostGpu | None, ctid: int, ct: CtGpu | None, name: str | None = None) -> list[Finding]:
    """A container's findings: its config against the host's nodes, then what it sees (host part excluded)."""
    cfg = host.configs.get(ctid) if host else None
    out = config_findings(host, cfg, ct, name) if host and cfg else []
    if ct is not None:
        # The config's finding about a node says it first: the container's about the same node is left out.
        seen, nodes = {f.code for f in out}, {f.node for f in out if f.node}
        out += [f for f in container_findings(ct, ctid, host, cfg, name)
                if f.code == "cuda-init-failed" or (f.code not in seen and f.node not in nodes)]
    return out


def versions(host: HostGpu | None, ct: CtGpu | None) -> dict:
    """What the known-good record keeps: the host's module version and the container's library versions."""
    return {"host_module": (host.loaded if host else None) or (ct.proc_version if ct else None),
            "driver_libs": ct.lib_versions if ct else {}}


def move_findings(cfg: CtConfig, source: HostGpu | None, target: HostGpu, node: str,
                  mounts_userspace: bool = False) -> list[Finding]:
    """Before a move of the container `cfg` describes to cluster node `node` (`target`: that node's facts):
    every device node its devN lines name that the node lacks (Proxmox refuses to start it there: devN is
    checked at start, HA placement is not), no module there, and a driver version other than the source's
    where the container's user space is its own (`mounts_userspace`: it follows the node's folder)."""
    out: list[Finding] = []
    c = cfg.ctid
    add = lambda kind, message, fix, path=None: out.append(  # noqa: E731
        _finding(kind, message, fix, c, node, path))
    if not cfg.gpu:
        return out
    if not target.loaded:
        add("move-no-driver", f"node {node} has no NVIDIA module loaded: container {c} (configured for a GPU) "
            "would start there without one, or not at all", f"install the driver on {node} (the source node's version"
            f"{', ' + source.loaded if source and source.loaded else ''}), or move {c} elsewhere")
        return out
    for key, path, _ in cfg.devs:
        if target.node(path) is not None:
            continue
        if path in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
            fix = (f"on {node}: `nvidia-modprobe -u -c 0` now, and `remote host setup {node}` so that every boot "
                   "makes it before the guests start")
        elif GPU_NODE.fullmatch(path):
            have = ", ".join(n.path for n in target.nodes if GPU_NODE.fullmatch(n.path)) or "no GPU node"
            fix = (f"{node} has {have}: move {c} to a node with {path}, or give it one {node} has (`pct set {c} "
                   f"-{key} /dev/nvidiaN` after the move, as root)")
        else:
            fix = f"on {node}: `nvidia-smi` once (it makes the control nodes), or load the driver (`modprobe nvidia`)"
        add("move-node-missing", f"{path} (its `{key}` line) does not exist on node {node}: Proxmox refuses to "
            f"start container {c} there", fix, path)
    if source is not None and source.loaded and source.loaded != target.loaded and not mounts_userspace:
        add("move-driver-differs", f"node {node} runs NVIDIA module {target.loaded}, the container's node "
            f"{source.loaded}: its own driver libraries ({source.loaded}) will not match there",
            f"after the move: `remote gpu fix -c {c}` (the node's own user space, mounted read-only)")
    return out
