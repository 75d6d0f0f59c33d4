"""`remote gpu fix`: repair what `doctor --gpu` found that the container's config or the host can fix.

    plan(host, ctid, ct, found)  -> Plan       pure: each finding to a fix (or a manual step), from the facts
    gpu_fix(t, dry=, force=)     -> GpuFix     probe, show the diff, snapshot, write, restart if it must, re-prove

What each finding becomes (remote.facts.gpu's kinds):

    device-not-passed, cgroup-major-stale,      the container's GPU lines rewritten as remote create writes them
    mount-optional-missing, device-permission,  (remote.ops.gpuconfig: devN lines with today's nodes, the driver's
    a node missing, or wrong through a mount    mpN; raw NVIDIA lxc lines dropped), then a restart
    container-node-wrong/-missing with a        in place, in the running container (remote/sh/gpu-node.sh): what
      config line that is right                 is mounted over the node unmounted; a missing or wrong node made
                                                again with the host's numbers where the container is privileged;
                                                a restart only where that cannot work (unprivileged and no mount
                                                over it) or did not (the node still wrong after it)
    host-uvm-not-loaded, the uvm node missing   on the host: `modprobe nvidia-uvm`, `nvidia-modprobe -u -c 0`
    driver-lib-mismatch, no-driver-libs         the host's folder refilled with the loaded driver's user space
                                                (remote/sh/nvidia-userspace.sh), mounted read-only, `ldconfig`
    host-no-driver, host-gpu-vfio, a pending    not fixed: named with the manual step (the finding's own fix)
      reboot, persistence-off, mig-caps-missing

The one restart path is `restart()` (a run live there is refused unless `force`, then killed; with
train.checkpoint it is saved and stopped first, and resumed from its checkpoint after).
Root on the host is needed (devN and mount entries are root-only in Proxmox: docs/guide/safety.md); a host
with `sudo: true` is refused before anything is read. A live run blocks a restart, as deploy's does, unless
`force`. Before the config is written, a Proxmox snapshot where the storage can (it holds the config too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import re
import shlex
from dataclasses import dataclass, field

from .. import shell
from ..errors import BusyError, GpuFixError, PctError, RemoteError, RootRequired
from ..facts import gpu
from ..naming import printable
from ..results import Finding, GpuFix, LiveRun, Stopped
from ..target import Target
from ..transport import dryline
from ..transport.pct import exec_argv, pct_argv
from . import gpuconfig, oplock

CONFIG_KINDS = {"device-not-passed", "cgroup-major-stale", "mount-optional-missing", "device-permission"}
NODE_KINDS = {"container-node-wrong", "container-node-missing", "container-uvm-missing"}
USERSPACE_KINDS = {"driver-lib-mismatch", "no-driver-libs"}
MANUAL_KINDS = {"host-no-driver", "host-gpu-vfio", "host-reboot-pending", "persistence-off", "mig-caps-missing"}
UVM_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
SNAPSHOT_DESCRIPTION = "before gpu fix"
NODE_PATH = re.compile(r"/dev/nvidia[A-Za-z0-9_-]*(/nvidia-cap[0-9]+)?")  # what gpu-node.sh is given: no other path


@dataclass(frozen=True)
class Repair:
    """One node repaired in place in the running container: unmount what hides it, else make it again."""

    path: str
    major: int
    minor: int
    mode: int
    gid: int
    make: bool  # mknod where unmounting is not enough (a privileged container only)

    def argv(self) -> list[str]:
        return ["bash", "-c", shell.load("gpu-node"), "gpu-node", self.path, str(self.major), str(self.minor),
                f"{self.mode:04o}", str(self.gid), "1" if self.make else "0"]

    def text(self, ctid: int) -> str:
        how = f"umount {self.path}" + (f" (else mknod -m {self.mode:04o} {self.path} c {self.major} {self.minor})"
                                       if self.make else "")
        return f"pct exec {ctid} -- {how}"


@dataclass(frozen=True)
class Plan:
    """What gpu fix does for one container, from the facts alone."""

    ctid: int
    config: gpuconfig.Plan = field(default_factory=gpuconfig.Plan)
    uvm: bool = False  # make the uvm nodes on the host
    userspace: bool = False  # refill the host's folder, ldconfig in the container
    restart: str | None = None  # why the container must restart (None: it need not)
    fixes: tuple[tuple[str, str], ...] = ()  # (finding kind, what answers it)
    manual: tuple[tuple[str, str, str], ...] = ()  # (finding kind, message, the manual step)
    inplace: tuple[Repair, ...] = ()  # nodes repaired in the running container, no restart
    fallback: str | None = None  # why it restarts after all where an in-place repair leaves its node wrong

    @property
    def empty(self) -> bool:
        return (self.config.empty and not self.uvm and not self.userspace and self.restart is None
                and not self.inplace)


def _passed_by(cfg: gpu.CtConfig | None, path: str) -> str | None:
    if cfg is None:
        return None
    if any(p == path for _, p, _ in cfg.devs):
        return "dev"
    if any(src == path or path.startswith(src.rstrip("/") + "/") for src, _, _ in cfg.mounts):
        return "mount"
    return None


def _bound_over(config_text: str, path: str) -> list[str]:
    """The raw `lxc.mount.entry` lines of the current config (before its first [snapshot]) whose target is the
    node `path` and whose source is not the host's node itself (`/dev/null dev/nvidia-uvm none bind...`)."""
    out = []
    for line in _current(config_text):
        key, _, value = line.partition(":")
        parts = value.split()
        if key.strip() == "lxc.mount.entry" and len(parts) >= 2 and parts[1].strip("/") == path.strip("/") \
                and parts[0] != path:
            out.append(f"lxc.mount.entry: {value.strip()}")
    return out


