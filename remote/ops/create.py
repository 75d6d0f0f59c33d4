"""`remote create`: from a Proxmox host to a container that trains, with its GPUs passed and proven.

In order, each step an event with its time in the result (remote.results.Created):
    preflight   root login; the id free (or already made as asked: a no-op); the template or the clone source
                and the storage there; the NVIDIA module loaded, the chosen GPUs' nodes, the uvm nodes made
                when absent (`nvidia-modprobe -u -c 0`); the driver's user space of the loaded version in
                /var/lib/remote/nvidia (remote/sh/nvidia-userspace.sh)
    create      `pct create` (or `pct clone`, then `pct set` of the resources)
    gpu config  the devN and mpN lines (remote.ops.gpuconfig: a plan from the new container's config)
    start       `pct start`
    packages    python3, git and CA certificates from the template's package manager where absent
    driver      the mounted user space made the loader's (remote/sh/nvidia-link.sh)
    proof       cuInit(0) == 0, nvidia-smi lists the chosen GPUs, doctor --gpu's findings: none an error
    hosts file  the entry added (comments and the rest kept)
A failure after `pct create` destroys the half-made container, or names what is left and the command that
removes it (CreateError.left). `dry`: the reads run, every command that changes something is reported
instead. Needs root on the host (`devN` and bind mounts are root@pam's only).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import unquote

from .. import shell
from ..errors import CreateError, CreateRefused, RemoteError
from ..facts import gpu
from ..results import Created, CreateStep
from ..sudo import program_path
from ..target import HostTarget
from ..transport.pct import DEFAULT_PATH, Container, pct_argv
from . import gpuconfig

MARK = "remote create:"  # the description's first words: a container remote made, and from what
PENDING = "remote create (unfinished):"  # the same until its last step: a container whose create did not finish
HOSTNAME = "ct{ctid}"
NET0 = "name=eth0,bridge=vmbr0,ip=dhcp"
STORAGE_ORDER = ("local-lvm", "local-zfs", "local")  # without --storage: the first of these the host has
VENV_FOR_PROBE = "/root/venv"
ALPINE = re.compile(r"^alpine[-_]", re.IGNORECASE)  # a template's name (alpine-3.20-default_...): not supported


@dataclass(frozen=True)
class CreateSpec:
    """What `remote create` is asked for. `template`: a vztmpl volume id; or `clone`: a container to copy."""

    ctid: int
    template: str | None = None
    clone: int | None = None
    gpu: str | None = None  # all | none | 0,1; None: not asked (none, the plan saying what the host has)
    cores: int = 4
    memory: int = 8192  # MiB
    disk: int = 32  # GiB
    storage: str | None = None  # None: the first of STORAGE_ORDER the host has
    unprivileged: bool = True
    net0: str | None = None  # pct's net0 value; None: NET0 (eth0 on vmbr0, DHCP)

    @property
    def network(self) -> str:
        return self.net0 or NET0

    @property
    def bridge(self) -> str:
        return dict(p.split("=", 1) for p in self.network.split(",") if "=" in p).get("bridge", "")

    @property
    def source(self) -> str:
        return self.template if self.template else f"clone {self.clone}"

    @property
    def gpus(self) -> str:
        return self.gpu or "none"

    def description(self, *, done: bool = True) -> str:
        """What the container's description records (one line): the source and the GPU selection, marked
        unfinished until create's last step."""
        return f"{MARK if done else PENDING} {self.source} gpu={self.gpus}"


