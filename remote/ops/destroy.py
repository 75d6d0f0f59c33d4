"""`remote destroy`: the pair of `remote create`. Removes a container from its Proxmox host (`pct destroy --purge 1`)
and its entry from the hosts file, comments with it; refused while a run is live there and for a `sudo: true`
login (destroy is one of pct's root-only verbs: remote.sudo.ROOT_ONLY). A container the host no longer has (removed
by hand, `missing` in status) only loses its entry.

No snapshot is taken first: `pct destroy` frees the container's volumes, and its snapshots with them, so a
snapshot would not outlive it; the result lists the snapshots that go with it, and a copy to keep is a backup
(`vzdump CTID`), made before.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from ..errors import BusyError, ContainerNotFound, RootRequired, call, worded
from ..results import Destroyed
from ..target import Target
from . import jobs, oplock
from . import snapshots as snaps


def refuse_without_root(t: Target) -> None:
    if t.host.sudo:
        raise RootRequired(f"host {t.host.name}: `pct destroy` is one of the verbs remote never runs through the sudo "
                           "rule (it deletes a container's disks); the host's login uses `sudo: true`: run destroy with a "
                           "root login for this host, or `pct destroy` there yourself "
                           "(docs/guide/safety.md#which-command-needs-which-login)")


def state_of(t: Target) -> str:
    """The container's state as pct says: running, stopped, or missing (the host has no such container)."""
    try:
        return t.ct.status()
    except ContainerNotFound:
        return "missing"


def plan(t: Target, state: str | None = None) -> tuple[str, list[str]]:
    """The container's state (`state`, else asked) and its snapshots' names; BusyError while a run is live
    there (read only when it runs)."""
    state = state_of(t) if state is None else state
    if state == "missing":
        return "missing", []
    if state == "running":
        live = jobs.state(t).live
        if live:
            stop = call(t.ctid, "stop()")
            raise worded(BusyError(t.ctid, f"container {t.ctid}: {jobs.live_text(live)} still running; destroying it "
                                           f"would end the run and delete its outputs. Stop it first ({stop}), then "
                                           "destroy it", jobs.busy_details(live)), stop)
    return state, [s.name for s in snaps.list_snapshots(t)]


def destroy(t: Target, *, hosts_file: str | None,
            remove_entry: Callable[[str, int, bool], tuple[str, ...]]) -> Destroyed:
    """Destroy the container on its host (stopping it: `--force 1`; every volume and snapshot: `--purge 1`), then
    remove its hosts-file entry with `remove_entry(file, ctid, write)` (the lines it removed; asked first with
    write=False, so a file it cannot edit refuses before anything is destroyed). A dry run reads and reports the
    command instead; the file is left as it is."""
    start = time.monotonic()
    refuse_without_root(t)
    if hosts_file:
        remove_entry(hosts_file, t.ctid, False)
    state = state_of(t)
    # The operation lease of a running container (a stopped one runs no launch), as rollback holds it: from the
    # live-run check to `pct destroy`, so no launch, deploy or warmup of another controller starts in between.
    # The lease file is in the container's /run: it goes with the container (its release then fails, unheard).
    # A dry run changes nothing, so it holds nothing (and names no lease command among what it would run).
    leased = state == "running" and not t.ct.dry
    with oplock.hold(t.ct, "destroy") if leased else contextlib.nullcontext() as lease:
        state, snapshot_names = plan(t, state)
        argv = ("destroy", str(t.ctid), "--force", "1", "--purge", "1")
        commands: tuple[str, ...] = ()
        if state != "missing":
            t.step(f"pct {' '.join(argv)} on {t.host.name} ({state}" +
                   (f"; its snapshots go with it: {', '.join(snapshot_names)})" if snapshot_names else ")"))
            if lease is not None:
                lease.verify()  # still ours: nothing of another controller's started since the check
            result = t.ct.run_pct(*argv, mutates=True, deadline=600)
            result.check(t.ct.where)
            commands = (f"pct {' '.join(argv)}",)
    dry = t.ct.dry
    removed: tuple[str, ...] = ()
    if hosts_file and not dry:
        removed = remove_entry(hosts_file, t.ctid, True)
    return Destroyed(t.ctid, t.host.name, state != "missing" and not dry, dry, state, tuple(snapshot_names), commands,
                     hosts_file if removed else None, removed, time.monotonic() - start)