def _current(config_text: str) -> list[str]:
    lines = []
    for line in config_text.splitlines():
        if line.startswith("["):
            break
        lines.append(line)
    return lines


def _selection(host: gpu.HostGpu, cfg: gpu.CtConfig | None) -> gpuconfig.Selection:
    """The GPUs the container's config gives it now (devN or mount lines), else the host's first."""
    passed = sorted({int(m.group(1)) for p in ([p for _, p, _ in cfg.devs] + [s for s, _, _ in cfg.mounts] if cfg else [])
                     if (m := gpuconfig.GPU_NODE.fullmatch(p))})
    have = gpuconfig.gpu_nodes(host)
    kept = tuple(i for i in passed if i in have) or have[:1]
    return gpuconfig.Selection("list", kept)


def _gid(cfg: gpu.CtConfig | None) -> int:
    """The group the config's NVIDIA devN lines give the nodes already (all the same), else the video group's."""
    gids = {opts.get("gid") for _, _, opts in (cfg.devs if cfg else ())}
    one = gids.pop() if len(gids) == 1 else None
    return int(one) if one and one.isdigit() and int(one) < 65536 else gpuconfig.VIDEO_GID


def plan(host: gpu.HostGpu, ctid: int, ct: gpu.CtGpu | None, found: list[Finding],
         config_text: str, folder: str | None = None) -> Plan:
    """Each finding (host's and container's) to what fixes it. Pure: the host's facts, the container's
    (None where it could not be probed: stopped), the findings and its `pct config` text; `folder`: the
    version the host's user-space folder holds, where it was read (a pending reboot)."""
    cfg = host.configs.get(ctid)
    fixes: list[tuple[str, str]] = []
    manual: list[tuple[str, str, str]] = []
    rewrite = uvm = userspace = False
    bound: list[str] = []  # raw lines that bind another file over an NVIDIA node
    restart: list[str] = []
    inplace: list[Repair] = []
    has_mount = f"{gpuconfig.USERSPACE_HOST}," in config_text or config_text.rstrip().endswith(gpuconfig.USERSPACE_HOST)
    for f in found:
        if f.container not in (None, ctid):
            continue
        if f.code in MANUAL_KINDS or (f.code == "host-uvm-not-loaded" and not host.loaded):
            manual.append((f.code, f.what, f.fix or ""))
        elif f.code == "host-uvm-not-loaded":
            uvm = True
            fixes.append((f.code, "the uvm nodes made on the host (`nvidia-modprobe -u -c 0`)"))
            if ct is None or ct.node("/dev/nvidia-uvm") is None:
                restart.append("the container sees /dev/nvidia-uvm only from its next start")
        elif f.code in CONFIG_KINDS:
            rewrite = True
            fixes.append((f.code, f"{f.node or 'the GPU lines'}: devN lines in place of "
                                  f"{'the missing line' if f.code == 'device-not-passed' else 'the mount and cgroup lines'}"))
            if f.code == "mount-optional-missing" and any(n in f.what for n in UVM_NODES):
                uvm = True
        elif f.code in NODE_KINDS:
            path = f.node or ""
            how = _passed_by(cfg, path)
            over = _bound_over(config_text, path) if f.code == "container-node-wrong" else []
            if over:  # a raw line binds something else over the node at every start: dropped, devN makes it
                bound += over
                fixes.append((f.code, f"{path}: the raw line that binds another file over it dropped"))
                if how != "dev":
                    rewrite = True
                continue
            if path in UVM_NODES and host.node(path) is None:
                uvm = True
            if how != "dev":
                rewrite = True
                fixes.append((f.code, f"{path}: a devN line makes it from the host's node at start"))
            elif (repair := _repair(host, ct, cfg, path)) is not None:
                inplace.append(repair)
                fixes.append((f.code, f"{path}: repaired in the running container, no restart ("
                                      + ("what is mounted over it unmounted" if _hidden(ct, path) else
                                         "made again with the host's numbers") + ")"))
            else:
                fixes.append((f.code, f"{path}: its devN line makes the host's node again at the next start"))
                restart.append(f"{path} is made from the host's node only at start (an unprivileged container "
                               "may not make a device node itself)")
        elif f.code in USERSPACE_KINDS:
            if host.on_disk and host.loaded and host.on_disk != host.loaded and folder != host.loaded:
                manual.append((f.code, f.what, f"reboot the host first: module {host.loaded} is loaded but "
                               f"driver {host.on_disk} is installed, so the loaded module's user space is no longer "
                               f"on the host; after the reboot `remote gpu fix -c {ctid}`"))
                continue
            userspace = True
            fixes.append((f.code, f"the driver's user space of {host.loaded} from the host "
                                  f"({gpuconfig.USERSPACE_HOST}, read-only at {gpuconfig.USERSPACE_CT}), then ldconfig"))
            if not has_mount:
                rewrite = True
        elif f.code == "cuda-init-failed":
            if not any(x.code != "cuda-init-failed" and x.container == ctid for x in found):
                manual.append((f.code, f.what, f.fix or ""))
    config = gpuconfig.Plan()
    if bound and not rewrite:
        config = gpuconfig.Plan(raw=tuple(bound), diff=tuple(f"- {line}" for line in bound))
        restart.insert(0, "LXC applies its mount entries at start")
    if rewrite:
        wanted = gpuconfig.wanted_lines(_selection(host, cfg), host, gid=_gid(cfg),
                                        userspace=userspace or has_mount)
        # A devN line no finding names stays as it is (only what is wrong changes).
        named = {f.node for f in found if f.node}
        keep = {p: p + "".join(f",{k}={v}" for k, v in opts.items()) for _, p, opts in (cfg.devs if cfg else ())
                if p not in named}
        wanted = dataclasses.replace(wanted, devs=tuple((p, keep.get(p, v)) for p, v in wanted.devs))
        config = gpuconfig.plan(config_text, wanted)
        extra = tuple(line for line in bound if line not in config.raw)
        config = dataclasses.replace(config, raw=config.raw + extra, diff=config.diff + tuple(f"- {x}" for x in extra))
        if not config.empty:
            restart.insert(0, "Proxmox applies devN and mount lines at start")
    if restart:  # the restart makes every devN node from the host's: nothing to repair in place before it
        inplace = []
    fallback = (f"{', '.join(r.path for r in inplace)}: still wrong after the repair in place, and Proxmox makes "
                "a devN node from the host's at start") if inplace else None
    return Plan(ctid, config, uvm, userspace, restart[0] if restart else None, tuple(fixes), tuple(manual),
                tuple(inplace), fallback)