def check_spec(spec: CreateSpec) -> gpuconfig.Selection:
    """Bad input before anything connects: one clear line (CreateRefused or GpuConfigError, exit 2)."""
    if not 100 <= spec.ctid <= 999_999_999:
        raise CreateRefused(f"CTID {spec.ctid}: Proxmox's ids are 100 to 999999999")
    if (spec.template is None) == (spec.clone is None):
        raise CreateRefused("give --template VOLID (e.g. local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst) "
                            "or --clone CTID, one of the two")
    if spec.template is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*:vztmpl/[^/\s]+\.tar\.(gz|xz|zst)",
                                                      spec.template):
        raise CreateRefused(f"--template {spec.template!r}: a template volume looks like "
                            "STORAGE:vztmpl/NAME.tar.zst (`pveam list local` lists them)")
    for name, value, low in (("--cores", spec.cores, 1), ("--memory", spec.memory, 16), ("--disk", spec.disk, 1)):
        if value < low:
            raise CreateRefused(f"{name} {value}: at least {low}")
    if spec.storage is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", spec.storage):
        raise CreateRefused(f"--storage {spec.storage!r}: a Proxmox storage name (`pvesm status` lists them)")
    if spec.template is not None and ALPINE.search(spec.template.split("/", 1)[-1]):
        raise CreateRefused(f"--template {spec.template}: Alpine is not supported: every step remote runs in a "
                            "container is bash with GNU env (`env -C`), which Alpine's busybox lacks; use a Debian or "
                            "Ubuntu template (`pveam available --section system`)")
    if spec.net0 is not None:
        parts = [p.partition("=") for p in spec.net0.split(",")]
        keys = [k for k, sep, v in parts if sep and v]
        bad = [k + sep + v for k, sep, v in parts if not sep or not v or not re.fullmatch(r"[A-Za-z0-9_.:/=-]+", v)]
        if bad or "name" not in keys or "bridge" not in keys or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", spec.bridge):
            raise CreateRefused(f"--net0 {spec.net0!r}: Proxmox's net0 value, comma-separated KEY=VALUE with name and "
                                f"bridge at least, e.g. {NET0} or name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1"
                                + (f" (not KEY=VALUE: {', '.join(bad)})" if bad else ""))
    return gpuconfig.parse_selection(spec.gpu)


def parse_pveam_list(text: str) -> list[str]:
    """`pveam list STORAGE`: the volume ids of its first column (`local:vztmpl/NAME.tar.zst   123.45MB`)."""
    return [line.split()[0] for line in text.splitlines()[1:] if ":vztmpl/" in (line.split() or [""])[0]]


def parse_storages(text: str) -> list[str]:
    """`pvesm status`: the storage names."""
    return [line.split()[0] for line in text.splitlines()[1:] if line.split()]


def marked(config: dict[str, str]) -> str | None:
    """The description's first line where it carries remote create's mark, finished or not (else None)."""
    first = next(iter(unquote(config.get("description", "")).splitlines()), "")
    return first if first.startswith((MARK, PENDING)) else None


def differences(config: dict[str, str], spec: CreateSpec, storage: str) -> list[str]:
    """How an existing container made by remote create differs from `spec` (`cores 4 (asked: 8)`)."""
    out = []
    made = marked(config)
    m = re.search(r"\bgpu=(\S+)", made) if made else None
    gpu_was = m.group(1) if m else "?"
    source = made.split(":", 1)[1].strip().rsplit(" gpu=", 1)[0] if made else "?"
    rootfs = config.get("rootfs", "")
    size = re.search(r"size=(\d+)G", rootfs)
    have = {"source": source, "gpu": gpu_was, "cores": config.get("cores", "1"), "memory": config.get("memory", "512"),
            "disk": f"{size.group(1)}G" if size else rootfs.split(",")[-1],
            "storage": rootfs.split(":", 1)[0] if ":" in rootfs else "?",
            "unprivileged": "yes" if config.get("unprivileged") in ("1", "true", "yes") else "no"}
    want = {"source": spec.source, "gpu": spec.gpus, "cores": str(spec.cores), "memory": str(spec.memory),
            "disk": f"{spec.disk}G", "storage": storage, "unprivileged": "yes" if spec.unprivileged else "no"}
    if spec.clone is not None:  # a clone keeps its source's disk and privilege (--disk, --privileged: a template's)
        del want["disk"], want["unprivileged"]
    for key in want:
        if have[key] != want[key]:
            out.append(f"{key} {have[key]} (asked: {want[key]})")
    return out


@dataclass
class _Run:
    """One create's bookkeeping: the steps with their times, the commands that changed something."""

    h: HostTarget
    steps: list[CreateStep] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    current: str = ""

    @contextmanager
    def step(self, name: str, what: str) -> Iterator[list[str]]:
        self.current = name
        self.h.step(f"{name}: {what}")
        detail: list[str] = []
        t0 = time.monotonic()
        yield detail
        self.steps.append(CreateStep(name, 0.0 if self.h.dry else round(time.monotonic() - t0, 3), "; ".join(detail)))

    def host(self, argv: list[str], *, mutates: bool, deadline: float = 120):
        """A command on the host; one that changes something is recorded, and in a dry run only reported."""
        session, host = self.h.session, self.h.host
        if mutates:
            shown = session.transport(host).describe(_short(argv))
            self.commands.append(shown)
            if self.h.dry:
                self.h.output(shown)
                return None
        return session.host_run(host, argv, deadline=deadline)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.h.note(text)


