"""`remote create` against a fake Proxmox host (pct, pvesm, pveam, the GPU probes answered with Proxmox's words):
the order of what it runs, the no-op, the refusals that change nothing, the undo of a failure part-way,
the dry run, and the hosts file's entry (comments kept)."""

import json
import re
import shlex

import pytest

from remote import config
from remote.errors import ConfigError, CreateError, CreateRefused, GpuConfigError
from remote.lab.testing import inner_argv
from remote.ops import create as cr
from remote.ops import hostsinit
from remote.target import HostTarget
from remote.transport import Result
from remote.transport.session import Session

from support import GPU_MARK  # noqa: E402
from support import gpu_host_text  # noqa: E402
from support import gpu_sample as data  # noqa: E402

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
HOSTS = """# my fleet: comments stay
hosts:
  pve: {address: 10.0.0.1}   # the GPU box
  pve2: {address: 10.0.0.2, user: trainer, sudo: true}
containers:
  200: {host: pve}   # the first one

  # the old one below
  201: {host: pve}
venv: {path: /root/venv}
"""
NO_DRIVER = dict(proc="", sys_version="", modinfo="", modules="", devices="", nodes="", smi="")
NO_UVM = "\n".join(line for line in data("nodes-509.txt").splitlines() if "uvm" not in line) + "\n"


