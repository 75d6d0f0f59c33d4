"""GPU passthrough facts: the Proxmox host's NVIDIA driver and each container's view of it, and the findings.

Two probes, one round trip each: remote/sh/gpu-host.sh on the host (the loaded and the on-disk module,
/proc/devices, the /dev/nvidia* nodes, the PCI driver, persistence and MIG, each container's `pct config`)
and remote/sh/gpu_container.py in a container (its nodes, the driver libraries its loader finds, nvidia-smi,
cuInit(0) through ctypes, the venv's torch CUDA build read from a file). Pure parsers turn their text into
frozen dataclasses, and `findings(...)` turns those into GPU findings with a stable `kind`, a one-line
message and a fix a user can paste, computed from what the host reports (majors, paths, versions).

A container with no NVIDIA line in its config, no /dev/nvidia* node and no driver library is a CPU
container: it gives no finding at all. Everything a host or container printed is untrusted text: it is
parsed, never run, and the command line shows it through remote.naming.printable.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import shlex
from dataclasses import asdict, dataclass, field
from importlib import resources

from .. import shell
from ..errors import RemoteError
from ..transport.pct import DEFAULT_PATH

CONTAINER_SOURCE = resources.files("remote").joinpath("sh").joinpath("gpu_container.py").read_text()
NVIDIA_MAJOR = 195  # nvidia0.., nvidiactl (255), nvidia-modeset (254): fixed; nvidia-uvm and nvidia-caps are dynamic
REQUIRED = re.compile(r"^/dev/(nvidia\d+|nvidiactl|nvidia-uvm)$")  # what CUDA opens
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
            "mig-caps-missing": "error", "persistence-off": "warning"}
KINDS = tuple(SEVERITY)


# -- the facts --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    path: str
    major: int
    minor: int
    uid: int = 0
    gid: int = 0
    mode: int = 0o666
    char: bool = True
    open_errno: int | None = None  # the container probe's open(O_RDWR): None opened, 1 EPERM, 13 EACCES


@dataclass(frozen=True)
class Pci:
    slot: str
    name: str
    driver: str | None  # `Kernel driver in use:`


@dataclass(frozen=True)
class CtConfig:
    """The NVIDIA lines of one container's `pct config`."""
    ctid: int
    devs: tuple[tuple[str, str, dict], ...] = ()  # (devN, path, options)
    allows: tuple[str, ...] = ()  # lxc.cgroup2.devices.allow values (and lxc.cgroup.devices.allow)
    mounts: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (source, target, options) of NVIDIA entries
    unprivileged: bool = False
    error: str | None = None  # pct config failed

    @property
    def gpu(self) -> bool:
        """Any NVIDIA passthrough configured: a /dev/nvidia* devN or mount line, or the cgroup allowing major 195."""
        return bool(self.devs or self.mounts or any(_allow_major(a) == NVIDIA_MAJOR for a in self.allows))

    def lines(self) -> list[str]:
        """The GPU lines as pct config prints them (what `remote init` writes as comments)."""
        out = [f"{key}: {path}" + "".join(f",{k}={v}" for k, v in opts.items()) for key, path, opts in self.devs]
        out += [f"lxc.cgroup2.devices.allow: {a}" for a in self.allows if self.gpu and _nvidia_allow(a)]
        out += [f"lxc.mount.entry: {s} {t} none {','.join(o)}" for s, t, o in self.mounts]
        return out


@dataclass(frozen=True)
class HostGpu:
    kernel: str | None
    packages: dict[str, str]  # pve-manager, pve-container -> version
    loaded: str | None  # the loaded module's version (/proc/driver/nvidia/version, else /sys/module/nvidia/version)
    open_module: bool  # "Open Kernel Module"
    on_disk: str | None  # modinfo -F version nvidia: the module the next boot (or modprobe) loads
    modules: tuple[str, ...]  # loaded nvidia* modules
    majors: dict[str, int]  # /proc/devices character majors of nvidia* names
    nodes: tuple[Node, ...]
    pci: tuple[Pci, ...]
    persistenced: bool
    smi: tuple[dict, ...]  # index, bus, persistence, mig, driver
    smi_error: str | None
    configs: dict[int, CtConfig] = field(default_factory=dict)

    @property
    def uvm_major(self) -> int | None:
        return self.majors.get("nvidia-uvm")

    def node(self, path: str) -> Node | None:
        return next((n for n in self.nodes if n.path == path), None)

    @property
    def mig(self) -> bool:
        return any((g.get("mig") or "").lower() == "enabled" for g in self.smi)


