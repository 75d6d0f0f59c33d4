"""Hosts of one Proxmox cluster: the hosts file's keys, the node resolution, the Session's one list read per
cluster and the re-read after Proxmox's "does not exist" (remote.cluster), over FakeCluster's transports."""

from __future__ import annotations

import json

import pytest
import yaml

from remote import cluster, config
from remote.errors import ConfigError
from remote.lab.testing import FakeCluster
from remote.transport.session import Session

HOSTS = """
hosts:
  pve1: {address: 10.0.0.1, cluster: c1}
  gpu-b: {address: 10.0.0.2, cluster: c1, node: pve2}
  solo: {address: 10.0.0.9}
containers:
  200: {host: pve1}
  201: {host: pve1}
  202: {cluster: c1}
  300: {host: solo}
"""


def load(text: str = HOSTS) -> config.Config:
    return config.parse(yaml.safe_load(text), "hosts.yaml")


def test_cluster_keys_parse():
    c = load()
    assert c.hosts["gpu-b"].node_name == "pve2" and c.hosts["pve1"].node_name == "pve1"
    assert c.containers[200].cluster == "c1" and c.containers[200].host_given
    assert c.containers[202].cluster == "c1" and not c.containers[202].host_given
    assert c.containers[202].host.name == "pve1"  # the cluster's first host until resolved
    assert c.containers[300].cluster is None


@pytest.mark.parametrize("text, key, words", [
    ("hosts: {a: {address: x, cluster: c}}\ncontainers: {200: {cluster: d}}", "containers.200.cluster", "unknown cluster 'd'"),
    ("hosts: {a: {address: x, cluster: c}, b: {address: y}}\ncontainers: {200: {host: b, cluster: c}}",
     "containers.200.cluster", "not a node of cluster 'c'"),
    ("hosts: {a: {address: x, node: n}}\ncontainers: {200: {host: a}}", "hosts.a.node", "add `cluster: NAME`"),
    ("hosts: {a: {address: x, cluster: c, node: n}, b: {address: y, cluster: c, node: n}}\ncontainers: {200: {host: a}}",
     "hosts.b.node", "both node 'n'"),
    ("hosts: {a: {address: x, cluster: c}}\ncontainers: {200: {address: z}}", "containers.200.host", "required key"),
    ("hosts: {a: {address: x, cluster: 'c d'}}\ncontainers: {200: {host: a}}", "hosts.a.cluster", "expected a name"),
])
def test_bad_cluster_keys_are_named(text, key, words):
    with pytest.raises(ConfigError) as e:
        load(text)
    assert e.value.key == key and words in str(e.value)


def guests(**where: str) -> dict:
    return {int(k[1:]): cluster.Guest(int(k[1:]), n, "running") for k, n in where.items()}


def test_resolve_follows_a_wrong_hint_with_one_line():
    c = load()
    right = cluster.resolve(c, c.containers[200], guests(c200="pve1"))
    assert right.spec is c.containers[200] and right.note is None and right.node == "pve1"
    moved = cluster.resolve(c, c.containers[201], guests(c201="pve2"))
    assert moved.spec.host.name == "gpu-b" and moved.node == "pve2"
    assert moved.note == "201 is on pve2, not pve1 (the hosts file's host): using gpu-b"
    found = cluster.resolve(c, c.containers[202], guests(c202="pve2"))
    assert found.spec.host.name == "gpu-b" and found.note is None  # no hint, nothing to correct
    assert cluster.resolve(c, c.containers[202], {}).node is None  # not in the list: the hint stays


@pytest.mark.fault("a cluster's container on a node the hosts file lacks", "exit 2 naming the node, the cluster and "
                   "the keys to add (a host with cluster: and node:), never a traceback")
def test_a_node_the_file_lacks_is_named_with_the_key_to_add():
    c = load()
    with pytest.raises(ConfigError) as e:
        cluster.resolve(c, c.containers[200], guests(c200="pve7"))
    assert "node pve7" in str(e.value) and "`cluster: c1`" in str(e.value) and "node: pve7" in str(e.value)


