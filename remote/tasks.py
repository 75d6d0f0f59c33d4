"""remote's tasks as an invoke Collection, for a user's own tasks.py:

    from invoke import Collection
    from remote.tasks import collection

    ns = Collection()
    ns.add_collection(collection(), "gpu")      # invoke gpu.deploy -c 200, invoke gpu.logs -f, ...

The tasks are the command line's (remote/cli.py), with the same options and checks. Settings come from
invoke's configuration as well as from flags and the environment: an `invoke.yaml` beside the tasks.py
(or ~/.invoke.yaml, or $INVOKE_REMOTE_HOSTS) with

    remote:
      hosts: hosts.yaml        # the hosts file, when --hosts is not given
      container: 200           # the container, when -c is not given

A flag wins over the configuration, which wins over $REMOTE_HOSTS_FILE / $REMOTE_CONTAINER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from invoke import Collection

DEFAULTS = {"hosts": None, "container": None}


def collection() -> Collection:
    """A new Collection of every remote task (groups such as `lab` as sub-collections), configured with
    the `remote` settings above (all None: flags and the environment decide)."""
    from .cli import SHORT_FLAGS, TASKS, Exit
    from .invoke_tasks import collection as build

    ns = build(TASKS, SHORT_FLAGS, Exit)
    ns.configure({"remote": dict(DEFAULTS)})
    return ns
