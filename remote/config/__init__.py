"""hosts.yaml -> frozen, validated objects.

One loader for every section. Unknown keys are rejected, types and ranges checked, references
resolved; every error names the file, the key path and what was expected. The `venv`, `code`,
`warmup` and `train` sections are global and can be overridden key by key per container.
Here: parse and load. The objects are in .model, the section readers in .sections, the YAML loader and
the parsed file kept in .yamlfile; every name is importable from remote.config.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import model
from .model import *  # noqa: F403  (the objects a hosts file becomes, remote.config.model.__all__)
from .model import DEFAULT_FILE, ENV_VAR, Config, ContainerSpec, _ids
from .sections import _FEATURES, ON_STALL, _clusters, _host, _kind, _nonempty, _Section
from .yamlfile import _MISSING, DuplicateKey, _keep_parsed, _parsed, _read_yaml
from .yamlfile import _cache_dir as _cache_dir  # the kept file's place, read as remote.config._cache_dir
from .yamlfile import _cache_file as _cache_file

__all__ = ["ON_STALL", "ConfigError", "DuplicateKey", "parse", "find_file", "load"]
__all__ += model.__all__

for _cls in [getattr(model, n) for n in model.__all__] + [DuplicateKey]:
    if isinstance(_cls, type):  # printed and pickled (the kept connection's Host) as remote.config.X, as before the split
        _cls.__module__ = __name__


def parse(data: Any, file: str) -> Config:
    """Validate the parsed YAML `data` of `file`."""
    top = _Section(file, "", data)
    hosts_s = top.section("hosts")
    hosts = {}
    for name in hosts_s.data:
        if not isinstance(name, str):
            raise ConfigError(file, f"hosts.{name}", "host names must be strings")
        hosts[name] = _host(hosts_s.section(name), name)
    if not hosts:
        raise ConfigError(file, "hosts", "no hosts defined")
    clusters = _clusters(file, hosts)
    globals_ = {key: reader(top.section(key), default()) for key, (reader, default) in _FEATURES.items()}
    containers_s = top.section("containers")
    containers = {}
    for raw_id in containers_s.data:
        key = f"containers.{raw_id}"
        try:
            ctid = int(raw_id)
        except (TypeError, ValueError):
            raise ConfigError(file, key, "container ids are integers from 100 to 999999999") from None
        if isinstance(raw_id, bool) or not 100 <= ctid <= 999_999_999:
            raise ConfigError(file, key, f"container id out of range: expected 100 to 999999999, got {raw_id}")
        if ctid in containers:
            raise ConfigError(file, key, "container listed twice")
        c = containers_s.section(raw_id)
        cluster = c.take("cluster", str, None)  # without it, host: is required (a cluster's container: a hint)
        host = c.take("host", str, None if cluster is not None else _MISSING)
        if host is not None and host not in hosts:
            raise ConfigError(file, c.key("host"), f"unknown host {host!r} (known: {_ids(hosts)})")
        if cluster is not None and cluster not in clusters:
            raise ConfigError(file, c.key("cluster"), f"unknown cluster {cluster!r}: no host says `cluster: {cluster}` "
                              f"(clusters: {_ids(clusters)})")
        if host is not None and cluster is not None and hosts[host].cluster != cluster:
            raise ConfigError(file, c.key("cluster"), f"host {host} is not a node of cluster {cluster!r} (its "
                              f"cluster: {hosts[host].cluster or 'none'}): drop one of host: and cluster:")
        features = {k: reader(c.section(k), globals_[k]) for k, (reader, _) in _FEATURES.items()}
        address = c.take("address", str, None, _nonempty)
        c.done()
        placed = hosts[host] if host is not None else clusters[cluster][0]
        containers[ctid] = ContainerSpec(ctid=ctid, host=placed, address=address, cluster=placed.cluster,
                                         host_given=host is not None, **features)
        _checkpoint_reach(file, containers[ctid])
    # No containers yet (a bare node's file, before `remote create`): loads; a task that needs one says so.
    groups = _groups(top.section("groups"), containers)
    default = top.take("default_container", int, None)
    if default is not None and default not in containers:
        raise ConfigError(file, "default_container", f"container {default} is not in this file (known: {_ids(containers)})")
    top.done()
    return Config(file=file, hosts=hosts, containers=containers, groups=groups, default_container=default)


def _groups(s: _Section, containers: dict[int, ContainerSpec]) -> dict[str, tuple[int, ...]]:
    """`groups: {drafters: [200, 201]}`: names usable as --container, each a list of configured ids."""
    groups = {}
    for name in s.data:
        key = s.key(str(name))
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) or name == "all":
            raise ConfigError(s.file, key, "group names are words that start with a letter (and not 'all')")
        ids = s.take(name, list)
        if not ids:
            raise ConfigError(s.file, key, "expected a list of container ids, got an empty list")
        seen = []
        for i, raw in enumerate(ids):
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise ConfigError(s.file, f"{key}[{i}]", f"expected a container id, got {_kind(raw)} {raw!r}")
            if raw not in containers:
                raise ConfigError(s.file, f"{key}[{i}]", f"unknown container {raw} (known: {_ids(containers)})")
            if raw not in seen:
                seen.append(raw)
        groups[name] = tuple(int(i) for i in seen)
    s.done()
    return groups


FABRIC_WHERE = "<fabric.Connection>"  # the "file" of a config made from a fabric Connection (remote.fabric)


def unset(file: str, key: str, what: str) -> ConfigError:
    """The error for a setting a call needs that is not set (`what`: how to set it), in the words of where the
    settings came from: a config made from a fabric Connection has no file to set it in, so hosts= is the way."""
    if file == FABRIC_WHERE:
        return ConfigError(file, key, f"not set: a Connection without a hosts file has only its login; pass hosts= (a "
                                      f"hosts file that sets {key}: {what})")
    return ConfigError(file, key, what)


def find_file(explicit: str | None = None) -> str:
    """The hosts file: `explicit`, else $REMOTE_HOSTS_FILE, else ./hosts.yaml."""
    return explicit or os.environ.get(ENV_VAR) or DEFAULT_FILE


def load(path: str | None = None) -> Config:
    """Load and validate the hosts file."""
    file = find_file(path)
    try:
        text = Path(file).read_text()
    except FileNotFoundError:
        raise ConfigError(file, "", "file not found" + (
            " (the hosts file given: check the path; `remote init` writes one)" if path else
            f" (named by ${ENV_VAR}: check it, or unset it to use ./{DEFAULT_FILE})" if os.environ.get(ENV_VAR) else
            f" (set ${ENV_VAR} or run from the folder holding {DEFAULT_FILE})")) from None
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror}") from None
    data = _parsed(text)
    if data is _MISSING:
        data = _read_yaml(file, text)
        _keep_parsed(text, data)
    config = parse(data, file)
    _check_files(config)
    return config


def _check_files(config: Config) -> None:
    """A key_file or known_hosts that is not there: exit 2 now, naming it, rather than at connect time."""
    for h in config.hosts.values():
        if h.local:
            continue
        if h.key_file and not os.path.isfile(h.key_file):
            raise ConfigError(config.file, f"hosts.{h.name}.key_file", f"no such file: {h.key_file} (fix the path, "
                              "or leave key_file out to use ssh-agent and ~/.ssh/config's IdentityFile)")
        if h.known_hosts and not os.path.isfile(h.known_hosts):
            raise ConfigError(config.file, f"hosts.{h.name}.known_hosts", f"no such file: {h.known_hosts} (fix the "
                              "path, or create it: check the host's fingerprint on the host with `ssh-keygen -lf "
                              f"/etc/ssh/ssh_host_ed25519_key.pub`, then `ssh-keyscan -p PORT ADDRESS >> {h.known_hosts}`)")


def _checkpoint_reach(file: str, spec: ContainerSpec) -> None:
    """A checkpoint path or glob must not reach what remote itself keeps: `train --fresh` moves every match aside,
    so `/root/*` (or `/root`) would move the run folder, the checkout or the venv. Matched as the container's glob
    matches (part by part; `**` crosses folders), against each of them and every folder above them."""
    import fnmatch
    from pathlib import PurePosixPath

    ck = spec.train.checkpoint
    if ck is None:
        return
    pattern = ck.path if ck.path.startswith("/") else f"{spec.code.path.rstrip('/')}/{ck.path}"
    want = PurePosixPath(pattern).parts

    def matches(path: PurePosixPath) -> bool:
        if "**" in want:
            return fnmatch.fnmatchcase(str(path), pattern)
        return len(path.parts) == len(want) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(path.parts, want, strict=True))

    for what, kept in (("train.run_dir", spec.train.run_dir), ("code.path", spec.code.path),
                       ("venv.path", spec.venv.path)):
        folder = PurePosixPath(kept)
        hit = next((str(a) for a in (folder, *folder.parents) if matches(a)), None)
        if hit is not None:
            raise ConfigError(file, f"containers.{spec.ctid}: train.checkpoint.path",
                              f"{ck.path!r} matches {hit}, which holds {what} ({kept}): `train --fresh` "
                              "would move it aside with the checkpoints. Name the checkpoints more narrowly "
                              "(e.g. /root/out/ckpt-*.pt)")