def test_guest_list_is_untrusted_input():
    text = json.dumps([{"type": "lxc", "vmid": 200, "node": "pve1", "status": "running"},
                       {"type": "qemu", "vmid": 100, "node": "pve1"}, {"type": "lxc", "vmid": "201", "node": "x"},
                       {"type": "lxc", "vmid": True, "node": "x"}, {"type": "lxc", "vmid": 202, "node": ""}, "junk"])
    assert cluster.parse_guests(text, "here") == {200: cluster.Guest(200, "pve1", "running")}
    with pytest.raises(cluster.ClusterError, match="no JSON"):
        cluster.parse_guests("Unable to load access control list", "here")


def test_a_node_name_that_is_no_plain_name_is_skipped_and_notes_are_one_printable_line():
    rows = [{"type": "lxc", "vmid": 200, "node": "pve1\x1b[2J"}, {"type": "lxc", "vmid": 201, "node": "-pve"},
            {"type": "lxc", "vmid": 202, "node": "pve 2"}, {"type": "lxc", "vmid": 203, "node": "pve2.lan_b-1"}]
    assert cluster.parse_guests(json.dumps(rows), "here") == {203: cluster.Guest(203, "pve2.lan_b-1", "unknown")}
    said: list = []
    lookup = cluster.Lookup(load(), lambda host, argv: None, said.append)
    lookup._say(None, "cluster c1: \x1b[2Jline\nnext", "warning")
    assert said and "\x1b" not in said[0].line and "\n" not in said[0].line and said[0].line.startswith("!! cluster")


def session(fake: FakeCluster, c: config.Config | None = None, echo=None) -> Session:
    """A session on the fake cluster; `echo`: where the lines of its events go."""
    return Session(c or load(), transport_factory=fake.transport,
                   events=(lambda e: echo(e.line)) if echo else None)


def test_one_list_read_per_cluster_and_commands_on_the_holding_node(capsys):
    fake = FakeCluster({200: "pve1", 201: "pve2", 202: "pve2"})
    said: list[str] = []
    with session(fake, echo=said.append) as s:
        for ctid in (200, 201, 202):
            s.container(ctid).run(["true"])
        assert s.container(300).transport.name == "solo"
        lookup = cluster.lookup_of(s.config)
        assert lookup is not None and lookup.reads == 1
    pvesh = [a for t in fake.transports.values() for a in t.calls if "pvesh" in a[0]]
    assert len(pvesh) == 1 and pvesh[0][:2] == ("pvesh", "get")
    execs = {name: [a[2] for a in t.calls if a[1] == "exec"] for name, t in fake.transports.items()}
    assert execs["pve1"] == ["200"] and execs["gpu-b"] == ["201", "202"]
    # the session's reporter has the note (the command line prints it; the library's events carry it): no print
    assert said == ["-- 201 is on pve2, not pve1 (the hosts file's host): using gpu-b"]
    assert capsys.readouterr().err == ""


def test_a_corrected_hint_is_a_typed_note_of_its_container():
    from remote.events import Note

    got: list = []
    with Session(load(), transport_factory=FakeCluster({200: "pve1", 201: "pve2"}).transport, events=got.append) as s:
        s.container(201).run(["true"])
    notes = [e for e in got if isinstance(e, Note)]
    assert [(e.container, e.level, e.line) for e in notes] == [
        (201, "info", "-- 201 is on pve2, not pve1 (the hosts file's host): using gpu-b")]


@pytest.mark.fault("a container migrated between the guest-list read and its command", "Proxmox's 'does not exist' "
                   "triggers one re-read and the command goes on on the new node")
def test_does_not_exist_after_the_list_rereads_it_once_and_follows():
    fake = FakeCluster({200: "pve1"})
    with session(fake) as s:
        ct = s.container(200)
        assert ct.transport.name == "pve1"
        fake.placement[200] = "pve2"  # migrated after the list was read
        ct.run(["true"])
        assert ct.transport.name == "gpu-b"
        assert cluster.lookup_of(s.config).reads == 2
        fake.placement[200] = "pve1"  # moved again: the one re-read is spent, Proxmox's error stands
        with pytest.raises(Exception, match="does not exist"):
            s.container(200).run(["true"])


