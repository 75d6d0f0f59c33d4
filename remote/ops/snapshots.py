"""Proxmox snapshots of a container: one before each deploy that changes something, `snapshots`, `rollback`.

A snapshot covers the container's rootfs (and volume mount points on a storage that can snapshot),
never a bind mount. Whether the rootfs can take one comes from `pct config ID` (the rootfs line names
its storage, `rootfs: local-zfs:subvol-200-disk-0,size=32G`) and `pvesm status` (the storage's type):
ZFS (zfspool), LVM-thin (lvmthin), Ceph RBD (rbd) and BTRFS (btrfs) can; directory, NFS, CIFS and thick
LVM cannot. `pvesm status` rather than /etc/pve/storage.cfg: the file is readable only by root and
www-data, `pvesm status` is one program a sudo rule can allow with exactly that argument.

remote's own snapshots are named `remote-<YYYYMMDD>-<n>` with the description `before deploy of
<commit>`; only those are ever deleted (the newest deploy.keep_snapshots of them are kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import re
from dataclasses import dataclass, field

from .. import sudo
from ..config import ContainerSpec
from ..errors import (
    FORCE,
    SNAPSHOT_NAME,
    BusyError,
    HostPermissionError,
    PctError,
    RemoteError,
    SnapshotError,
    call,
    snapshot_named,
    worded,
)
from ..results import RolledBack, Snapshot
from ..target import Target
from ..transport.pct import Container, classify
from . import carry, checkpoints, oplock

SNAPSHOT_TYPES = ("zfspool", "lvmthin", "rbd", "btrfs")
OURS = re.compile(r"remote-(\d{8})-(\d+)")
DESCRIPTION = "before deploy of "
ROLLBACK_DEADLINE = 1800.0  # seconds: copying a large rootfs back on slow storage


class UnknownSnapshot(SnapshotError):
    exit_code = 2


def is_ours(name: str, description: str) -> bool:
    """Made by remote's deploy (the only ones remote ever deletes)."""
    return bool(OURS.fullmatch(name)) and description.startswith(DESCRIPTION)


def _order(s: Snapshot) -> tuple:
    m = OURS.fullmatch(s.name)
    return (m.group(1), int(m.group(2))) if m else ("", 0)


@dataclass(frozen=True)
class Support:
    storage: str | None
    type: str | None
    supported: bool
    reason: str  # one line: why not, or which storage


_LINE = re.compile(r"^(?P<indent>\s*)`-> (?P<name>\S+)\s+(?:(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s+(?P<desc>.*?)"
                   r"|(?P<here>You are here!))\s*$")


def parse_listsnapshot(text: str) -> list[Snapshot]:
    """`pct listsnapshot`'s tree, one line per snapshot; `current` (You are here!) left out."""
    found = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group("here") or m.group("name") == "current":
            continue
        desc = m.group("desc") or ""
        desc = "" if desc == "no-description" else desc
        found.append(Snapshot(m.group("name"), m.group("time"), desc, is_ours(m.group("name"), desc),
                              len(m.group("indent"))))
    return found


def parse_pvesm_status(text: str) -> dict[str, str]:
    """`pvesm status`: storage name -> type (the header's Name and Type columns)."""
    types = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2:
            types[parts[0]] = parts[1]
    return types


def config_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("lxc."):
            out[key.strip()] = value.strip()
    return out


def rootfs_storage(config_text: str) -> str | None:
    """The storage of the rootfs volume (`rootfs: local-zfs:subvol-200-disk-0,size=8G` -> local-zfs)."""
    volume = config_lines(config_text).get("rootfs", "").split(",")[0]
    return volume.split(":", 1)[0] if ":" in volume else None


def mount_points(config_text: str) -> list[str]:
    """The container paths of its mount points (`mp0: /srv/data,mp=/data` -> /data): outside the rootfs."""
    paths = []
    for key, value in config_lines(config_text).items():
        if re.fullmatch(r"mp\d+", key):
            m = re.search(r"(?:^|,)mp=([^,]+)", value)
            if m:
                paths.append(m.group(1).rstrip("/") or "/")
    return paths


