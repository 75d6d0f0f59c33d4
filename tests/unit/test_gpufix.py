"""`remote gpu fix` and `remote host setup` as data: recorded H200 facts (tests/data/gpu) in, the plan out
(each finding to its fix or its manual step), then the operation over a fake transport that answers like a
Proxmox host: the diff shown before anything is written, dry changing nothing, a live run blocking a restart,
a `sudo: true` login refused, CUDA re-proved."""

from __future__ import annotations

import pytest
from support import GPU_MARK, gpu_host, gpu_host_text, needs
from support import gpu_sample as data
from test_gpu import GOOD_NODES, ct_text

from remote import config
from remote.errors import BusyError, RootRequired
from remote.events import Note, Output, StepStarted
from remote.facts import gpu
from remote.lab.testing import inner_argv
from remote.ops import gpuconfig, gpufix, hostsetup
from remote.results import GpuFix
from remote.target import resolve, resolve_host
from remote.transport import Capabilities, Result
from remote.transport.session import Session

UVM_GONE = "\n".join(line for line in data("nodes-509.txt").splitlines() if "nvidia-uvm" not in line)


def plan_of(h: gpu.HostGpu, c: gpu.CtGpu | None, config_text: str, ctid: int = 200) -> gpufix.Plan:
    found = gpu.host_findings(h) + gpu.findings(h, ctid, c)
    return gpufix.plan(h, ctid, c, found, config_text)


def ct(**kw) -> gpu.CtGpu:
    return gpu.parse_container(ct_text(**kw))


# -- the plan: each finding to its fix ---------------------------------------------------------------------

def test_a_healthy_container_gives_an_empty_plan():
    p = plan_of(gpu_host(), ct(), data("pct-config-dev.txt"))
    assert p.empty and not p.manual and not p.fixes


def test_a_missing_devn_line_is_added_with_a_restart():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    p = plan_of(gpu_host(configs={200: cfg}), ct(nodes=[n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], init=999),
                cfg)
    assert "device-not-passed" in dict(p.fixes)
    assert "+ dev2: /dev/nvidia-uvm,gid=44,mode=0666" in p.config.diff
    assert ("dev2", "/dev/nvidia-uvm,gid=44,mode=0666") in p.config.set
    assert p.restart and "at start" in p.restart and not p.uvm and not p.config.raw