@dataclass(frozen=True)
class CtGpu:
    """What one container sees (remote/sh/gpu_container.py)."""
    nodes: tuple[Node, ...]
    libs: dict[str, dict | None]  # soname -> {path, file, version} or None
    proc_version: str | None  # the module's version as /proc/driver/nvidia/version shows it in the container
    smi_driver: str | None
    smi_error: str | None  # nvidia-smi's failure text
    smi_missing: bool
    cuda_loaded: bool
    cuda_error: str | None  # why libcuda did not load
    cuda_init: int | None  # cuInit(0)'s return code
    cuda_driver: str | None  # cuDriverGetVersion, as "13.0"
    torch_cuda: str | None  # the venv's torch CUDA build (torch/version.py)
    torch_version: str | None = None

    def node(self, path: str) -> Node | None:
        return next((n for n in self.nodes if n.path == path), None)

    @property
    def lib_versions(self) -> dict[str, str]:
        return {k: v["version"] for k, v in self.libs.items() if v and v.get("version")}

    @property
    def gpu(self) -> bool:
        return bool(self.nodes or self.lib_versions or (not self.smi_missing and self.smi_driver))


@dataclass(frozen=True)
class GpuFinding:
    kind: str  # stable: one of KINDS
    severity: str  # error | warning
    message: str  # one line
    fix: str  # what to paste, or do
    ctid: int | None = None  # None: about the host itself
    host: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# -- parsing -------------------------------------------------------------------------------------------------

def module_version(text: str | None) -> tuple[str | None, bool]:
    """(version, open module?) from /proc/driver/nvidia/version's NVRM line, e.g.
    `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (...)`."""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text or "")
    return (m.group(1) if m else None), "Open Kernel Module" in (text or "")


def _version(text: str | None) -> str | None:
    m = re.fullmatch(r"\s*(\d+\.\d+(?:\.\d+)?)\s*", text or "")
    return m.group(1) if m else None


def parse_devices(text: str) -> dict[str, int]:
    """nvidia* character majors from /proc/devices (`195 nvidia`, `508 nvidia-uvm`, `509 nvidia-caps`)."""
    out: dict[str, int] = {}
    for line in text.split("Block devices:")[0].splitlines():
        m = re.fullmatch(r"\s*(\d+)\s+(nvidia\S*)\s*", line)
        if m:
            out.setdefault(m.group(2), int(m.group(1)))
    return out


def parse_nodes(text: str) -> tuple[Node, ...]:
    """`stat -c '%n %F %t %T %u %g %a'` lines (major and minor in hex)."""
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"(/dev/\S+) (character special file|directory|[\w ]+?) ([0-9a-f]+) ([0-9a-f]+) (\d+) (\d+) "
                         r"([0-7]+)", line.strip())
        if m and m.group(2) == "character special file":
            out.append(Node(m.group(1), int(m.group(3), 16), int(m.group(4), 16), int(m.group(5)), int(m.group(6)),
                            int(m.group(7), 8)))
    return tuple(out)


def parse_lspci(text: str) -> tuple[Pci, ...]:
    """`lspci -nnk -d 10de:` blocks: the slot line, then indented `Kernel driver in use:`."""
    out: list[Pci] = []
    slot: str | None = None
    name = ""
    driver: str | None = None
    for line in text.splitlines() + [""]:
        if line and not line[0].isspace():
            if slot:
                out.append(Pci(slot, name, driver))
            slot, _, name = line.partition(" ")
            driver = None
        elif "Kernel driver in use:" in line:
            driver = line.split(":", 1)[1].strip()
    if slot:
        out.append(Pci(slot, name, driver))
    # Only GPUs (VGA or 3D controllers), not their audio or USB functions.
    return tuple(p for p in out if re.search(r"\[03(00|02)\]", p.name or ""))


def parse_smi(text: str) -> tuple[tuple[dict, ...], str | None]:
    body, _, rc = text.rpartition("rc=")
    if not text.strip():
        return (), None
    if rc.strip() != "0":
        return (), body.strip()[-300:] or f"nvidia-smi exited {rc.strip()}"
    out = []
    for line in body.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5 and parts[0].isdigit():
            out.append({"index": int(parts[0]), "bus": parts[1], "persistence": parts[2], "mig": parts[3],
                        "driver": parts[4]})
    return tuple(out), None