class FakePve:
    """A Proxmox node as pct, pvesm and pveam answer: containers as config dicts; every command kept."""

    def __init__(self, *, gpu: dict | None = None, existing: dict | None = None, cuinit: int = 0):
        self.cuinit = cuinit
        self.cts: dict[int, dict] = {ctid: dict(c) for ctid, c in (existing or {}).items()}
        self.running: set[int] = set()
        self.templates = {"local": [TEMPLATE]}
        self.storages = ["local", "local-lvm"]
        self.rootdir = ["local-lvm"]  # the storages whose content has rootdir (a plain `local` dir has not)
        self.bridges = ["vmbr0"]
        self.gpu = dict(gpu or {})
        self.cluster_ids = {150: "pve-b"}  # another node's container
        self.calls: list[tuple[str, ...]] = []
        self.fail: dict[str, tuple[int, str]] = {}  # a step name -> (exit code, stderr)
        self.name = "pve"

    # -- the transport's side ---------------------------------------------------------------------------------
    def describe(self, argv) -> str:
        return "pve: " + shlex.join(argv)

    def close(self) -> None:
        pass

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = tuple(argv)
        self.calls.append(argv)
        code, out, err = self.answer(argv)
        return Result(argv, code, out.encode(), err.encode(), 0.0)

    def conf(self, ctid: int) -> str:
        return "".join(f"{k}: {v}\n" for k, v in sorted(self.cts[ctid].items()))

    def answer(self, argv):
        if argv[:2] == ("bash", "-c"):
            return self.script(argv[3], argv[4:])
        if argv[0] == "pvesm":
            listed = [s for s in self.storages if "--content" not in argv or s in self.rootdir]
            return 0, "Name Type Status Total Used Available %\n" + "".join(f"{s} dir active 1 1 1 1%\n" for s in listed), ""
        if argv[:2] == ("pvesh", "get") and argv[2] == "/nodes/pve/network":
            return 0, json.dumps([{"iface": b, "type": "bridge"} for b in self.bridges]), ""
        if argv[:3] == ("pvesh", "get", "/cluster/nextid"):  # as Proxmox: the lowest free id from 100
            return 0, f"{next(i for i in range(100, 10**9) if i not in self.cts and i not in self.cluster_ids)}\n", ""
        if argv[0] == "pveam":
            store = argv[2]
            if store not in self.templates:
                return 255, "", f"storage '{store}' does not exist\n"
            return 0, "NAME SIZE\n" + "".join(f"{t} 120.00MB\n" for t in self.templates[store]), ""
        assert argv[0] == "pct", argv
        sub, ctid = argv[1], int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else None
        if sub in self.fail:
            code, err = self.fail.pop(sub)
            return code, "", err
        missing = (255, "", f"Configuration file 'nodes/pve/lxc/{ctid}.conf' does not exist\n")
        if sub == "config":
            return (0, self.conf(ctid), "") if ctid in self.cts else missing
        if sub in ("create", "clone"):
            new = ctid if sub == "create" else int(argv[3])
            node = "pve" if new in self.cts else self.cluster_ids.get(new)
            if node:
                return 255, "", f"unable to create CT {new} - CT {new} already exists on node '{node}'\n"
            opts = dict(zip(argv[4::2], argv[5::2], strict=False)) if sub == "create" else {}
            if sub == "create":
                rootfs = opts["--rootfs"].split(":")
                self.cts[new] = {"arch": "amd64", "cores": opts["--cores"], "memory": opts["--memory"],
                                 "rootfs": f"{rootfs[0]}:vm-{new}-disk-0,size={rootfs[1]}G",
                                 "unprivileged": opts["--unprivileged"], "description": opts["--description"],
                                 "hostname": opts["--hostname"]}
            else:
                self.cts[new] = dict(self.cts[ctid])
            return 0, "extracting archive\n", ""
        if ctid not in self.cts:
            return missing
        if sub == "set":
            rest = list(argv[3:])
            for key, value in zip(rest[::2], rest[1::2], strict=True):
                if key == "--delete":
                    for k in value.split(","):
                        self.cts[ctid].pop(k, None)
                else:
                    self.cts[ctid][key[2:]] = value
            return 0, "", ""
        if sub == "start":
            self.running.add(ctid)
            return 0, "", ""
        if sub == "status":
            return 0, f"status: {'running' if ctid in self.running else 'stopped'}\n", ""
        if sub == "stop":
            self.running.discard(ctid)
            return 0, "", ""
        if sub == "destroy":
            if ctid in self.running:
                return 255, "", f"CT {ctid} is running - destroy failed\n"
            del self.cts[ctid]
            return 0, "", ""
        if sub == "exec":
            return self.inside(ctid, inner_argv(argv))
        raise AssertionError(argv)

    def script(self, name, args):
        if name == "gpu-host":
            mark = args[0]
            ids = [int(a) for a in args[args.index("--") + 1:]]
            text = gpu_host_text(**self.gpu, configs={i: self.conf(i) for i in ids if i in self.cts})
            return 0, text.replace(GPU_MARK, mark), ""
        if name == "nvidia-userspace":
            if "nvidia-userspace" in self.fail:
                return self.fail.pop("nvidia-userspace")[0], "version 580.95.05\nerror no libcuda.so.580.95.05\n", ""
            return 0, "version 580.95.05\nfiles 5\ndest /var/lib/remote/nvidia\nstate filled\n", ""
        if name == "gpu-uvm":
            self.gpu["nodes"] = data("nodes-509.txt")
            return 0, "ok\n", ""
        if name == "gpu-host-fix" and args[0] == "drop-raw":
            conf = self.cts[int(args[1])]
            for line in args[2:]:
                key, _, value = line.partition(": ")
                assert conf.get(key) == value, (line, conf)
                del conf[key]
            return 0, "", ""
        raise AssertionError(name)

    def inside(self, ctid, argv):
        if argv[:2] == ("bash", "-c"):
            name = argv[3]
            if name in self.fail:
                code, err = self.fail.pop(name)
                return code, "", err
            return 0, {"ct-needs": "missing git\ninstalled-with apt-get\n", "nvidia-link": "version 580.95.05\n"}[name], ""
        if argv[0] == "python3":  # the GPU probe: what a healthy container with the config's nodes sees
            devs = [v.split(",")[0] for k, v in self.cts[ctid].items() if re.fullmatch(r"dev\d+", k)]
            majors = {"/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (509, 0), "/dev/nvidia-uvm-tools": (509, 1)}
            nodes = [{"path": p, "char": True, "major": majors.get(p, (195, int(p[11:]) if p[11:].isdigit() else 0))[0],
                      "minor": majors.get(p, (195, int(p[11:]) if p[11:].isdigit() else 0))[1], "uid": 0, "gid": 44,
                      "mode": 0o666, "open": None} for p in devs]
            libs = {so: {"path": f"/opt/remote/nvidia/current/lib/{so}", "file": so.replace(".so.1", ".so.580.95.05"),
                         "version": "580.95.05"} for so in ("libcuda.so.1", "libnvidia-ml.so.1")}
            first = {"nodes": nodes, "libs": libs, "proc_version": data("proc-driver-nvidia-version-open.txt"),
                     "smi": {"rc": 0, "out": "580.95.05\n", "err": ""}, "torch": {}}
            cuda = {"loaded": True, "driver_version": 13000, "driver_version_rc": 0,
                    "init": self.cuinit}
            return 0, json.dumps(first) + "\n" + json.dumps({"cuda": cuda}) + "\n", ""
        if argv[:2] == ("nvidia-smi", "-L"):
            gpus = [v for k, v in self.cts[ctid].items() if re.fullmatch(r"dev\d+", k) and re.match(r"/dev/nvidia\d", v)]
            return 0, "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\n" for i in range(len(gpus))), ""
        raise AssertionError(argv)

    def subs(self) -> list[str]:
        """What ran, one word each: pct's sub-command, a script's name, a program."""
        out = []
        for argv in self.calls:
            if argv[:2] == ("bash", "-c"):
                out.append(argv[3])
            elif argv[0] == "pct" and argv[1] == "exec":
                inner = inner_argv(argv)
                out.append("exec " + (inner[3] if inner[:2] == ("bash", "-c") else inner[0]))
            else:
                out.append(" ".join(argv[:2]) if argv[0] == "pct" else argv[0])
        return out


