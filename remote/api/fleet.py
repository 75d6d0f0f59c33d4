"""`remote.open(hosts)`: the Fleet of a hosts file, and its handles: `fleet.container(id)`, a Container
resolved once; `fleet.containers(which)`, a Group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..events import Sink
from ..results import CacheCopy, Created, Destroyed, Drained, GpuFix, GroupResult, HostSetup, Moved
from .base import ALL, FleetBase, Progress
from .container import Container
from .group import Group

if TYPE_CHECKING:
    from ..ops.session import TransportFactory


def open(source: str | os.PathLike | Mapping[str, Any] | None = None, *, dry: bool = False,
         progress: Progress | None = None, keep: bool = False, events: Sink | None = None,
         transport: TransportFactory | None = None, one_off: bool = False) -> Fleet:
    """The fleet of a hosts file (a path; None: $REMOTE_HOSTS_FILE, else ./hosts.yaml) or of a config
    built in code (a dict in the hosts file's shape). Bad input raises ConfigError naming the file and key.

    `dry`: mutating commands are described through `progress` instead of run. The fleet's connections end
    with it (close(), or the end of `with`). keep=True: SSH hosts through their kept connection instead, which
    stays after the script for the next process (as the command line does; `remote disconnect` ends it). `progress`
    gets each line of progress as text, `events` as a typed event (remote.events); without either, nothing
    of it leaves the library but `logging`. `transport`: what makes each host's transport, for tests
    (remote.testing.MockTransport; default: SSH, or local for a `local: true` host). `one_off` (with keep):
    the fleet runs one container command, as `remote exec` does: where a host has no live kept connection,
    that command runs over OpenSSH's `ssh` (exactly the host's address, port, user, key and known_hosts; host
    keys never added), ended in the container if the link goes, and the kept connection starts behind it."""
    from .. import config as cfg
    from . import checks

    for name, value in (("dry", dry), ("keep", keep), ("one_off", one_off)):
        checks.flag(name, value)
    if transport is not None and not callable(transport):
        raise TypeError(f"transport: expected a transport factory such as remote.testing.MockTransport(handler), "
                        f"got {type(transport).__name__}")
    if source is not None and not isinstance(source, (str, os.PathLike, Mapping)):
        raise TypeError(f"source: expected a hosts file's path, a dict in its shape, or None; got {type(source).__name__}")
    if isinstance(source, Mapping):
        config = cfg.parse(dict(source), "<dict>")
    else:
        config = cfg.load(os.fspath(source) if source is not None else None)
    return Fleet(config, dry=dry, progress=progress, keep=keep, events=events, transport=transport, one_off=one_off)


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
        from .. import executor
        from ..target import resolve_host

        resolve_host(self._session, host)  # ConfigError naming the known hosts
        ids = [i for i, spec in self.config.containers.items() if spec.host.name == host]
        return executor.each(self.config, ids, lambda ctid: self.container(ctid).gpu_fix(dry=dry, force=force),
                             serial=True)

    def create(self, ctid: int, *, host: str | None = None, node: str | None = None, template: str | None = None,
               clone: int | None = None, gpu: str | None = None, cores: int = 4, memory: int = 8192, disk: int = 32,
               storage: str | None = None, unprivileged: bool = True, net0: str | None = None,
               dry: bool | None = None) -> Created:
        """Make container `ctid` on `host` (or the hosts-file host that is cluster node `node`) from a vztmpl
        `template` volume or by cloning container `clone`; pass the GPUs `gpu` names (all, none, 0,1; None: none,
        with a note where the host has GPUs) with the host's own driver user space; install what deploy needs; prove CUDA starts; add it to the hosts file.
        The same create again is a no-op (Created.made False); bad input (an unknown template, storage or
        node, an id in use, a GPU the host lacks) raises CreateRefused, GpuConfigError or ConfigError before
        anything changed; a failure part-way raises CreateError after destroying what it made. Needs root
        on the host (docs/guide/bare-node.md). `net0`: Proxmox's net0 value (default
        name=eth0,bridge=vmbr0,ip=dhcp; its bridge checked). `dry` (default: the fleet's): reads, reports the commands."""
        from ..errors import ConfigError
        from ..ops import create as createmod
        from ..ops import hostsinit
        from ..target import resolve_host
        from . import checks

        checks.flag("unprivileged", unprivileged)
        for name, value in (("ctid", ctid), ("cores", cores), ("memory", memory), ("disk", disk)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        spec = createmod.CreateSpec(ctid, template, clone, gpu, cores, memory, disk, storage, unprivileged, net0)
        createmod.check_spec(spec)
        hosts = self.config.hosts
        if (host is None) == (node is None):
            raise ConfigError(self.config.file, "--host", "give --host H or --node N (a node of a cluster), one of the two")
        if node is not None:
            found = [h for h in hosts.values() if h.node_name == node]
            if not found:
                nodes = sorted(h.node_name for h in hosts.values() if h.cluster)
                raise ConfigError(self.config.file, "--node", f"node {node!r} is not in the hosts file (its cluster "
                                  f"nodes: {', '.join(nodes) or 'none'}): add it (remote init --address NODE lists a "
                                  "cluster's nodes)")
            host = found[0].name
        assert host is not None
        listed = self.config.containers.get(ctid)
        if listed is not None and listed.host.name != host and not listed.host.cluster:
            raise ConfigError(self.config.file, f"containers.{ctid}", f"is on host {listed.host.name!r} in the file, "
                              f"not {host!r}: create it there, or give another id")
        writable = self.config.file if self.config.file not in ("<dict>", "") else None
        if dry is None or dry == self.dry:
            target = resolve_host(self._session, host, ctid)
            return createmod.create(target, spec, hosts_file=writable, add_entry=hostsinit.add_container)
        from ..ops.session import open_session

        # Another dry than the fleet's: a session of its own, on the fleet's transports all the same.
        with open_session(self.config, dry=dry, agent=True, keep=self._keep, events=self._emit.event,
                          transport=self._transport) as session:
            return createmod.create(resolve_host(session, host, ctid), spec, hosts_file=writable,
                                    add_entry=hostsinit.add_container)

    def destroy(self, ctid: int | str, *, dry: bool | None = None) -> Destroyed:
        """Remove container `ctid` (of the hosts file) from its Proxmox host, its disks and snapshots with it
        (`pct destroy --force 1 --purge 1`), then its hosts-file entry with the comments above and inside it and
        its id in groups. A container the host no longer has only loses its entry. Refused (BusyError) while a
        run is live there; RootRequired for a `sudo: true` login; ConfigError for an id the file lacks or a file
        it cannot edit safely, before anything changed. Asks nothing: the command line confirms first.
        `dry` (default: the fleet's): reads, reports the command. No snapshot is taken: `pct destroy` deletes
        the container's snapshots with its volumes; back it up first (`vzdump CTID`) to keep a copy."""
        from ..ops import destroy as destroymod
        from ..ops import hostsinit
        from ..target import resolve
        from . import checks

        if dry is not None:
            checks.flag("dry", dry)
        ctid = self.config.container(ctid).ctid
        writable = self.config.file if self.config.file not in ("<dict>", "") else None
        if dry is None or dry == self.dry:
            return destroymod.destroy(resolve(self._session, ctid), hosts_file=writable,
                                      remove_entry=hostsinit.remove_container)
        from ..ops.session import open_session

        with open_session(self.config, dry=dry, agent=False, keep=self._keep, events=self._emit.event,
                          transport=self._transport) as session:
            return destroymod.destroy(resolve(session, ctid), hosts_file=writable,
                                      remove_entry=hostsinit.remove_container)

    # -- moves and maintenance (docs/guide/cluster.md) --------------------------------------------------------
    def _node(self, ctid: int, node: str) -> tuple[str, str, str]:
        """(the host entry of node `node` of container ctid's cluster, that node's name, the node it is on now);
        ConfigError naming the cluster's nodes for a node the hosts file lacks."""
        from ..cluster import lookup_of, node_of
        from ..errors import ConfigError
        from ..target import resolve

        spec = resolve(self._session, ctid).spec
        lookup = lookup_of(self._session.config)
        name_of = lookup.node_of if lookup is not None else node_of
        hosts = [h for h in self.config.hosts.values() if h.cluster and h.cluster == spec.cluster]
        found = [h for h in hosts if node in (name_of(h), h.name)]
        if spec.cluster is not None and not found:
            raise ConfigError(self.config.file, "--node", f"node {node!r} is not a node of cluster {spec.cluster!r} in the "
                              f"hosts file (its nodes: {', '.join(sorted(name_of(h) for h in hosts)) or 'none'})")
        return (found[0].name if found else node), (name_of(found[0]) if found else node), name_of(spec.host)

    def move(self, ctid: int | str, node: str, *, force: bool = False) -> Moved:
        """Move container `ctid` to node `node` of its cluster with its run: the node's GPU check first (GpuConfigError
        naming the findings where the container cannot use its GPUs there: nothing changed), the live run
        save-stopped (stop(save=True); force=True stops it unsaved and does not resume it), `pct migrate --restart`
        (offline for a stopped container) on the node that holds it, the container waited for there, the run
        resumed from its checkpoint (train(resume=True)). ConfigError for a container in no cluster, its own node,
        or a live run without train.checkpoint (unless force). The fleet's dry: reads, reports every command."""
        from ..cluster import lookup_of
        from ..gpudoctor import before_move
        from ..ops import move as movemod
        from ..target import resolve
        from . import checks

        checks.flag("force", force)
        t = resolve(self._session, ctid)
        host, name, source = self._node(t.ctid, node)
        lookup = lookup_of(self._session.config)

        def check() -> tuple[bool, tuple]:
            report = before_move(self._session, t.ctid, host)
            return report.gpu, report.findings

        return movemod.move(t, source, name, check=check, force=force,
                            moved=(lambda: lookup.moved(t.ctid, name)) if lookup is not None else None)

    def drain(self, host: str, *, to: str | None = None) -> Drained:
        """Every live run of `host`'s containers save-stopped (stop(save=True)); `to` (a node of their cluster): each
        container moved there (move()); without: left stopped, each with the command that resumes it, and
        remembered for resume_host(). One container's failure is its own (Drained.containers' error)."""
        from ..ops import move as movemod
        from ..target import resolve_host

        resolve_host(self._session, host)  # ConfigError naming the known hosts
        return movemod.drain(self._session, host, to=to, mover=lambda ctid: self.move(ctid, to or ""))

    def resume_host(self, host: str) -> Drained:
        """Each container drain() left on `host`: started where it is stopped (after a reboot), its run resumed from
        its checkpoint (train(resume=True)). ConfigError where no drain of `host` is remembered."""
        from ..ops import move as movemod
        from ..target import resolve_host

        resolve_host(self._session, host)
        return movemod.resume_host(self._session, host)