def _short(argv: list[str]) -> list[str]:
    """A command as a dry run shows it: a remote/sh script's text named by its file (`bash -c
    <remote/sh/NAME.sh> NAME ...`), the rest exactly as it runs."""
    out = list(argv)
    for i in range(len(out) - 2):
        if out[i:i + 2] == ["bash", "-c"] and re.fullmatch(r"[a-z_-]+", out[i + 3] if i + 3 < len(out) else ""):
            out[i + 2] = f"<remote/sh/{out[i + 3]}.sh>"
            break
    return out


def _words(text: str) -> str:
    """Proxmox's message: the first non-empty line of stderr (or stdout)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "").strip()


def create(h: HostTarget, spec: CreateSpec, *, hosts_file: str | None = None,
           add_entry: Callable[[str, int, str, str], bool] | None = None) -> Created:
    """Make container spec.ctid on h's host as asked (module docstring); the same create again is a no-op.
    `add_entry(file, ctid, host, comment)` writes the hosts file's entry (True: added; False: already there)."""
    t_start = time.monotonic()
    selection = check_spec(spec)
    host = h.host
    run = _Run(h)
    if host.sudo:
        raise CreateRefused(f"create needs root on {host.name}: Proxmox lets only root@pam write devN lines and bind "
                            f"mounts, and hosts.{host.name} logs in as {host.user or 'a user'} with sudo: true (whose "
                            "sudo rule allows only what trainers need, and stays so): add a second hosts entry for the "
                            "same address with user: root for create (docs/guide/safety.md)")
    pct = host.pct
    pvesm = program_path("pvesm", pct, exact=False)  # beside pct, as every host program remote runs (remote.sudo)
    # pveam is no program of the sudo rule's (root logins only): Proxmox keeps it in /usr/bin, the lab beside pct
    pveam = "/usr/bin/pveam" if pct == "/usr/sbin/pct" else (pct.rsplit("/", 1)[0] + "/pveam") if "/" in pct else "pveam"
    ctid = spec.ctid
    source_config = ""  # the clone source's `pct config` (a dry run plans the clone's GPU lines from it)
    host_gpu: gpu.HostGpu | None = None
    wanted = gpuconfig.Wanted()
    driver = None
    gpus: tuple[int, ...] = ()

    # -- preflight: nothing changes on the host until every check has passed ---------------------------------
    with run.step("preflight", f"{host.name}: container {ctid}, {spec.source}, --gpu {selection}") as said:
        listed = run.host(pct_argv(pct, "config", str(ctid)), mutates=False, deadline=60)
        if listed is not None and listed.exit_code != 0 and not re.search(r"Configuration file '\S*/lxc/\d+\.conf' does not exist", listed.err):
            raise CreateRefused(f"`pct config {ctid}` on {host.name} failed: {_words(listed.err) or f'exit {listed.exit_code}'}"
                                " (whether the id is free is not known; is it a Proxmox VE host, and `pct` its path?)")
        resume = False
        if listed is not None and listed.exit_code == 0:
            config = gpuconfig.parse_config(listed.out)
            mark = marked(config)
            if mark is None:
                raise CreateRefused(f"unable to create CT {ctid} - CT {ctid} already exists on node "
                                    f"'{host.node_name}' (not made by remote create: remote never changes it); "
                                    f"{_free_id(run, host.name, pct)}")
            diff = differences(config, spec, spec.storage or config.get("rootfs", "?").split(":", 1)[0])
            if diff:
                raise CreateRefused(f"container {ctid} on {host.name} exists with another spec: {'; '.join(diff)}: remote "
                                    f"create never changes a container (ask for what it has, or `pct destroy {ctid} "
                                    "--force 1 --purge 1` first)")
            if mark.startswith(MARK):
                said.append("already made as asked")
                h.note(f"container {ctid} on {host.name} is already made as asked ({spec.source}, --gpu {spec.gpus}): "
                       "nothing to do")
                added = _hosts_entry(run, hosts_file, add_entry, ctid, host.name, spec)
                return Created(ctid, host.name, False, h.dry, spec.source, (), None, (), (), tuple(run.steps), added,
                               round(time.monotonic() - t_start, 3), tuple(run.notes))
            # Made by a create that did not finish (its last step marks it done): the steps after `pct create`
            # run again, each of them idempotent; the container is not destroyed if one fails (not made now).
            resume = True
            said.append("unfinished: its steps after pct create run again")
            run.note(f"container {ctid} on {host.name} was left unfinished by an earlier create ({spec.source}, "
                     f"--gpu {spec.gpus}): the GPU lines, the start, the packages, the driver and the proof run again")
        storages_out = run.host([pvesm, "status"], mutates=False, deadline=60)
        if storages_out is not None and storages_out.exit_code != 0:
            raise CreateRefused(f"`pvesm status` on {host.name} failed: "
                                f"{_words(storages_out.err) or f'exit {storages_out.exit_code}'} (its storages are not known)")
        storages = parse_storages(storages_out.out) if storages_out is not None else []
        # Only a storage with `rootdir` content holds a container's disk (`local`, a plain dir, usually does not).
        rootdir_out = run.host([pvesm, "status", "--content", "rootdir"], mutates=False, deadline=60)
        rootdir = parse_storages(rootdir_out.out) if rootdir_out is not None and rootdir_out.exit_code == 0 else storages
        storage = spec.storage or next((s for s in STORAGE_ORDER if s in rootdir), None)
        if storage is None or (storages and storage not in storages):
            raise CreateRefused(f"storage '{storage or '(none given)'}' does not exist on {host.name} (it has: "
                                f"{', '.join(storages) or 'none'}): give --storage NAME")
        if storages and storage not in rootdir:
            raise CreateRefused(f"storage '{storage}' on {host.name} does not hold container disks (no `rootdir` in "
                                f"its content; those that do: {', '.join(rootdir) or 'none'}): give --storage NAME, or "
                                f"add rootdir to its content (`pvesm set {storage} --content ...,rootdir`)")
        _check_bridge(run, spec)
        if spec.template:
            store = spec.template.split(":", 1)[0]
            r = run.host([pveam, "list", store], mutates=False, deadline=60)
            if r is None or r.exit_code != 0:
                raise CreateRefused(f"--template {spec.template}: `pveam list {store}` on {host.name} says: "
                                    f"{_words(r.err if r else '') or 'nothing'}")
            have = parse_pveam_list(r.out)
            if spec.template not in have:
                raise CreateRefused(f"--template {spec.template}: volume '{spec.template}' does not exist on "
                                    f"{host.name} (its {store} has: {', '.join(have) or 'no template'}; "
                                    f"`pveam download {store} NAME` fetches one, `pveam available` lists them)")
        elif not resume:
            r = run.host(pct_argv(pct, "config", str(spec.clone)), mutates=False, deadline=60)
            if r is None or r.exit_code != 0:
                raise CreateRefused(f"--clone {spec.clone}: {_words(r.err if r else '') or 'no such container'} "
                                    f"(on {host.name})")
            source_config = r.out
            if gpuconfig.parse_config(r.out).get("ostype") == "alpine":
                raise CreateRefused(f"--clone {spec.clone}: an Alpine container, which remote does not support (every "
                                    "step it runs in a container is bash with GNU env, which Alpine's busybox lacks)")
            if gpuconfig.parse_config(r.out).get("template") not in ("1", "true", "yes"):
                st = run.host(pct_argv(pct, "status", str(spec.clone)), mutates=False, deadline=60)
                if st is not None and st.exit_code == 0 and "running" in st.out.split():
                    raise CreateRefused(f"--clone {spec.clone}: container {spec.clone} on {host.name} is running, and "
                                        "Proxmox clones only a stopped container or a template: `pct stop "
                                        f"{spec.clone}` first, or clone a template (`pct template {spec.clone}` "
                                        "makes one of a stopped container)")
        said.append(f"storage {storage}")
        if spec.gpu is None:  # not asked: a CPU container, and the plan says what the host would have given
            _say_gpus_left_out(run, h)
        if not selection.none:
            host_gpu = gpu.read_host(h.session, host, [])
            gpus = gpuconfig.chosen(selection, host_gpu)  # GpuConfigError: no module, an index it lacks
            driver = host_gpu.loaded
            said.append(f"NVIDIA {driver}, GPU {', '.join(map(str, gpus))}")
            # Both nodes: CUDA run as root remakes /dev/nvidia-uvm by itself but never -tools (seen on an H200), and
            # pct start refuses a devN line whose node is missing.
            missing = [n for n in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if not host_gpu.node(n)]
            if missing:
                run.note(f"{host.name} has no {' and no '.join(missing)} yet (as after a reboot until something asks "
                         "the driver): making the uvm nodes as `nvidia-modprobe -u -c 0` does")
                r = run.host(["bash", "-c", shell.load("gpu-uvm"), "gpu-uvm"], mutates=True, deadline=60)
                if r is not None:
                    if r.exit_code != 0:
                        raise CreateRefused(f"{host.name}: the uvm nodes could not be made (remote/sh/gpu-uvm.sh): "
                                            f"{_words(r.err + r.out) or f'exit {r.exit_code}'}")
                    host_gpu = gpu.read_host(h.session, host, [])
            wanted = gpuconfig.wanted_lines(selection, host_gpu)
            r = run.host(["bash", "-c", shell.load("nvidia-userspace"), "nvidia-userspace", gpuconfig.USERSPACE_HOST],
                         mutates=True, deadline=300)
            if r is not None:
                got = dict(line.split(" ", 1) for line in r.out.splitlines() if " " in line)
                if r.exit_code != 0:
                    raise CreateRefused(f"{host.name}: the driver's user space: "
                                        f"{got.get('error') or _words(r.err) or f'exit {r.exit_code}'}")
                said.append(f"user space {got.get('version')} {got.get('state')}")

    # -- create, then everything that can fail with a container there: undone on failure -----------------------
    made = attempted = False
    try:
        if not resume:
            with run.step("create", f"pct {'create' if spec.template else 'clone'} {ctid}") as said:
                attempted = True
                _make(run, spec, storage)
                made = True
                if spec.clone is not None:  # the clone has its source's description until this
                    _check(run.host(pct_argv(pct, "set", str(ctid), "--cores", str(spec.cores), "--memory",
                                             str(spec.memory), "--description", spec.description(done=False)),
                                    mutates=True), "pct set")
                said.append(f"{storage}:{spec.disk}G, {spec.cores} cores, {spec.memory} MiB")
        config_lines: tuple[str, ...] = ()
        if not wanted.empty or spec.clone is not None or resume:  # a clone ends with exactly the GPUs asked
            with run.step("gpu config", f"devN and mpN lines for GPU {', '.join(map(str, gpus)) or 'none'}") as said:
                current = None if h.dry and not resume else run.host(pct_argv(pct, "config", str(ctid)), mutates=False,
                                                                     deadline=60)
                now = current.out if current is not None and current.exit_code == 0 else source_config
                plan = gpuconfig.plan(now, wanted)
                for line in plan.diff:
                    h.output(line)
                if plan.raw:  # a clone's source's raw NVIDIA lxc lines: pct cannot remove them, the file is edited
                    _check(run.host(["bash", "-c", shell.load("gpu-host-fix"), "gpu-host-fix", "drop-raw", str(ctid),
                                     *plan.raw], mutates=True), "dropping the raw lxc lines (remote/sh/gpu-host-fix.sh)")
                if plan.pct_args():
                    _check(run.host(pct_argv(pct, "set", str(ctid), *plan.pct_args()), mutates=True), "pct set")
                config_lines = tuple(f"{k}: {v}" for k, v in plan.set)
                said.append(f"{len(plan.set)} lines" + (f", {len(plan.delete) + len(plan.raw)} removed"
                                                         if plan.delete or plan.raw else ""))
        with run.step("start", f"pct start {ctid}") as said:
            status = None if h.dry or not resume else run.host(pct_argv(pct, "status", str(ctid)), mutates=False)
            if status is not None and "running" in status.out.split():
                said.append("already running")
            else:
                _check(run.host(pct_argv(pct, "start", str(ctid)), mutates=True), "pct start")
            if not h.dry:
                Container(h.session.transport(host), ctid, pct=pct).wait_running(timeout=120)
        ct = Container(h.session.transport(host), ctid, pct=pct, dry=h.dry, events=h.session.sink,
                       path=DEFAULT_PATH)
        with run.step("packages", "python3, git, CA certificates") as said:
            r = _in_ct(run, ct, "ct-needs", timeout=900)
            if r is not None:
                out = dict(line.split(" ", 1) if " " in line else (line, "") for line in r.out.splitlines())
                if r.exit_code != 0:
                    raise CreateError(f"container {ctid}: installing what deploy needs failed: "
                                      f"{_words(r.err) or out.get('missing') or r.exit_code}")
                if "installed-with" in out:
                    run.note(f"installed {out.get('missing')} with {out['installed-with']}")
                said.append("installed " + out["missing"] if "missing" in out else "present")
        if not wanted.empty:
            with run.step("driver", f"the host's {driver} user space at {gpuconfig.USERSPACE_CT}") as said:
                r = _in_ct(run, ct, "nvidia-link", gpuconfig.USERSPACE_CT, timeout=120)
                if r is not None and r.exit_code != 0:
                    raise CreateError(f"container {ctid}: linking the driver's user space failed: "
                                      f"{_words(r.err + r.out) or r.exit_code}")
                said.append(f"ldconfig: {gpuconfig.USERSPACE_CT}/current/lib")
            with run.step("proof", "cuInit(0), nvidia-smi, doctor --gpu") as said:
                if not h.dry:
                    said += _prove(h, ct, gpus)
        # The last step: until it, the description says unfinished, and `remote create` again resumes.
        with run.step("mark", "the description says the create finished"):
            _check(run.host(pct_argv(pct, "set", str(ctid), "--description", spec.description()), mutates=True),
                   "pct set --description")
    except BaseException as exc:
        if h.dry or not attempted and not resume or isinstance(exc, CreateRefused):
            raise  # nothing made: pct was not asked, or said no
        why = str(exc) if isinstance(exc, RemoteError) else f"{type(exc).__name__}: {exc}"
        if resume:  # made by an earlier create: not destroyed now; the same create again resumes it
            raise CreateError(f"create {ctid} failed at {run.current}: {why}; container {ctid} (left unfinished by an "
                              f"earlier create) is kept: `remote create` again re-runs the steps after pct create, or "
                              f"`pct destroy {ctid} --force 1 --purge 1` on {host.name} removes it",
                              left=f"pct destroy {ctid} --force 1 --purge 1") from exc
        if not made:  # pct create (clone) gave no answer (a lost connection, a timeout): it may have made it
            there = _exists(h, pct, ctid)
            if there is False:
                raise
            if there is None:
                raise CreateError(f"create {ctid} failed at {run.current}: {why}; whether pct made container {ctid} is "
                                  f"not known: `pct config {ctid}` on {host.name} says, and `pct destroy {ctid} --force 1 "
                                  "--purge 1` there removes it", left=f"pct destroy {ctid} --force 1 --purge 1") from exc
        left = _undo(h, pct, ctid, None if made else _ours(spec, source_config))
        if left is None:
            raise CreateError(f"create {ctid} failed at {run.current}: {why}; the half-made container was "
                              "destroyed: nothing is left") from exc
        raise CreateError(f"create {ctid} failed at {run.current}: {why}; container {ctid} is left on {host.name} ({left}): "
                          f"remove it with `pct destroy {ctid} --force 1 --purge 1` there if it is this create's",
                          left=f"pct destroy {ctid} --force 1 --purge 1") from exc
    added = _hosts_entry(run, hosts_file, add_entry, ctid, host.name, spec)
    return Created(ctid, host.name, not h.dry, h.dry, spec.source, gpus, driver,
                   config_lines or tuple(gpuconfig.spec_lines(wanted)), tuple(run.commands), tuple(run.steps), added,
                   round(time.monotonic() - t_start, 3), tuple(run.notes))


