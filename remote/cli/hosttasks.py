"""The task on a Proxmox host itself: `remote create` (registered in TASKS when remote/cli/tasks.py imports
this module), as every task: its options, one remote.api call, remote/cli/format.py's lines."""

from __future__ import annotations

from . import format as fmt
from .table import HOSTS_HELP, Exit, fleet_of, handled, say, task


@task(positional="ctid", usage="remote create CTID (--host H | --node N) (--template VOLID | --clone CTID) [--gpu all|0,1|none]", help={
    "ctid": "the new container's id", "host": "the Proxmox host of the hosts file to make it on",
    "node": "instead of --host: a cluster's node (a host of the hosts file)",
    "template": "a template volume, e.g. local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst (`pveam list local`)",
    "clone": "instead of --template: the container (a template) to clone", "gpu": "all, none (the default: the plan says what GPUs the host has) or GPU indices, "
    "e.g. 0,1 (the host's /dev/nvidiaN numbers)", "cores": "CPU cores (default 4)", "memory": "memory in MiB "
    "(default 8192)", "disk": "root disk in GiB (default 32; a clone keeps its source's)", "storage": "the storage of its root disk (default: "
    "local-lvm, else local-zfs, else local)", "unprivileged": "an unprivileged container (the default)",
    "privileged": "a privileged container instead", "net0": "its network as Proxmox's net0 value (default "
    "name=eth0,bridge=vmbr0,ip=dhcp; e.g. name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1)", "dry": "read the host, print the plan and every command that "
    "would change something; change nothing", "json": "print the result as JSON", "hosts": HOSTS_HELP})
@handled
def create(c, ctid, host=None, node=None, template=None, clone=None, gpu=None, cores=4, memory=8192, disk=32,
           storage=None, unprivileged=False, privileged=False, net0=None, dry=False, json_=False, hosts=None):
    """Make a container on a Proxmox host that trains: its GPUs passed, the host's own driver user space
    mounted, what deploy needs installed, CUDA proven, its entry added to the hosts file.

    Needs root on the host (devN lines are root@pam's only). The same create again does nothing; another
    spec for an existing id, an id Proxmox has, an unknown template or storage or a GPU the host lacks are
    refused before anything changes; a failure part-way destroys what it made (docs/guide/bare-node.md)."""
    if unprivileged and privileged:
        raise Exit("error: --unprivileged and --privileged: give one", code=2)
    with fleet_of(hosts, dry, stderr_progress=json_) as fleet:
        got = fleet.create(int(ctid), host=host, node=node, template=template, clone=int(clone) if clone else None,
                           gpu=gpu, cores=int(cores), memory=int(memory), disk=int(disk), storage=storage,
                           unprivileged=not privileged, net0=net0)
    say(fmt.created_json(got) if json_ else "\n".join(fmt.created_lines(got)))


@task(positional="ctid", usage="remote destroy CTID [--yes] [--dry]", help={
    "ctid": "the container to remove (an id of the hosts file)",
    "yes": "do not ask: destroy it (needed where nobody can answer, e.g. without a terminal)",
    "dry": "read the host, print what would be destroyed and the command; change nothing",
    "json": "print the result as JSON", "hosts": HOSTS_HELP})
@handled
def destroy(c, ctid, yes=False, dry=False, json_=False, hosts=None):
    """Remove a container from its Proxmox host, its disks and snapshots with it, and its entry from the hosts
    file (its comments too): the pair of `remote create`.

    Refused while a run is live there. Asks first (type the id), unless --yes. A container the host no longer
    has only loses its entry. No snapshot is taken: Proxmox deletes a container's snapshots with it; back it up
    first (`vzdump CTID` on the host) to keep a copy (docs/guide/bare-node.md)."""
    import sys

    with fleet_of(hosts, dry, stderr_progress=json_) as fleet:
        if not dry and not yes:
            plan = fleet.destroy(ctid, dry=True)  # reads, refuses a live run, changes nothing
            say("\n".join(fmt.destroy_plan_lines(plan)), file=sys.stderr)
            if not sys.stdin.isatty():
                raise Exit(f"error: destroy {plan.ctid}: nobody to ask (no terminal): pass --yes to destroy it", code=2)
            sys.stderr.write(f"type {plan.ctid} to destroy it (anything else keeps it): ")
            sys.stderr.flush()
            if sys.stdin.readline().strip() != str(plan.ctid):
                raise Exit(f"destroy {plan.ctid}: not confirmed; nothing changed", code=1)
        got = fleet.destroy(ctid)
    say(fmt.destroyed_json(got) if json_ else "\n".join(fmt.destroyed_lines(got)))
