"""The GPU lines of a container's Proxmox config, computed purely: what `remote create` writes and what
`remote gpu fix` repairs, from the host's facts (remote.facts.gpu.HostGpu) and nothing else.

    parse_selection("all" | "none" | "0,1")  -> Selection          (--gpu's text; GpuConfigError when malformed)
    gpu_nodes(host)                          -> the host's GPU indices, /dev/nvidiaN numbers
    wanted_nodes(selection, host)            -> the host nodes the container needs, in order
    wanted_lines(selection, host, ...)       -> Wanted: {path: devN options} and the driver's mount
    plan(current_config_text, wanted)        -> Plan: `pct set` arguments, the diff, raw lines to drop

Only `devN` lines (PVE >= 8.1: Proxmox stats the host node at every start and writes the cgroup rule itself,
so no major can go stale) and one `mpN` bind mount of the driver's user space: never an `lxc.cgroup.*` key
(cgroup v1 keys are ignored by LXC on PVE 9; raw cgroup2 lines hold numbers that go stale after a reboot).
A GPU index is the number of the host's /dev/nvidiaN node (nvidia-smi's `minor_number`).
The driver's user space: remote/sh/nvidia-userspace.sh fills USERSPACE_HOST on the host with the host's own
files of the loaded module's version (libcuda.so.V, libnvidia-ml.so.V, ..., nvidia-smi), which the container
sees read-only at USERSPACE_CT (docs/guide/bare-node.md says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import GpuConfigError
from ..facts.gpu.host import HostGpu

USERSPACE_HOST = "/var/lib/remote/nvidia"  # on the host: the loaded driver's user-space files (lib/, bin/, VERSION)
USERSPACE_CT = "/opt/remote/nvidia"  # where the container sees it, read-only
VIDEO_GID = 44  # the `video` group of Debian's and Ubuntu's templates (Proxmox's own)
CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")  # every GPU container needs these
DEV_MAX = 256  # devN: N < 256
GPU_NODE = re.compile(r"/dev/nvidia(\d+)")


@dataclass(frozen=True)
class Selection:
    """--gpu: every GPU of the host (`all`), none (`none`), or the listed /dev/nvidiaN numbers."""

    kind: str  # "all" | "none" | "list"
    indices: tuple[int, ...] = ()

    def __str__(self) -> str:
        return self.kind if self.kind != "list" else ",".join(map(str, self.indices))

    @property
    def none(self) -> bool:
        return self.kind == "none"


def parse_selection(text: str | None) -> Selection:
    """`all`, `none` (or nothing) or comma-separated GPU indices (`0,1`); anything else: GpuConfigError."""
    t = (text or "none").strip().lower()
    if t in ("all", "none"):
        return Selection(t)
    parts = [p.strip() for p in t.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise GpuConfigError(f"--gpu {text!r}: write all, none or GPU indices like 0,1")
    indices = tuple(sorted({int(p) for p in parts}))
    return Selection("list", indices)


def gpu_nodes(host: HostGpu) -> tuple[int, ...]:
    """The GPU indices the host has: its /dev/nvidiaN nodes, else the indices nvidia-smi lists."""
    from_nodes = sorted(int(m.group(1)) for n in host.nodes if (m := GPU_NODE.fullmatch(n.path)))
    return tuple(from_nodes) or tuple(sorted(int(g["index"]) for g in host.smi))


def _have(indices: tuple[int, ...]) -> str:
    return ", ".join(map(str, indices)) if indices else "none"


def chosen(selection: Selection, host: HostGpu) -> tuple[int, ...]:
    """The GPU indices a selection names on this host. Refused (GpuConfigError, one line) when the host has
    no NVIDIA module loaded and GPUs are asked for, or an index the host lacks is named."""
    if selection.none:
        return ()
    if not host.loaded:
        raise GpuConfigError(f"--gpu {selection}: the host has no NVIDIA kernel module loaded (/proc/driver/nvidia "
                             "is absent): install the driver on the host and `modprobe nvidia`, or use --gpu none")
    have = gpu_nodes(host)
    if not have:
        raise GpuConfigError(f"--gpu {selection}: the NVIDIA module {host.loaded} is loaded but the host has no "
                             "/dev/nvidiaN node: run `nvidia-smi` on the host once (it makes them), then again")
    if selection.kind == "all":
        return have
    missing = [i for i in selection.indices if i not in have]
    if missing:
        raise GpuConfigError(f"--gpu {selection}: the host has no GPU {_have(tuple(missing))} "
                             f"(it has: {_have(have)})")
    return selection.indices


def wanted_nodes(selection: Selection, host: HostGpu) -> list[str]:
    """The host nodes a container with these GPUs needs: each chosen /dev/nvidiaN, then nvidiactl, nvidia-uvm,
    nvidia-uvm-tools, and with MIG on the host the /dev/nvidia-caps nodes of the chosen GPUs' instances. The
    uvm nodes are named even where the host lacks them yet (create makes them first: `nvidia-modprobe -u -c 0`)."""
    indices = chosen(selection, host)
    if not indices:
        return []
    nodes = [f"/dev/nvidia{i}" for i in indices] + list(CONTROL)
    if host.mig:
        nodes += mig_caps(host, indices)
    return nodes


def mig_caps(host: HostGpu, indices: tuple[int, ...]) -> list[str]:
    """The /dev/nvidia-caps nodes that open the GPU and compute instances of these GPUs (mig-minors'
    `gpuN/giM/access`, `gpuN/giM/ciK/access`): never `config` (nvidia-cap1: create and destroy instances,
    which other containers share) nor `monitor` (nvidia-cap2), nor another GPU's instances."""
    prefixes = tuple(f"gpu{i}/" for i in indices)
    return sorted((n.path for n in host.nodes if n.path.startswith("/dev/nvidia-caps/")
                   and host.mig_minors.get(n.minor, "").startswith(prefixes)
                   and host.mig_minors[n.minor].endswith("/access")),
                  key=lambda p: int(re.sub(r"\D", "", p) or 0))


