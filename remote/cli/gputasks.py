"""The GPU host tasks: `remote gpu fix` and `remote host setup` (registered in TASKS when remote/cli/tasks.py
imports this module), each as every task: its options, one remote.api call, remote/cli/format.py's lines."""

from __future__ import annotations

from ..naming import printable
from . import format as fmt
from .table import DRY_HELP, HOSTS_HELP, ONE_CT_HELP, Exit, fleet_of, handled, say, task


@task(name="gpu fix", help={
    "container": ONE_CT_HELP, "host": "with --all: every container of this host in the hosts file",
    "all": "with --host: every container of that host, one after another",
    "force": "restart the container even while a run is live (the run is killed)", "dry": DRY_HELP,
    "hosts": HOSTS_HELP})
@handled
def gpu_fix(c, container=None, host=None, all_=False, force=False, dry=False, hosts=None):
    """Repair what `doctor --gpu` found that the container's config or its host can fix.

    Missing or wrong devN lines, a node bound over, the uvm node missing on the host, the driver's user
    space not matching the loaded module. Shows the config change as a diff first, takes a snapshot where
    the storage can, restarts the container only where it must (refused while a run is live unless
    --force), then proves cuInit(0) again; names what it cannot fix with the manual step. Needs root on
    the host (docs/guide/safety.md). Exit 0 fixed, nothing to fix or --dry, 1 something left, 2 bad input, 3 busy."""
    if bool(host) != bool(all_):
        raise Exit("error: gpu fix: give -c ID, or --host H with --all (every container of host H)", code=2)
    if host and container:
        raise Exit("error: gpu fix: -c ID or --host H --all, not both", code=2)
    with fleet_of(hosts, dry) as fleet:
        if host:
            result = fleet.gpu_fix_host(host, dry=dry, force=force)
            for ctid, outcome in result.items():
                say("\n".join(fmt.gpu_fix_lines(outcome.value)) if outcome.value is not None else
                    f"container {ctid} on {host}: error: {printable(outcome.message, lines=True)}")
            code = max([o.exit_code for o in result.values()] + [0 if dry or all(o.value.ok for o in result.values()
                                                                                   if o.value) else 1])
            if code:
                raise Exit(code=code)
            return
        done = fleet.container(container).gpu_fix(dry=dry, force=force)
    say("\n".join(fmt.gpu_fix_lines(done)))
    if not dry and not done.ok:  # dry: the plan was shown; nothing was left undone
        raise Exit(code=1)


@task(name="host setup", positional="host", help={
    "host": "the Proxmox host (a host of the hosts file)", "dry": "say what would be written, write nothing",
    "hosts": HOSTS_HELP})
@handled
def host_setup(c, host=None, dry=False, hosts=None):
    """Install the boot unit that keeps a GPU host's containers startable (idempotent).

    remote-gpu.service, before pve-guests.service: the uvm nodes and each GPU's node made, the driver's
    user-space folder refilled with the loaded module's files. Says what it wrote. Needs root on the host."""
    if not host:
        raise Exit("error: host setup: name the host (`remote host setup pve1`)", code=2)
    with fleet_of(hosts, dry) as fleet:
        done = fleet.host_setup(host, dry=dry)
    say("\n".join(fmt.host_setup_lines(done)))
