"""What needs no fleet: a hosts file to start from (`remote init`), the sudoers drop-in, ending kept
connections, terminal progress, and the few texts the command line shares with the library's messages.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:  # imported where used: `import remote` loads no yaml
    from ..config import Config, Host


@dataclass(frozen=True)
class HostsFile:
    """What write_hosts_file wrote: the file, the host's name, the containers found (id, name, state)."""

    path: str
    host: str
    containers: tuple[tuple[int, str, str], ...]


def write_hosts_file(address: str, *, out: str | os.PathLike | None = None, port: int | None = None,
                     user: str | None = None, key_file: str | None = None, known_hosts: str | None = None,
                     pct: str | None = None, force: bool = False, sudo: bool = False) -> HostsFile:
    """Connect to a Proxmox host, read `pct list` and each container's hostname, and write a commented
    hosts file listing them (never over an existing file without force). ConfigError for a missing
    key or known_hosts file; a host without containers gets a file with its host alone (`remote create` adds them).
    sudo: log in as a non-root user
    whose sudo rule allows pct (the file says `sudo: true`; sudoers_dropin() prints that rule)."""
    from .. import config as cfg
    from .. import sudo as sudomod
    from ..ops import hostsinit

    target = os.fspath(out) if out is not None else cfg.find_file(None)
    hostsinit.check_target(target, force)
    for flag, path in (("--key-file", key_file), ("--known-hosts", known_hosts)):
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise ConfigError(flag, "", f"{path}: no such file")
    key = os.path.abspath(os.path.expanduser(key_file)) if key_file else None
    known = os.path.abspath(os.path.expanduser(known_hosts)) if known_hosts else None
    given = {"port": port, "user": user, "pct": pct, "sudo": True if sudo else None, "key_file": key,
             "known_hosts": known}
    # Port and user not given: ~/.ssh/config's for the address, else 22 and root (as the hosts file will).
    host = cfg.Host(name=hostsinit.host_name(address), address=address, port=port, user=user,
                    key_file=key, known_hosts=known, pct=sudomod.pct_command(pct or "pct", sudo), sudo=sudo,
                    pct_path=pct or "pct")
    found = hostsinit.read_host(host)
    cluster = hostsinit.read_cluster(host)
    if cluster is not None:  # a cluster node: every container of the cluster, the others' from its guest list
        mine = {c[0] for c in found}
        found += [(ctid, cluster.states.get(ctid, ""), "", []) for ctid in sorted(cluster.node_of) if ctid not in mine]
    # A bare node (no container yet): the file names the host alone; `remote create` adds containers to it.
    hostsinit.write(target, hostsinit.render(host, given, found, cluster), force)
    return HostsFile(target, host.name, tuple((c[0], c[1], c[2]) for c in found))


def sudoers_dropin(user: str, hosts: str | os.PathLike | None = None, host: str | None = None) -> str:
    """The sudoers drop-in (for /etc/sudoers.d/) that lets `user` run what remote needs on a `sudo: true`
    host: the host programs at their exact paths, each with only the arguments remote gives it. Without a
    hosts file: Proxmox's own paths, any container. With one: for its `sudo: true` host (`host` names it where
    the file has several), that host's pct path and only the containers the file places on it (a cluster
    node's: the cluster's); the host is asked who owns every folder above those programs, and a path that
    anyone but root could change is refused (ConfigError naming the host and the path): such a rule is a root
    grant."""
    from .. import config as cfg
    from .. import sudo as sudomod
    from ..ops import hostsinit

    if not hosts:
        if host is not None:
            raise ConfigError("--host", "", "needs --hosts FILE: the host is one of that file's")
        return sudomod.sudoers(user)
    config = cfg.load(os.fspath(hosts))
    chosen = _sudo_host(config, host)
    if chosen.cluster is not None:  # a guest of the cluster may move to this node: the cluster's containers
        ctids = [c for c, spec in config.containers.items()
                 if chosen.cluster in (spec.cluster, spec.host.cluster)]
    else:
        ctids = [c for c, spec in config.containers.items() if spec.host.name == chosen.name and not spec.cluster]
    if not ctids:  # sudoers() reads no ids as any id: a file's drop-in names its containers or is not made
        raise ConfigError(config.file, "containers", f"none is on host {chosen.name}: a drop-in made from the file "
                          "allows only the file's containers there, and without one it would allow every container of "
                          f"the host; add the containers first (`remote create` adds its own), then print the drop-in")
    pct = sudomod.pct_path(chosen.pct_path or "pct")
    paths = sudomod.rule_paths(pct)
    bad = hostsinit.unsafe_paths(chosen, paths)
    if bad:
        path, why = next(iter(bad.items()))
        raise ConfigError(config.file, f"hosts.{chosen.name}.pct",
                          f"on {chosen.name}, {path} can be changed by a user other than root ({why}): a sudo rule "
                          "naming it would give that user root; put pct where only root can write (Proxmox's own "
                          "/usr/sbin/pct), or log in as root there (no `sudo:`)")
    return sudomod.sudoers(user, [pct], sorted(ctids), host=chosen.name)


def _sudo_host(config: Config, name: str | None) -> Host:
    """The `sudo: true` host a drop-in is for: `name`, or the file's only one (ConfigError otherwise)."""
    sudo_hosts = [h for h in config.hosts.values() if h.sudo]
    if name is not None:
        if name not in config.hosts:
            raise ConfigError(config.file, "--host", f"unknown host {name!r} (the file has: {', '.join(config.hosts)})")
        if not config.hosts[name].sudo:
            raise ConfigError(config.file, f"hosts.{name}.sudo", "is not true: remote logs in there as root and "
                              "needs no sudo rule; the drop-in is for a host where it logs in as a plain user")
        return config.hosts[name]
    if not sudo_hosts:
        raise ConfigError(config.file, "hosts", "no host has `sudo: true`: a drop-in is for a host where remote logs "
                          "in as a plain user (set `sudo: true` and `user: USER` on that host first)")
    if len(sudo_hosts) > 1:
        raise ConfigError(config.file, "--host", "one drop-in per host, each with its own containers: name the host "
                          f"(`sudo: true` hosts: {', '.join(h.name for h in sudo_hosts)})")
    return sudo_hosts[0]


def disconnect(hosts: str | os.PathLike | None = None, host: str | None = None, *, every: bool = False) -> list[int]:
    """End the kept connections of a hosts file (one host's, or every one) now: the pids ended. Without
    `host` the file is not read (a broken file's connections can still be ended). every=True: every kept
    connection of this user, whatever hosts file made it (no file is read)."""
    from .. import config as cfg
    from ..ops.session import disconnect as end

    if every:
        if host is not None:
            raise ConfigError(cfg.find_file(os.fspath(hosts) if hosts is not None else None), "--host",
                              "give --host (one host of this hosts file) or --all (every hosts file's), not both")
        return end(None)
    config_file = cfg.find_file(os.fspath(hosts) if hosts is not None else None)
    if host is not None and host not in cfg.load(config_file).hosts:
        raise ConfigError(config_file, "--host", f"unknown host {host!r}")
    return end(config_file, host)


def progress_printer(label: str, stream: Any = None) -> Callable[[int, int], None]:
    """An on_bytes callback for push/pull that draws progress on stderr, or on `stream` (for a command line,
    not a library)."""
    from ..ops import files

    return files.ProgressPrinter(label, stream)


def current_container() -> int | None:
    """The container whose part of a group call this thread runs (None outside one): a command line marks
    what it prints with it."""
    from ..events import CONTAINER

    return CONTAINER.get()