@pytest.fixture
def hosts(tmp_path):
    p = tmp_path / "hosts.yaml"
    p.write_text(HOSTS)
    return p


def make(hosts, pve, ctid=210, host="pve", dry=False, **kw):
    cfg = config.load(str(hosts))
    events = []
    session = Session(cfg, dry=dry, transport_factory=lambda h: pve, agent=False, events=events.append)
    spec = cr.CreateSpec(ctid, **{"template": TEMPLATE, **kw})
    got = cr.create(HostTarget(session, cfg.hosts[host], ctid), spec, hosts_file=str(hosts),
                    add_entry=hostsinit.add_container)
    return got, events


def test_create_with_gpus_runs_every_step_in_order_and_adds_the_entry(hosts):
    pve = FakePve()
    got, events = make(hosts, pve, gpu="all")
    assert pve.subs() == ["pct config", "pvesm", "pvesm", "pvesh", "pveam", "gpu-host", "nvidia-userspace", "pct create", "pct config",
                          "pct set", "pct start", "pct status", "exec ct-needs", "exec nvidia-link", "exec python3",
                          "gpu-host", "exec nvidia-smi", "pct set"]
    assert [s.name for s in got.steps] == ["preflight", "create", "gpu config", "start", "packages", "driver", "proof",
                                           "mark", "hosts file"]
    assert pve.cts[210]["description"] == f"remote create: {TEMPLATE} gpu=all"  # marked done only at the end
    create = next(c for c in pve.calls if c[:2] == ("pct", "create"))
    assert create[create.index("--description") + 1] == f"remote create (unfinished): {TEMPLATE} gpu=all"
    assert got.made and got.gpus == (0,) and got.driver == "580.95.05"
    conf = pve.cts[210]
    assert conf["dev0"] == "/dev/nvidia0,gid=44,mode=0666" and conf["dev2"] == "/dev/nvidia-uvm,gid=44,mode=0666"
    assert conf["mp0"] == "/var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1"
    assert not any(k.startswith("lxc.") for k in conf)
    create = next(c for c in pve.calls if c[:2] == ("pct", "create"))
    assert create[2:4] == ("210", TEMPLATE) and "--unprivileged" in create
    text = hosts.read_text()
    assert "# my fleet: comments stay" in text and "# the old one below" in text and "# the GPU box" in text
    assert config.load(str(hosts)).containers[210].host.name == "pve"
    assert got.hosts_file == str(hosts)
    assert any(getattr(e, "step", "").startswith("proof") and e.container == 210 for e in events)
    assert "installed git with apt-get" in got.notes


def test_the_same_create_again_is_a_no_op_that_says_so(hosts):
    pve = FakePve()
    make(hosts, pve, gpu="all")
    before = hosts.read_text()
    pve.calls.clear()
    got, events = make(hosts, pve, gpu="all")
    assert not got.made and pve.subs() == ["pct config"]
    assert any("already made as asked" in e.line for e in events)
    assert hosts.read_text() == before


def test_a_different_spec_for_a_container_it_made_is_refused_with_the_difference(hosts):
    pve = FakePve()
    make(hosts, pve, gpu="none", cores=4)
    pve.calls.clear()
    with pytest.raises(CreateRefused, match=r"gpu none \(asked: all\); cores 4 \(asked: 8\)"):
        make(hosts, pve, gpu="all", cores=8)
    assert pve.subs() == ["pct config"]


@pytest.mark.fault("`remote create` on an id in use", "refused with Proxmox's words and a free id (`pvesh get "
                   "/cluster/nextid`); nothing changed")
def test_an_id_proxmox_has_is_refused_with_proxmoxs_words_and_nothing_changed(hosts):
    pve = FakePve(existing={201: {"hostname": "old", "cores": "2"}})
    with pytest.raises(CreateRefused, match=r"unable to create CT 201 - CT 201 already exists on node 'pve'.*; a free id: "
                                            r"100 \(`pvesh get /cluster/nextid` on pve\)"):
        make(hosts, pve, ctid=201)
    pve2 = FakePve()
    with pytest.raises(CreateRefused, match=r"unable to create CT 150 - CT 150 already exists on node 'pve-b'; a free "
                                            r"id: 100"):
        make(hosts, pve2, ctid=150)
    assert 150 not in pve2.cts and not any(c[1] in ("set", "start", "destroy") for c in pve2.calls if c[0] == "pct")