def _host_program(t: Target, name: str, *args: str) -> str:
    """A Proxmox program other than pct on the container's host (`pvesm status`), through sudo where the host
    says so; its permission errors named as pct's are."""
    session, spec, ct = t.session, t.spec, t.system
    argv = sudo.host_argv(spec.host, name, *args)
    result = session.host_run(spec.host, argv, deadline=60)
    if result.exit_code != 0:
        error = classify(result.err, result.exit_code, spec.ctid, spec.host)
        if isinstance(error, HostPermissionError):
            if sudo.sudo_failure(argv, result.err) == "password":
                raise HostPermissionError(spec.ctid, sudo.diagnose(lambda a: session.host_run(spec.host, a, deadline=60),
                                                                   argv, spec.host.name, spec.host.user), result.err)
            raise error
        raise SnapshotError(f"{ct.where}: `{name} {' '.join(args)}` failed: {result.err.strip() or result.exit_code}")
    return result.out


def support(t: Target) -> Support:
    """Whether the container's rootfs can take a snapshot: its storage from `pct config`, the type from `pvesm status`."""
    spec, ct = t.spec, t.system
    config = ct.run_pct("config", str(spec.ctid), mutates=False)
    config.check(ct.where)
    storage = rootfs_storage(config.out)
    if storage is None:
        return Support(None, None, False, f"container {spec.ctid}: `pct config` names no rootfs storage")
    types = parse_pvesm_status(_host_program(t, "pvesm", "status"))
    kind = types.get(storage)
    if kind is None:
        return Support(storage, None, False, f"storage {storage} of container {spec.ctid}'s rootfs is not in "
                                             "`pvesm status` (disabled, or not on this node)")
    if kind not in SNAPSHOT_TYPES:
        return Support(storage, kind, False, f"container {spec.ctid}'s rootfs is on storage {storage} ({kind}), which "
                                             "cannot take snapshots (ZFS, LVM-thin, Ceph RBD and BTRFS can)")
    return Support(storage, kind, True, f"storage {storage} ({kind})")


def list_snapshots(t: Target) -> list[Snapshot]:
    """The container's snapshots (`pct listsnapshot`), oldest first."""
    return _listed(t)


def _listed(t: Target) -> list[Snapshot]:
    ct, spec = t.ct, t.spec
    result = ct.run_pct("listsnapshot", str(spec.ctid), mutates=False)
    result.check(ct.where)
    return parse_listsnapshot(result.out)


def next_name(existing: list[Snapshot], today: datetime.date) -> str:
    day = today.strftime("%Y%m%d")
    taken = [int(m.group(2)) for s in existing if (m := OURS.fullmatch(s.name)) and m.group(1) == day]
    return f"remote-{day}-{max(taken, default=0) + 1}"


def to_delete(existing: list[Snapshot], keep: int) -> list[Snapshot]:
    """remote's own snapshots beyond the newest `keep`, oldest first; never another's."""
    ours = sorted((s for s in existing if s.ours), key=_order)
    return ours[:-keep] if keep > 0 else ours


NO_QUORUM = "cluster not ready - no quorum?"  # PVE::Cluster::check_cfs_quorum's message


@dataclass
class Taken:
    name: str | None = None
    note: str | None = None  # why none was taken
    deleted: list[str] = field(default_factory=list)


