"""A Proxmox cluster: containers found on the node that holds them.

The hosts of one cluster share `cluster: NAME` in the hosts file; a container says `cluster: NAME` (or
`host:`, then only a hint). pct sees only the containers of the node it runs on, and a container moves
between nodes (`pct migrate`, HA, an admin after a node failure), so the node is read from the cluster's
own guest list, once per command per cluster:

    pvesh get /cluster/resources --type vm --output-format json     (root, or the sudo rule's one entry)

`resolve` is the pure part (config + guest list -> the container's spec on its node's host entry); `Lookup`
reads each cluster's list once for a Session, and once more where Proxmox says "does not exist" on the node
the list named (the container moved after the list was read). A node that no host of the file is: a
ConfigError that names the node and the keys to add.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, ItemsView, ValuesView
from dataclasses import dataclass, replace
from typing import Any

from . import sudo
from .config import Config, ContainerSpec, Host
from .errors import ConfigError, RemoteError
from .naming import json_loads, printable

GUESTS = ("get", "/cluster/resources", "--type", "vm", "--output-format", "json")  # remote.sudo.PROGRAMS' pvesh


@dataclass(frozen=True)
class Guest:
    ctid: int
    node: str
    status: str  # running | stopped | unknown (its node is offline)


NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a Proxmox node name (a host name)


class ClusterError(RemoteError):
    """The cluster's guest list could not be read or makes no sense."""


def parse_guests(text: str, where: str) -> dict[int, Guest]:
    """pvesh's /cluster/resources JSON (untrusted: every field checked) -> the LXC guests by id."""
    try:
        rows = json_loads(text)
    except ValueError:
        raise ClusterError(f"{where}: pvesh printed no JSON guest list: {text.strip()[:200]!r}") from None
    if not isinstance(rows, list):
        raise ClusterError(f"{where}: pvesh's guest list is not a list")
    guests = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("type") != "lxc":
            continue
        vmid, node = row.get("vmid"), row.get("node")
        if isinstance(vmid, bool) or not isinstance(vmid, int) or not isinstance(node, str) or not NODE_RE.fullmatch(node):
            continue  # a node name goes into notes, errors and the hosts file: a plain name or nothing
        status = row.get("status")
        guests[vmid] = Guest(vmid, node, status if isinstance(status, str) else "unknown")
    return guests


def hosts_of(config: Config, cluster: str) -> list[Host]:
    return [h for h in config.hosts.values() if h.cluster == cluster]


def node_host(config: Config, cluster: str, node: str) -> Host | None:
    """The host entry that is `node` of `cluster` (its `node:` key, else its name)."""
    return next((h for h in hosts_of(config, cluster) if h.node_name == node), None)


@dataclass(frozen=True)
class Placement:
    spec: ContainerSpec  # on the host entry of the node that holds it (unchanged where the list lacks it)
    node: str | None  # None: not in the cluster's guest list
    note: str | None = None  # the hint was wrong: one line saying where it is


def resolve(config: Config, spec: ContainerSpec, guests: dict[int, Guest]) -> Placement:
    """Where container `spec` is, from its cluster's guest list: its spec with the node's host entry."""
    if spec.cluster is None:
        return Placement(spec, spec.host.node_name)
    guest = guests.get(spec.ctid)
    if guest is None:
        return Placement(spec, None)
    host = node_host(config, spec.cluster, guest.node)
    if host is None:
        known = ", ".join(f"{h.name} (node {h.node_name})" for h in hosts_of(config, spec.cluster))
        raise ConfigError(config.file, "hosts", f"container {spec.ctid} is on node {guest.node} of cluster "
                          f"{spec.cluster!r}, which no host of the file is (hosts of {spec.cluster}: {known}): add a "
                          f"host with `cluster: {spec.cluster}` named {guest.node} (or with `node: {guest.node}`) "
                          f"and its address; `remote init --address NODE` writes every node of the cluster")
    if host.name == spec.host.name:
        return Placement(spec, guest.node)
    note = (f"-- {spec.ctid} is on {guest.node}, not {spec.host.node_name} (the hosts file's host): using {host.name}"
            if spec.host_given else None)
    return Placement(replace(spec, host=host), guest.node, note)


Runner = Callable[[Host, list[str]], Any]  # (host, argv) -> transport Result