@pytest.mark.parametrize("kw, words", [
    (dict(template="local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"),
     "volume 'local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst' does not exist on pve .*its local has: "
     "local:vztmpl/debian-12"),
    (dict(template="nfs:vztmpl/x.tar.zst"), "`pveam list nfs` on pve says: storage 'nfs' does not exist"),
    (dict(storage="fast-zfs"), r"storage 'fast-zfs' does not exist on pve \(it has: local, local-lvm\)"),
    (dict(clone=900, template=None), "--clone 900: Configuration file 'nodes/pve/lxc/900.conf' does not exist"),
])
def test_bad_input_is_one_line_and_changes_nothing(hosts, kw, words):
    pve = FakePve()
    with pytest.raises(CreateRefused, match=words) as e:
        make(hosts, pve, **kw)
    assert "\n" not in str(e.value) and e.value.exit_code == 2
    assert pve.cts == {} and hosts.read_text() == HOSTS


def test_a_gpu_index_the_host_lacks_and_gpu_without_the_module_are_refused_before_pct_create(hosts):
    pve = FakePve()
    with pytest.raises(GpuConfigError, match=r"no GPU 3 \(it has: 0\)"):
        make(hosts, pve, gpu="0,3")
    pve = FakePve(gpu=NO_DRIVER)
    with pytest.raises(GpuConfigError, match="no NVIDIA kernel module loaded"):
        make(hosts, pve, gpu="all")
    assert pve.cts == {} and "pct create" not in pve.subs()


def test_gpu_none_on_a_host_without_a_driver_makes_a_cpu_container(hosts):
    pve = FakePve(gpu=NO_DRIVER)
    got, _ = make(hosts, pve, gpu="none")
    assert "gpu-host" not in pve.subs() and got.config == () and got.gpus == ()
    assert not any(k.startswith(("dev", "mp")) for k in pve.cts[210])


def test_the_uvm_node_is_made_when_the_host_lacks_it(hosts):
    pve = FakePve(gpu={"nodes": NO_UVM})
    got, _ = make(hosts, pve, gpu="0")
    assert pve.subs()[5:8] == ["gpu-host", "gpu-uvm", "gpu-host"]
    assert any("nvidia-modprobe -u -c 0" in n for n in got.notes)


def test_the_uvm_tools_node_alone_missing_is_made_too(hosts):
    """As on the H200 machine: /dev/nvidia-uvm remade by CUDA run as root, -tools not: create makes it before
    writing a devN line for it (pct start refuses a devN line whose node is missing)."""
    pve = FakePve(gpu={"nodes": "\n".join(line for line in data("nodes-509.txt").splitlines()
                                           if "nvidia-uvm-tools" not in line) + "\n"})
    got, _ = make(hosts, pve, gpu="0")
    assert pve.subs()[5:8] == ["gpu-host", "gpu-uvm", "gpu-host"]
    assert any("no /dev/nvidia-uvm-tools yet" in n for n in got.notes), got.notes


def test_a_sudo_login_is_refused_saying_create_needs_root(hosts):
    pve = FakePve()
    with pytest.raises(CreateRefused, match="create needs root on pve2: Proxmox lets only root@pam write devN"):
        make(hosts, pve, host="pve2")
    assert pve.calls == []


@pytest.mark.fault("remote create failing part-way (after pct create)", "the half-made container is destroyed and "
                   "the error says so; where destroying fails too, the command that removes it is named")
def test_a_failure_part_way_destroys_the_half_made_container(hosts):
    pve = FakePve()
    pve.fail["nvidia-link"] = (3, "error /opt/remote/nvidia/current is not there")
    with pytest.raises(CreateError, match="failed at driver: .*the half-made container was destroyed: nothing is left"):
        make(hosts, pve, gpu="all")
    assert pve.cts == {} and pve.subs()[-3:] == ["pct stop", "pct destroy", "pct config"]
    assert hosts.read_text() == HOSTS
    pve = FakePve()
    pve.fail["ct-needs"] = (100, "E: Unable to locate package git")
    pve.fail["destroy"] = (255, "can't lock file '/run/lock/lxc/pve-config-210.lock' - got timeout")
    with pytest.raises(CreateError) as e:
        make(hosts, pve)
    assert e.value.left == "pct destroy 210 --force 1 --purge 1" and "container 210 is left on pve" in str(e.value)


class LostAnswer(FakePve):
    """pct create (or clone) runs on the host, and then the connection drops before its answer comes back;
    `dark`: every later command is lost too."""

    def __init__(self, dark: bool = False):
        super().__init__()
        self.dark, self.lost = dark, False

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        from remote.errors import TransportError

        if self.lost and self.dark:
            raise TransportError("pve", "pve: connection lost")
        got = super().run(argv, stdin=stdin, deadline=deadline, on_output=on_output)
        if tuple(argv[:2]) in (("pct", "create"), ("pct", "clone")):
            self.lost = True
            raise TransportError("pve", "pve: connection lost")
        return got


@pytest.mark.fault("remote create: pct create's answer lost (the connection dropped)", "the container it may have "
                   "made is found and destroyed, or, where the host does not answer, named with the command that "
                   "removes it")
