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
from ..target import resolve
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
            "mig-caps-missing": "error", "persistence-off": "warning", "container-node-missing": "error",
            "container-node-wrong": "error"}
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
    open_errno: int | None = None  # the container probe's open(O_RDWR): None opened, 1 EPERM, 13 EACCES, 6 ENXIO
    mount: str | None = None  # in a container: the root of what is mounted on the node (`/null`), if anything

    @property
    def numbers(self) -> str:
        return f"{self.major}:{self.minor}"


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
    drivers: dict[int, tuple[str, ...]] = field(default_factory=dict)  # every character major of /proc/devices

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
    drivers: dict[int, tuple[str, ...]] = field(default_factory=dict)  # /proc/devices as the container reads it

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
    node: str | None = None  # the device node it is about (/dev/nvidiactl), where it is about one

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


def parse_char_devices(text: str) -> dict[int, tuple[str, ...]]:
    """Every character major of /proc/devices with the names its driver registered (`4: (tty, ttyS)`)."""
    out: dict[int, tuple[str, ...]] = {}
    for line in text.split("Block devices:")[0].splitlines():
        m = re.fullmatch(r"\s*(\d+)\s+(\S.*?)\s*", line)
        if m:
            out[int(m.group(1))] = out.get(int(m.group(1)), ()) + (m.group(2),)
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
                   "running" in s.get("persistenced", ""), smi, smi_error, configs,
                   parse_char_devices(s.get("devices", "")))


def _typed(value, types, where: str, *, none: bool = True):
    """`value` where it is one of `types` (None too where `none`), else ValueError naming `where` and what it
    was: the probe's answer is untrusted, and a wrong type is one container's error, not a crash."""
    types = types if isinstance(types, tuple) else (types,)
    if (value is None and none) or (isinstance(value, types) and (bool in types or not isinstance(value, bool))):
        return value
    want = " or ".join(t.__name__ for t in types)
    raise ValueError(f"the container's GPU probe gave {where} as {type(value).__name__} "
                     f"{json.dumps(value)[:60]}, not {want}")


def _node(n, i: int) -> Node | None:
    where = f"nodes[{i}]"
    _typed(n, dict, where, none=False)
    path = _typed(n.get("path"), str, where + ".path", none=False)
    if n.get("dir") or "major" not in n:
        return None
    get = lambda key, default: _typed(n.get(key, default), int, f"{where}.{key}", none=False)  # noqa: E731
    return Node(path, get("major", 0), get("minor", 0), get("uid", 0), get("gid", 0), get("mode", 0o666),
                bool(_typed(n.get("char", True), bool, where + ".char", none=False)),
                _typed(n.get("open"), int, where + ".open"), _typed(n.get("mount"), str, where + ".mount"))


def _lib(soname, lib) -> dict | None:
    _typed(lib, dict, f"libs[{json.dumps(soname)}]")
    if lib is not None:
        for key in ("path", "file", "version"):
            _typed(lib.get(key), str, f"libs[{json.dumps(soname)}].{key}")
    return lib