def _make(run: _Run, spec: CreateSpec, storage: str) -> None:
    """`pct create`, its description marked unfinished, or `pct clone`; CreateRefused where pct says no."""
    h, pct, ctid = run.h, run.h.host.pct, spec.ctid
    hostname = HOSTNAME.format(ctid=ctid)
    if spec.template:
        argv = pct_argv(pct, "create", str(ctid), spec.template, "--hostname", hostname, "--cores",
                        str(spec.cores), "--memory", str(spec.memory), "--swap", "0", "--rootfs",
                        f"{storage}:{spec.disk}", "--unprivileged", "1" if spec.unprivileged else "0",
                        "--features", "nesting=1", "--net0", spec.network, "--description", spec.description(done=False))
    else:
        argv = pct_argv(pct, "clone", str(spec.clone), str(ctid), "--hostname", hostname, "--full", "1",
                        "--storage", storage)
    r = run.host(argv, mutates=True, deadline=900)
    if r is not None and r.exit_code != 0:
        if re.search(rf"\bCT {ctid} already exists\b", r.err) and _exists(h, pct, ctid):  # found free before
            raise CreateRefused(
                f"{h.host.name}: {_words(r.err)}, though the check before found id {ctid} free: made meanwhile (by "
                f"another create, or by hand); `pct config {ctid}` on {h.host.name} says whose it is, and `remote "
                f"create` again finds it made (or unfinished) if it is this spec's; {_free_id(run, h.host.name, pct)}")
        if re.search(rf"\bCT {ctid} already exists\b", r.err):
            raise CreateRefused(f"{h.host.name}: {_words(r.err)}; {_free_id(run, h.host.name, pct)}")
        raise CreateRefused(f"{h.host.name}: {_words(r.err) or f'pct exited {r.exit_code}'}")