def _hidden(ct: gpu.CtGpu | None, path: str) -> bool:
    node = ct.node(path) if ct else None
    return node is not None and node.mount is not None


def _repair(host: gpu.HostGpu, ct: gpu.CtGpu | None, cfg: gpu.CtConfig | None, path: str) -> Repair | None:
    """The in-place repair of a node its devN line passes (None: only a restart can): unmount what hides it
    (any container), make it again with the host's numbers (a privileged one: mknod is not allowed in an
    unprivileged container). The mode and group are the devN line's, else the host node's, as Proxmox's."""
    want = host.node(path)
    if ct is None or want is None or cfg is None or not NODE_PATH.fullmatch(path):
        return None
    hidden = _hidden(ct, path)
    if not hidden and cfg.unprivileged:
        return None
    opts = next((o for _, p, o in cfg.devs if p == path), {})
    mode = int(opts["mode"], 8) if re.fullmatch(r"0?[0-7]{3}", opts.get("mode", "")) else want.mode & 0o777
    gid = int(opts["gid"]) if str(opts.get("gid", "")).isdigit() else 0
    return Repair(path, want.major, want.minor, mode, gid, make=not cfg.unprivileged)


def _fix_argv(action: str, *args: str) -> list[str]:
    return ["bash", "-c", shell.load("gpu-host-fix"), "gpu-host-fix", action, *args]