@dataclass(frozen=True)
class Wanted:
    """The GPU part of a container's config: devN options per host node (ordered), and the driver's mount."""

    devs: tuple[tuple[str, str], ...] = ()  # (path, value as `pct set --devN` takes it: "/dev/nvidia0,gid=44")
    mount: str | None = None  # the mpN value: "/var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1"

    @property
    def empty(self) -> bool:
        return not self.devs and self.mount is None


def dev_value(path: str, gid: int = VIDEO_GID, mode: str = "0666") -> str:
    """One devN value: the host node, the group it has in the container (the container's own gid: Proxmox
    maps it for an unprivileged container) and its mode (CUDA opens the nodes read-write as any user)."""
    if not 0 <= gid < 65536:
        raise GpuConfigError(f"gid {gid}: a group id inside the container is 0..65535 (the video group's, e.g. 44)")
    return f"{path},gid={gid},mode={mode}"


def mount_value(source: str = USERSPACE_HOST, target: str = USERSPACE_CT) -> str:
    """The mpN value of the driver's user space: the host folder, bind-mounted read-only."""
    return f"{source},mp={target},ro=1"


def wanted_lines(selection: Selection, host: HostGpu, *, gid: int = VIDEO_GID, userspace: bool = True) -> Wanted:
    """What the container's config should hold for this selection on this host (nothing for `none`)."""
    nodes = wanted_nodes(selection, host)
    if not nodes:
        return Wanted()
    if len(nodes) > DEV_MAX:
        raise GpuConfigError(f"--gpu {selection}: {len(nodes)} device nodes, more than Proxmox's {DEV_MAX} devN lines")
    # A MIG access node is read-only (0444, as the driver makes it): reading it is what grants the instance.
    return Wanted(tuple((p, dev_value(p, gid, "0444" if p.startswith("/dev/nvidia-caps/") else "0666"))
                        for p in nodes), mount_value() if userspace else None)


