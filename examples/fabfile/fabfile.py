"""A fabfile that drives a container through your own Fabric Connection to the Proxmox host:

    fab -H root@pve1 gpu-check --ctid 200               # a command in container 200
    fab -H root@pve1 gpu-deploy --ctid 200 --hosts hosts.yaml

remote.fabric reads where and how the Connection logs in (host, port, user, key_filename) and connects
with remote's own transport: an unknown host key is refused (HostKeyError), never added."""

from fabric import task

import remote
import remote.fabric


@task
def gpu_check(c, ctid=200, known_hosts=None):
    """Run one command in a container of the host: its exit status and output."""
    r = remote.fabric.exec(c, int(ctid), ["python3", "-c", "import platform; print(platform.node())"],
                           known_hosts=known_hosts)
    print(f"container {ctid}: exit {r.exit_code}: {r.text.strip()}")


@task
def gpu_deploy(c, ctid=200, hosts="hosts.yaml"):
    """Deploy a container as the hosts file pins it (its venv and checkout), then say what changed."""
    plan = remote.fabric.deploy(c, int(ctid), hosts=hosts, progress=print)
    print(f"container {ctid}: " + ("nothing to do" if plan.noop else "changed: " + ", ".join(plan.changed)))