@pytest.mark.fault("an evacuation: several containers moved while one command or one open Fleet runs", "every moved "
                   "container is followed to its new node (one re-read of the list per cluster answers them all), "
                   "none fails with 'does not exist'")
def test_an_evacuation_follows_every_moved_container_on_one_reread():
    fake = FakeCluster({200: "pve1", 201: "pve1", 202: "pve1"})
    with session(fake) as s:
        cts = [s.container(ctid) for ctid in (200, 201, 202)]
        assert {ct.transport.name for ct in cts} == {"pve1"}
        fake.placement.update({200: "pve2", 201: "pve2", 202: "pve2"})  # HA moved them all off pve1
        for ct in cts:
            ct.run(["true"])
        assert [ct.transport.name for ct in cts] == ["gpu-b", "gpu-b", "gpu-b"]
        assert cluster.lookup_of(s.config).reads == 2


ALIASES = """
hosts:
  pve1: {address: 10.0.0.1, cluster: c1}
  pve2: {address: 10.0.0.2, cluster: c1}
  pve3: {address: 10.0.0.3, cluster: c1, node: pvethree}
containers:
  200: {host: pve1}
  201: {host: pve1}
  202: {cluster: c1}
  203: {cluster: c1}
"""


@pytest.mark.fault("host entries not named after their nodes (an SSH alias pve1 for node pvelab)", "each host is "
                   "asked its node name (`uname -n`) once, only where the cluster's list names a node no entry is "
                   "called; `node:` stays the override and is never asked; containers there work (no exit 2)")
def test_a_hosts_node_name_is_learned_from_the_host_once():
    fake = FakeCluster({200: "pvelab", 201: "pve2", 202: "pvelab", 203: "pvethree"},
                       nodes={"pve1": "pvelab"})
    said: list[str] = []
    with session(fake, load(ALIASES), echo=said.append) as s:
        for ctid in (200, 201, 202, 203):
            s.container(ctid).run(["true"])
        lookup = cluster.lookup_of(s.config)
        assert lookup is not None
        assert {c: s.config.containers[c].host.name for c in (200, 201, 202, 203)} == {
            200: "pve1", 201: "pve2", 202: "pve1", 203: "pve3"}
        assert lookup.node_of(s.config.hosts["pve1"]) == "pvelab" and lookup.node_of(s.config.hosts["pve3"]) == "pvethree"
    asked = {name: [a for a in t.calls if a[0].endswith("uname")] for name, t in fake.transports.items()}
    assert asked["pve1"] == [("/usr/bin/uname", "-n")]  # once, though two containers are on its node
    assert not asked.get("pve2") and not asked.get("pve3")  # named after its node; node: is the override
    assert said == ["-- 201 is on pve2, not pvelab (the hosts file's host): using pve2"]


def test_a_kept_connection_is_asked_through_its_keeper_which_keeps_the_answer():
    from remote.lab.testing import CountingTransport

    fake = FakeCluster({200: "pvelab"}, nodes={"pve1": "pvelab"})

    class Kept(CountingTransport):
        kept = True
        remembered_calls: list = []

        def remembered(self, argv, *, deadline=None):
            self.remembered_calls.append(tuple(argv))
            return self.run(argv)

    def factory(host):
        t = Kept(host.name, lambda argv, n=fake.nodes.get(host.name, host.name): fake.answer(n, argv))
        fake.transports[host.name] = t
        return t

    with Session(load(ALIASES), transport_factory=factory) as s:
        assert s.config.containers[200].host.name == "pve1"
    assert Kept.remembered_calls == [("/usr/bin/uname", "-n")]