def before_deploy(t: Target, what: str, today: datetime.date | None = None) -> Taken:
    """deploy.snapshot: take `remote-<date>-<n>` before the deploy's changing steps (auto: where the storage
    can; always: refuse where it cannot), then delete remote's own beyond deploy.keep_snapshots. A snapshot
    taken is a SnapshotTaken event of the container's; none taken is the caller's to say (Taken.note)."""
    spec, ct = t.spec, t.system
    mode = spec.deploy.snapshot
    if mode == "never":
        return Taken(note="deploy.snapshot is never")
    how = support(t)
    if not how.supported:
        if mode == "always":
            raise SnapshotError(f"{ct.where}: deploy.snapshot is always, but {how.reason}: nothing was changed "
                                "(set deploy.snapshot: auto to deploy without one)")
        return Taken(note=f"no snapshot: {how.reason}")
    existing = _listed(t)
    name = next_name(existing, today or datetime.datetime.now(datetime.timezone.utc).date())
    result = ct.run_pct("snapshot", str(spec.ctid), name, "--description", f"{DESCRIPTION}{what}", mutates=True,
                     deadline=ROLLBACK_DEADLINE)
    if result.exit_code != 0 and NO_QUORUM in result.err:  # a cluster node cut off: /etc/pve is read-only there
        why = (f"the cluster has no quorum on node {spec.host.node_name} (`{NO_QUORUM}`: Proxmox writes no "
               "container config there, so no snapshot)")
        if mode == "always":
            raise SnapshotError(f"{ct.where}: deploy.snapshot is always, but {why}: nothing was changed (deploy again "
                                "once the cluster is quorate, or set deploy.snapshot: auto to deploy without one)")
        return Taken(note=f"no snapshot: {why}")
    if result.exit_code != 0:
        raise SnapshotError(f"{ct.where}: `pct snapshot {spec.ctid} {name}` failed: {result.err.strip()}: nothing "
                            "was changed (deploy.snapshot: never deploys without one)")
    taken = Taken(name=name)
    t.snapshot_taken(name, how.reason)
    if not ct.dry:
        for old in to_delete(_listed(t), spec.deploy.keep_snapshots):
            r = ct.run_pct("delsnapshot", str(spec.ctid), old.name, mutates=True, deadline=ROLLBACK_DEADLINE)
            if r.exit_code == 0:
                taken.deleted.append(old.name)
            else:
                t.warn(f"could not delete the old snapshot {old.name}: {r.err.strip()}")
    return taken


def _places(spec: ContainerSpec) -> list[tuple[str, str]]:
    run_dir = spec.train.run_dir.rstrip("/")
    return [("run folders", run_dir), ("the known-good record", f"{run_dir}/known-good.json"),
            ("the compile cache", spec.warmup.cache_dir), ("the venv", spec.venv.path), ("the checkout", spec.code.path)]


def where_things_live(spec: ContainerSpec, config_text: str) -> tuple[list[str], list[str]]:
    """(kept, restored): each of remote's places on a mount point (outside the rootfs: a rollback leaves it)
    or in the rootfs (a rollback returns it to the snapshot)."""
    mounts = mount_points(config_text)
    kept: list[str] = []
    restored: list[str] = []
    for what, path in _places(spec):
        inside = next((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), None)
        (kept if inside else restored).append(f"{what} ({path}{', on mount point ' + inside if inside else ''})")
    return kept, restored