def parse_pct_config(ctid: int, text: str) -> CtConfig:
    """The NVIDIA lines of `pct config ID` (sorted `key: value` lines, raw `lxc.*` lines last); the text's
    last line is the probe's `rc=N`."""
    body, _, rc = text.rpartition("rc=")
    if rc.strip() not in ("", "0"):
        return CtConfig(ctid, error=body.strip()[-300:] or f"pct config exited {rc.strip()}")
    devs, allows, mounts, unpriv = [], [], [], False
    for line in body.splitlines():
        if line.startswith("["):  # a snapshot's section: not the current config
            break
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if re.fullmatch(r"dev\d+", key):
            path, *opts = value.split(",")
            if path.startswith("/dev/nvidia"):
                devs.append((key, path, dict(o.partition("=")[::2] for o in opts if o)))
        elif key in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            allows.append(value)
        elif key == "lxc.mount.entry":
            parts = value.split()
            if len(parts) >= 3 and parts[0].startswith("/dev/nvidia"):
                mounts.append((parts[0], parts[1], tuple(parts[3].split(",")) if len(parts) > 3 else ()))
        elif key == "unprivileged":
            unpriv = value in ("1", "true", "yes")
    return CtConfig(ctid, tuple(devs), tuple(allows), tuple(mounts), unpriv)


def sections(text: str, mark: str) -> list[tuple[str, str, str]]:
    """(name, arg, body) of each `MARK name [arg]` section."""
    out: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(mark + " "):
            name, _, arg = line[len(mark) + 1:].partition(" ")
            out.append((name, arg, []))
        elif out:
            out[-1][2].append(line)
    return [(n, a, "\n".join(b)) for n, a, b in out]


def parse_host(text: str, mark: str) -> HostGpu:
    """remote/sh/gpu-host.sh's output -> HostGpu. Pure. Raises ValueError when the output is cut short."""
    got = sections(text, mark)
    if not got or got[-1][0] != "end":
        raise ValueError("the host probe's output ended early: " + repr(text[-300:]))
    s = {n: b for n, a, b in got if n != "pct-config"}
    loaded, open_module = module_version(s.get("proc-version"))
    loaded = loaded or _version(s.get("sys-version"))
    smi, smi_error = parse_smi(s.get("smi", ""))
    # Where /proc and /sys hide the module (a host that is itself a container), nvidia-smi's answer is the
    # loaded module's version: it only answers when the module is loaded and matches its libraries.
    loaded = loaded or next((_version(g.get("driver")) for g in smi if _version(g.get("driver"))), None)
    packages = {}
    for line in s.get("packages", "").splitlines():
        name, _, version = line.partition(" ")
        if version.strip():
            packages[name] = version.strip()
    configs = {int(a): parse_pct_config(int(a), b) for n, a, b in got if n == "pct-config" and a.isdigit()}
    return HostGpu((s.get("kernel") or "").strip() or None, packages, loaded, open_module,
                   _version(s.get("modinfo")), tuple(s.get("modules", "").split()), parse_devices(s.get("devices", "")),
                   parse_nodes(s.get("nodes", "")), parse_lspci(s.get("lspci", "")),
                   "running" in s.get("persistenced", ""), smi, smi_error, configs)


def parse_container(text: str) -> CtGpu:
    """remote/sh/gpu_container.py's output (two JSON lines; the second, cuInit's, may be missing when the
    driver crashed the probe) -> CtGpu. Pure. Raises ValueError when there is no JSON."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("the container's GPU probe printed no JSON: " + repr(text[-300:]))
    raw = json.loads(lines[0])
    cu = (json.loads(lines[1]) if len(lines) > 1 else {}).get("cuda") or {
        "loaded": False, "error": "the probe ended in cuInit (the driver crashed it?)"}
    nodes = tuple(Node(n["path"], int(n["major"]), int(n["minor"]), int(n.get("uid", 0)), int(n.get("gid", 0)),
                       int(n.get("mode", 0o666)), bool(n.get("char", True)), n.get("open"))
                  for n in raw.get("nodes") or [] if not n.get("dir") and "major" in n)
    smi = raw.get("smi") or {}
    driver = error = None
    if not smi.get("missing"):
        if smi.get("rc") == 0:
            driver = _version((smi.get("out") or "").strip().splitlines()[0] if smi.get("out", "").strip() else "")
        else:
            error = ((smi.get("out") or "") + (smi.get("err") or "")).strip()[-300:] or "nvidia-smi failed"
    v = cu.get("driver_version") or 0
    torch = raw.get("torch") or {}
    return CtGpu(nodes, dict(raw.get("libs") or {}), module_version(raw.get("proc_version"))[0], driver, error,
                 bool(smi.get("missing")), bool(cu.get("loaded")), cu.get("error"), cu.get("init"),
                 f"{v // 1000}.{v % 1000 // 10}" if v else None, torch.get("cuda"), torch.get("version"))


# -- the commands --------------------------------------------------------------------------------------------

def host_argv(pct: list[str], ctids: list[int], mark: str | None = None) -> tuple[list[str], str]:
    """The host probe's argv and its section mark (a fresh random token)."""
    mark = mark or "@@gpu-" + secrets.token_hex(8)
    return ["bash", "-c", shell.load("gpu-host"), "gpu-host", mark, *pct, "--", *map(str, ctids)], mark