def test_raw_lines_with_a_stale_major_become_devn_lines_and_the_raw_lines_are_dropped():
    raw = data("pct-config-raw.txt")
    h = gpu_host(configs={201: raw})
    p = plan_of(h, ct(), raw, ctid=201)
    assert "cgroup-major-stale" in dict(p.fixes)
    assert "lxc.cgroup2.devices.allow: c 511:* rwm" in p.config.raw
    assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in p.config.raw
    assert [v for _, v in p.config.set] == [f"{n},gid=44,mode=0666" for n in
                                             ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")]
    assert not any("cgroup" in k for k, _ in p.config.set) and p.restart


def test_the_uvm_node_missing_on_the_host_is_made_there():
    h = gpu_host(nodes=UVM_GONE)
    p = plan_of(h, ct(nodes=GOOD_NODES[:2], init=999), data("pct-config-dev.txt"))
    assert p.uvm and "host-uvm-not-loaded" in dict(p.fixes)
    assert p.config.empty  # the devN lines are right: the node is made, the container restarted
    assert p.restart


PRIVILEGED = data("pct-config-dev.txt").replace("unprivileged: 1\n", "")


@pytest.mark.fault("gpu fix on a node bound over or remade inside a running container",
                   promise="repaired in place (umount, or mknod where privileged) with no restart; a restart only "
                           "where nothing else can fix it")
@pytest.mark.parametrize("mount, config_text, how", [
    ("/null", data("pct-config-dev.txt"), "unmounted"),  # unprivileged: unmount only
    ("/null", PRIVILEGED, "unmounted"),
    (None, PRIVILEGED, "made again"),
])
def test_a_node_bound_over_or_wrong_with_a_right_devn_line_is_repaired_in_place(mount, config_text, how):
    from test_gpu import planted

    c = gpu.parse_container(planted("/dev/nvidia-uvm", 1, 3, mount=mount))
    p = plan_of(gpu_host(configs={200: config_text}), c, config_text)
    assert p.config.empty and not p.uvm and not p.userspace
    assert p.restart is None and not p.empty
    assert [(r.path, r.major, r.minor, r.make) for r in p.inplace] == [
        ("/dev/nvidia-uvm", 509, 0, "unprivileged: 1" not in config_text)]
    assert how in dict(p.fixes)["container-node-wrong"] and "no restart" in dict(p.fixes)["container-node-wrong"]
    assert p.fallback and "/dev/nvidia-uvm" in p.fallback


def test_a_wrong_node_with_nothing_over_it_in_an_unprivileged_container_needs_a_restart():
    """mknod of a device is not allowed in an unprivileged container: only Proxmox's start makes the node."""
    from test_gpu import planted

    c = gpu.parse_container(planted("/dev/nvidia-uvm", 1, 3))
    p = plan_of(gpu_host(), c, data("pct-config-dev.txt"))
    assert p.config.empty and not p.inplace
    assert p.restart and "/dev/nvidia-uvm" in p.restart and "unprivileged" in p.restart
    assert dict(p.fixes)["container-node-wrong"].startswith("/dev/nvidia-uvm: its devN line")


def test_user_space_of_another_version_is_refilled_and_mounted():
    p = plan_of(gpu_host(), ct(libs="570.148.08"), data("pct-config-dev.txt"))
    assert p.userspace and "driver-lib-mismatch" in dict(p.fixes)
    mp = f"{gpuconfig.USERSPACE_HOST},mp={gpuconfig.USERSPACE_CT},ro=1"
    assert ("mp0", mp) in p.config.set and f"+ mp0: {mp}" in p.config.diff
    assert p.restart  # a new mount point applies at start


def test_user_space_already_mounted_is_refilled_without_a_config_change_or_restart():
    cfg = data("pct-config-dev.txt") + f"mp0: {gpuconfig.USERSPACE_HOST},mp={gpuconfig.USERSPACE_CT},ro=1\n"
    cfg = cfg.replace("dev0: /dev/nvidia0\ndev1: /dev/nvidiactl\ndev2: /dev/nvidia-uvm\ndev3: /dev/nvidia-uvm-tools\n",
                      "".join(f"dev{i}: {n},gid=44,mode=0666\n" for i, n in enumerate(
                          ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"))))
    p = plan_of(gpu_host(configs={200: cfg}), ct(libs="570.148.08"), cfg)
    assert p.userspace and p.config.empty and p.restart is None


def test_user_space_after_an_upgrade_without_a_reboot_is_a_manual_step():
    h = gpu_host(modinfo="580.105.08")
    p = plan_of(h, ct(libs="580.105.08"), data("pct-config-dev.txt"))
    assert not p.userspace and p.empty
    kinds = [k for k, _, _ in p.manual]
    assert "driver-lib-mismatch" in kinds and "host-reboot-pending" in kinds
    step = dict((k, s) for k, _, s in p.manual)["driver-lib-mismatch"]
    assert "reboot the host first" in step and "remote gpu fix -c 200" in step


@pytest.mark.parametrize("kind, kw", [
    ("host-no-driver", {"proc": "", "sys_version": "", "modules": "", "smi": ""}),
    ("host-gpu-vfio", {"proc": "", "sys_version": "", "modules": "", "smi": "", "lspci": data("lspci-vfio.txt")}),
    ("persistence-off", {"persistenced": "", "smi": "0, 00000000:01:00.0, Disabled, [N/A], 580.95.05\nrc=0"}),
])
def test_what_gpu_fix_cannot_fix_is_named_with_its_manual_step(kind, kw):
    h = gpu_host(**kw)
    p = plan_of(h, None, data("pct-config-dev.txt"))
    assert p.empty, p
    manual = {k: s for k, _, s in p.manual}
    assert kind in manual and manual[kind]


# -- the operation over a host that answers -------------------------------------------------------------------

HOSTS = {"hosts": {"pve1": {"address": "10.0.0.1"}, "pve2": {"address": "10.0.0.2", "user": "trainer", "sudo": True}},
         "containers": {200: {"host": "pve1"}, 202: {"host": "pve2"}}}


class Host(Capabilities):
    """A Proxmox host's answers, by what the command is: the GPU probes answer from `host`/`ct` (changed by
    what was run: the uvm made, the config set), pct from `config`; every command kept in `calls`."""

    def __init__(self, *, nodes=None, ct_kw=None, config_text=None, running=True, live="", storage="zfspool",
                 host_kw=None, folder="unchanged"):
        self.nodes, self.ct_kw, self.host_kw, self.folder = nodes, dict(ct_kw or {}), dict(host_kw or {}), folder
        self.config = config_text or data("pct-config-dev.txt")
        self.running, self.live, self.storage = running, live, storage
        self.calls: list[tuple[str, ...]] = []
        self.leases: list[str] = []
        self.name = "pve1"
        self.uvm_made = "nvidia-modprobe -u -c 0"  # the last line of gpu-uvm.sh: how it made the nodes
        self.planted: str | None = None  # the container probe's whole answer, where a test plants one
        self.inplace_ok = True  # remote/sh/gpu-node.sh makes the node right
        self.snapshots: list[str] = []  # what pct snapshot made (pct listsnapshot lists them)

    def describe(self, argv) -> str:
        return "fake: " + " ".join(argv)

    def close(self) -> None:
        pass

    def _ok(self, argv, out="", err="", rc=0) -> Result:
        return Result(tuple(argv), rc, out.encode(), err.encode(), 0.0)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv[:1] == ("bash",) and argv[3] == "gpu-host":
            text = gpu_host_text(nodes=self.nodes, configs={200: self.config}, **self.host_kw).replace(GPU_MARK, argv[4])
            return self._ok(argv, text)
        if argv[:1] == ("bash",) and argv[3] == "gpu-uvm":
            self.nodes = None  # the host's nodes as recorded: the uvm ones there again
            return self._ok(argv, f"made: {self.uvm_made}\n")
        if argv[:1] == ("bash",) and argv[3] == "gpu-host-fix":
            return self._ok(argv)
        if argv[:1] == ("bash",) and argv[3] == "nvidia-userspace" and argv[-1] == "--check":  # read-only
            return self._ok(argv, f"version 580.95.05\nstate {self.folder}\n", rc=0 if self.folder == "unchanged" else 5)
        if argv[:1] == ("bash",) and argv[3] == "nvidia-userspace":
            self.ct_kw.pop("libs", None)
            return self._ok(argv, "version 580.95.05\nstate filled\n")
        if argv[0] != "pct":
            raise AssertionError(f"unexpected host command: {argv}")
        sub = argv[1]
        if sub == "config":
            return self._ok(argv, self.config)
        if sub == "status":
            return self._ok(argv, f"status: {'running' if self.running else 'stopped'}\n")
        if sub in ("stop", "start"):
            self.running = sub == "start"
            self.planted = None if sub == "start" else self.planted
            if sub == "start":
                if self.nodes is None and all(f"{n}," in self.config or f"{n}\n" in self.config
                                              for n in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")):
                    self.ct_kw.pop("nodes", None)  # Proxmox makes the nodes from the host's at start
                    self.ct_kw.pop("init", None)
            return self._ok(argv)
        if sub == "set":
            self.config += "".join(f"{k[2:]}: {v}\n" for k, v in zip(argv[3::2], argv[4::2], strict=False)
                                   if k != "--delete")
            return self._ok(argv)
        if sub == "listsnapshot":
            return self._ok(argv, "".join(f"`-> {n:<40} 2026-12-02 07:00:00  {gpufix.SNAPSHOT_DESCRIPTION}\n"
                                          for n in self.snapshots)
                            + "`-> current                                              You are here!\n")
        if sub == "snapshot":
            if argv[3] in self.snapshots:
                return self._ok(argv, err=f"snapshot name '{argv[3]}' already used\n", rc=255)
            self.snapshots.append(argv[3])
            return self._ok(argv)
        if sub == "exec":
            inner = argv[argv.index("--") + 1:]
            if "python3" in inner and "-I" in inner:
                return self._ok(argv, self.planted or ct_text(**self.ct_kw))
            core = inner_argv(argv)
            if core[:2] == ("bash", "-c") and core[3:4] == ("remote",) and core[4] in ("acquire", "renew", "release"):
                self.leases.append(core[4])
                return self._ok(argv, "acquired\n")
            if any("nvidia-link" in a for a in inner):
                return self._ok(argv)
            if core[:2] == ("bash", "-c") and core[3:4] == ("gpu-node",):
                if not self.inplace_ok:
                    return self._ok(argv, err=f"{core[4]} is still character special file 1:3 (mounted on: no), "
                                              "not the character device 509:0\n", rc=3)
                self.ct_kw.pop("nodes", None)
                self.ct_kw.pop("init", None)
                self.planted = None
                return self._ok(argv, f"unmounted {core[4]}\n")
            if any("--manifest--" in a or "live=" in a for a in inner) or any("state" in a for a in inner[-4:]):
                return self._ok(argv, f"run=\nlive={self.live}\n")
        if argv[:2] == ("pvesm", "status"):
            pass
        raise AssertionError(f"unexpected pct command: {argv}")


class Pvesm(Host):
    def run(self, argv, **kw) -> Result:
        if tuple(argv[:2]) == ("pvesm", "status"):
            self.calls.append(tuple(argv))
            return self._ok(argv, f"Name Type Status Total Used Available %\nlocal-zfs {self.storage} active 1 1 1 1%\n")
        return super().run(argv, **kw)


def fix(fake: Host, ctid=200, **kw):
    events: list = []
    s = Session(config.parse(HOSTS, "hosts.yaml"), events=events.append, agent=False, transport_factory=lambda h: fake)
    done = gpufix.gpu_fix(resolve(s, ctid), **kw)
    return done, events


def mutating(calls) -> list[tuple[str, ...]]:
    return [c for c in calls if (c[0] == "pct" and c[1] in ("set", "stop", "start", "snapshot"))
            or (c[0] == "bash" and c[3] in ("gpu-host-fix", "gpu-uvm", "nvidia-userspace"))
            or (c[0] == "pct" and c[1] == "exec" and "gpu-node" in c)]


def test_a_failure_part_way_names_what_was_done_and_the_snapshot_that_holds_the_config():
    """`pct start` refusing after the config was written and the container stopped: the error says so and
    names the snapshot to roll back to, not only pct's words."""
    from remote.errors import GpuFixError

    class NoStart(Pvesm):
        def run(self, argv, **kw) -> Result:
            if tuple(argv[:2]) == ("pct", "start"):
                self.calls.append(tuple(argv))
                return self._ok(argv, err="startup for container '200' failed\n", rc=255)
            return super().run(argv, **kw)

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = NoStart(config_text=cfg, ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    with pytest.raises(GpuFixError, match=r"container 200: gpu fix failed part-way: .*startup for container '200' "
                                          r"failed.*; done before it: pct set 200 written; container 200 stopped; "
                                          r"snapshot (gpufix-\S+) holds the config as it was \(`pct rollback 200 \1` "
                                          r"restores it\)"):
        fix(fake)


def test_dry_shows_the_diff_and_the_commands_and_changes_nothing():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = Pvesm(config_text=cfg, ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    done, events = fix(fake, dry=True)
    assert done.dry and "+ dev2: /dev/nvidia-uvm,gid=44,mode=0666" in done.diff
    assert any(e.line == "+ dev2: /dev/nvidia-uvm,gid=44,mode=0666" for e in events if isinstance(e, Output))
    assert any("pct set 200 --dev2 /dev/nvidia-uvm,gid=44,mode=0666" in c for c in done.commands)
    assert mutating(fake.calls) == [] and not done.restarted


def test_a_missing_devn_line_is_written_after_a_snapshot_the_container_restarted_and_cuda_proven():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = Pvesm(config_text=cfg, ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    done, events = fix(fake)
    m = mutating(fake.calls)
    assert [c[1] for c in m] == ["snapshot", "set", "stop", "start"], m
    assert m[0][3].startswith("gpufix-") and m[0][-1] == gpufix.SNAPSHOT_DESCRIPTION
    steps = [e.step for e in events if isinstance(e, StepStarted)]
    diff_at = next(i for i, e in enumerate(events) if isinstance(e, Output) and e.line.startswith("+ dev2"))
    set_at = next(i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.step.startswith("pct set"))
    assert diff_at < set_at  # the diff before the write
    assert any(s.startswith("restart container 200") for s in steps)
    assert done.restarted and done.cuda_init == 0 and done.after == () and done.ok and done.snapshot
    assert fake.leases[0] == "acquire" and fake.leases[-1] == "release"  # held around the restart


def test_no_snapshot_where_the_storage_cannot_and_it_says_why():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = Pvesm(config_text=cfg, storage="dir",
                 ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    done, events = fix(fake)
    assert done.snapshot is None and not any(c[1] == "snapshot" for c in mutating(fake.calls))
    assert any(isinstance(e, Note) and "no snapshot" in e.line and "cannot take snapshots" in e.line for e in events)


def test_a_live_run_blocks_a_restart_unless_forced():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    kw = {"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999}
    fake = Pvesm(config_text=cfg, ct_kw=kw, live="20261202-0700-ab:4242")
    with pytest.raises(BusyError, match=r"run 20261202-0700-ab \(pid 4242\).*must restart.*--force"):
        fix(fake)
    assert mutating(fake.calls) == []
    fake = Pvesm(config_text=cfg, ct_kw=kw, live="20261202-0700-ab:4242")
    done, events = fix(fake, force=True)
    assert done.restarted and any(isinstance(e, Note) and e.level == "warning" for e in events)


@pytest.mark.fault("gpu fix with a run live and /dev/nvidia-uvm bound over inside the container",
                   promise="the bind is unmounted in place: no restart, no --force asked, the run lives on")
def test_a_node_bound_over_with_a_run_live_is_unmounted_in_place_and_the_run_lives():
    from test_gpu import planted

    fake = Pvesm(live="20261202-0700-ab:4242")
    fake.planted = planted("/dev/nvidia-uvm", 1, 3, mount="/null")
    done, events = fix(fake)
    m = mutating(fake.calls)
    assert len(m) == 1 and m[0][:2] == ("pct", "exec"), m  # no stop, no start, no config written
    assert m[0][m[0].index("gpu-node") + 1:] == ("/dev/nvidia-uvm", "509", "0", "0666", "0", "0")
    assert not done.restarted and done.ok and done.after == () and done.cuda_init == 0
    assert "pct exec 200 -- umount /dev/nvidia-uvm" in done.commands
    assert not any("pct stop" in c for c in done.commands)
    assert not any(isinstance(e, Note) and e.level == "warning" for e in events)


def test_a_repair_in_place_that_leaves_the_node_wrong_falls_back_to_a_restart_a_live_run_refusing_it():
    from test_gpu import planted

    fake = Pvesm(live="20261202-0700-ab:4242")
    fake.planted, fake.inplace_ok = planted("/dev/nvidia-uvm", 1, 3, mount="/null"), False
    with pytest.raises(BusyError, match=r"run 20261202-0700-ab.*must restart.*still wrong after the repair in place"
                                        r".*not the character device 509:0.*--force"):
        fix(fake)
    assert not any(c[1] in ("stop", "start") for c in mutating(fake.calls))
    fake = Pvesm()
    fake.planted, fake.inplace_ok = planted("/dev/nvidia-uvm", 1, 3, mount="/null"), False
    done, _ = fix(fake)
    assert [c[1] for c in mutating(fake.calls)] == ["exec", "stop", "start"]
    assert done.restarted and "still wrong" in (done.restart_reason or "") and done.ok
    assert done.commands[-1] == "pct stop 200 && pct start 200"


def test_the_uvm_node_is_made_on_the_host_then_the_container_restarted():
    fake = Pvesm(nodes=UVM_GONE, ct_kw={"nodes": GOOD_NODES[:2], "init": 999})
    done, _ = fix(fake)
    m = mutating(fake.calls)
    assert [c[3] if c[0] == "bash" else c[1] for c in m] == ["gpu-uvm", "stop", "start"], m
    assert done.diff == () and done.snapshot is None and done.restarted and done.cuda_init == 0 and done.ok
    assert done.commands[0] == "nvidia-modprobe -u -c 0"


def test_the_command_said_to_have_run_is_the_one_gpu_uvm_ran():
    """A host without nvidia-modprobe (the H200's): the nodes are made by mknod, and gpu fix's result (its
    `ran:` lines) says so rather than naming the tool that is not there."""
    fake = Pvesm(nodes=UVM_GONE, ct_kw={"nodes": GOOD_NODES[:2], "init": 999})
    fake.uvm_made = "mknod -m 0666 /dev/nvidia-uvm c 238 0; mknod -m 0666 /dev/nvidia-uvm-tools c 238 1 (no nvidia-modprobe)"
    done, _ = fix(fake)
    assert done.commands[0] == fake.uvm_made and "nvidia-modprobe -u -c 0" not in done.commands


def test_user_space_of_another_version_refilled_mounted_and_ldconfig_run():
    fake = Pvesm(ct_kw={"libs": "570.148.08"})
    done, _ = fix(fake)
    m = mutating(fake.calls)
    assert ("bash", "-c") == m[1][:2] and m[1][3] == "nvidia-userspace" and m[1][4] == gpuconfig.USERSPACE_HOST
    assert any(c[0] == "pct" and c[1] == "exec" and any("nvidia-link" in a for a in c) for c in fake.calls)
    assert done.after == () and done.ok


def test_nothing_to_fix_is_a_noop_that_changes_nothing():
    fake = Pvesm()
    done, _ = fix(fake)
    assert done.noop and done.ok and mutating(fake.calls) == []


def test_a_sudo_login_is_refused_before_anything_runs():
    fake = Pvesm()
    with pytest.raises(RootRequired, match="only root can.*sudo: true.*safety.md"):
        fix(fake, ctid=202)
    assert fake.calls == []


# -- host setup -------------------------------------------------------------------------------------------------

def test_host_setup_sends_the_unit_and_scripts_and_reads_what_was_written():
    argv = hostsetup.setup_argv(dry=True)
    assert argv[3:5] == ["host-setup", "1"]
    files = dict(zip(argv[5::2], argv[6::2], strict=True))
    unit = files[hostsetup.UNIT]
    assert "ExecStart=/usr/local/lib/remote/gpu-boot.sh" in unit
    before = next(line for line in unit.splitlines() if line.startswith("Before="))
    assert before.split("=", 1)[1].split() == ["pve-guests.service", "pve-ha-lrm.service"]  # HA guests start there
    assert "nvidia-modprobe -u -c 0" in files["/usr/local/lib/remote/gpu-boot.sh"]
    assert set(files) == {p for p, _ in hostsetup.FILES}
    wrote, same, enabled = hostsetup.parse("would write /etc/systemd/system/remote-gpu.service\n"
                                           "unchanged /usr/local/lib/remote/gpu-boot.sh\nwould enable remote-gpu.service\n")
    assert wrote == ("/etc/systemd/system/remote-gpu.service",) and same == ("/usr/local/lib/remote/gpu-boot.sh",)
    assert enabled == ("remote-gpu.service",)


def test_host_setup_refuses_a_sudo_login():
    s = Session(config.parse(HOSTS, "hosts.yaml"), transport_factory=lambda h: pytest.fail("nothing runs"))
    with pytest.raises(RootRequired, match="host pve2"):
        hostsetup.host_setup(resolve_host(s, "pve2"))


def test_host_setup_script_is_idempotent_and_dry_writes_nothing(tmp_path):
    import os
    import subprocess

    env = {**os.environ, "REMOTE_GPU_SYSROOT": str(tmp_path)}
    argv = hostsetup.setup_argv(dry=True)
    first = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert "would write /etc/systemd/system/remote-gpu.service" in first and not (tmp_path / "etc").exists()
    real = subprocess.run(hostsetup.setup_argv(dry=False), capture_output=True, text=True, env=env, check=True).stdout
    assert hostsetup.parse(real)[0] == tuple(p for p, _ in hostsetup.FILES)
    assert "enabled remote-gpu.service" in real
    link = tmp_path / "etc/systemd/system/multi-user.target.wants/remote-gpu.service"
    assert os.readlink(link) == hostsetup.UNIT
    assert os.access(tmp_path / "usr/local/lib/remote/gpu-boot.sh", os.X_OK)
    again = subprocess.run(hostsetup.setup_argv(dry=False), capture_output=True, text=True, env=env, check=True).stdout
    wrote, same, enabled = hostsetup.parse(again)
    assert wrote == () and enabled == () and len(same) == len(hostsetup.FILES)


def test_the_boot_script_makes_each_gpus_node_by_its_own_minor(tmp_path):
    """A GPU bound to vfio-pci for a VM leaves a gap in the module's minors (GPUs 1 and 3 only): the boot script
    makes /dev/nvidia1 and /dev/nvidia3 (`Device Minor:` of each GPU's information file), not 0 and 1."""
    import os
    import subprocess

    root = tmp_path / "root"
    for bus, minor in (("0000:1b:00.0", 1), ("0000:5d:00.0", 3)):
        info = root / "proc/driver/nvidia/gpus" / bus / "information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t NVIDIA H200\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
                        "GPU Excluded:\t No\n")
    tool = root / "usr/bin/nvidia-modprobe"
    tool.parent.mkdir(parents=True)
    tool.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n')
    tool.chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("gpu-boot.sh", "gpu-uvm.sh"):
        (lib / name).write_text(hostsetup._text(name))
    env = {**os.environ, "REMOTE_GPU_SYSROOT": str(root)}
    subprocess.run(["bash", str(lib / "gpu-boot.sh")], env=env, capture_output=True, text=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c for c in calls if c.startswith("-c ")] == ["-c 1", "-c 3"]


@pytest.mark.fault("A GPU host whose driver has no nvidia-modprobe, rebooted (remote host setup's boot unit)",
                   promise="each GPU's /dev/nvidiaN (and nvidiactl) made by mknod c 195 N, as the uvm nodes are, "
                           "before pve-guests and pve-ha-lrm start containers")
def test_the_boot_script_makes_the_gpu_nodes_by_mknod_without_nvidia_modprobe(tmp_path):
    import os
    import stat
    import subprocess

    root = tmp_path / "root"
    for bus, minor in (("0000:1b:00.0", 1), ("0000:5d:00.0", 3)):
        info = root / "proc/driver/nvidia/gpus" / bus / "information"
        info.parent.mkdir(parents=True)
        info.write_text(f"Model: \t\t NVIDIA H200\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n")
    (root / "dev").mkdir()
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("gpu-boot.sh", "gpu-uvm.sh"):
        (lib / name).write_text(hostsetup._text(name))
    env = {**os.environ, "REMOTE_GPU_SYSROOT": str(root), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    r = subprocess.run(["bash", str(lib / "gpu-boot.sh")], env=env, capture_output=True, text=True)
    needs(os.geteuid() == 0, "root (mknod of a device node)", "run the tests as root, as .ci/run does")
    made = {p.name: os.stat(p) for p in (root / "dev").iterdir()}
    for name, minor in (("nvidia1", 1), ("nvidia3", 3), ("nvidiactl", 255)):
        st = made[name]
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, minor), r.stderr
    assert "nvidia0" not in made and "made " in r.stdout


def test_the_command_line_shows_the_diff_the_restart_and_what_is_left_by_hand():
    from remote.cli import format as fmt

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = Pvesm(config_text=cfg, ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    done, _ = fix(fake, dry=True)
    text = "\n".join(fmt.gpu_fix_lines(done))
    assert "would fix cuda-init-failed, device-not-passed" in text and "  + dev2: /dev/nvidia-uvm,gid=44,mode=0666" in text
    assert "would run: pct set 200 --dev2" in text and "restart would be: Proxmox applies devN" in text
    manual = GpuFix(200, "pve1", False, ("host-no-driver",), (), (), (), (("host-no-driver", "no module",
                           "install it"),), None, False, None, None, ("host-no-driver",))
    lines = fmt.gpu_fix_lines(manual)
    assert lines[0].endswith("nothing gpu fix can change") and "by hand: install it" in lines[1] and manual.ok


def test_gpu_fix_wants_one_container_or_a_host_with_all():
    from remote.cli import tasks

    assert tasks.run(["gpu", "fix", "--host", "pve1"]) == 2
    assert tasks.run(["gpu", "fix", "-c", "200", "--host", "pve1", "--all"]) == 2


def test_doctor_before_a_move_reads_both_nodes_and_names_what_the_target_lacks():
    from remote import gpudoctor
    from remote.cli import format as fmt
    from remote.errors import ConfigError

    here, there = Pvesm(), Pvesm(nodes=UVM_GONE)
    s = Session(config.parse(HOSTS, "hosts.yaml"), agent=False,
                transport_factory=lambda h: here if h.name == "pve1" else there)
    moved = gpudoctor.before_move(s, 200, "pve2")
    assert [f.node for f in moved.findings] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] and not moved.healthy
    assert fmt.gpu_move_text(moved).startswith("container 200 (pve1) to node pve2: 2 finding(s)")
    assert mutating(here.calls + there.calls) == []
    with pytest.raises(ConfigError, match="unknown host 'pve9'"):
        gpudoctor.before_move(s, 200, "pve9")
    ok = gpudoctor.before_move(Session(config.parse(HOSTS, "hosts.yaml"), agent=False,
                                       transport_factory=lambda h: Pvesm()), 200, "pve2")
    assert ok.healthy and fmt.gpu_move_text(ok).endswith("every device node its devN lines name is there")


def test_doctor_node_wants_gpu_and_one_container():
    from remote.cli import tasks

    assert tasks.run(["doctor", "--node", "pve2", "-c", "200"]) == 2
    assert tasks.run(["doctor", "--gpu", "--node", "pve2"]) == 2


def test_drop_raw_removes_exactly_the_named_lines_of_the_current_config_or_nothing(tmp_path):
    import os
    import subprocess

    conf = tmp_path / "etc/pve/lxc/201.conf"
    conf.parent.mkdir(parents=True)
    text = data("pct-config-raw.txt") + "[before-upgrade]\nlxc.cgroup2.devices.allow: c 511:* rwm\n"
    conf.write_text(text)
    p = plan_of(gpu_host(configs={201: data("pct-config-raw.txt")}), ct(), data("pct-config-raw.txt"), ctid=201)
    env = {**os.environ, "REMOTE_GPU_SYSROOT": str(tmp_path)}
    r = subprocess.run(gpufix._fix_argv("drop-raw", "201", *p.config.raw), env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    left = conf.read_text()
    assert [line for line in left.split("[before-upgrade]")[0].splitlines() if line.startswith("lxc.")] == []
    assert left.split("[before-upgrade]")[1] == "\nlxc.cgroup2.devices.allow: c 511:* rwm\n"  # a snapshot's: kept
    assert "hostname: gpu201" in left
    conf.write_text(text)
    r = subprocess.run(gpufix._fix_argv("drop-raw", "201", "lxc.cgroup2.devices.allow: c 999:* rwm"), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 3 and "not every line" in r.stderr and conf.read_text() == text


def test_the_uvm_nodes_are_made_without_nvidia_modprobe_from_the_modules_major(tmp_path):
    """As on the H200 machine: no nvidia-modprobe installed; the nodes made as it makes them, with the major that
    /proc/devices gives the loaded nvidia_uvm (238 there), minors 0 and 1, mode 0666; again changes nothing."""
    import os
    import stat
    import subprocess

    from remote import shell

    (tmp_path / "proc").mkdir()
    (tmp_path / "dev").mkdir()
    argv = ["bash", "-c", shell.load("gpu-uvm"), "gpu-uvm"]
    env = {**os.environ, "REMOTE_GPU_SYSROOT": str(tmp_path)}
    (tmp_path / "proc/devices").write_text("Character devices:\n195 nvidia\n241 nvidia-caps\n\nBlock devices:\n")
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert r.returncode == 4 and "nvidia_uvm module is not loaded" in r.stdout, r
    assert not (tmp_path / "dev/nvidia-uvm").exists()
    (tmp_path / "proc/devices").write_text("Character devices:\n195 nvidia\n238 nvidia-uvm\n241 nvidia-caps\n")
    for _ in range(2):
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert r.returncode == 0 and r.stdout.strip() == ("made: mknod -m 0666 /dev/nvidia-uvm c 238 0; mknod -m 0666 "
                                                          "/dev/nvidia-uvm-tools c 238 1 (no nvidia-modprobe)"), r
        made = {n: os.stat(tmp_path / "dev" / n) for n in ("nvidia-uvm", "nvidia-uvm-tools")}
        assert {n: (stat.S_ISCHR(s.st_mode), os.major(s.st_rdev), os.minor(s.st_rdev), stat.S_IMODE(s.st_mode))
                for n, s in made.items()} == {"nvidia-uvm": (True, 238, 0, 0o666), "nvidia-uvm-tools": (True, 238, 1, 0o666)}


def test_a_node_bound_over_by_a_raw_config_line_has_that_line_dropped_and_a_restart():
    from test_gpu import planted

    over = "lxc.mount.entry: /dev/null dev/nvidia-uvm none bind,create=file"
    cfg = data("pct-config-dev.txt") + over + "\n[snap]\n" + over + "\n"
    c = gpu.parse_container(planted("/dev/nvidia-uvm", 1, 3, mount="/null"))
    p = plan_of(gpu_host(configs={200: cfg}), c, cfg)
    assert p.config.raw == (over,) and p.config.diff == (f"- {over}",) and p.config.set == ()
    assert p.restart and "the raw line that binds another file over it dropped" in dict(p.fixes)["container-node-wrong"]


@pytest.mark.parametrize("version", ["..", "../../etc", "580.95.05/../..", "580..95"])
def test_the_user_space_script_refuses_a_version_that_is_no_version(tmp_path, version):
    """The module's version names the files it looks for and the folders nvidia-userspace.sh replaces and
    removes (`rm -rf DEST/VERSION`): one read from /sys/module/nvidia/version was used unchecked. Refused before
    any path is made of it, nothing written."""
    import os
    import subprocess

    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text(version + "\n")
    keep = root / "var/lib/remote/keep"
    keep.parent.mkdir(parents=True)
    keep.write_text("another's\n")
    r = subprocess.run(["bash", "-c", hostsetup._text("nvidia-userspace.sh"), "nvidia-userspace",
                        gpuconfig.USERSPACE_HOST], env={**os.environ, "REMOTE_GPU_SYSROOT": str(root)},
                       capture_output=True, text=True)
    assert r.returncode == 3 and "not NUMBER.NUMBER" in r.stdout
    assert keep.read_text() == "another's\n" and not (root / "var/lib/remote/nvidia").exists()


@pytest.mark.fault("A second gpu fix on one container the same day",
                   promise="its snapshot is gpufix-DATE-2, not a name Proxmox refuses as already used")
def test_a_second_gpu_fix_the_same_day_takes_the_next_snapshot_name():
    import datetime

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    kw = {"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999}
    fake = Pvesm(config_text=cfg, ct_kw=kw)
    first, _ = fix(fake)
    fake.config, fake.ct_kw = cfg, dict(kw)  # broken again the same day
    second, _ = fix(fake)
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    assert (first.snapshot, second.snapshot) == (f"gpufix-{day}-1", f"gpufix-{day}-2")
    assert gpufix.snapshot_name(["remote-20261202-4", "gpufix-20261202-2", "gpufix-20261201-7"],
                                datetime.date(2026, 12, 2)) == "gpufix-20261202-3"


@pytest.mark.fault("gpu fix of a container's user space with a reboot pending, the host's folder already the loaded "
                   "version's", promise="the folder is mounted and the loader pointed at it (the files the upgrade "
                   "removed are still there); only a folder without them is left to `reboot the host first`")
def test_a_pending_reboot_with_the_folder_already_the_loaded_version_is_fixed_not_left_by_hand():
    p = plan_of(gpu_host(modinfo="580.105.08"), ct(libs="570.148.08"), data("pct-config-dev.txt"))
    assert not p.userspace  # the folder not read: as before, by hand
    h = gpu_host(modinfo="580.105.08")
    found = gpu.host_findings(h) + gpu.findings(h, 200, ct(libs="570.148.08"))
    p = gpufix.plan(h, 200, ct(libs="570.148.08"), found, data("pct-config-dev.txt"), folder="580.95.05")
    assert p.userspace and "driver-lib-mismatch" in dict(p.fixes)
    fake = Pvesm(ct_kw={"libs": "570.148.08"}, host_kw={"modinfo": "580.105.08"})
    done, _ = fix(fake)
    assert any(c[3] == "nvidia-userspace" and c[-1] == "--check" for c in fake.calls if c[0] == "bash")
    assert "driver-lib-mismatch" not in done.after and "driver-lib-mismatch" not in [k for k, _, _ in done.manual]
    fake = Pvesm(ct_kw={"libs": "570.148.08"}, host_kw={"modinfo": "580.105.08"}, folder="missing")
    done, _ = fix(fake)
    step = dict((k, s) for k, _, s in done.manual)["driver-lib-mismatch"]
    assert "reboot the host first" in step and not any(c[3] == "nvidia-userspace" and c[-1] != "--check"
                                                       for c in fake.calls if c[0] == "bash")


@pytest.mark.fault("gpu fix that must restart a container with a run live, train.checkpoint set",
                   promise="the run is saved and stopped before the restart and resumed from its checkpoint after; "
                           "--force is the only way to skip the save")
def test_a_live_run_with_a_checkpoint_is_saved_before_the_restart_and_resumed_after(monkeypatch):
    from remote.ops import jobs
    from remote.results import Checkpoint, Saved, Stopped

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    kw = {"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999}
    order: list = []
    fake = Pvesm(config_text=cfg, ct_kw=kw, live="20261202-0700-ab:4242")
    real_run = fake.run

    def run(argv, **k):  # the container's restart, in the order it happens beside the save and the resume
        if argv[:2] in (["pct", "stop"], ["pct", "start"]) or tuple(argv[:2]) in (("pct", "stop"), ("pct", "start")):
            order.append(argv[1])
        return real_run(argv, **k)

    monkeypatch.setattr(fake, "run", run)
    left = Checkpoint("/root/out/ckpt.pt", True, "torch", step=250)
    monkeypatch.setattr(jobs, "stop", lambda t, run_id=None, grace=10, save=False, refuse=None: order.append(("stop", save)) or
                        Stopped("20261202-0700-ab", True, "TERM", 143, None, saved=Saved("saved", left)))
    monkeypatch.setattr(jobs, "start", lambda t, resume=False, **k: order.append(("start", resume)) or ("R2", 7))
    hosts = {**HOSTS, "train": {"command": "python train.py", "checkpoint": {"path": "/root/out/ckpt.pt"}}}
    s = Session(config.parse(hosts, "hosts.yaml"), agent=False, transport_factory=lambda h: fake)
    done = gpufix.gpu_fix(resolve(s, 200))
    assert order == [("stop", True), "stop", "start", ("start", True)], order
    assert done.restarted and done.resumed == "R2"
    order.clear()  # --force: killed with the container, nothing saved or resumed
    done = gpufix.gpu_fix(resolve(Session(config.parse(hosts, "hosts.yaml"), agent=False,
                                          transport_factory=lambda h: Pvesm(config_text=cfg, ct_kw=kw,
                                                                            live="20261202-0700-ab:4242")), 200),
                          force=True)
    assert order == [] and done.restarted and done.resumed is None


@pytest.mark.fault("gpu fix that fails after it saved and stopped a live run",
                   promise="the error says the run was saved and stopped and names `remote train -c ID --resume`: "
                           "the run is not left stopped without a word")
def test_a_gpu_fix_that_fails_after_the_save_stop_names_the_resume(monkeypatch):
    from remote.errors import RemoteError
    from remote.ops import jobs
    from remote.results import Checkpoint, Saved, Stopped

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    kw = {"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999}
    fake = Pvesm(config_text=cfg, ct_kw=kw, live="20261202-0700-ab:4242")
    left = Checkpoint("/root/out/ckpt.pt", True, "torch", step=250)
    monkeypatch.setattr(jobs, "stop", lambda t, run_id=None, grace=10, save=False, refuse=None:
                        Stopped("20261202-0700-ab", True, "TERM", 143, None, saved=Saved("saved", left)))

    def change(*a, **k):
        raise RemoteError("pct set failed: storage busy")

    monkeypatch.setattr(gpufix, "_change", change)
    hosts = {**HOSTS, "train": {"command": "python train.py", "checkpoint": {"path": "/root/out/ckpt.pt"}}}
    s = Session(config.parse(hosts, "hosts.yaml"), agent=False, transport_factory=lambda h: fake)
    with pytest.raises(RemoteError) as e:
        gpufix.gpu_fix(resolve(s, 200))
    assert "storage busy" in str(e.value)
    assert "run 20261202-0700-ab was saved and stopped" in str(e.value) and "remote train -c 200 --resume" in str(e.value)


@pytest.mark.fault("gpu fix that must restart a container whose live run saves nothing new within its grace",
                   promise="refused (SaveRefused, exit 3) naming --force: the container is not restarted, the run "
                           "left running, nothing resumed")
def test_a_live_run_that_does_not_save_in_time_refuses_the_restart(monkeypatch):
    from remote.errors import SaveRefused
    from remote.ops import jobs

    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    kw = {"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999}
    order: list = []
    fake = Pvesm(config_text=cfg, ct_kw=kw, live="20261202-0700-ab:4242")
    real_run = fake.run

    def run(argv, **k):
        if tuple(argv[:2]) in (("pct", "stop"), ("pct", "start"), ("pct", "set")):
            order.append(argv[1])
        return real_run(argv, **k)

    def stop(t, run_id=None, grace=10, save=False, refuse=None):
        order.append(("stop", save, refuse))
        raise SaveRefused(200, f"container 200: {refuse} refused, nothing was changed: ... pass --force", "r1", 30.0)

    monkeypatch.setattr(fake, "run", run)
    monkeypatch.setattr(jobs, "stop", stop)
    monkeypatch.setattr(jobs, "start", lambda t, resume=False, **k: order.append(("start", resume)) or ("R2", 7))
    hosts = {**HOSTS, "train": {"command": "python train.py", "checkpoint": {"path": "/root/out/ckpt.pt"}}}
    s = Session(config.parse(hosts, "hosts.yaml"), agent=False, transport_factory=lambda h: fake)
    with pytest.raises(SaveRefused, match=r"gpu fix \(it must restart the container: .*\) refused") as e:
        gpufix.gpu_fix(resolve(s, 200))
    assert e.value.exit_code == 3
    assert len(order) == 1 and order[0][:2] == ("stop", True)  # no restart, no resume