def test_a_pct_create_whose_answer_is_lost_leaves_nothing_unnamed(hosts):
    pve = LostAnswer()
    with pytest.raises(CreateError, match="failed at create: pve: connection lost; the half-made container was "
                                          "destroyed: nothing is left"):
        make(hosts, pve)
    assert pve.cts == {} and pve.subs()[-3:] == ["pct stop", "pct destroy", "pct config"]
    pve = LostAnswer(dark=True)
    with pytest.raises(CreateError, match=r"whether pct made container 210 is not known: `pct config 210` on pve") as e:
        make(hosts, pve)
    assert e.value.left == "pct destroy 210 --force 1 --purge 1"
    assert hosts.read_text() == HOSTS


class RunTwice(FakePve):
    """The transport's rerun of a host command whose answer it lost (session.host_run after the mux died):
    pct create runs, its answer is lost, and it runs again."""

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        if tuple(argv[:2]) == ("pct", "create"):
            super().run(argv, stdin=stdin, deadline=deadline, on_output=on_output)
        return super().run(argv, stdin=stdin, deadline=deadline, on_output=on_output)


@pytest.mark.fault("`pct create` says the id exists though preflight found it free", "said so in true words (made "
                   "meanwhile; no claim that the transport reran it), nothing destroyed, a free id named")
def test_a_pct_create_run_twice_is_named_not_taken_for_anothers_container(hosts):
    """The second run says `CT 210 already exists`, though the check found 210 free: said so, nothing destroyed
    (it may be another create's), `remote create` again named."""
    pve = RunTwice()
    with pytest.raises(CreateRefused, match=r"CT 210 already exists on node 'pve', though the check before found "
                                            r"id 210 free: made meanwhile \(by another create, or by hand\).*`remote "
                                            r"create` again finds it made \(or unfinished\) if it is this spec's") as e:
        make(hosts, pve)
    assert "reruns" not in str(e.value)  # the transport never reruns a host command (issue 45 item 14)
    assert 210 in pve.cts and "pct destroy" not in pve.subs()
    again, _ = make(hosts, pve)  # this create's, unfinished: its steps run again and mark it done
    assert again.made and pve.cts[210]["description"].startswith("remote create: ")


def test_a_host_that_cannot_say_whether_the_id_is_free_or_its_storages_is_refused_in_its_words(hosts):
    """A failing `pct config` was read as `the id is free`, a failing `pvesm status` as `no storage`: a host
    without pct said `storage '(none given)' does not exist on pve (it has: none)`."""
    pve = FakePve()
    pve.fail["config"] = (127, "bash: line 1: pct: command not found")
    with pytest.raises(CreateRefused, match=r"`pct config 210` on pve failed: bash: line 1: pct: command not found "
                                            r"\(whether the id is free is not known"):
        make(hosts, pve)
    assert pve.subs() == ["pct config"]

    class NoPvesm(FakePve):
        def answer(self, argv):
            return (127, "", "bash: line 1: pvesm: command not found\n") if argv[0] == "pvesm" else super().answer(argv)

    pve = NoPvesm()
    with pytest.raises(CreateRefused, match=r"`pvesm status` on pve failed: bash: line 1: pvesm: command not found"):
        make(hosts, pve)
    assert pve.cts == {} and "pct create" not in pve.subs()


def test_a_cuda_that_does_not_start_fails_the_proof_and_is_undone(hosts):
    pve = FakePve(cuinit=999)
    with pytest.raises(CreateError, match="cuInit"):
        make(hosts, pve, gpu="all")
    assert pve.cts == {}


def test_dry_reads_and_reports_every_command_running_none(hosts):
    pve = FakePve()
    got, events = make(hosts, pve, gpu="all", dry=True)
    assert pve.subs() == ["pct config", "pvesm", "pvesm", "pvesh", "pveam", "gpu-host"]
    assert pve.cts == {} and hosts.read_text() == HOSTS and not got.made and got.dry
    shown = [e.line for e in events if type(e).__name__ == "Output"]
    assert any("pct create 210 " + TEMPLATE in line for line in shown)
    assert "pve: bash -c '<remote/sh/nvidia-userspace.sh>' nvidia-userspace /var/lib/remote/nvidia" in shown
    assert any("add to " in line and "containers.210" in line for line in shown)
    assert got.config[0] == "dev0: /dev/nvidia0,gid=44,mode=0666"


def test_clone_sets_the_resources_and_records_the_source(hosts):
    pve = FakePve(existing={9000: {"hostname": "tmpl", "template": "1", "rootfs": "local-lvm:base-9000-disk-0,size=8G"}})
    got, _ = make(hosts, pve, ctid=211, template=None, clone=9000, cores=2)
    assert got.source == "clone 9000" and pve.cts[211]["cores"] == "2"
    assert pve.cts[211]["description"] == "remote create: clone 9000 gpu=none"
    pve.calls.clear()
    again, _ = make(hosts, pve, ctid=211, template=None, clone=9000, cores=2)  # its source's 8G disk is no difference
    assert not again.made and pve.subs() == ["pct config"]