def _check_bridge(run: _Run, spec: CreateSpec) -> None:
    """The net0 bridge is one of the node's (`pvesh get /nodes/NODE/network --type any_bridge`); where pvesh
    cannot say, a note, and pct create names a missing bridge itself."""
    h = run.h
    pvesh = program_path("pvesh", h.host.pct, exact=False)
    try:
        r = run.host([pvesh, "get", f"/nodes/{h.host.node_name}/network", "--type", "any_bridge", "--output-format",
                      "json"], mutates=False, deadline=60)
    except RemoteError:
        r = None
    try:
        found = json.loads(r.out) if r is not None and r.exit_code == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, list):
        if r is not None:
            run.note(f"bridge {spec.bridge} not checked: `pvesh get /nodes/{h.host.node_name}/network` on "
                     f"{h.host.name} did not answer ({_words(r.err) or 'no list'})")
        return
    bridges = sorted(str(b.get("iface")) for b in found if isinstance(b, dict) and b.get("iface"))
    if spec.bridge not in bridges:
        raise CreateRefused(f"bridge {spec.bridge} does not exist on {h.host.name} (its bridges: "
                            f"{', '.join(bridges) or 'none'}): give --net0 name=eth0,bridge=NAME,ip=dhcp")


def _free_id(run: _Run, host: str, pct: str) -> str:
    """What to do about an id in use: the cluster's next free id, as Proxmox's own `pvesh get /cluster/nextid`
    names it (or that command, where it does not answer)."""
    pvesh = program_path("pvesh", pct, exact=False)
    try:
        r = run.host([pvesh, "get", "/cluster/nextid"], mutates=False, deadline=60)
    except RemoteError:
        r = None
    free = re.fullmatch(r'\s*"?(\d+)"?\s*', r.out) if r is not None and r.exit_code == 0 else None
    if free:
        return f"a free id: {free.group(1)} (`pvesh get /cluster/nextid` on {host})"
    return f"`pvesh get /cluster/nextid` on {host} names a free id"