def _userspace_argv() -> list[str]:
    return ["bash", "-c", shell.load("nvidia-userspace"), "nvidia-userspace", gpuconfig.USERSPACE_HOST]


def refuse_without_root(t: Target) -> None:
    if t.host.sudo:
        raise RootRequired(f"host {t.host.name}: gpu fix writes devN and mount lines and makes device nodes, which "
                          "only root can (Proxmox: `configuring device passthrough is only allowed for root@pam`); "
                          "the host's login uses `sudo: true`, whose rule stays narrow: run it with a root login "
                          "for this host (docs/guide/safety.md#which-command-needs-which-login)")


def _probe(t: Target) -> tuple[gpu.HostGpu, gpu.CtGpu | None, str | None, list[Finding]]:
    host = gpu.read_host(t.session, t.host, [t.ctid])
    ct, why = None, None
    try:
        ct = gpu.read_container(t.session, t.ctid)
    except (PctError, RemoteError) as exc:  # stopped, or its probe failed: the config's findings still stand
        why = str(exc)
    found = gpu.host_findings(host, t.host.name) + gpu.findings(host, t.ctid, ct, t.host.name)
    return host, ct, why, found


def _folder(t: Target, host: gpu.HostGpu, found: list[Finding]) -> str | None:
    """With a reboot pending and the container's user space wrong: the version the host's folder already
    holds, where it is the loaded module's (`nvidia-userspace.sh --check` answers `unchanged`: the files the
    upgrade removed are still there, so mounting it fixes the container), else None. Read-only."""
    pending = host.on_disk and host.loaded and host.on_disk != host.loaded
    if not pending or not any(f.code in USERSPACE_KINDS and f.container in (None, t.ctid) for f in found):
        return None
    r = t.session.host_run(t.host, _userspace_argv() + ["--check"], deadline=120)
    said = dict(line.split(" ", 1) for line in r.out.splitlines() if " " in line)
    return host.loaded if r.exit_code == 0 and said.get("state") == "unchanged" else None


def _host(t: Target, argv: list[str], what: str) -> str:
    r = t.session.host_run(t.host, argv, deadline=120, mutates=True, container=t.ctid)
    if r.exit_code != 0:
        raise GpuFixError(f"host {t.host.name}: {what} failed (exit {r.exit_code}): {r.err.strip()[-300:]}")
    return r.out


def _snapshot(t: Target) -> str | None:
    """A snapshot before the config is written, where the storage can (it keeps the config as it was)."""
    from . import snapshots

    how = snapshots.support(t)
    if not how.supported:
        t.note(f"no snapshot: {how.reason}")
        return None
    name = snapshot_name([s.name for s in snapshots.list_snapshots(t)], datetime.datetime.now(datetime.timezone.utc).date())
    t.step(f"snapshot {name} ({how.reason})")
    r = t.system.run_pct("snapshot", str(t.ctid), name, "--description", SNAPSHOT_DESCRIPTION, mutates=True,
                      deadline=snapshots.ROLLBACK_DEADLINE)
    if r.exit_code != 0:
        raise GpuFixError(f"container {t.ctid}: `pct snapshot {t.ctid} {name}` failed: {r.err.strip()}: nothing was "
                          "changed")
    return name


GPUFIX_SNAPSHOT = re.compile(r"gpufix-(\d{8})-(\d+)")