def test_fleet_create_refuses_a_node_the_file_lacks_and_a_spec_without_a_source(hosts):
    import remote

    with remote.open(str(hosts)) as fleet:
        with pytest.raises(ConfigError, match="--node: node 'pve-b' is not in the hosts file"):
            fleet.create(212, node="pve-b", template=TEMPLATE)
        with pytest.raises(CreateRefused, match="give --template VOLID .* or --clone CTID"):
            fleet.create(212, host="pve")
        with pytest.raises(ConfigError, match="containers.200: is on host 'pve' in the file, not 'pve2'"):
            fleet.create(200, host="pve2", template=TEMPLATE)


def test_the_entry_goes_into_a_file_without_containers_and_an_empty_block():
    import tempfile
    from pathlib import Path

    for text in ("hosts:\n  pve: {address: h}\n", "hosts:\n  pve: {address: h}\ncontainers: {}\n# end\n"):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "hosts.yaml"
            p.write_text(text)
            assert hostsinit.add_container(str(p), 220, "pve", "made by remote create")
            assert config.load(str(p)).containers[220].host.name == "pve"
            assert not hostsinit.add_container(str(p), 220, "pve", "again")


def test_the_command_line_renders_what_was_made_each_step_and_what_next(hosts):
    import json

    from remote.cli import format as fmt

    pve = FakePve()
    got, _ = make(hosts, pve, gpu="all")
    lines = fmt.created_lines(got)
    assert lines[0].startswith("made container 210 on pve from local:vztmpl/debian-12") and "GPU 0 (driver 580.95.05" in lines[0]
    assert "  dev0: /dev/nvidia0,gid=44,mode=0666" in lines
    assert any(line.startswith("  proof") for line in lines)
    assert lines[-1] == f"added containers.210 to {hosts}; next: `remote deploy -c 210 --hosts {hosts}`"
    again, _ = make(hosts, pve, gpu="all")
    assert fmt.created_lines(again) == ["container 210 on pve: already made as asked "
                                        "(local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst): nothing to do"]
    assert json.loads(fmt.created_json(got))["steps"][0]["name"] == "preflight"