def parse_config(text: str) -> dict[str, str]:
    """`pct config ID` -> {key: value} of the current config (a snapshot's `[section]` ends it; raw `lxc.*`
    keys that repeat are joined by newlines)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("["):
            break
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key != key.strip() or " " in key:
            continue
        key, value = key.strip(), value.strip()
        out[key] = f"{out[key]}\n{value}" if key in out and key.startswith("lxc.") else value
    return out


def _dev_path(value: str) -> str:
    first = value.split(",")[0]
    return first.partition("=")[2] if first.startswith("path=") else first


def _nvidia_raw(key: str, value: str) -> bool:
    """A raw lxc line about NVIDIA passthrough: a mount entry of /dev/nvidia*, or any cgroup device rule
    that names major 195 or a dynamic major (the uvm's and caps', 234 and up)."""
    if key == "lxc.mount.entry":
        return value.split()[0].startswith("/dev/nvidia") if value.split() else False
    if key in ("lxc.cgroup.devices.allow", "lxc.cgroup2.devices.allow"):
        m = re.fullmatch(r"\s*c\s+(\d+):\S+\s+\S+\s*", value)
        return m is not None and (int(m.group(1)) == 195 or int(m.group(1)) >= 234)
    return False


@dataclass(frozen=True)
class Plan:
    """From a container's current config to the wanted GPU lines: `pct set` arguments and a readable diff.
    `raw` lists the raw lxc lines of /etc/pve/lxc/ID.conf that pct cannot remove (an NVIDIA cgroup or mount
    line), each to be deleted from the file by hand or by `remote gpu fix`."""

    set: tuple[tuple[str, str], ...] = ()  # (key, value): devN / mpN to write
    delete: tuple[str, ...] = ()  # keys to remove
    raw: tuple[str, ...] = ()  # `key: value` raw lines to drop from the file
    diff: tuple[str, ...] = field(default=())  # `- key: old`, `+ key: new` lines

    @property
    def empty(self) -> bool:
        return not self.set and not self.delete and not self.raw

    def pct_args(self) -> list[str]:
        """The arguments after `pct set CTID` ([] when there is nothing pct can do)."""
        args: list[str] = []
        for key, value in self.set:
            args += [f"--{key}", value]
        if self.delete:
            args += ["--delete", ",".join(self.delete)]
        return args


def _free(prefix: str, used: set[int], limit: int) -> str:
    for i in range(limit):
        if i not in used:
            used.add(i)
            return f"{prefix}{i}"
    raise GpuConfigError(f"no free {prefix}N key left in the container's config (all {limit} are used)")


def plan(current: str | dict[str, str], wanted: Wanted) -> Plan:
    """The change from `current` (pct config's text, or parse_config's dict) to `wanted`: an NVIDIA devN line
    kept when equal, rewritten in place when its options differ, removed when not wanted; a missing one added
    at the lowest free devN; the driver's mpN likewise (its source is USERSPACE_HOST); raw NVIDIA lxc lines
    (cgroup rules, mount entries) listed to drop. An empty plan: the config is already as wanted."""
    cfg = parse_config(current) if isinstance(current, str) else dict(current)
    want = dict(wanted.devs)
    sets: list[tuple[str, str]] = []
    deletes: list[str] = []
    diff: list[str] = []
    dev_used = {int(k[3:]) for k in cfg if re.fullmatch(r"dev\d+", k)}
    mp_used = {int(k[2:]) for k in cfg if re.fullmatch(r"mp\d+", k)}
    placed: set[str] = set()
    for key in sorted((k for k in cfg if re.fullmatch(r"dev\d+", k)), key=lambda k: int(k[3:])):
        path = _dev_path(cfg[key])
        if not path.startswith("/dev/nvidia"):
            continue
        if path in want and path not in placed:
            placed.add(path)
            if cfg[key] != want[path]:
                sets.append((key, want[path]))
                diff += [f"- {key}: {cfg[key]}", f"+ {key}: {want[path]}"]
        else:  # not wanted, or a second line for a node already placed
            deletes.append(key)
            diff.append(f"- {key}: {cfg[key]}")
    for path, value in wanted.devs:
        if path not in placed:
            key = _free("dev", dev_used, DEV_MAX)
            sets.append((key, value))
            diff.append(f"+ {key}: {value}")
    mine = [k for k in sorted(cfg, key=lambda k: int(k[2:]) if re.fullmatch(r"mp\d+", k) else -1)
            if re.fullmatch(r"mp\d+", k) and cfg[k].split(",")[0] == USERSPACE_HOST]
    if wanted.mount is not None:
        if mine:
            if cfg[mine[0]] != wanted.mount:
                sets.append((mine[0], wanted.mount))
                diff += [f"- {mine[0]}: {cfg[mine[0]]}", f"+ {mine[0]}: {wanted.mount}"]
            mine = mine[1:]
        else:
            key = _free("mp", mp_used, DEV_MAX)
            sets.append((key, wanted.mount))
            diff.append(f"+ {key}: {wanted.mount}")
    for key in mine:
        deletes.append(key)
        diff.append(f"- {key}: {cfg[key]}")
    raw = tuple(f"{k}: {v}" for k in cfg if k.startswith("lxc.") for v in cfg[k].split("\n") if _nvidia_raw(k, v))
    diff += [f"- {line}" for line in raw]
    order = {k: i for i, k in enumerate(sorted({k for k, _ in sets} | set(deletes), key=_key_order))}
    return Plan(tuple(sorted(sets, key=lambda kv: order[kv[0]])), tuple(sorted(deletes, key=lambda k: order[k])), raw,
                tuple(diff))


def _key_order(key: str) -> tuple[str, int]:
    m = re.fullmatch(r"([a-z]+)(\d+)", key)
    return (m.group(1), int(m.group(2))) if m else (key, -1)


def spec_lines(wanted: Wanted) -> list[str]:
    """The wanted lines as `pct config` prints them, devN numbered from 0 (a new container's)."""
    lines = [f"dev{i}: {value}" for i, (_, value) in enumerate(wanted.devs)]
    return lines + ([f"mp0: {wanted.mount}"] if wanted.mount else [])