def container_argv(venv: str) -> list[str]:
    """The container probe: the system python3 (the venv's may be broken), isolated, stdlib only."""
    return ["python3", "-I", "-S", "-c", CONTAINER_SOURCE, json.dumps({"venv": venv})]


def read_host(session, host, ctids: list[int]) -> HostGpu:
    """The host probe: one round trip (through the host's kept connection or mux when there is one)."""
    argv, mark = host_argv(shlex.split(host.pct), ctids)
    r = session.host_run(host, argv, deadline=60 + host.connect_timeout)
    try:
        return parse_host(r.out, mark)
    except ValueError as exc:
        raise RemoteError(f"the GPU host probe on {host.name} failed (exit {r.exit_code}): {exc}; "
                          f"{r.err.strip()[-300:]}") from None


def read_container(session, ctid: int) -> CtGpu:
    """The container probe: one round trip, with the container's system python3."""
    spec = session.config.container(ctid)
    ct = dataclasses.replace(session.container(spec.ctid, venv_on_path=False), path=DEFAULT_PATH)
    r = ct.run(container_argv(spec.venv.path), mutates=False, timeout=60, check=False, label="GPU probe")
    try:
        return parse_container(r.out)
    except ValueError as exc:
        raise RemoteError(f"container {ctid}: {exc} (exit {r.exit_code}; {r.err.strip()[-300:]})") from None



# -- the findings ----------------------------------------------------------------------------------------------

def _allow_major(value: str) -> int | None:
    """The character major a cgroup allow line names (`c 509:* rwm` -> 509), None for `a`, `b ..`, `c *:*`."""
    m = re.fullmatch(r"\s*c\s+(\d+):(\*|\d+)\s+\S+\s*", value)
    return int(m.group(1)) if m else None


def _nvidia_allow(value: str) -> bool:
    """A line that may be for an NVIDIA node: major 195, or a dynamic major (nvidia-uvm and nvidia-caps get
    one from 234 up); tun (10), fuse (10), DRI (226) and the like are not."""
    major = _allow_major(value)
    return major is not None and (major == NVIDIA_MAJOR or major >= 234)


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


def _dev_fix(ctid: int, cfg: CtConfig, paths: list[str]) -> str:
    sets = " ".join(f"-{_free_dev(cfg, i)} {p}" for i, p in enumerate(paths))
    return f"pct set {ctid} {sets} (PVE >= 8.1, as root@pam), then pct reboot {ctid}"


def host_findings(host: HostGpu, name: str | None = None) -> list[GpuFinding]:
    """What is wrong on the host itself; nothing when no container there is configured for a GPU and the host
    has no driver loaded (a CPU host)."""
    out: list[GpuFinding] = []
    wanted = [c for c in host.configs.values() if c.gpu]
    if not wanted and not host.loaded:
        return out
    add = lambda kind, message, fix: out.append(GpuFinding(kind, SEVERITY[kind], message, fix, None, name))  # noqa: E731
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
            "nvidia_modeset nvidia && modprobe nvidia && modprobe nvidia-uvm`; then pct reboot each GPU container")
    if host.loaded and wanted and ("nvidia_uvm" not in host.modules or host.uvm_major is None
                                   or not host.node("/dev/nvidia-uvm")):
        why = ("module nvidia_uvm is not loaded" if "nvidia_uvm" not in host.modules else
               "/dev/nvidia-uvm does not exist (nothing created the node since the module loaded)")
        add("host-uvm-not-loaded", f"{why} on the host: CUDA needs it (cuInit fails with 999)",
            "on the host: `modprobe nvidia-uvm && nvidia-modprobe -u -c=0`, and `echo nvidia-uvm > "
            "/etc/modules-load.d/nvidia-uvm.conf` so it loads at boot; then pct reboot each GPU container")
    if host.loaded and wanted and host.smi and not host.persistenced and any(
            (g.get("persistence") or "").lower() == "disabled" for g in host.smi):
        add("persistence-off", "persistence mode is off and nvidia-persistenced is not running: the driver is "
            "torn down between jobs (slow starts, lost clocks and ECC state)",
            "on the host: `systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1`)")
    return out