def rollback(t: Target, *, snapshot: str | None = None, force: bool = False, timeout: float = 120) -> RolledBack:
    """`pct rollback` to `snapshot` (default: the newest of remote's); a running container is started again and
    waited for until it answers a command. It reverts the environment, never the training progress: a live run
    with train.checkpoint saves first (or the rollback is refused, the run left running: SaveRefused) and
    resumes after; the latest complete checkpoint and the run folders are carried across (remote.ops.carry), a
    stopped container started for that and stopped again. Without train.checkpoint a live run refuses it.
    `force`: no save (the run is killed), the carry still made; a stopped container is not started for it."""

    spec, ct = t.spec, t.ct
    existing = list_snapshots(t)
    if snapshot is None:
        ours = sorted((s for s in existing if s.ours), key=_order)
        if not ours:
            listed = call(spec.ctid, "snapshots()")
            raise worded(UnknownSnapshot(f"{ct.where}: no snapshot of remote's to roll back to ({listed} lists "
                                         f"them; {SNAPSHOT_NAME} picks another's)"), listed, SNAPSHOT_NAME)
        chosen = ours[-1]
    else:
        named = next((s for s in existing if s.name == snapshot), None)
        if named is None:
            names = ", ".join(s.name for s in existing) or "none"
            named_as = snapshot_named(snapshot)
            raise worded(UnknownSnapshot(f"{ct.where}: {named_as}: no such snapshot (there: {names})"), named_as)
        chosen = named
    if getattr(spec.host, "sudo", False) and not OURS.fullmatch(chosen.name):
        # The sudo rule allows `pct rollback` to remote's own snapshots only (remote.sudo.PROGRAMS): a rollback
        # restores the snapshot's container config too, and another's may be older and wider than today's.
        raise UnknownSnapshot(f"{ct.where}: --snapshot {chosen.name} is not one of remote's (remote-DATE-N): the sudo "
                              f"rule of a `sudo: true` host allows a rollback to remote's own snapshots only; roll "
                              f"back to another as root on {spec.host.name} (`pct rollback {spec.ctid} {chosen.name}`)")
    running = ct.status() == "running"
    # A stopped container is started for the carry (pct pull/push need it running) and stopped again after.
    leave_stopped = not running and _start_for_carry(t, ct, force=force, timeout=timeout)
    running = running or leave_stopped
    # The operation lease of a running container (a stopped one runs no deploy): held from the run check
    # to the rollback, so no deploy, warmup or launch of another controller starts in between.
    try:
        with oplock.hold(ct, f"rollback to {chosen.name}") if running else contextlib.nullcontext() as lease:
            done = _rollback(t, ct, chosen, running, lease, force=force, timeout=timeout, leave_stopped=leave_stopped)
    except carry.NotPutBack as exc:
        if leave_stopped:  # pct push needs it running: left so, for the commands the error names
            raise carry.NotPutBack(f"{exc} (the container, stopped before the rollback, is left running for "
                                   f"that: `pct stop {spec.ctid}` stops it)") from exc
        raise
    except RemoteError:
        if leave_stopped and not ct.dry:
            with contextlib.suppress(RemoteError):  # the error that stopped the rollback is the one to see
                ct.stop()  # as it was
        raise
    if done.saved is None:
        return done
    # The run saved before the rollback resumes from its (carried) checkpoint, outside the lease (a train
    # takes it), as gpu fix's restart does.
    from . import jobs

    t.step(f"resume run {done.stopped} from its checkpoint (train --resume)")
    resumed = jobs.resume_saved(t, done.stopped, "the container rolled back")
    return done if resumed is None else dataclasses.replace(done, resumed=resumed)


def _start_for_carry(t: Target, ct: Container, *, force: bool, timeout: float) -> bool:
    """A stopped container with train.checkpoint whose checkpoint or run folders are in the rootfs: started (and
    waited for) so they can be carried across the rollback; True where it was. --force carries nothing."""
    spec = t.spec
    if spec.train.checkpoint is None or force:
        return False
    config = ct.run_pct("config", str(spec.ctid), mutates=False)
    mounts = mount_points(config.out if config.ok else "")
    if all(carry.mount_of(path, mounts) for path in (checkpoints.path_of(spec) or "", spec.train.run_dir)):
        return False
    t.step(f"container {spec.ctid} is stopped: started for the carry (its checkpoint and run folders can be read "
           f"and put back only while it runs; {FORCE.cli}, {FORCE.library} skips it), stopped again after the rollback")
    if ct.dry:  # nothing of a stopped container can be read: the plan in words
        t.output(f"(dry run) pct start {spec.ctid}; the carry out; pct rollback {spec.ctid} ... --start 1; the carry "
                 f"back; pct stop {spec.ctid}")
        return False
    ct.start()
    ct.wait_running(timeout=timeout)
    try:
        ct.run(["true"], timeout=timeout, mutates=False)
    except (PctError, RemoteError) as exc:
        ct.stop()
        raise SnapshotError(f"{ct.where}: started for the carry, but the container does not answer: {exc}; "
                            "stopped again, nothing was changed") from exc
    return True