class Lookup:
    """The cluster guest lists of one Session: each read once (on the first reachable host of the cluster,
    the container's hinted host first), read again at most once per cluster when Proxmox says a container
    does not exist on the node the list named."""

    def __init__(self, config: Config, run: Runner, echo: Callable[[str], None] | None = None):
        self.config, self._run = config, run
        echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))  # never in a command's output
        self._echo = lambda line: echo(printable(line))  # notes quote the hosts' answers: one plain line each
        self._lists: dict[str, dict[int, Guest]] = {}
        self._placed: dict[int, Placement] = {}
        self._reread: set[str] = set()
        self._said: set[int] = set()
        self._lock = threading.RLock()
        self.reads = 0  # how many lists were read (for the tests and the bench)

    def guests(self, cluster: str, prefer: Host | None = None) -> dict[int, Guest]:
        with self._lock:
            if cluster not in self._lists:
                self._lists[cluster] = self._read(cluster, prefer)
            return self._lists[cluster]

    def _read(self, cluster: str, prefer: Host | None) -> dict[int, Guest]:
        from .transport.pct import classify

        hosts = hosts_of(self.config, cluster)
        if prefer is not None and prefer in hosts:
            hosts.remove(prefer)
            hosts.insert(0, prefer)
        problems = []
        for host in hosts:
            argv = sudo.host_argv(host, "pvesh", *GUESTS)
            try:
                result = self._run(host, argv)
            except RemoteError as exc:  # that node is down or unreachable: the next one answers for the cluster
                problems.append(f"{host.name}: {exc}")
                continue
            self.reads += 1
            if result.exit_code == 0:
                return parse_guests(result.out, f"cluster {cluster} (read on {host.name})")
            err = result.err.strip()
            if "access control list" in err or sudo.sudo_failure(argv, err) or (classify(err, result.exit_code, 0, host.name)):
                raise ClusterError(f"reading cluster {cluster}'s guest list on {host.name} (`pvesh get "
                                   f"/cluster/resources`) needs root: log in as root, or set `sudo: true` with the "
                                   f"rule `remote init --sudoers USER` prints (it allows exactly that read): {err[:200]}")
            problems.append(f"{host.name}: pvesh exited {result.exit_code}: {err[:200]}")
        if any("pvesh exited" in p for p in problems):
            raise ClusterError(f"cannot read cluster {cluster}'s guest list on any of its hosts: " + "; ".join(problems))
        # No node answers: each container stays on its hint, where the command reports the host unreachable.
        self._echo(f"!! cluster {cluster}: no node answered for its guest list ({'; '.join(problems)[:300]}): using "
                   "the hosts file's hosts")
        return {}

    def place(self, spec: ContainerSpec) -> Placement:
        """Container `spec` on its node (read from its cluster's list, once), its note said once."""
        if spec.cluster is None:
            return Placement(spec, spec.host.node_name)
        with self._lock:
            placed = self._placed.get(spec.ctid)
            if placed is None:
                placed = resolve(self.config, spec, self.guests(spec.cluster, spec.host))
                self._placed[spec.ctid] = placed
            if placed.note and spec.ctid not in self._said:
                self._said.add(spec.ctid)
                self._echo(placed.note)
            return placed

    def reread(self, spec: ContainerSpec) -> Placement | None:
        """After "does not exist" on the node the list named: the list read once more (once per cluster);
        the new placement where the container moved, else None."""
        if spec.cluster is None:
            return None
        with self._lock:
            if spec.cluster in self._reread:
                return None
            self._reread.add(spec.cluster)
            before = self._placed.get(spec.ctid)
            self._lists.pop(spec.cluster, None)
            for ctid in [c for c, p in self._placed.items() if p.spec.cluster == spec.cluster]:
                del self._placed[ctid]
            raw = self.config.containers[spec.ctid]
            after = self.place(raw)
            if before is not None and after.spec.host.name == before.spec.host.name:
                return None
            return after


class Containers(dict):
    """A Config's containers, each read through the Lookup: the spec on the host of the node holding it."""

    def __init__(self, raw: dict[int, ContainerSpec], lookup: Lookup):
        super().__init__(raw)
        self.lookup = lookup

    def raw(self, ctid: int) -> ContainerSpec:
        return dict.__getitem__(self, ctid)

    def __getitem__(self, ctid: int) -> ContainerSpec:
        return self.lookup.place(dict.__getitem__(self, ctid)).spec

    def get(self, ctid: Any, default: Any = None) -> Any:
        return self[ctid] if ctid in self else default

    def values(self) -> ValuesView[ContainerSpec]:  # type: ignore[override]
        return {k: self[k] for k in self}.values()

    def items(self) -> ItemsView[int, ContainerSpec]:  # type: ignore[override]
        return {k: self[k] for k in self}.items()


def has_clusters(config: Config) -> bool:
    return any(h.cluster for h in config.hosts.values())


def resolving(config: Config, run: Runner, echo: Callable[[str], None] | None = None) -> Config:
    """`config` whose containers of a cluster resolve to the host of the node holding them, on first use."""
    if isinstance(config.containers, Containers):  # another session's view: this one reads its own lists
        config = config.containers.lookup.config
    if not has_clusters(config):
        return config
    lookup = Lookup(config, run, echo)
    return replace(config, containers=Containers(config.containers, lookup))


def lookup_of(config: Config) -> Lookup | None:
    return config.containers.lookup if isinstance(config.containers, Containers) else None