def config_findings(host: HostGpu, cfg: CtConfig, ct: CtGpu | None = None, name: str | None = None) -> list[GpuFinding]:
    """What a container's config does wrong against the host's nodes now (needs the host's facts)."""
    out: list[GpuFinding] = []
    if not cfg.gpu or not host.loaded:
        return out
    c = cfg.ctid
    add = lambda kind, message, fix: out.append(GpuFinding(kind, SEVERITY[kind], message, fix, c, name))  # noqa: E731
    required = [n for n in host.nodes if REQUIRED.match(n.path)]
    # The control nodes are needed by every container; of the GPUs, at least one (a host's GPUs are often
    # shared out between containers: one that gets GPU 0 of 8 lacks nothing).
    gpus = [n.path for n in required if re.fullmatch(r"/dev/nvidia\d+", n.path)]
    missing = [n.path for n in required if n.path not in gpus and not _passed(cfg, n.path)]
    if gpus and not any(_passed(cfg, p) for p in gpus):
        missing.insert(0, gpus[0])
    if missing:
        add("device-not-passed", f"{', '.join(missing)} exist(s) on the host but {_conf(c)} neither passes nor mounts "
            "it", _dev_fix(c, cfg, missing) + f"; or add `lxc.mount.entry: {missing[0]} {missing[0][1:]} none "
            "bind,optional,create=file` and its cgroup allow line")
    # Raw lxc keys: every node passed by a mount entry must be allowed by a cgroup line with today's major.
    mounted = [n for n in required + [n for n in host.nodes if n.path.startswith("/dev/nvidia-caps/")]
               if _passed(cfg, n.path) == "mount" and not _allowed(cfg.allows, n)]
    majors = set(host.majors.values())
    for n in mounted:
        stale = [a for a in cfg.allows if _nvidia_allow(a) and _allow_major(a) not in majors]
        if stale:
            old = stale[0].strip()
            add("cgroup-major-stale", f"the cgroup allows `{old}` but {n.path} is major {n.major} on this host now "
                f"(majors change at a reboot or a driver update)",
                f"in {_conf(c)} replace `lxc.cgroup2.devices.allow: {old}` with `lxc.cgroup2.devices.allow: "
                f"c {n.major}:* rwm`, or use `{_free_dev(cfg)}: {n.path}` (PVE >= 8.1, set as root@pam), then "
                f"pct reboot {c}")
        else:
            add("cgroup-major-stale", f"{n.path} (major {n.major}) is mounted into the container but no "
                "lxc.cgroup2.devices.allow line allows its major: opening it fails with EPERM",
                f"add `lxc.cgroup2.devices.allow: c {n.major}:* rwm` to {_conf(c)}, or use "
                f"`{_free_dev(cfg)}: {n.path}` (PVE >= 8.1, set as root@pam), then pct reboot {c}")
        break  # one line fixes every node of that major; the next probe names what is left
    for src, _, opts in cfg.mounts:
        if "optional" in opts and not host.node(src) and REQUIRED.match(src) and not src.startswith("/dev/nvidia-caps"):
            add("mount-optional-missing", f"`lxc.mount.entry: {src} ...` is optional and {src} does not exist on the "
                "host: the container starts without it, silently",
                ("on the host `nvidia-modprobe -u -c=0` (it creates /dev/nvidia-uvm)" if "uvm" in src else
                 "load the driver on the host (`modprobe nvidia`)") + f", then pct reboot {c}; `devN: {src}` is "
                "refused when the node is missing, so it never fails silently")
    if host.mig and host.majors.get("nvidia-caps") is not None and not _passed(cfg, "/dev/nvidia-caps/nvidia-cap1"):
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