def _say_gpus_left_out(run: _Run, h: HostTarget) -> None:
    """--gpu not given: a CPU container; where the host has GPUs, the plan says so (and how to pass them)."""
    try:
        found = gpu.read_host(h.session, h.host, [])
    except RemoteError:
        return
    have = gpuconfig.gpu_nodes(found) if found.loaded else ()
    if have:
        run.note(f"--gpu not given: a CPU container, though {h.host.name} has GPU {', '.join(map(str, have))} "
                 f"(NVIDIA {found.loaded}): `--gpu all` or `--gpu {have[0]}` passes them, `--gpu none` says no")


def _ours(spec: CreateSpec, source_config: str) -> Callable[[dict[str, str]], bool]:
    """Whether a container found at spec's id after a lost `pct create` answer is this create's: its hostname
    and remote's unfinished mark with this spec (a clone: its source's description, copied by pct clone)."""
    source = unquote(gpuconfig.parse_config(source_config).get("description", "")) if spec.clone is not None else None

    def check(config: dict[str, str]) -> bool:
        desc = unquote(config.get("description", ""))
        return config.get("hostname") == HOSTNAME.format(ctid=spec.ctid) and (
            desc.splitlines()[:1] == [spec.description(done=False)] or (source is not None and desc == source))
    return check


