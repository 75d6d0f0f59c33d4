"""remote for Fabric users: a remote.Container from your own `fabric.Connection` to the Proxmox host.

    from fabric import Connection
    import remote.fabric

    c = Connection("pve1", user="root", connect_kwargs={"key_filename": "~/.ssh/pve"})
    with remote.fabric.container(c, 200, hosts="hosts.yaml") as ct:   # hosts: the venv/code/train settings
        ct.exec(["nvidia-smi"])
    remote.fabric.exec(c, 200, ["python", "-c", "print(1)"])          # c-first helpers for a fabfile
    remote.fabric.deploy(c, 200, hosts="hosts.yaml")

The Connection gives where and how to log in (the host name it was given, port, user, connect_timeout,
connect_kwargs' key_filename); remote's own transport then connects, applying ~/.ssh/config as the
Connection did (HostName, ProxyJump, several IdentityFile: honoured, not refused). Fabric's Connection is never used to connect: it
would add an unknown host key (its client's AutoAddPolicy), and remote never does. A host whose key is
not in known_hosts (the hosts file's, `known_hosts=`, else ~/.ssh/known_hosts and ssh_config's
UserKnownHostsFile) is refused with HostKeyError, whatever the Connection would do. Keys only: a
Connection with a password or an in-memory pkey is refused (ConfigError), as is a `gateway` passed to it
(write a ProxyJump for the host in ~/.ssh/config: remote verifies every hop's key); the gateway Fabric
made from that ProxyJump is accepted.

This is the only module of remote that imports fabric (tests/unit/test_layers.py checks).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import api
from .errors import ConfigError

if TYPE_CHECKING:
    import fabric

WHERE = "<fabric.Connection>"  # what errors name as the "file" of a config made from a Connection


def _login(c: fabric.Connection) -> dict[str, Any]:
    """Where and how the Connection logs in, as hosts-file keys; what remote cannot honour is refused.
    What the Connection took from ~/.ssh/config (HostName, ProxyJump, IdentityFile) is not copied: the
    address is the name the Connection was given, which remote's transport looks up in ~/.ssh/config
    itself (and so applies the same entry, every hop's host key verified)."""
    kwargs = dict(getattr(c, "connect_kwargs", None) or {})
    for secret in ("password", "passphrase", "pkey"):
        if kwargs.get(secret):
            raise ConfigError(WHERE, f"connect_kwargs.{secret}",
                              "remote logs in with key files only (key_filename) or ssh-agent: drop it")
    if getattr(c, "gateway", None) not in (None, False) and not _gateway_from_ssh_config(c):
        raise ConfigError(WHERE, "gateway", f"not supported: add `Host {c.original_host}` with `ProxyJump JUMP` to "
                          "~/.ssh/config instead (remote reads it and verifies every hop's host key)")
    keys = _explicit_keys(c, kwargs.get("key_filename"))
    if len(keys) > 1:
        raise ConfigError(WHERE, "connect_kwargs.key_filename", f"one key file, got {len(keys)}: {keys} (name "
                          f"several with IdentityFile under `Host {c.original_host}` in ~/.ssh/config: remote tries "
                          "each, as ssh does)")
    login: dict[str, Any] = {"address": str(getattr(c, "original_host", None) or c.host), "port": int(c.port),
                             "user": c.user}
    if keys:
        login["key_file"] = keys[0]
    if getattr(c, "connect_timeout", None):
        login["connect_timeout"] = float(c.connect_timeout)
    return login


def _ssh_config(c: fabric.Connection) -> dict[str, Any]:
    return dict(getattr(c, "ssh_config", None) or {})


def _gateway_from_ssh_config(c: fabric.Connection) -> bool:
    """Whether the Connection's gateway is the one Fabric made from its ssh config (ProxyJump: a Connection
    to the first hop; ProxyCommand: its text), not one passed to it: remote applies that entry itself."""
    ssh, gateway = _ssh_config(c), c.gateway
    if ssh.get("proxyjump"):
        first = str(ssh["proxyjump"]).split(",")[0].strip()
        return getattr(gateway, "original_host", None) == c.derive_shorthand(first)["host"]
    return bool(ssh.get("proxycommand")) and gateway == ssh["proxycommand"]


def _explicit_keys(c: fabric.Connection, given: Any) -> list[str]:
    """The key files the Connection was given, absolute: Fabric adds ~/.ssh/config's IdentityFile entries to
    its key_filename list; those are left to remote's own reading of that file."""
    listed = [given] if isinstance(given, (str, os.PathLike)) else list(given or [])
    from_config = {os.path.abspath(os.path.expanduser(str(k))) for k in _ssh_config(c).get("identityfile", [])}
    keys: list[str] = []
    for key in listed:
        path = os.path.abspath(os.path.expanduser(str(key)))
        if path not in from_config and path not in keys:
            keys.append(path)
    return keys


def _matches(host: Any, c: fabric.Connection) -> bool:
    """Is the hosts file's `host` the one the Connection reaches (its name, or its address and port)?"""
    names = {str(n) for n in (getattr(c, "original_host", None), c.host) if n}
    return host.name in names or (host.address in names and host.port in (None, int(c.port)))


def _config(c: fabric.Connection, ids: Sequence[int | str], hosts: str | os.PathLike | None,
            known_hosts: str | os.PathLike | None) -> tuple[Any, str]:
    """The config, with the Connection's login applied to the one host it reaches, and that host's name.
    The hosts file's other hosts keep their own settings."""
    from . import config as cfg

    login = _login(c)
    if known_hosts is not None:
        login["known_hosts"] = os.path.abspath(os.fspath(known_hosts))
    given = ["fabric.Connection"] + (["key_filename"] if "key_file" in login else [])
    reached = str(getattr(c, "original_host", None) or c.host)
    if hosts is None:
        data = {"hosts": {reached: login}, "containers": {int(i): {"host": reached} for i in ids}}
        config, name = cfg.parse(data, WHERE), reached
        given.append("no-hosts-file")
    else:
        config = cfg.load(os.fspath(hosts))
        matched = [n for n, h in config.hosts.items() if _matches(h, c)]
        if not matched and len(config.hosts) == 1:
            matched = list(config.hosts)  # a file of that one host, whatever it calls it
        if len(matched) != 1:
            raise ConfigError(config.file, "hosts", f"the Connection reaches {reached}, which is "
                              + ("none" if not matched else "more than one") + " of this file's hosts ("
                              + ", ".join(f"{n}: {h.address}" for n, h in config.hosts.items())
                              + ") by name or address: connect to one of them by its name or address")
        name = matched[0]
    host = config.hosts[name]
    if host.local:
        raise ConfigError(config.file, f"hosts.{name}.local", f"true: remote runs pct on this machine for {name}, so the "
                          f"Connection to {reached} would be ignored: drop `local: true` to reach {name} through "
                          "the Connection, or use remote.Fleet without Fabric to run here")
    host = dataclasses.replace(host, **{"known_hosts": host.known_hosts, **login}, given_by=" ".join(given))
    hosts_ = {**config.hosts, name: host}
    containers = {i: dataclasses.replace(s, host=hosts_[s.host.name]) for i, s in config.containers.items()}
    return dataclasses.replace(config, hosts=hosts_, containers=containers), name


def fleet(c: fabric.Connection, ids: Sequence[int | str] = (), *, hosts: str | os.PathLike | None = None,
          known_hosts: str | os.PathLike | None = None, progress: api.Progress | None = None,
          dry: bool = False) -> api.Fleet:
    """A remote.Fleet on the host `c` connects to. With `hosts` (a hosts file): its containers and
    settings, the host `c` reaches (the one whose name or address is `c`'s host; a file's only host) logged
    into as `c` says (address, port, user, key; the file's known_hosts unless `known_hosts` is given); its
    other hosts as the file says. Without: the containers `ids`, with the defaults (exec, push, pull and
    doctor work; deploy and train need a file's venv, code and train)."""
    config, _ = _config(c, ids, hosts, known_hosts)
    return api.Fleet(config, keep=False, dry=dry, progress=progress)


def container(c: fabric.Connection, ctid: int | str, *, hosts: str | os.PathLike | None = None,
              known_hosts: str | os.PathLike | None = None, progress: api.Progress | None = None,
              dry: bool = False) -> api.Container:
    """Container `ctid` of the Proxmox host `c` connects to; closes its connection when used as a context
    manager (`with remote.fabric.container(c, 200) as ct:`) or with ct.close(). A container the hosts file
    puts on another host is refused (ConfigError naming both), never run on `c`'s host."""
    config, name = _config(c, [ctid] if hosts is None else (), hosts, known_hosts)
    spec = config.container(ctid)
    if spec.host.name != name:
        raise ConfigError(config.file, f"containers.{spec.ctid}.host",
                          f"container {spec.ctid} is on {spec.host.name} ({spec.host.address}), but the Connection "
                          f"reaches {name} ({getattr(c, 'original_host', None) or c.host}): pass a Connection to "
                          f"{spec.host.name}")
    return api.Fleet(config, keep=False, dry=dry, progress=progress).container(ctid)


def exec(c: fabric.Connection, ctid: int | str, argv: Sequence[str] | str, *,
         hosts: str | os.PathLike | None = None, known_hosts: str | os.PathLike | None = None,
         timeout: float | None = None, check: bool = False) -> api.Result:
    """Run argv in container `ctid` of `c`'s host (as Container.exec): its Result."""
    with container(c, ctid, hosts=hosts, known_hosts=known_hosts) as ct:
        return ct.exec(argv, timeout=timeout, check=check)


def deploy(c: fabric.Connection, ctid: int | str, *, hosts: str | os.PathLike,
           known_hosts: str | os.PathLike | None = None, check: bool = False, force: bool = False,
           progress: api.Progress | None = None) -> api.DeployPlan:
    """Deploy container `ctid` of `c`'s host as the hosts file pins it (as Container.deploy)."""
    with container(c, ctid, hosts=hosts, known_hosts=known_hosts, progress=progress) as ct:
        return ct.deploy(check=check, force=force)


def push(c: fabric.Connection, ctid: int | str, src: str | os.PathLike, dest: str, *,
         hosts: str | os.PathLike | None = None, known_hosts: str | os.PathLike | None = None) -> api.Transfer:
    with container(c, ctid, hosts=hosts, known_hosts=known_hosts) as ct:
        return ct.push(src, dest)


def pull(c: fabric.Connection, ctid: int | str, src: str, dest: str | os.PathLike, *,
         hosts: str | os.PathLike | None = None, known_hosts: str | os.PathLike | None = None) -> api.Transfer:
    with container(c, ctid, hosts=hosts, known_hosts=known_hosts) as ct:
        return ct.pull(src, dest)


def doctor(c: fabric.Connection, ctid: int | str, *, hosts: str | os.PathLike | None = None,
           known_hosts: str | os.PathLike | None = None) -> list[api.Finding]:
    with container(c, ctid, hosts=hosts, known_hosts=known_hosts) as ct:
        return ct.doctor()