def test_the_entry_keeps_the_files_mode_and_its_link(tmp_path):
    """A hosts file kept 0600 (a private index's token in it) stays 0600, not the umask's 0644; a hosts file that
    is a link (a dotfiles checkout) stays a link, its target rewritten."""
    import os

    target = tmp_path / "dotfiles" / "hosts.yaml"
    target.parent.mkdir()
    target.write_text("hosts:\n  pve: {address: h}\n")
    target.chmod(0o600)
    link = tmp_path / "hosts.yaml"
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        assert hostsinit.add_container(str(link), 220, "pve", "made by remote create")
    finally:
        os.umask(old)
    assert link.is_symlink() and config.load(str(link)).containers[220].host.name == "pve"
    assert (target.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["hosts.yaml"]  # no temporary left


HALF_MADE = ("a container left half-made (its create killed or its undo failed), then `remote create` again",
             "the steps after pct create run again and the container is marked made only by the last step; a "
             "container whose description says unfinished is never taken for made as asked")


@pytest.mark.fault(*HALF_MADE)
def test_a_half_made_container_is_finished_by_the_same_create_again_not_taken_for_made(hosts):
    pve = FakePve()
    pve.fail["nvidia-link"] = (3, "error /opt/remote/nvidia/current is not there")
    pve.fail["destroy"] = (255, "can't lock file '/run/lock/lxc/pve-config-210.lock' - got timeout")
    with pytest.raises(CreateError, match="failed at driver"):
        make(hosts, pve, gpu="all")
    assert pve.cts[210]["description"].startswith("remote create (unfinished): ") and 210 not in pve.running
    dry, events = make(hosts, pve, gpu="all", dry=True)  # the plan reads the config it has: no line to add again
    assert not any(e.line.startswith("+ dev") for e in events if type(e).__name__ == "Output")
    assert any("pct start 210" in c for c in dry.commands) and not any("pct create" in c for c in dry.commands)
    pve.calls.clear()
    got, events = make(hosts, pve, gpu="all")
    assert got.made and got.gpus == (0,)
    assert [s.name for s in got.steps] == ["preflight", "gpu config", "start", "packages", "driver", "proof", "mark",
                                           "hosts file"]
    assert "pct create" not in pve.subs() and pve.cts[210]["description"] == f"remote create: {TEMPLATE} gpu=all"
    assert any("left unfinished by an earlier create" in n for n in got.notes)
    assert config.load(str(hosts)).containers[210].host.name == "pve"
    pve.calls.clear()
    again, _ = make(hosts, pve, gpu="all")  # now it is made as asked
    assert not again.made and pve.subs() == ["pct config"]


@pytest.mark.fault(*HALF_MADE)
def test_a_half_made_container_whose_steps_fail_again_is_kept_and_named(hosts):
    pve = FakePve(existing={210: {"hostname": "ct210", "cores": "4", "memory": "8192", "unprivileged": "1",
                                  "rootfs": "local-lvm:vm-210-disk-0,size=32G",
                                  "description": f"remote create (unfinished): {TEMPLATE} gpu=none"}})
    pve.fail["ct-needs"] = (100, "E: Unable to locate package git")
    with pytest.raises(CreateError, match=r"failed at packages: .*left unfinished by an earlier create\) is kept: "
                                          r"`remote create` again re-runs") as e:
        make(hosts, pve, gpu="none")
    assert 210 in pve.cts and "pct destroy" not in pve.subs() and e.value.left
    assert hosts.read_text() == HOSTS


@pytest.mark.fault("`remote create --clone SRC --gpu none` of a GPU container",
                   "the clone ends with exactly the GPUs asked: the source's devN, driver mount and raw NVIDIA lines "
                   "removed")
def test_a_clone_of_a_gpu_container_ends_with_exactly_the_gpus_asked(hosts):
    src = {"hostname": "gpu", "template": "1", "rootfs": "local-lvm:base-9000-disk-0,size=8G",
           "dev0": "/dev/nvidia0,gid=44,mode=0666", "dev1": "/dev/nvidiactl,gid=44,mode=0666",
           "dev2": "/dev/nvidia-uvm,gid=44,mode=0666", "mp0": "/var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1",
           "lxc.cgroup2.devices.allow": "c 195:* rwm", "dev3": "/dev/ttyUSB0"}
    pve = FakePve(existing={9000: src})
    got, _ = make(hosts, pve, ctid=211, template=None, clone=9000, gpu="none")
    conf = pve.cts[211]
    assert not any(k.startswith("lxc.") or (k.startswith(("dev", "mp")) and "nvidia" in v) for k, v in conf.items()), conf
    assert conf["dev3"] == "/dev/ttyUSB0"  # not NVIDIA's: kept
    assert got.gpus == () and "gpu-host-fix" in pve.subs()
    pve.calls.clear()
    dry, events = make(hosts, pve, ctid=212, template=None, clone=9000, gpu="none", dry=True)
    shown = [e.line for e in events if type(e).__name__ == "Output"]
    assert "- dev0: /dev/nvidia0,gid=44,mode=0666" in shown and "- lxc.cgroup2.devices.allow: c 195:* rwm" in shown


@pytest.mark.fault("`remote create --clone SRC` of a running container", "refused in preflight (stop it, or clone a "
                   "template), before pct clone; nothing made")
def test_a_clone_of_a_running_container_is_refused_in_preflight(hosts):
    pve = FakePve(existing={300: {"hostname": "src", "rootfs": "local-lvm:vm-300-disk-0,size=8G"}})
    pve.running.add(300)
    with pytest.raises(CreateRefused, match=r"--clone 300: container 300 on pve is running.*`pct stop 300` first, or "
                                            r"clone a template"):
        make(hosts, pve, ctid=211, template=None, clone=300)
    assert "pct clone" not in pve.subs() and 211 not in pve.cts


@pytest.mark.fault("`remote create` without --gpu on a host with GPUs", "a CPU container, and the plan says what GPUs "
                   "the host has and how to pass them")
def test_gpu_left_out_on_a_host_with_gpus_says_so_in_the_plan(hosts):
    pve = FakePve()
    got, events = make(hosts, pve, dry=True, gpu=None)
    assert any("--gpu not given: a CPU container, though pve has GPU 0" in n and "`--gpu all`" in n for n in got.notes)
    pve = FakePve()
    got, _ = make(hosts, pve, gpu="none")  # said: no note
    assert not any("--gpu not given" in n for n in got.notes) and "gpu-host" not in pve.subs()


@pytest.mark.fault("remote create: pct create's answer lost and another's container at the id",
                   "a container without this create's mark and hostname is never destroyed: it is named as left")
def test_a_lost_answer_never_destroys_a_container_that_is_not_this_creates(hosts):
    class Raced(LostAnswer):
        def answer(self, argv):
            got = super().answer(argv)
            if tuple(argv[:2]) == ("pct", "create"):  # someone else's create won the id
                self.cts[210] = {"hostname": "theirs", "description": "made by hand"}
            return got

    pve = Raced()
    with pytest.raises(CreateError, match=r"container 210 is left on pve \(not destroyed: it does not carry this "
                                          r"create's mark"):
        make(hosts, pve)
    assert pve.cts[210]["hostname"] == "theirs" and "pct destroy" not in pve.subs()


@pytest.mark.fault("remote create's hosts-file entry in a file with a quoted `'containers':` key or init's `# GPU` "
                   "comment lines", "the entry lands in that block, after the previous container's comment lines; "
                   "the file is checked with remote's own loader before it is written")
@pytest.mark.parametrize("text, after", [
    ("hosts:\n  pve: {address: h}\n'containers':\n  200: {host: pve}\nvenv: {path: /root/venv}\n", "  200: {host: pve}"),
    ('hosts:\n  pve: {address: h}\n"containers":  # mine\n  200: {host: pve}\n', "  200: {host: pve}"),
    ("hosts:\n  pve: {address: h}\ncontainers:\n  200:  # trainer, running\n    host: \"pve\"\n"
     "    # GPU (pct config):\n    #   dev0: /dev/nvidia0\n# default_container: 200\nvenv: {path: /root/venv}\n",
     "    #   dev0: /dev/nvidia0"),
])
def test_the_entry_goes_into_the_containers_block_after_its_last_entrys_comments(tmp_path, text, after):
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    assert hostsinit.add_container(str(p), 220, "pve", "made by remote create")
    lines = p.read_text().splitlines()
    assert lines[lines.index(after) + 1].startswith("  220: {host: \"pve\"}")
    loaded = config.load(str(p))
    assert sorted(loaded.containers) == [200, 220]
    assert sum(1 for line in lines if "containers" in line and line.rstrip().endswith((":", ":  # mine"))) == 1


def test_an_entry_that_would_make_a_key_twice_is_refused_by_remotes_loader(tmp_path, monkeypatch):
    """What add_container writes is checked with remote's loader, which refuses a key given twice (yaml's
    safe_load lets the second silently win): nothing is written."""
    p = tmp_path / "hosts.yaml"
    text = "hosts:\n  pve: {address: h}\ncontainers:\n  200: {host: pve}\n"
    p.write_text(text)
    monkeypatch.setattr(hostsinit, "_comment", lambda c: c + "\ncontainers: {}")  # a writer bug: a second block
    with pytest.raises(ConfigError, match="given twice"):
        hostsinit.add_container(str(p), 220, "pve", "x")
    assert p.read_text() == text


@pytest.mark.fault("remote create on a storage without rootdir content, or a bridge the node lacks",
                   "refused in preflight naming the storages that hold container disks, or the node's bridges; "
                   "--net0 sets the network")
def test_the_network_is_set_by_net0_and_preflight_checks_the_bridge_and_the_storages_content(hosts):
    pve = FakePve()
    pve.bridges = ["vmbr0", "vmbr1"]
    make(hosts, pve, net0="name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1")
    create = next(c for c in pve.calls if c[:2] == ("pct", "create"))
    assert create[create.index("--net0") + 1] == "name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1"
    pve = FakePve()
    with pytest.raises(CreateRefused, match=r"bridge vmbr9 does not exist on pve \(its bridges: vmbr0\)"):
        make(hosts, pve, net0="name=eth0,bridge=vmbr9,ip=dhcp")
    with pytest.raises(CreateRefused, match=r"storage 'local' on pve does not hold container disks \(no `rootdir` in "
                                            r"its content; those that do: local-lvm\)"):
        make(hosts, pve, storage="local")
    assert pve.cts == {} and "pct create" not in pve.subs()
    pve.rootdir = ["local"]  # without --storage: the first of local-lvm, local-zfs, local that holds rootdir
    got, _ = make(hosts, pve)
    create = next(c for c in pve.calls if c[:2] == ("pct", "create"))
    assert create[create.index("--rootfs") + 1] == "local:32"


@pytest.mark.parametrize("net0", ["bridge=vmbr0", "name=eth0", "name=eth0,bridge=vmbr0,ip=dhcp;reboot",
                                  "name=eth0,bridge=,ip=dhcp", "name=eth0,bridge=vmbr0,ip"])
def test_a_malformed_net0_is_refused_before_anything_connects(hosts, net0):
    pve = FakePve()
    with pytest.raises(CreateRefused, match=r"--net0 .*Proxmox's net0 value"):
        make(hosts, pve, net0=net0)
    assert pve.calls == []


@pytest.mark.fault("remote create from an Alpine template or clone", "refused in preflight, saying why (bash and GNU "
                   "env in every step): Alpine is not supported")
def test_alpine_is_refused_saying_why(hosts):
    pve = FakePve()
    with pytest.raises(CreateRefused, match="Alpine is not supported: every step remote runs in a container is bash"):
        make(hosts, pve, template="local:vztmpl/alpine-3.20-default_20240908_amd64.tar.xz")
    pve = FakePve(existing={9001: {"hostname": "a", "template": "1", "ostype": "alpine"}})
    with pytest.raises(CreateRefused, match="--clone 9001: an Alpine container"):
        make(hosts, pve, ctid=211, template=None, clone=9001)
    assert "pct clone" not in pve.subs() and "pct create" not in pve.subs()