def test_status_shows_each_container_under_its_node():
    from remote.api import Fleet

    c = load()
    fake = FakeCluster({200: "pve1", 201: "pve2", 202: "pve2"}, running=set())
    fleet = Fleet(c, keep=False)
    fleet._made = Session(c, transport_factory=fake.transport)  # the fleet over the fake cluster
    data = fleet.status()
    by_host = {h.host: h for h in data.hosts}
    assert by_host["gpu-b"].containers == {201: "stopped", 202: "stopped"} and by_host["gpu-b"].node == "pve2"
    assert by_host["pve1"].containers == {200: "stopped"} and by_host["pve1"].cluster == "c1"
    assert by_host["solo"].containers == {300: "missing"} and by_host["solo"].cluster is None
    assert {c.container: c.node for c in data.containers} == {200: "pve1", 201: "pve2", 202: "pve2", 300: "solo"}
    assert max(fake.connections().values()) == 1


def test_sudo_rule_allows_exactly_the_guest_list_read():
    from remote import sudo

    host = load().hosts["pve1"]
    assert sudo.host_argv(host, "pvesh", *cluster.GUESTS) == ["pvesh", *cluster.GUESTS]
    sudo_host = config.Host("h", "x", sudo=True, pct="sudo -n /usr/sbin/pct", pct_path="/usr/sbin/pct", cluster="c")
    assert sudo.host_argv(sudo_host, "pvesh", *cluster.GUESTS) == ["sudo", "-n", "/usr/bin/pvesh", *cluster.GUESTS]
    assert "/usr/bin/pvesh get /cluster/resources --type vm --output-format json" in sudo.rule_commands([])
    with pytest.raises(ValueError):
        sudo.host_argv(sudo_host, "pvesh", "get", "/access/users")


def test_the_multi_node_gate_names_each_differing_field_and_its_nodes():
    from remote.facts import Gpu
    from remote.facts.deployed import venv_record_of
    from remote.ops.jobs import Preflight
    from remote.ops.multinode import gate_fields, mismatches

    def pre(torch="2.11.0+cu128", nccl="2.26.2", driver="580.65.06", commit="a" * 40):
        venv = venv_record_of({"lock_sha256": "f" * 64, "verify": {"torch": torch, "cuda_build": "12.8",
                                                                  "dists": {"torch": torch, "nvidia-nccl-cu12": nccl}}})
        return Preflight(commit, venv, (Gpu(0, "H200", driver),), [])

    same = {200: ("pve1", gate_fields(pre())), 201: ("pve2", gate_fields(pre(driver="580.82.07")))}
    assert mismatches(same) == []  # the driver's major version is what must match
    differ = {200: ("pve1", gate_fields(pre())), 201: ("pve2", gate_fields(pre(torch="2.10.0+cu128", nccl="2.21.5"))),
              202: ("pve2", gate_fields(pre(driver="570.1")))}
    assert mismatches(differ) == [
        "torch: 2.11.0+cu128 on 200 (pve1), 202 (pve2); 2.10.0+cu128 on 201 (pve2)",
        "NCCL: nvidia-nccl-cu12 2.26.2 on 200 (pve1), 202 (pve2); nvidia-nccl-cu12 2.21.5 on 201 (pve2)",
        "driver major: 580 on 200 (pve1), 201 (pve2); 570 on 202 (pve2)"]


@pytest.mark.fault("no node of a cluster answers, or pvesh refuses the guest list", "each container stays on its "
                   "hint (one line said); a refused read names root or the sudo rule")
def test_no_node_answering_leaves_the_hints_and_a_refused_read_is_named(capsys):
    from remote.errors import ConnectError
    from remote.lab.testing import CountingTransport

    def down(argv):
        raise ConnectError("pve1", "connection refused")

    said: list[str] = []
    with Session(load(), transport_factory=lambda h: CountingTransport(h.name, down), events=lambda e: said.append(e.line)) as s:
        assert s.config.containers[201].host.name == "pve1"  # its hint: the command then says it is unreachable
    assert len(said) == 1 and said[0].startswith("!! cluster c1: no node answered for its guest list")

    def refused(argv):
        return 255, "", "Unable to load access control list: Permission denied\n"

    with Session(load(), transport_factory=lambda h: CountingTransport(h.name, refused)) as s:
        with pytest.raises(cluster.ClusterError, match="needs root"):
            s.container(200)