def container_findings(ct: CtGpu, ctid: int, host: HostGpu | None = None, cfg: CtConfig | None = None,
                       name: str | None = None) -> list[GpuFinding]:
    """What a container sees wrong; with the host's facts the fixes name the host's versions and majors.
    Nothing at all for a CPU container (no node, no driver library, no NVIDIA line in its config)."""
    out: list[GpuFinding] = []
    if not ct.gpu and not (cfg and cfg.gpu):
        return out
    add = lambda kind, message, fix: out.append(GpuFinding(kind, SEVERITY[kind], message, fix, ctid, name))  # noqa: E731
    module = (host.loaded if host else None) or ct.proc_version
    if host is not None and not host.loaded:
        return out  # host-no-driver says it all
    ctl = ct.node("/dev/nvidiactl")
    gpus = [n for n in ct.nodes if re.fullmatch(r"/dev/nvidia\d+", n.path)]
    uvm_host = host.node("/dev/nvidia-uvm") if host else None
    if (ctl or gpus) and not ct.node("/dev/nvidia-uvm") and not (host and not uvm_host):
        if cfg and _passed(cfg, "/dev/nvidia-uvm"):
            fix = f"pct reboot {ctid} (its config passes /dev/nvidia-uvm; the node was not there when it started)"
        elif cfg:
            fix = _dev_fix(ctid, cfg, ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"])
        else:
            major = host.uvm_major if host else None
            fix = (f"pass /dev/nvidia-uvm into {_conf(ctid)}: `dev0: /dev/nvidia-uvm` (PVE >= 8.1, set as root@pam) or "
                   f"`lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file` with "
                   f"`lxc.cgroup2.devices.allow: c {major or '<nvidia-uvm major in /proc/devices>'}:* rwm`; then "
                   f"pct reboot {ctid}")
        add("container-uvm-missing", "/dev/nvidia-uvm is not in the container: nvidia-smi works but CUDA does not "
            "(cuInit 999, torch.cuda.is_available() False)", fix)
    libs = ct.lib_versions
    if (ct.nodes or (cfg and cfg.gpu)) and not any(ct.libs.values()):
        v = module or "<the host's module version>"
        add("no-driver-libs", "no NVIDIA driver library (libcuda.so.1, libnvidia-ml.so.1) is found by the container's "
            "loader: couldn't find libnvidia-ml.so", f"install the driver's user space of version {v} in the container "
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
            fix = (f"install the driver's user space of version {module} in the container (`sh NVIDIA-Linux-x86_64-"
                   f"{module}.run --no-kernel-module`, or the distribution's {module} packages), remove the other "
                   "version's libraries, then `ldconfig`")
        add("driver-lib-mismatch", f"the container's driver libraries ({have}) are not the host's loaded module "
            f"{module}: Failed to initialize NVML: Driver/library version mismatch", fix)
    denied = [n for n in ct.nodes if n.open_errno in (1, 13) and REQUIRED.match(n.path)]
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
        if not any(f.kind == "device-permission" for f in out):
            add("device-permission", f"permission denied opening {n.path} in the container: {what}", fix)
    if ct.cuda_loaded and ct.cuda_init not in (None, 0):
        code = ct.cuda_init
        cause = {999: "usually /dev/nvidia-uvm missing or not allowed", 803: "the libraries and the module differ",
                 100: "no GPU node passed", 34: "a stub libcuda is found first"}.get(code, "see the other findings")
        add("cuda-init-failed", f"cuInit(0) returned {code} ({CUDA_ERRORS.get(code, 'CUDA error')}): {cause}",
            "fix the findings above, then check again with `remote doctor --gpu -c " + str(ctid) + "`"
            if len(out) else f"check the host's driver (`remote doctor --gpu -c {ctid}`) and pct reboot {ctid}")
    return out


def findings(host: HostGpu | None, ctid: int, ct: CtGpu | None, name: str | None = None) -> list[GpuFinding]:
    """A container's findings: its config against the host's nodes, then what it sees (host part excluded)."""
    cfg = host.configs.get(ctid) if host else None
    out = config_findings(host, cfg, ct, name) if host and cfg else []
    if ct is not None:
        seen = {f.kind for f in out}
        out += [f for f in container_findings(ct, ctid, host, cfg, name)
                if f.kind not in seen or f.kind == "cuda-init-failed"]
    return out


def versions(host: HostGpu | None, ct: CtGpu | None) -> dict:
    """What the known-good record keeps: the host's module version and the container's library versions."""
    return {"host_module": (host.loaded if host else None) or (ct.proc_version if ct else None),
            "driver_libs": ct.lib_versions if ct else {}}
