"""A lab Proxmox cluster: two or more look-alike nodes over one shared config tree.

Each node is a lab host of its own (remote.lab.Lab): its own sshd on a loopback address of its own
(127.0.9.1, 127.0.9.2, ... all on one port), its own host key and its own pct node name, which is also the
host name its commands see (`uname -n`: its sshd runs in a UTS namespace of its own). What pmxcfs
shares between the nodes of a real cluster (/etc/pve) is one folder, `<dir>/pve`, that every node's pct
double reads (remote/lab/pct_double.py: CLUSTER_DIR):

    pve/nodes/<node>/lxc/<id>.conf   which node owns a container (pct sees only its own node's)
    pve/.vmlist, pve/.members        the cluster-wide guest list and node list (names, addresses, online)
    pve/.noquorum-<node>             the quorum switch: that node refuses config writes
    pve/.nocluster-<node>            the cluster service switch: that node's pvesh fails (ipcc_send_rec)

The containers' rootfs live in one folder (<dir>/lxc) for all nodes, as on shared storage: a migration
moves the config, and the container's files travel with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import Lab, LabError, _run, _sbin_path, address


@dataclass
class NodeLab(Lab):
    """One node of a ClusterLab: its own sshd, host key and bin/ (the double with its NODE), the cluster's
    containers folder, client key and known_hosts."""

    cluster: ClusterLab | None = field(default=None, repr=False)

    @property
    def lxc(self) -> Path:
        assert self.cluster is not None
        return self.cluster.lxc

    @property
    def key_file(self) -> Path:
        assert self.cluster is not None
        return self.cluster.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        assert self.cluster is not None
        return self.cluster.dir / "known_hosts"

    def _keys(self) -> None:
        host_key = self.ssh / "host_ed25519"
        if not host_key.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"remote-lab-{self.node}", "-f",
                  str(host_key)]).check_returncode()
        (self.ssh / "authorized_keys").write_text(Path(str(self.key_file) + ".pub").read_text())

    def _double_source(self, source: str) -> str:
        assert self.cluster is not None
        return (source.replace('CLUSTER_DIR = ""', f"CLUSTER_DIR = {str(self.cluster.tree)!r}")
                .replace('LOCK_DIR = ' + repr(str(self.dir / "lock")), f"LOCK_DIR = {str(self.cluster.dir / 'lock')!r}"))

    def _write_pve_conf(self, ct: Path, ctid: int) -> None:
        """The container's config in the shared tree, under this node, unless a node owns it already."""
        assert self.cluster is not None
        if self.cluster.owner(ctid) is None:
            conf = self.cluster.tree / "nodes" / self.node / "lxc" / f"{ctid}.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(self._pve_conf(ctid))
            self.cluster.write_vmlist()

    def _sshd_argv(self, conf_file: Path) -> list[str]:
        """The node's sshd in a UTS namespace of its own named after the node: what runs there sees the node's
        host name (`uname -n`), as on a Proxmox node, whose node name is its host name."""
        sshd = shutil.which("sshd", path=_sbin_path())
        unshare = shutil.which("unshare", path=_sbin_path())
        if sshd is None or unshare is None:
            raise LabError("the lab cluster needs sshd and unshare (apt-get install openssh-server util-linux)")
        return [unshare, "--uts", "--", "sh", "-c", 'hostname "$1" && exec "$2" -f "$3" -E "$4"', "sh", self.node,
                sshd, str(conf_file), str(self.dir / "sshd.log")]

    def pct(self, *args: str) -> subprocess.CompletedProcess:
        """This node's pct double, run as the node's sshd would (from /)."""
        return subprocess.run([str(self.dir / "bin" / "pct"), *args], capture_output=True, text=True, cwd="/")

    def down(self, purge: bool = False) -> None:
        self._stop_sshd()