def parse_container(text: str) -> CtGpu:
    """remote/sh/gpu_container.py's output (two JSON lines; the second, cuInit's, may be missing when the
    driver crashed the probe) -> CtGpu. Pure. Raises ValueError when there is no JSON, or a value of the
    wrong type (the probe's answer is untrusted: a container may print anything)."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("the container's GPU probe printed no JSON: " + repr(text[-300:]))
    raw = _typed(json.loads(lines[0]), dict, "its answer", none=False)
    second = _typed(json.loads(lines[1]), dict, "cuInit's answer", none=False) if len(lines) > 1 else {}
    cu = _typed(second.get("cuda"), dict, "cuda") or {
        "loaded": False, "error": "the probe ended in cuInit (the driver crashed it?)"}
    nodes = tuple(n for n in (_node(x, i) for i, x in enumerate(_typed(raw.get("nodes"), list, "nodes") or []))
                  if n is not None)
    libs = {_typed(k, str, "a library name", none=False): _lib(k, v)
            for k, v in (_typed(raw.get("libs"), dict, "libs") or {}).items()}
    smi = _typed(raw.get("smi"), dict, "smi") or {}
    out, err = _typed(smi.get("out"), str, "smi.out") or "", _typed(smi.get("err"), str, "smi.err") or ""
    rc = _typed(smi.get("rc"), int, "smi.rc")
    driver = error = None
    if not smi.get("missing"):
        if rc == 0:
            driver = _version(out.strip().splitlines()[0] if out.strip() else "")
        else:
            error = (out + err).strip()[-300:] or (f"nvidia-smi exited {rc}" if rc is not None else "nvidia-smi failed")
    v = _typed(cu.get("driver_version"), int, "cuda.driver_version") or 0
    torch = _typed(raw.get("torch"), dict, "torch") or {}
    devices = _typed(raw.get("devices"), str, "devices") or ""
    return CtGpu(nodes, libs, module_version(_typed(raw.get("proc_version"), str, "proc_version"))[0], driver, error,
                 bool(smi.get("missing")), bool(cu.get("loaded")), _typed(cu.get("error"), str, "cuda.error"),
                 _typed(cu.get("init"), int, "cuda.init"), f"{v // 1000}.{v % 1000 // 10}" if v else None,
                 _typed(torch.get("cuda"), str, "torch.cuda"), _typed(torch.get("version"), str, "torch.version"),
                 parse_char_devices(devices))


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
    spec = resolve(session, ctid).spec
    ct = dataclasses.replace(session.container_for(spec, venv_on_path=False), path=DEFAULT_PATH)
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
    add = lambda kind, message, fix, node=None: out.append(  # noqa: E731
        GpuFinding(kind, SEVERITY[kind], message, fix, c, name, node))
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
                  name: str | None = None) -> list[GpuFinding]:
    """Each node the container needs against the host's (major:minor, character device, opens): one finding
    per wrong or missing node, naming it, what it is and what it should be. Needed: /dev/nvidiactl,
    /dev/nvidia-uvm, every GPU node the container has or its config passes (one at least),
    /dev/nvidia-uvm-tools and /dev/nvidia-caps/* where it has them or its config passes them."""
    out: list[GpuFinding] = []
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
            out.append(GpuFinding(kind, SEVERITY[kind], f"{path} is not in the container" +
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
        out.append(GpuFinding("container-node-wrong", SEVERITY["container-node-wrong"],
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
                       name: str | None = None) -> list[GpuFinding]:
    """What a container sees wrong; with the host's facts the fixes name the host's versions and majors.
    Nothing at all for a CPU container (no node, no driver library, no NVIDIA line in its config)."""
    out: list[GpuFinding] = []
    if not ct.gpu and not (cfg and cfg.gpu):
        return out
    add = lambda kind, message, fix, node=None: out.append(  # noqa: E731
        GpuFinding(kind, SEVERITY[kind], message, fix, ctid, name, node))
    module = (host.loaded if host else None) or ct.proc_version
    if host is not None and not host.loaded:
        return out  # host-no-driver says it all
    out += node_findings(ct, ctid, host, cfg, name)
    named = {f.node for f in out}
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
        if not any(f.kind == "device-permission" for f in out):
            add("device-permission", f"permission denied opening {n.path} in the container: {what}", fix, n.path)
    if ct.cuda_loaded and ct.cuda_init not in (None, 0):
        code = ct.cuda_init
        nodes = [f"{f.node} {'wrong' if f.kind == 'container-node-wrong' else 'missing'}" for f in out
                 if f.node and f.kind in ("container-node-wrong", "container-node-missing", "container-uvm-missing")]
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
    return out


def findings(host: HostGpu | None, ctid: int, ct: CtGpu | None, name: str | None = None) -> list[GpuFinding]:
    """A container's findings: its config against the host's nodes, then what it sees (host part excluded)."""
    cfg = host.configs.get(ctid) if host else None
    out = config_findings(host, cfg, ct, name) if host and cfg else []
    if ct is not None:
        # The config's finding about a node says it first: the container's about the same node is left out.
        seen, nodes = {f.kind for f in out}, {f.node for f in out if f.node}
        out += [f for f in container_findings(ct, ctid, host, cfg, name)
                if f.kind == "cuda-init-failed" or (f.kind not in seen and f.node not in nodes)]
    return out


def versions(host: HostGpu | None, ct: CtGpu | None) -> dict:
    """What the known-good record keeps: the host's module version and the container's library versions."""
    return {"host_module": (host.loaded if host else None) or (ct.proc_version if ct else None),
            "driver_libs": ct.lib_versions if ct else {}}
