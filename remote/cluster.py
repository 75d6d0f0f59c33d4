"""A Proxmox cluster: containers found on the node that holds them.

The hosts of one cluster share `cluster: NAME` in the hosts file; a container says `cluster: NAME` (or
`host:`, then only a hint). pct sees only the containers of the node it runs on, and a container moves
between nodes (`pct migrate`, HA, an admin after a node failure), so the node is read from the cluster's
own guest list, once per command per cluster:

    pvesh get /cluster/resources --type vm --output-format json     (root, or the sudo rule's one entry)

`resolve` is the pure part (config + guest list -> the container's spec on its node's host entry); `Lookup`
reads each cluster's list once for a Session, and once more where Proxmox says "does not exist" on the node
the list named (the container moved after the list was read): every container that re-read list moved is
followed, not only the first to fail. A node that no host of the file is: a
ConfigError that names the node and the keys to add.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, ItemsView, ValuesView
from dataclasses import dataclass, replace
from typing import Any, Literal

from . import sudo
from .config import Config, ContainerSpec, Host
from .errors import ConfigError, RemoteError
from .events import Note, Sink
from .naming import json_loads, printable

GUESTS = ("get", "/cluster/resources", "--type", "vm", "--output-format", "json")  # remote.sudo.PROGRAMS' pvesh
NODE_NAME = ("uname", "-n")  # a host's Proxmox node name is its host name (remote.sudo.PROGRAMS' uname: no root)


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


def node_host(config: Config, cluster: str, node: str, learned: dict[str, str] | None = None) -> Host | None:
    """The host entry that is `node` of `cluster`: its `node:` key, else the name the host gave (`learned`, by
    entry name), else the entry's name."""
    return next((h for h in hosts_of(config, cluster) if node_of(h, learned) == node), None)


def node_of(host: Host, learned: dict[str, str] | None = None) -> str:
    """Host's Proxmox node name: `node:` (the override), else what the host said it is, else its entry's name."""
    return host.node or (learned or {}).get(host.name) or host.name


def parse_node_name(text: str) -> str | None:
    """`uname -n` (untrusted) -> the Proxmox node name it makes: Proxmox takes the host name up to its first dot
    (PVE::INotify::nodename); None where that is no plain name."""
    name = text.strip().split(".", 1)[0]
    return name if NODE_RE.fullmatch(name) else None


@dataclass(frozen=True)
class Placement:
    spec: ContainerSpec  # on the host entry of the node that holds it (unchanged where the list lacks it)
    node: str | None  # None: not in the cluster's guest list
    note: str | None = None  # the hint was wrong: what to know (one line) of where it is


def resolve(config: Config, spec: ContainerSpec, guests: dict[int, Guest],
            learned: dict[str, str] | None = None) -> Placement:
    """Where container `spec` is, from its cluster's guest list: its spec with the node's host entry
    (`learned`: the node names hosts gave, by entry name)."""
    if spec.cluster is None:
        return Placement(spec, spec.host.node_name)
    guest = guests.get(spec.ctid)
    if guest is None:
        return Placement(spec, None)
    host = node_host(config, spec.cluster, guest.node, learned)
    if host is None:
        known = ", ".join(f"{h.name} (node {node_of(h, learned)})" for h in hosts_of(config, spec.cluster))
        raise ConfigError(config.file, "hosts", f"container {spec.ctid} is on node {guest.node} of cluster "
                          f"{spec.cluster!r}, which no host of the file is (hosts of {spec.cluster}: {known}): add a "
                          f"host with `cluster: {spec.cluster}` named {guest.node} (or with `node: {guest.node}`) "
                          f"and its address; `remote init --address NODE` writes every node of the cluster")
    if host.name == spec.host.name:
        return Placement(spec, guest.node)
    note = (f"{spec.ctid} is on {guest.node}, not {node_of(spec.host, learned)} (the hosts file's host): using "
            f"{host.name}"
            if spec.host_given else None)
    return Placement(replace(spec, host=host), guest.node, note)


Runner = Callable[[Host, list[str]], Any]  # (host, argv) -> transport Result

# What says the login user may not read the cluster's lists: pvesh as a plain user, or sudo's rule. Nothing
# else does (pvesh as root on a node whose cluster service is down says "Unable to load access control list:
# Connection refused" after its ipcc_send_rec lines: that node is not answering, the login is fine).
NOT_ROOT = re.compile(r"(?m)^(Unable to load access control list: Permission denied|please run as root)")


def refused(argv: list[str], err: str) -> bool:
    """Whether pvesh's failure says the login user lacks the right to read (root or the sudo rule)."""
    return bool(NOT_ROOT.search(err)) or sudo.sudo_failure(argv, err) == "password"