@dataclass
class ClusterLab:
    """`nodes` look-alike Proxmox nodes of one cluster `name`, their sshd on `port` at 127.0.9.<n>."""

    dir: Path
    port: int
    nodes: tuple[str, ...] = ("pve1", "pve2")
    name: str = "labcluster"
    wheels_dir: Path | None = None
    subnet: str = "127.0.9."
    _labs: dict[str, NodeLab] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.dir = Path(self.dir)
        if len(self.nodes) < 2:
            raise LabError("a lab cluster needs two nodes or more")

    @property
    def tree(self) -> Path:
        """The shared config tree (pmxcfs's /etc/pve)."""
        return self.dir / "pve"

    @property
    def lxc(self) -> Path:
        return self.dir / "lxc"

    @property
    def wheels(self) -> Path:
        return self.node(self.nodes[0]).wheels

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def key_file(self) -> Path:
        return self.dir / "id_ed25519"

    def ip(self, node: str) -> str:
        return f"{self.subnet}{self.nodes.index(node) + 1}"

    def node(self, name: str) -> NodeLab:
        if name not in self.nodes:
            raise LabError(f"no node {name!r} in the lab cluster (nodes: {', '.join(self.nodes)})")
        if name not in self._labs:
            self._labs[name] = NodeLab(dir=self.dir / "nodes" / name, port=self.port, node=name,
                                       wheels_dir=self.wheels_dir or self.dir / "wheels", listen=self.ip(name),
                                       cluster=self)
        return self._labs[name]

    # -- bring up, tear down -------------------------------------------------------------------------------
    def up(self, placement: dict[int, str], wheels: bool = True) -> None:
        """Every node's sshd and pct double, then each container `ctid` started on node `placement[ctid]`
        (idempotent: a container some node owns already stays there)."""
        for d in (self.dir, self.lxc, self.tree / "nodes"):
            d.mkdir(parents=True, exist_ok=True)
        if not self.key_file.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "remote-lab-cluster", "-f",
                  str(self.key_file)]).check_returncode()
        os.chmod(self.key_file, 0o600)
        for i, name in enumerate(self.nodes):
            lab = self.node(name)
            lab._check_tools()
            if wheels and i == 0:
                lab.provide_wheels()
            for d in (lab.ssh, lab.dir / "bin", self.tree / "nodes" / name / "lxc"):
                d.mkdir(parents=True, exist_ok=True)
            lab._keys()
            lab._templates()  # each node's own `local` storage, its template (create on any node)
            lab._pct_double()
            lab._sshd()
        self.known_hosts.write_text("".join(
            f"[{self.ip(n)}]:{self.port} {' '.join((self.node(n).ssh / 'host_ed25519.pub').read_text().split()[:2])}\n"
            for n in self.nodes))
        self.write_members()
        for ctid, node in placement.items():
            self.node(self.owner(ctid) or node).start_container(ctid)
        self.write_vmlist()

    def down(self, purge: bool = False) -> None:
        for ctid in self.containers():
            if self.state(ctid) == "RUNNING":
                _run(["lxc-stop", "-P", str(self.lxc), "-n", str(ctid), "-k"])
        for name in self.nodes:
            self.node(name).down()
        if purge and self.dir.exists():
            shutil.rmtree(self.dir)

    def containers(self) -> list[int]:
        if not self.lxc.is_dir():
            return []
        return sorted(int(p.name) for p in self.lxc.iterdir() if p.name.isdigit() and (p / "config").exists())

    def state(self, ctid: int) -> str:
        return _run(["lxc-info", "-P", str(self.lxc), "-n", str(ctid), "-sH"]).stdout.strip() or "STOPPED"

    # -- the shared tree -------------------------------------------------------------------------------------
    def owner(self, ctid: int) -> str | None:
        """The node whose folder holds container ctid's config, or None."""
        for name in self.nodes:
            if (self.tree / "nodes" / name / "lxc" / f"{ctid}.conf").exists():
                return name
        return None

    def write_members(self, offline: tuple[str, ...] = ()) -> None:
        data = {"nodename": self.nodes[0], "version": 1,
                "cluster": {"name": self.name, "version": 1, "nodes": len(self.nodes), "quorate": 1},
                "nodelist": {n: {"id": i + 1, "online": 0 if n in offline else 1, "ip": self.ip(n)}
                             for i, n in enumerate(self.nodes)}}
        (self.tree / ".members").write_text(json.dumps(data, indent=1))

    def write_vmlist(self) -> None:
        """The cluster-wide .vmlist, as the double writes it after a migration."""
        path = self.tree / ".vmlist"
        try:
            version = int(json.loads(path.read_text()).get("version", 0)) + 1
        except (OSError, ValueError):
            version = 1
        ids = {str(c): {"node": n, "type": "lxc", "version": version}
               for c in self.containers() if (n := self.owner(c)) is not None}
        path.write_text(json.dumps({"version": version, "ids": ids}, indent=1))

    def set_quorum(self, node: str, quorate: bool) -> None:
        """The quorum switch: a node without quorum refuses config writes (`cluster not ready - no quorum?`)."""
        flag = self.tree / f".noquorum-{node}"
        if quorate:
            flag.unlink(missing_ok=True)
        else:
            flag.write_text("")

    def set_service(self, node: str, up: bool) -> None:
        """The cluster service switch: a node whose pve-cluster is down answers pvesh with ipcc_send_rec's
        `Connection refused` (exit 255), as root too."""
        flag = self.tree / f".nocluster-{node}"
        if up:
            flag.unlink(missing_ok=True)
        else:
            flag.write_text("")

    def migrate(self, ctid: int, target: str, *flags: str) -> subprocess.CompletedProcess:
        """`pct migrate ctid target FLAGS` on the node that owns it (as an admin would run it there)."""
        source = self.owner(ctid)
        if source is None:
            raise LabError(f"container {ctid} is on no node of the lab cluster")
        return self.node(source).pct("migrate", str(ctid), target, *flags)

    def move_config(self, ctid: int, target: str) -> None:
        """What an admin does for a container of a dead node: its config moved to another node's folder."""
        source = self.owner(ctid)
        if source is None:
            raise LabError(f"container {ctid} is on no node of the lab cluster")
        dest = self.tree / "nodes" / target / "lxc" / f"{ctid}.conf"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.tree / "nodes" / source / "lxc" / f"{ctid}.conf", dest)
        self.write_vmlist()

    # -- hosts files -----------------------------------------------------------------------------------------
    def host_lines(self, nodes: tuple[str, ...] | None = None, *, names: dict[str, str] | None = None,
                   node_keys: bool = True) -> list[str]:
        """`hosts:` entries for these nodes, each `cluster: <name>` (named `names[node]` where given, then
        with a `node:` key unless not `node_keys`: remote asks the node its name)."""
        lines = ["hosts:"]
        for n in nodes or self.nodes:
            entry = (names or {}).get(n, n)
            lines += [f"  {entry}:", f"    address: {self.ip(n)}", f"    port: {self.port}", "    user: root",
                      f"    key_file: {self.key_file}", f"    known_hosts: {self.known_hosts}",
                      f"    cluster: {self.name}"]
            if entry != n and node_keys:
                lines.append(f"    node: {n}")
        return lines

    def hosts_yaml(self, containers: dict[int, str | None], *, nodes: tuple[str, ...] | None = None,
                   names: dict[str, str] | None = None, node_keys: bool = True) -> str:
        """A hosts file: each container with `host: <hint>` where a hint is given, else `cluster:` only."""
        lines = self.host_lines(nodes, names=names, node_keys=node_keys) + ["containers:"]
        for ctid, hint in containers.items():
            where = f"host: {(names or {}).get(hint, hint)}" if hint else f"cluster: {self.name}"
            lines += [f"  {ctid}:", f"    {where}", f"    address: {address(ctid)}"]
        return "\n".join(lines) + "\n"