def snapshot_name(existing: list[str], today: datetime.date) -> str:
    """`gpufix-DATE-N`, N one past the day's highest gpufix snapshot (Proxmox refuses a name already used)."""
    day = today.strftime("%Y%m%d")
    taken = [int(m.group(2)) for n in existing if (m := GPUFIX_SNAPSHOT.fullmatch(n)) and m.group(1) == day]
    return f"gpufix-{day}-{max(taken, default=0) + 1}"


def _live(t: Target) -> tuple[LiveRun, ...]:
    from . import jobs

    return jobs.state(t).live


def gpu_fix(t: Target, *, dry: bool = False, force: bool = False) -> GpuFix:
    """Probe, plan, show the diff, then (unless dry) snapshot, write, restart where it must, re-prove CUDA."""
    refuse_without_root(t)
    dry = dry or t.dry
    t.step(f"gpu fix: probe host {t.host.name} and container {t.ctid}")
    host, ct, why, found = _probe(t)
    config_text = t.system.run_pct("config", str(t.ctid), mutates=False).check(t.system.where).out
    p = plan(host, t.ctid, ct, found, config_text, _folder(t, host, found))
    before = tuple(f.code for f in found)
    if p.empty:
        return GpuFix(t.ctid, t.host.name, dry, before, (), (), (), p.manual, None, False, None,
                      ct.cuda_init if ct else None, before, why)
    commands = _commands(t, p)
    for line in p.config.diff:  # the config change, shown before anything is written
        t.output(f"{line}")
    if dry:  # each command as every dry run shows one (DryCommand: remote.transport.dryline), none run
        for host_side, argv in _argvs(t, p):
            dryline.show(t.session.transport(t.host).describe,
                         argv if host_side else exec_argv(t.system.pct, t.ctid, argv, path=t.system.path),
                         t.session.sink, t.ctid)
        return GpuFix(t.ctid, t.host.name, True, before, tuple(w for _, w in p.fixes), p.config.diff, tuple(commands),
                      p.manual, None, False, p.restart, ct.cuda_init if ct else None, before, why)
    for c in commands:
        t.note("runs: " + c)
    running = t.system.status() == "running"
    # The operation lease of a running container that must restart (or may, where a repair in place fails): held
    # from the run check to the restart, so no deploy, warmup or launch of another controller starts in between
    # (as rollback holds it).
    saved: list[Stopped] = []  # a live run saved and stopped for the restart (train.checkpoint): resumed after
    try:
        with oplock.hold(t.system, "gpu fix") if (p.restart or p.inplace) and running else contextlib.nullcontext():
            done = _apply(t, p, host, before, commands, running, force, saved)
    except RemoteError as exc:
        if saved:  # the run is stopped now: the error says so, and what resumes it (as a failed move does)
            exc.args = (f"{exc}; run {saved[0].run} was saved and stopped for the restart: "
                        f"`remote train -c {t.ctid} --resume` resumes it",)
        raise
    return _resume(t, done, saved[0]) if saved else done


def _resume(t: Target, done: GpuFix, stopped: Stopped) -> GpuFix:
    """After the restart, the run saved before it resumed from its checkpoint (train --resume), outside the
    lease; where it cannot (no checkpoint came, a preflight problem), a warning says how to resume by hand."""
    from . import jobs

    run_id = jobs.resume_saved(t, stopped.run, "stopped for the restart")
    return done if run_id is None else dataclasses.replace(done, resumed=run_id)


def _refuse_live(t: Target, why: str, force: bool, saved: list[Stopped]) -> None:
    """A live run blocks a restart unless `force` (then it is killed, and said so); with train.checkpoint it is
    saved and stopped first (jobs.stop(save=True), put in `saved`: gpu_fix resumes it after)."""
    live = _live(t)
    if live and not force and t.spec.train.checkpoint is not None:
        from . import jobs

        t.step(f"container {t.ctid} must restart ({why}): the live run saves and stops first, and resumes after")
        # Save or refuse: no new complete checkpoint within the grace leaves the run running (SaveRefused).
        saved.append(jobs.stop(t, save=True, refuse=f"gpu fix (it must restart the container: {why})"))
        return
    if live and not force:
        from . import jobs

        raise BusyError(t.ctid, f"container {t.ctid}: {jobs.live_text(live)} still running; gpu fix must restart "
                                f"the container ({why}). `remote stop` first, or pass --force (the run is "
                                "killed); with train.checkpoint it is saved and resumed", jobs.busy_details(live))
    if live:
        t.warn(f"--force: restarting container {t.ctid} while a run is live (it is killed)")