@pytest.mark.fault("a cluster node whose cluster service is down, or whose pvesh fails otherwise", "the next node is "
                   "asked for the guest list (no 'needs root' as root); 'needs root' only for pvesh's permission "
                   "denied or sudo's password; no node answering: the hints, one line")
@pytest.mark.parametrize("err, code", [
    ("ipcc_send_rec[1] failed: Connection refused\nipcc_send_rec[2] failed: Connection refused\n"
     "ipcc_send_rec[3] failed: Connection refused\nUnable to load access control list: Connection refused\n", 255),
    ("sh: 1: /usr/bin/pvesh: not found\n", 127),
    ("sudo: /usr/bin/pvesh: command not found\n", 1),
    ("400 Parameter verification failed.\ntype: value 'vm' does not have a value in the enumeration\n", 255),
])
def test_a_node_that_does_not_answer_for_the_cluster_is_passed_over_not_called_root(err, code):
    from remote.lab.testing import CountingTransport

    fake = FakeCluster({200: "pve1", 201: "pve2"})

    def factory(host):
        if host.name != "pve1":
            return fake.transport(host)
        return CountingTransport("pve1", lambda argv: (code, "", err) if "pvesh" in argv[0] else fake.answer("pve1", argv))

    said: list[str] = []
    with Session(load(), transport_factory=factory, events=lambda e: said.append(e.line)) as s:
        assert s.config.containers[201].host.name == "gpu-b"  # read on gpu-b, pve1's failure passed over
        assert cluster.lookup_of(s.config).reads == 2
    assert said == ["-- 201 is on pve2, not pve1 (the hosts file's host): using gpu-b"]


def test_a_cluster_whose_every_node_fails_its_read_uses_the_hints_and_says_why():
    fake = FakeCluster({200: "pve1", 201: "pve2"}, down={"pve1", "pve2"})
    said: list[str] = []
    with Session(load(), transport_factory=fake.transport, events=lambda e: said.append(e.line)) as s:
        assert s.config.containers[201].host.name == "pve1"
    assert len(said) == 1 and "no node answered" in said[0] and "ipcc_send_rec" in said[0] and "gpu-b" in said[0]


def test_needs_root_only_for_a_refusal():
    from remote.lab.testing import CountingTransport

    def password(argv):
        return 1, "", "sudo: a password is required\n"

    sudo_hosts = HOSTS.replace("10.0.0.1, cluster: c1}", "10.0.0.1, cluster: c1, user: u, sudo: true}")
    with Session(load(sudo_hosts), transport_factory=lambda h: CountingTransport(h.name, password)) as s:
        with pytest.raises(cluster.ClusterError, match="needs root"):
            s.container(200)


def test_init_on_a_cluster_node_writes_every_node_and_container_and_loads():
    from remote.ops import hostsinit

    info = hostsinit.ClusterInfo("lab", "pve1", (hostsinit.NodeInfo("pve1", "10.0.0.1", True),
                                                 hostsinit.NodeInfo("pve2", "10.0.0.2", False)),
                                 {200: "pve1", 201: "pve2"}, {200: "running", 201: "unknown"})
    host = config.Host("pve", "10.0.0.1", port=2222)
    text = hostsinit.render(host, {"port": 2222}, [(200, "running", "ct200", []), (201, "unknown", "", [])], info)
    c = config.parse(yaml.safe_load(text), "hosts.yaml")
    assert {h.name: (h.node_name, h.address, h.port, h.cluster) for h in c.hosts.values()} == {
        "pve": ("pve1", "10.0.0.1", 2222, "lab"), "pve2": ("pve2", "10.0.0.2", 2222, "lab")}
    assert {i: s.host.name for i, s in c.containers.items()} == {200: "pve", 201: "pve2"}
    assert "# offline when remote init read the cluster" in text


def test_a_fleet_containers_target_is_on_the_node_holding_it():
    from remote.api import Fleet

    c = load()
    fake = FakeCluster({200: "pve1", 201: "pve2", 202: "pve2"})
    fleet = Fleet(c, keep=False)
    fleet._made = Session(c, transport_factory=fake.transport)
    assert fleet.container(202).host == "gpu-b" and fleet.container(202)._target.spec.host.name == "gpu-b"
    assert fleet.container(300)._target.spec.host.name == "solo"


