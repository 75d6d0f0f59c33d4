"""The public Python API: what `import remote` gives a script, a notebook or a user's own tasks.py.

    with remote.open("hosts.yaml") as fleet:
        ct = fleet.container(200)
        r = ct.exec(["python", "-c", "print(1)"])        # Result
        ct.deploy()                                       # DeployPlan (applied); check=True: what would change
        run = ct.train(detach=True)                       # Run
        for line in run.follow(): ...

Everything here returns data and raises the exception tree of remote.errors; nothing prints or exits.
Progress (the steps a deploy takes, a followed log's lines, dry-run commands) goes to the `progress`
callback given to `open` (as text), to its `events` callback (typed, remote.events) and to `logging`
(logger `remote.api`). The command line (remote.cli) is a client of this package. It reaches the
operations only, never the transport. One module per noun:

    fleet.py      open(), Fleet (its handles: container, containers)
    base.py       what a fleet is and does on many containers (status, doctor, caches, multi-node runs)
    container.py  Container (a container resolved once) and Run
    group.py      Group: one call per container through the one executor
    setup.py      what needs no fleet: write_hosts_file, sudoers_dropin, disconnect, progress_printer

What operations return is remote.results'; docs/reference/library.md documents every public name.
"""

from __future__ import annotations

from .. import results
from ..results import *  # noqa: F403  (the values the API returns, remote.results.__all__, re-exported as they are)
from .base import ALL, PROGRESS_EVERY, FleetBase, Progress
from .container import Container, OutputCallback
from .fleet import Fleet, open
from .group import Group
from .run import FOLLOW_SLICE_S, Run
from .setup import (
    HostsFile,
    current_container,
    disconnect,
    progress_printer,
    sudoers_dropin,
    write_hosts_file,
)

__all__ = [
    "ALL", "FOLLOW_SLICE_S", "PROGRESS_EVERY", "Container", "Fleet",
    "FleetBase", "Group", "HostsFile", "OutputCallback", "Progress", "Run",
    "current_container", "disconnect", "open",
    "progress_printer", "sudoers_dropin", "write_hosts_file",
]
__all__ += results.__all__
