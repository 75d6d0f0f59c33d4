"""What needs no fleet: a hosts file to start from (`remote init`), the sudoers drop-in, ending kept
connections, terminal progress, and the few texts the command line shares with the library's messages.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, RemoteError
from .values import Diagnosis


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
    key or known_hosts file; RemoteError when the host shows no containers. sudo: log in as a non-root user
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
    if not found:
        raise RemoteError(f"`pct list` on {address} shows no containers: create one first (pct create), "
                          "then run remote init again")
    hostsinit.write(target, hostsinit.render(host, given, found, cluster), force)
    return HostsFile(target, host.name, tuple((c[0], c[1], c[2]) for c in found))


def sudoers_dropin(user: str, hosts: str | os.PathLike | None = None) -> str:
    """The sudoers drop-in (for /etc/sudoers.d/) that lets `user` run what remote needs on a `sudo: true`
    host: the host programs at their exact paths, each with only the arguments remote gives it (pct's path
    from the hosts file's hosts, and only its containers, when one is given)."""
    from .. import config as cfg
    from .. import sudo as sudomod

    if not hosts:
        return sudomod.sudoers(user)
    config = cfg.load(os.fspath(hosts))
    return sudomod.sudoers(user, [sudomod.pct_path(h.pct_path or "pct") for h in config.hosts.values()],
                           sorted(config.containers))


def disconnect(hosts: str | os.PathLike | None = None, host: str | None = None) -> list[int]:
    """End the kept connections of a hosts file (one host's, or every one) now: the pids ended. Without
    `host` the file is not read (a broken file's connections can still be ended)."""
    from .. import config as cfg
    from ..ops.session import disconnect as end

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


# -- text the command line shows: one definition each, shared with the library's own messages ------------

def known_good_label(record: Mapping[str, Any] | None) -> str:
    """A known-good record as doctor names it: `known-good run ID, VALUE UNIT` ("" for none)."""
    from ..doctor import known_good_label as label

    return label(dict(record) if record else None)


def passport_line(passport: Mapping[str, Any]) -> str:
    """A compile cache's passport in one line (escaped), as `remote cache` and doctor show it."""
    from ..doctor import passport_line as line

    return line(dict(passport))


def doctor_document(diagnoses: Sequence[Diagnosis]) -> dict[str, Any]:
    """`remote doctor --json` (docs/guide/doctor.md): the schema's version, whether all are healthy, each container's."""
    from ..doctor import SCHEMA_VERSION

    return {"schema": SCHEMA_VERSION, "healthy": all(d.healthy for d in diagnoses),
            "containers": [d.to_dict() for d in diagnoses]}