class Lookup:
    """The cluster guest lists of one Session: each read once (on the first reachable host of the cluster,
    the container's hinted host first), read again at most once per cluster when Proxmox says a container
    does not exist on the node the list named."""

    def __init__(self, config: Config, run: Runner, sink: Sink | None = None, ask: Runner | None = None):
        self.config, self._run = config, run
        self._ask = ask or run  # a question whose answer holds while the connection does (a kept connection keeps it)
        self.learned: dict[str, str] = {}  # entry name -> the node name that host gave
        self._asked: set[str] = set()  # hosts asked their node name (once each)
        # where its notes go (the session's sink: typed events); without one, their lines to stderr, never
        # into a command's output
        self._sink: Sink = sink or (lambda event: print(event.line, file=sys.stderr, flush=True))
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
                try:
                    return parse_guests(result.out, f"cluster {cluster} (read on {host.name})")
                except ClusterError as exc:
                    problems.append(str(exc))
                    continue
            err = result.err.strip()
            if refused(argv, err):
                raise ClusterError(f"reading cluster {cluster}'s guest list on {host.name} (`pvesh get "
                                   f"/cluster/resources`) needs root: log in as root, or set `sudo: true` with the "
                                   f"rule `remote init --sudoers USER` prints (it allows exactly that read): {err[:200]}")
            # Anything else is that node not answering for the cluster (its cluster service down: ipcc_send_rec
            # ... Connection refused; no pvesh there; pvesh refusing the line): the next node may.
            problems.append(f"{host.name}: pvesh exited {result.exit_code}: {' '.join(err.split())[:200]}")
        # No node answers: each container stays on its hint, where the command reports what is wrong there.
        self._say(None, f"cluster {cluster}: no node answered for its guest list ({'; '.join(problems)[:300]}): "
                  "using the hosts file's hosts", "warning")
        return {}

    def place(self, spec: ContainerSpec) -> Placement:
        """Container `spec` on its node (read from its cluster's list, once), its note said once."""
        if spec.cluster is None:
            return Placement(spec, spec.host.node_name)
        with self._lock:
            placed = self._placed.get(spec.ctid)
            if placed is None:
                guests = self.guests(spec.cluster, spec.host)
                guest = guests.get(spec.ctid)
                if guest is not None and node_host(self.config, spec.cluster, guest.node, self.learned) is None:
                    self._learn(spec.cluster, guest.node)
                placed = resolve(self.config, spec, guests, self.learned)
                self._placed[spec.ctid] = placed
            if placed.note and spec.ctid not in self._said:
                self._said.add(spec.ctid)
                self._say(spec.ctid, placed.note, "info")
            return placed

    def _say(self, ctid: int | None, text: str, level: Literal["info", "warning"]) -> None:
        """A note to the sink, marked with the container it is about (None: the cluster's); printable: notes
        quote the hosts' answers, one plain line each."""
        self._sink(Note.of(ctid, printable(text), level))

    def _learn(self, cluster: str, node: str) -> None:
        """The list names `node` and no entry of the file is called so: the cluster's hosts without `node:` are
        asked which node they are (each once; an entry may be an SSH alias, `pve1` for node `pvelab`), until
        one says `node`. A host that cannot say keeps its entry's name."""
        for host in hosts_of(self.config, cluster):
            if host.node or host.name in self._asked:
                continue
            self._asked.add(host.name)
            try:
                result = self._ask(host, [sudo.program("uname").path, *NODE_NAME[1:]])
            except RemoteError:
                continue  # unreachable: its entry's name; a command there says what is wrong
            name = parse_node_name(result.out) if result.exit_code == 0 else None
            if name is not None:
                self.learned[host.name] = name
                if name == node:
                    return

    def node_of(self, host: Host) -> str:
        """Host's Proxmox node name as this lookup knows it (`node:`, else what the host said, else its name)."""
        return node_of(host, self.learned)

    def moved(self, ctid: int, node: str) -> None:
        """Container `ctid` was migrated to `node` by this process (remote move): its next command goes there,
        with no Proxmox error and no re-read first (a drain moves many; the re-read is once per cluster)."""
        with self._lock:
            spec = self.config.containers[ctid]
            if spec.cluster is None:
                return
            old = self.guests(spec.cluster, spec.host)
            self._lists[spec.cluster] = {**old, ctid: Guest(ctid, node, "running")}
            self._placed.pop(ctid, None)
            self._said.add(ctid)  # the hosts file's hint is stale by our own doing: no note about it

    def reread(self, spec: ContainerSpec, failed_on: str) -> Placement | None:
        """After "does not exist" on host `failed_on` (the node the list named): where the container is now,
        or None. The list is read again at most once per cluster, but every container it moved is followed
        (an evacuation moves many): one whose current list places it elsewhere is answered from that list."""
        if spec.cluster is None:
            return None
        with self._lock:
            placed = self._placed.get(spec.ctid) or self.place(self.config.containers[spec.ctid])
            if placed.spec.host.name != failed_on:
                return placed  # the list read since it was placed there has it elsewhere
            if spec.cluster in self._reread:
                return None  # the re-read is spent and it says the same: Proxmox's error stands
            self._reread.add(spec.cluster)
            self._lists.pop(spec.cluster, None)
            for ctid in [c for c, p in self._placed.items() if p.spec.cluster == spec.cluster]:
                del self._placed[ctid]
            after = self.place(self.config.containers[spec.ctid])
            return after if after.spec.host.name != failed_on else None


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


def resolving(config: Config, run: Runner, sink: Sink | None = None, ask: Runner | None = None) -> Config:
    """`config` whose containers of a cluster resolve to the host of the node holding them, on first use
    (`sink`: where its notes go, typed; `ask`: how a host is asked its node name, once per kept connection
    where it has one)."""
    if isinstance(config.containers, Containers):  # another session's view: this one reads its own lists
        config = config.containers.lookup.config
    if not has_clusters(config):
        return config
    lookup = Lookup(config, run, sink, ask)
    return replace(config, containers=Containers(config.containers, lookup))


def lookup_of(config: Config) -> Lookup | None:
    return config.containers.lookup if isinstance(config.containers, Containers) else None
