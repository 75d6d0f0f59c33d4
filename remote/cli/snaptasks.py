"""A container's Proxmox snapshots: `remote snapshots` and `remote rollback` (registered in TASKS when
remote/cli/tasks.py imports this module), as every task: its options, one remote.api call, format.py's lines."""

from __future__ import annotations

from . import format as fmt
from .table import HOSTS_HELP, ONE_CT_HELP, fleet_of, handled, say, task


@task(help={"container": ONE_CT_HELP, "json": "print the snapshots as JSON", "hosts": HOSTS_HELP})
@handled
def snapshots(c, container=None, json_=False, hosts=None):
    """List the container's Proxmox snapshots: name, time, description, and which are remote's own."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        found = fleet.container(container).snapshots()
    say(fmt.snapshots_json(found) if json_ else "\n".join(fmt.snapshot_lines(found)))


@task(help={"container": ONE_CT_HELP, "snapshot": "the snapshot (default: the newest of remote's own)",
            "force": "roll back even while a run is live (the container is killed, and the run with it)",
            "hosts": HOSTS_HELP})
@handled
def rollback(c, container=None, snapshot=None, force=False, hosts=None):
    """Roll the whole container back to a Proxmox snapshot (`pct rollback`), then start it again.

    Refused while a run is live unless --force. Mount points are not part of a snapshot: what lives on
    one (run folders, the known-good record, where configured so) stays as it is."""
    with fleet_of(hosts) as fleet:
        done = fleet.container(container).rollback(snapshot, force=force)
    say("\n".join(fmt.rollback_lines(done)))