def _check(r, what: str) -> None:
    if r is not None and r.exit_code != 0:
        raise CreateError(f"{what}: {_words(r.err) or f'exit {r.exit_code}'}")


def _in_ct(run: _Run, ct: Container, script: str, *args: str, timeout: float):
    """A remote/sh script in the new container (recorded; dry: only reported)."""
    argv = ["bash", "-c", shell.load(script), script, *args]
    if run.h.dry:
        from ..transport.pct import exec_argv

        shown = run.h.session.transport(run.h.host).describe(_short(exec_argv(ct.pct, ct.ctid, argv, cwd="/root")))
        run.commands.append(shown)
        run.h.output(shown)
        return None
    run.commands.append(f"pct exec {ct.ctid} -- bash -c <remote/sh/{script}.sh> {shlex.join(args)}".rstrip())
    return ct.run(argv, timeout=timeout, check=False, label=f"remote/sh/{script}.sh")


def _prove(h: HostTarget, ct: Container, gpus: tuple[int, ...]) -> list[str]:
    """cuInit(0) == 0, nvidia-smi lists exactly the chosen GPUs, and doctor --gpu's findings hold no error."""
    r = ct.run(gpu.container_argv(VENV_FOR_PROBE), mutates=False, timeout=60, check=False, label="GPU probe")
    try:
        seen = gpu.parse_container(r.out)
    except ValueError as exc:
        raise CreateError(f"container {ct.ctid}: the GPU probe failed: {exc}") from None
    host_gpu = gpu.read_host(h.session, h.host, [ct.ctid])
    errors = [f for f in gpu.findings(host_gpu, ct.ctid, seen) if f.severity == "error"]
    if errors:
        raise CreateError(f"container {ct.ctid}: doctor --gpu: " + "; ".join(f"{f.what} (fix: {f.fix})" for f in errors))
    if seen.cuda_init != 0:
        raise CreateError(f"container {ct.ctid}: cuInit(0) returned {seen.cuda_init}: {seen.cuda_error or ''}".rstrip(": "))
    smi = ct.run(["nvidia-smi", "-L"], mutates=False, timeout=30, check=False, label="nvidia-smi -L")
    listed = [line for line in smi.out.splitlines() if line.startswith("GPU ")]
    if smi.exit_code != 0 or len(listed) != len(gpus):
        raise CreateError(f"container {ct.ctid}: nvidia-smi -L listed {len(listed)} GPU(s), {len(gpus)} chosen "
                          f"({_words(smi.err) or _words(smi.out) or f'exit {smi.exit_code}'})")
    return [f"cuInit(0) 0, CUDA {seen.cuda_driver}", f"nvidia-smi: {len(listed)} GPU(s)", "doctor --gpu: no error"]