def _apply(t: Target, p: Plan, host: gpu.HostGpu, before: tuple[str, ...], commands: list[str], running: bool,
           force: bool, saved: list[Stopped]) -> GpuFix:
    if p.restart and running:
        _refuse_live(t, p.restart, force, saved)
    snap = _snapshot(t) if not p.config.empty else None
    done: list[str] = []  # what has changed so far, for an error part-way
    why = p.restart
    try:
        restarted = _change(t, p, host, running, done, commands)
        left = repair_in_place(t, p.inplace, done) if p.inplace and running and not restarted else None
        if left:  # a node the repair in place left wrong: only a restart makes it from the host's
            why = f"{p.fallback} ({left})"
            _refuse_live(t, why, force, saved)
            commands.append(RESTART_COMMAND.format(ctid=t.ctid))
            restart(t, why, done)
            restarted = True
    except BusyError:
        raise
    except RemoteError as exc:
        if not done:
            raise
        back = (f"snapshot {snap} holds the config as it was (`pct rollback {t.ctid} {snap}` restores it)" if snap
                else "no snapshot was taken")
        said = ": ".join(line.strip() for line in str(exc).splitlines() if line.strip())  # one line
        raise GpuFixError(f"container {t.ctid}: gpu fix failed part-way: {said}; done before it: {'; '.join(done)}; "
                          f"{back}") from exc
    if p.userspace and (running or restarted):
        t.step(f"container {t.ctid}: the mounted driver libraries first for the loader (remote/sh/nvidia-link.sh: ldconfig)")
        _ldconfig(t)
    t.step(f"gpu fix: re-prove CUDA in container {t.ctid}")
    host2, ct2, why2, after = _probe(t)
    return GpuFix(t.ctid, t.host.name, False, before, tuple(w for _, w in p.fixes), p.config.diff, tuple(commands),
                  p.manual, snap, restarted, why, ct2.cuda_init if ct2 else None,
                  tuple(f.code for f in after), why2)


def restart(t: Target, why: str, done: list[str]) -> None:
    """gpu fix's one restart of a running container (Proxmox makes devN nodes and applies mounts at start);
    a live run there dies with it: the caller checked that (`_refuse_live`)."""
    t.step(f"restart container {t.ctid}: {why}")
    t.system.stop()
    done.append(f"container {t.ctid} stopped")
    t.system.start()
    t.system.wait_running()


def repair_in_place(t: Target, repairs: tuple[Repair, ...], done: list[str]) -> str | None:
    """Each node repaired in the running container (remote/sh/gpu-node.sh): None where every one is right
    now, else what is still wrong (one line)."""
    left = []
    for r in repairs:
        t.step(f"container {t.ctid}: repair {r.path} in place ({r.text(t.ctid)})")
        res = t.system.run(r.argv(), check=False, timeout=60, label=f"gpu-node {r.path}")
        for line in res.out.splitlines():
            if line.startswith(("unmounted /dev/", "made /dev/")):
                done.append(f"in container {t.ctid}: {printable(line)}")
        if res.exit_code == 3:
            left.append(printable(res.err.strip().splitlines()[-1] if res.err.strip() else f"{r.path} still wrong"))
        elif res.exit_code != 0:
            raise GpuFixError(f"container {t.ctid}: repairing {r.path} in place failed (exit {res.exit_code}): "
                              f"{printable(res.err.strip()[-300:])}")
    return "; ".join(left) or None


