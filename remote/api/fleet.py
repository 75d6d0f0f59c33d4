"""`remote.open(hosts)`: the Fleet of a hosts file, and its handles: `fleet.container(id)`, a Container
resolved once; `fleet.containers(which)`, a Group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..events import Sink
from ..results import CacheCopy, GpuFix, GroupResult, HostSetup, Outcome
from .base import ALL, FleetBase, Progress
from .container import Container
from .group import Group


def open(source: str | os.PathLike | Mapping[str, Any] | None = None, *, dry: bool = False,
         progress: Progress | None = None, keep: bool = True, events: Sink | None = None) -> Fleet:
    """The fleet of a hosts file (a path; None: $REMOTE_HOSTS_FILE, else ./hosts.yaml) or of a config
    built in code (a dict in the hosts file's shape). Bad input raises ConfigError naming the file and key.

    `dry`: mutating commands are described through `progress` instead of run. `keep`: SSH hosts through
    their kept connection (as the command line does), so the next process connects at once. `progress`
    gets each line of progress as text, `events` as a typed event (remote.events); without either, nothing
    of it leaves the library but `logging`."""
    from .. import config as cfg
    from . import checks

    for name, value in (("dry", dry), ("keep", keep)):
        checks.flag(name, value)
    if source is not None and not isinstance(source, (str, os.PathLike, Mapping)):
        raise TypeError(f"source: expected a hosts file's path, a dict in its shape, or None; got {type(source).__name__}")
    if isinstance(source, Mapping):
        config = cfg.parse(dict(source), "<dict>")
    else:
        config = cfg.load(os.fspath(source) if source is not None else None)
    return Fleet(config, dry=dry, progress=progress, keep=keep, events=events)


class Fleet(FleetBase):
    """The hosts and containers of one config, over one connection per host (closed with the fleet)."""

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def container(self, ctid: int | str | None = None) -> Container:
        """The container `ctid` (None: default_container, $REMOTE_CONTAINER or the only one). An id the
        hosts file does not list raises ConfigError, naming the ones it does."""
        from ..target import spec_of

        return Container(self, spec_of(self.config, ctid))

    def containers(self, which: int | str | Sequence[int | str] = ALL) -> Group:
        """Several containers at once, as `-c all` (a group, a comma list or a list of ids)."""
        return Group(self, [self.container(i) for i in self.select(which)])

    def copy_cache(self, src: int | str, which: int | str | Sequence[int | str] | None = None, *,
                   fail_fast: bool = False, prefix_output: bool = False) -> GroupResult[CacheCopy]:
        """src's compile cache into each of these containers (src itself left out) whose passport matches:
        a GroupResult of CacheCopy (a mismatch fails that container with a WarmupError naming the fields)."""
        ctid = self.config.container(src).ctid
        ids = [i for i in self.select(which) if i != ctid]
        group = Group(self, [self.container(i) for i in ids])
        session = self._session
        # src's host connected first, before the group's threads: the session's resolved view (a cluster's
        # container on the node holding it, not its hinted host)
        session.transport(session.config.containers[ctid].host)
        return group.map(lambda ct: ct.copy_cache(ctid), fail_fast=fail_fast, prefix_output=prefix_output)


    # -- GPU hosts ----------------------------------------------------------------------------------------
    def host_setup(self, host: str, *, dry: bool = False) -> HostSetup:
        """Install on `host` (a host of the hosts file), idempotently, the boot unit that makes the uvm nodes
        before Proxmox starts its guests and refills the driver's user-space folder (remote.ops.hostsetup).
        Needs root on the host (RootRequired for a `sudo: true` login); ConfigError for an unknown host."""
        from ..ops import hostsetup
        from ..target import resolve_host
        from . import checks

        checks.flag("dry", dry)
        return hostsetup.host_setup(resolve_host(self._session, host), dry=dry)

    def gpu_fix_host(self, host: str, *, dry: bool = False, force: bool = False) -> GroupResult[GpuFix]:
        """gpu fix on every container of `host` in the hosts file, one after another (they share the host's
        uvm nodes and driver folder): a GroupResult of GpuFix, one container's failure its own."""
        import time

        from .. import executor
        from ..target import resolve_host

        resolve_host(self._session, host)  # ConfigError naming the known hosts
        result: GroupResult[GpuFix] = GroupResult()
        for ctid in [i for i, spec in self.config.containers.items() if spec.host.name == host]:
            start = time.monotonic()
            try:
                result[ctid] = Outcome(ctid, host, self.container(ctid).gpu_fix(dry=dry, force=force), None,
                                       time.monotonic() - start)
            except Exception as exc:  # noqa: BLE001 -- one container's failure is its result
                code, message = executor.failure(exc)
                result[ctid] = Outcome(ctid, host, None, exc, time.monotonic() - start, False, code, message)
        return result