def _exists(h: HostTarget, pct: str, ctid: int) -> bool | None:
    """Whether container `ctid` is there now (None: the host did not answer)."""
    try:
        return h.session.host_run(h.host, pct_argv(pct, "config", str(ctid)), deadline=60).exit_code == 0
    except RemoteError:
        return None


def _undo(h: HostTarget, pct: str, ctid: int, ours: Callable[[dict[str, str]], bool] | None = None) -> str | None:
    """Destroy the half-made container: None when it is gone, else why it could not be (or was not). `ours`,
    where pct's answer was lost: the container is destroyed only where its config says it is this create's."""
    if ours is not None:
        r = h.session.host_run(h.host, pct_argv(pct, "config", str(ctid)), deadline=60)
        if r.exit_code != 0 or not ours(gpuconfig.parse_config(r.out)):
            return ("not destroyed: it does not carry this create's mark and hostname, so it may be another's; "
                    f"`pct config {ctid}` says whose it is")
    h.warn(f"destroying the half-made container {ctid}")
    h.session.host_run(h.host, pct_argv(pct, "stop", str(ctid)), deadline=120)
    r = h.session.host_run(h.host, pct_argv(pct, "destroy", str(ctid), "--purge", "1"), deadline=300)
    gone = h.session.host_run(h.host, pct_argv(pct, "config", str(ctid)), deadline=60)
    if gone.exit_code != 0:
        return None
    return _words(r.err) or f"pct destroy exited {r.exit_code}"


def _hosts_entry(run: _Run, hosts_file: str | None, add_entry, ctid: int, host: str, spec: CreateSpec) -> str | None:
    with run.step("hosts file", f"containers.{ctid} in {hosts_file or '(none)'}") as said:
        if hosts_file is None or add_entry is None:
            said.append("no hosts file (a fleet built in code)")
            return None
        comment = f"made by remote create: {spec.source}, --gpu {spec.gpu}"
        if run.h.dry:
            run.h.output(f"add to {hosts_file}: containers.{ctid}: {{host: {json.dumps(host)}}}  # {comment}")
            return None
        if add_entry(hosts_file, ctid, host, comment):
            said.append("added")
            return hosts_file
        said.append("already there")
        return None