@pytest.mark.fault("a cluster's container on a node the hosts file lacks", "`remote warmup -c 200` looking for a "
                   "cache to copy skips that container (and places only the candidates) instead of failing on it")
def test_finding_a_cache_source_skips_a_container_that_cannot_be_placed(monkeypatch):
    from remote.ops import cachecopy
    from remote.results import CacheHolding
    from remote.target import resolve

    looked = []

    def look(t):
        looked.append(t.spec.ctid)
        return CacheHolding(t.spec.ctid, "/cache", 1, 1, {"torch": "2"}, True, host=t.spec.host.name, sizes={"f": 1},
                            want={"torch": "2"})

    monkeypatch.setattr(cachecopy, "look", look)
    c = load(HOSTS + "  203: {cluster: c1, venv: {python: '3.10'}}\n")
    fake = FakeCluster({200: "pve1", 201: "pve2", 202: "pve7", 203: "pve7"})  # pve7: not in the hosts file
    with session(fake, c) as s:
        src = cachecopy.find_source(resolve(s, 200))
        lookup = cluster.lookup_of(s.config)
        assert lookup is not None
        placed = set(lookup._placed)
    assert src is not None and src.container == 201 and src.host == "gpu-b"
    assert sorted(looked) == [200, 201, 300]  # 202 unplaceable: passed over; 203 (another venv) never alike
    assert 203 not in placed  # not alike on the hosts file's own entry: never placed


def test_a_json_or_exec_tasks_progress_goes_to_stderr_not_into_its_stdout(monkeypatch, capsys):
    import remote.api as api
    from remote.cli import table
    from remote.events import Note, StepStarted

    got = {}
    monkeypatch.setattr(api, "open", lambda hosts, dry=False, events=None, **kw: got.setdefault("events", events))
    table.fleet_of("hosts.yaml", stderr_progress=True)
    got.pop("events")(Note(None, "-- 201 is on pve2, not pve1 (the hosts file's host): using gpu-b", "info"))
    table.fleet_of("hosts.yaml")
    got.pop("events")(StepStarted(200, "==> step", "step"))
    out, err = capsys.readouterr()
    assert out == "==> step\n" and err == "-- 201 is on pve2, not pve1 (the hosts file's host): using gpu-b\n"


def test_init_quotes_names_so_numeric_looking_ones_load_as_names():
    from remote.ops import hostsinit

    info = hostsinit.ClusterInfo("2024", "1e3", (hostsinit.NodeInfo("1e3", "10.0.0.1", True),
                                                 hostsinit.NodeInfo("0755", "10.0.0.2", True)),
                                 {200: "1e3", 201: "0755"}, {200: "running", 201: "running"})
    host = config.Host("007", "10.0.0.1")
    text = hostsinit.render(host, {}, [(200, "running", "", []), (201, "running", "", [])], info)
    c = config.parse(yaml.safe_load(text), "hosts.yaml")
    assert {h.name: (h.node_name, h.cluster) for h in c.hosts.values()} == {"007": ("1e3", "2024"),
                                                                           "0755": ("0755", "2024")}
    assert {i: s.host.name for i, s in c.containers.items()} == {200: "007", 201: "0755"}


def test_copy_cache_connects_the_node_holding_the_source_not_its_hinted_host(monkeypatch):
    from remote.api import Fleet
    from remote.api.group import Group

    c = load()
    fake = FakeCluster({200: "pve1", 201: "pve2", 202: "pve2"})
    fleet = Fleet(c, keep=False)
    fleet._made = Session(c, transport_factory=fake.transport)
    opened: list[str] = []
    real = fleet._made.transport
    monkeypatch.setattr(fleet._made, "transport", lambda host: opened.append(host.name) or real(host))
    monkeypatch.setattr(Group, "map", lambda self, fn, **kw: None)
    fleet.copy_cache(201, [200])  # 201's hint is pve1; the cluster's list has it on pve2 (host gpu-b)
    assert opened[-1] == "gpu-b"