def _rollback(t: Target, ct: Container, chosen: Snapshot, running: bool, lease: oplock.Lease | None, *,
              force: bool, timeout: float, leave_stopped: bool = False) -> RolledBack:
    """The rollback itself, through `ct` (the pct Container rollback chose), reporting through `t`: a live run
    saved (or refused) first, the latest complete checkpoint and the run folders carried across it
    (remote.ops.carry). `leave_stopped`: the container was started for the carry, and is stopped after it."""
    from . import jobs

    spec = t.spec
    ck = spec.train.checkpoint
    stopped: str | None = None
    saved = None
    if running:
        live = jobs.state(t).live
        if live and not force and ck is None:
            stop = call(spec.ctid, "stop()")
            raise worded(BusyError(spec.ctid, f"container {spec.ctid}: {jobs.live_text(live)} still running; a "
                                              f"rollback kills the container. Stop it first ({stop}), or pass {FORCE} "
                                              "(with train.checkpoint it is saved, carried and resumed)",
                                   jobs.busy_details(live)), stop, FORCE)
        if live and not force:
            assert ck is not None
            t.step(f"{jobs.live_text(live)} saves first (train.checkpoint.grace {ck.grace:g} s), and resumes after "
                   "the rollback from its checkpoint")
            if ct.dry:
                t.output(f"(dry run) remote stop -c {spec.ctid} --save (or refuse: it is left running); after the "
                         f"rollback: remote train -c {spec.ctid} --resume")
            else:
                got = jobs.stop(t, save=True, refuse=f"the rollback to {chosen.name}")
                stopped, saved = got.run, got.saved
        elif live:
            t.step(f"forced: rolling back while {jobs.live_text(live)} runs (it is killed, not saved)")
            if ck is not None and not ct.dry:
                jobs.stop(t)  # unsaved, but stopped first: the checkpoint carried holds still while it travels
    config = ct.run_pct("config", str(spec.ctid), mutates=False)
    kept, restored = where_things_live(spec, config.out if config.ok else "")
    got_plan, said = carry.plan(t, mount_points(config.out if config.ok else ""), stopped) if running and ck \
        else (None, "")
    if said:
        t.step(said)
    if got_plan is not None and got_plan.run_dir:  # carried across: not returned to the snapshot's
        restored = [line for line in restored if not line.startswith("run folders (")]
    carried = carry.out(t, got_plan) if got_plan is not None else None
    start = running and not leave_stopped
    t.step(f"pct rollback {spec.ctid} {chosen.name}" + (" (the container is stopped, then started again)"
                                                        if start else " (the container is stopped, started to put "
                                                        "the carry back, then stopped)" if running else ""))
    if lease is not None:
        lease.verify()  # still ours: nothing of another controller's started since the check
    result = ct.run_pct("rollback", str(spec.ctid), chosen.name, "--start", "1" if running else "0", mutates=True,
                     deadline=ROLLBACK_DEADLINE)
    kept_copy = (f"; the carry ({carry.words(carried.plan)}) is on {t.host.name} at {carried.plan.host_file}, "
                 f"{carry.put_back_command(t, carried)}" if carried else "")
    if result.exit_code != 0:
        raise SnapshotError(f"{ct.where}: `pct rollback {spec.ctid} {chosen.name}` failed: "
                            f"{result.err.strip() or result.exit_code}{kept_copy}"
                            + (f"; run {stopped} was saved and stopped: `remote train -c {spec.ctid} --resume` "
                               "resumes it" if stopped else ""))
    if running and not ct.dry:
        ct.wait_running(timeout=timeout)
        try:
            ct.run(["true"], timeout=timeout, mutates=False)
        except (PctError, RemoteError) as exc:
            raise SnapshotError(f"{ct.where}: rolled back to {chosen.name}, but the container does not answer: "
                                f"{exc}{kept_copy}") from exc
    runs = carry.back(t, carried) if carried is not None else ()
    if leave_stopped:
        t.step(f"container {spec.ctid} stopped again, as it was")
        ct.stop()
    return RolledBack(spec.ctid, chosen, start, tuple(kept), tuple(restored),
                      carried=carried.plan.checkpoint if carried else None,
                      carried_via=carried.plan.host_file if carried else None, stopped=stopped, saved=saved,
                      carried_runs=runs)
