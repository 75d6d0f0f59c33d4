"""A container's Proxmox snapshots: `remote snapshots` and `remote rollback` (registered in TASKS when
remote/cli/tasks.py imports this module), as every task: its options, one remote.api call, and its lines (a rollback's
here, as movetasks.py words a drain)."""

from __future__ import annotations

from typing import Any

from ..naming import path_words, printable
from . import format as fmt
from .table import DRY_HELP, HOSTS_HELP, ONE_CT_HELP, fleet_of, handled, say, task


@task(help={"container": ONE_CT_HELP, "json": "print the snapshots as JSON", "hosts": HOSTS_HELP})
@handled
def snapshots(c, container=None, json_=False, hosts=None):
    """List the container's Proxmox snapshots: name, time, description, and which are remote's own."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        found = fleet.container(container).snapshots()
    say(fmt.snapshots_json(found) if json_ else "\n".join(fmt.snapshot_lines(found)))


@task(help={"container": ONE_CT_HELP, "snapshot": "the snapshot (default: the newest of remote's own)",
            "force": "roll back without saving a live run (it is killed; its latest complete checkpoint is still "
                     "carried across)", "dry": DRY_HELP, "hosts": HOSTS_HELP})
@handled
def rollback(c, container=None, snapshot=None, force=False, dry=False, hosts=None):
    """Roll the whole container back to a Proxmox snapshot (`pct rollback`), then start it again.

    It reverts the environment (venv, code, config), never the training progress: a live run with
    train.checkpoint saves first and resumes after (refused, the run left running, where no new checkpoint
    comes within its grace; --force skips the save), and the latest complete checkpoint is carried across.
    Mount points are not part of a snapshot: what lives on one stays as it is."""
    with fleet_of(hosts, dry=dry) as fleet:
        done = fleet.container(container).rollback(snapshot, force=force)
    say("\n".join(rollback_lines(done)))


def rollback_lines(done: Any) -> list[str]:
    """`remote rollback`: the snapshot rolled back to, then what was restored and what was kept."""
    return ([f"rolled back container {done.container} to {done.snapshot.name} ({done.snapshot.time}, "
             f"{printable(done.snapshot.description) or 'no description'})" + ("; started again" if done.started else "")]
            + [f"  restored: {line}" for line in done.restored] + [f"  kept:     {line}" for line in done.kept]
            + ([f"  carried:  checkpoint {path_words(done.carried.path)}"
                + (f" (step {done.carried.step})" if done.carried.step is not None else "")
                + f" across the rollback (through {printable(done.carried_via or '')})"] if done.carried else [])
            + ([f"  carried:  run folders {printable(', '.join(done.carried_runs))} across the rollback (the "
                "snapshot's own left as they are)"] if done.carried_runs else [])
            + ([f"  resumed:  run {done.resumed} continues run {done.stopped}"] if done.resumed else
               [f"  NOT resumed: run {done.stopped} (`remote train -c {done.container} --resume`)"] if done.stopped
               else []))