def _change(t: Target, p: Plan, host: gpu.HostGpu, running: bool, done: list[str], commands: list[str]) -> bool:
    """The host's and the config's changes, then the restart where it must: whether it restarted. `done`
    gets each change as it is made; `commands` (what it said it runs) is corrected to what did run."""
    if p.uvm:
        t.step(f"host {t.host.name}: make the uvm nodes (nvidia-modprobe -u -c 0)")
        out = _host(t, ["bash", "-c", shell.load("gpu-uvm"), "gpu-uvm"], "making the uvm nodes (remote/sh/gpu-uvm.sh)")
        how = made_by(out)
        if how and UVM_COMMAND in commands:  # what did run: mknod where the host has no nvidia-modprobe
            commands[commands.index(UVM_COMMAND)] = how
        done.append("the host's uvm nodes made")
    if p.userspace:
        t.step(f"host {t.host.name}: refill {gpuconfig.USERSPACE_HOST} with the driver's user space of {host.loaded}")
        _host(t, _userspace_argv(), f"filling {gpuconfig.USERSPACE_HOST}")
        done.append(f"{gpuconfig.USERSPACE_HOST} refilled")
    if p.config.raw:
        t.step(f"container {t.ctid}: drop {len(p.config.raw)} raw lxc line(s) from /etc/pve/lxc/{t.ctid}.conf")
        _host(t, _fix_argv("drop-raw", str(t.ctid), *p.config.raw), "dropping the raw lxc lines")
        done.append(f"{len(p.config.raw)} raw lxc line(s) dropped")
    if p.config.pct_args():
        t.step(f"pct set {t.ctid} " + shlex.join(p.config.pct_args()))
        t.system.run_pct("set", str(t.ctid), *p.config.pct_args(), mutates=True).check(t.system.where)
        done.append(f"pct set {t.ctid} written")
    if p.restart and running:
        restart(t, p.restart, done)
        return True
    if p.restart:
        t.note(f"container {t.ctid} is stopped: the change applies at its next start")
    return False


RESTART_COMMAND = "pct stop {ctid} && pct start {ctid}"
UVM_COMMAND = "nvidia-modprobe -u -c 0"


def made_by(out: str) -> str | None:
    """How remote/sh/gpu-uvm.sh made the uvm nodes (its last line, `made: <command>`), or None."""
    last = out.strip().splitlines()[-1:] or [""]
    return printable(last[0].removeprefix("made: ")) if last[0].startswith("made: ") else None


def _argvs(t: Target, p: Plan) -> list[tuple[bool, list[str]]]:
    """What _change, repair_in_place, restart and _ldconfig run for plan `p`, in order: (on the host?, argv)."""
    pct = t.system.pct
    out: list[tuple[bool, list[str]]] = []
    if p.uvm:
        out.append((True, ["bash", "-c", shell.load("gpu-uvm"), "gpu-uvm"]))
    if p.userspace:
        out.append((True, _userspace_argv()))
    if p.config.raw:
        out.append((True, _fix_argv("drop-raw", str(t.ctid), *p.config.raw)))
    if p.config.pct_args():
        out.append((True, pct_argv(pct, "set", str(t.ctid), *p.config.pct_args())))
    out += [(False, r.argv()) for r in p.inplace]
    if p.restart:
        out += [(True, pct_argv(pct, "stop", str(t.ctid))), (True, pct_argv(pct, "start", str(t.ctid)))]
    if p.userspace:
        out.append((False, ["bash", "-c", shell.load("nvidia-link"), "nvidia-link", gpuconfig.USERSPACE_CT]))
    return out


def _commands(t: Target, p: Plan) -> list[str]:
    """What gpu fix runs, as a user would type it on the host."""
    out = []
    if p.uvm:
        out.append(UVM_COMMAND)
    if p.userspace:
        out.append(f"remote/sh/nvidia-userspace.sh {gpuconfig.USERSPACE_HOST}")
    if p.config.raw:
        out.append(f"drop from /etc/pve/lxc/{t.ctid}.conf: " + "; ".join(p.config.raw))
    if p.config.pct_args():
        out.append(f"pct set {t.ctid} " + shlex.join(p.config.pct_args()))
    out += [r.text(t.ctid) for r in p.inplace]
    if p.restart:
        out.append(RESTART_COMMAND.format(ctid=t.ctid))
    if p.userspace:
        out.append(f"pct exec {t.ctid} -- ldconfig")
    return out


def _ldconfig(t: Target) -> None:
    r = t.system.run(["bash", "-c", shell.load("nvidia-link"), "nvidia-link", gpuconfig.USERSPACE_CT], check=False,
                     timeout=120, label="nvidia-link (ldconfig)")
    if r.exit_code != 0:
        raise GpuFixError(f"container {t.ctid}: ldconfig failed (exit {r.exit_code}): {r.err.strip()[-300:]}")

