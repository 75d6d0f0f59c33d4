"""The Proxmox host's side of GPU passthrough: its NVIDIA module, device nodes, PCI functions and each
container's NVIDIA config lines, read by remote/sh/gpu-host.sh in one round trip and parsed here, purely.

Node and the version and /proc/devices parsers serve the container's side too (remote.facts.gpu.container).
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass, field

from ... import shell
from ...errors import RemoteError

NVIDIA_MAJOR = 195  # nvidia0.., nvidiactl (255), nvidia-modeset (254): fixed; nvidia-uvm and nvidia-caps are dynamic
REQUIRED = re.compile(r"^/dev/(nvidia\d+|nvidiactl|nvidia-uvm)$")  # what CUDA opens


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
    mig_minors: dict[int, str] = field(default_factory=dict)  # a /dev/nvidia-caps minor -> `gpu0/gi1/access`

    @property
    def uvm_major(self) -> int | None:
        return self.majors.get("nvidia-uvm")

    def node(self, path: str) -> Node | None:
        return next((n for n in self.nodes if n.path == path), None)

    @property
    def mig(self) -> bool:
        return any((g.get("mig") or "").lower() == "enabled" for g in self.smi)


def _allow_major(value: str) -> int | None:
    """The character major a cgroup allow line names (`c 509:* rwm` -> 509), None for `a`, `b ..`, `c *:*`."""
    m = re.fullmatch(r"\s*c\s+(\d+):(\*|\d+)\s+\S+\s*", value)
    return int(m.group(1)) if m else None


def _nvidia_allow(value: str) -> bool:
    """A line that may be for an NVIDIA node: major 195, or a dynamic major (nvidia-uvm and nvidia-caps get
    one from 234 up); tun (10), fuse (10), DRI (226) and the like are not."""
    major = _allow_major(value)
    return major is not None and (major == NVIDIA_MAJOR or major >= 234)


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
                   parse_char_devices(s.get("devices", "")), parse_mig_minors(s.get("mig-minors", "")))


def parse_mig_minors(text: str) -> dict[int, str]:
    """/proc/driver/nvidia-caps/mig-minors lines (`config 1`, `gpu0/gi1/ci0/access 13`) -> {minor: name}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[int(parts[1])] = parts[0]
    return out


def host_argv(pct: list[str], ctids: list[int], mark: str | None = None) -> tuple[list[str], str]:
    """The host probe's argv and its section mark (a fresh random token)."""
    mark = mark or "@@gpu-" + secrets.token_hex(8)
    return ["bash", "-c", shell.load("gpu-host"), "gpu-host", mark, *pct, "--", *map(str, ctids)], mark


def read_host(session, host, ctids: list[int]) -> HostGpu:
    """The host probe: one round trip (through the host's kept connection or mux when there is one)."""
    argv, mark = host_argv(shlex.split(host.pct), ctids)
    r = session.host_run(host, argv, deadline=60 + host.connect_timeout)
    try:
        return parse_host(r.out, mark)
    except ValueError as exc:
        raise RemoteError(f"the GPU host probe on {host.name} failed (exit {r.exit_code}): {exc}; "
                          f"{r.err.strip()[-300:]}") from None
