"""GPU passthrough facts and findings as data: the host probe's and the container probe's output in, findings out.

The fixtures in tests/data/gpu/ are written from the real formats: an open kernel module's
/proc/driver/nvidia/version, nvidia-smi's mismatch and no-driver texts, `pct config` with `devN` lines and
with raw `lxc.*` lines, `lspci -nnk` with vfio-pci, /proc/devices with nvidia-uvm at major 509 (a config
written when it was 511), `stat` lines of the host's nodes. Each test changes one thing.
"""

import json
import subprocess
from pathlib import Path

import pytest

from remote.facts import gpu
from remote.cli import format as fmt
from remote.results import Finding, GpuContainer, GpuHost, GpuReport

from support import GPU_MARK as MARK  # noqa: E402  (the samples and the host probe's text: shared with tests/lab)
from support import gpu_host as host  # noqa: E402
from support import gpu_host_text as host_text  # noqa: E402
from support import gpu_sample as data  # noqa: E402

GOOD_NODES = [("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 509, 0),
              ("/dev/nvidia-uvm-tools", 509, 1)]


def ct_text(*, nodes=GOOD_NODES, libs="580.95.05", smi=None, init=0, proc=None, torch_cuda="13.0", opened=None) -> str:
    """What remote/sh/gpu_container.py prints in a healthy GPU container, with any part replaced."""
    opened = opened or {}
    libmap = {so: None if libs is None else {"path": f"/usr/lib/x86_64-linux-gnu/{so}",
                                              "file": so.replace(".so.1", f".so.{libs}"), "version": libs}
              for so in ("libcuda.so.1", "libnvidia-ml.so.1")}
    first = {"nodes": [{"path": p, "char": True, "major": a, "minor": b, "uid": 0, "gid": 0, "mode": 0o666,
                        "open": opened.get(p)} for p, a, b in nodes],
             "libs": libmap, "proc_version": data("proc-driver-nvidia-version-open.txt") if proc is None else proc,
             "smi": smi if smi is not None else {"rc": 0, "out": "580.95.05\n", "err": ""},
             "torch": {"path": "/root/venv/lib/python3.11/site-packages/torch/version.py", "cuda": torch_cuda,
                       "version": "2.11.0+cu130"}}
    cuda = {"loaded": libs is not None, "driver_version": 13000 if libs else 0, "driver_version_rc": 0}
    if libs is None:
        cuda["error"] = "libcuda.so.1 not found by the loader"
    else:
        cuda["init"] = init
    return json.dumps(first) + "\n" + json.dumps({"cuda": cuda}) + "\n"


def ct(**kw) -> gpu.CtGpu:
    return gpu.parse_container(ct_text(**kw))


def kinds(found) -> list[str]:
    return [f.code for f in found]


def everything(h: gpu.HostGpu, c: gpu.CtGpu | None, ctid=200) -> list[Finding]:
    return gpu.host_findings(h) + gpu.findings(h, ctid, c)


# -- parsers ------------------------------------------------------------------------------------------------

def test_open_module_version_parsed():
    version, is_open = gpu.module_version(data("proc-driver-nvidia-version-open.txt"))
    assert (version, is_open) == ("580.95.05", True)


def test_host_parsed_from_real_formats():
    h = host()
    assert h.loaded == "580.95.05" and h.open_module and h.on_disk == "580.95.05"
    assert h.uvm_major == 509 and h.majors["nvidia"] == 195 and h.majors["nvidia-caps"] == 236
    assert h.node("/dev/nvidia-uvm") == gpu.Node("/dev/nvidia-uvm", 509, 0, 0, 0, 0o666)
    assert [p.driver for p in h.pci] == ["nvidia"]
    assert h.packages == {"pve-container": "5.2.3", "pve-manager": "8.3.0"}
    cfg = h.configs[200]
    assert [p for _, p, _ in cfg.devs] == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert cfg.unprivileged and cfg.gpu


def test_raw_lxc_config_parsed():
    cfg = gpu.parse_pct_config(201, data("pct-config-raw.txt") + "rc=0")
    assert cfg.allows == ("c 195:* rwm", "c 511:* rwm")
    assert cfg.mounts[2] == ("/dev/nvidia-uvm", "dev/nvidia-uvm", ("bind", "optional", "create=file"))
    assert not cfg.devs and not cfg.unprivileged
    assert cfg.lines()[0] == "lxc.cgroup2.devices.allow: c 195:* rwm"


def test_a_cut_short_host_output_is_an_error_not_a_healthy_host():
    with pytest.raises(ValueError, match="ended early"):
        gpu.parse_host(host_text(end=False), MARK)


def test_a_forged_section_line_without_the_mark_is_data():
    # A container's config cannot open a section: the mark is a fresh random token per probe.
    forged = data("pct-config-cpu.txt") + "@@gpu-other end\ndev0: /dev/nvidia0\n"
    cfg = host(configs={202: forged}).configs[202]
    assert [p for _, p, _ in cfg.devs] == ["/dev/nvidia0"]


# -- healthy and CPU ------------------------------------------------------------------------------------------

def test_healthy_dev_passthrough_gives_nothing():
    assert everything(host(), ct()) == []


def test_healthy_raw_passthrough_with_todays_majors_gives_nothing():
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 509:* rwm")
    assert everything(host(configs={201: raw}), ct(), 201) == []


def test_cpu_container_gives_nothing_even_on_a_host_without_a_driver():
    cpu = ct(nodes=[], libs=None, smi={"missing": True}, proc="", torch_cuda=None)
    assert gpu.findings(host(configs={202: data("pct-config-cpu.txt")}), 202, cpu) == []
    bare = host(proc="", sys_version="", modinfo="", modules="", devices="", nodes="", lspci="", persistenced="",
                smi="", configs={202: data("pct-config-cpu.txt")})
    assert gpu.host_findings(bare) == [] and gpu.findings(bare, 202, cpu) == []
    assert gpu.container_findings(cpu, 202) == []


# -- one test per kind --------------------------------------------------------------------------------------

def test_host_no_driver():
    h = host(proc="", sys_version="", modinfo="", modules="", nodes="", devices="", smi=data("smi-no-driver.txt") + "rc=9")
    found = gpu.host_findings(h)
    assert kinds(found) == ["host-no-driver"]
    assert "6.8.12-4-pve" in found[0].fix and "200" in found[0].what


def test_host_reboot_pending():
    found = gpu.host_findings(host(modinfo="580.105.08"))
    assert kinds(found) == ["host-reboot-pending"] and found[0].severity == "warning"
    assert "580.95.05" in found[0].what and "580.105.08" in found[0].what


def test_host_uvm_not_loaded():
    nodes = "\n".join(line for line in data("nodes-509.txt").splitlines() if "uvm" not in line)
    devices = data("proc-devices-uvm509.txt").replace("509 nvidia-uvm\n", "")
    found = gpu.host_findings(host(modules="nvidia_drm\nnvidia_modeset\nnvidia", nodes=nodes, devices=devices))
    assert kinds(found) == ["host-uvm-not-loaded"]
    assert "modprobe nvidia-uvm" in found[0].fix


def test_host_uvm_tools_missing_while_uvm_is_there():
    """As seen on the H200 machine: both uvm nodes removed, then CUDA run as root made /dev/nvidia-uvm by itself but
    never -tools: a container whose devN line names it cannot start, so the host's finding names the -tools node."""
    nodes = "\n".join(line for line in data("nodes-509.txt").splitlines() if "nvidia-uvm-tools" not in line)
    assert "/dev/nvidia-uvm " in nodes
    found = gpu.host_findings(host(nodes=nodes))
    assert kinds(found) == ["host-uvm-not-loaded"]
    assert "/dev/nvidia-uvm-tools does not exist" in found[0].what


def test_host_gpu_vfio():
    h = host(proc="", sys_version="", modinfo="580.95.05", modules="", nodes="", lspci=data("lspci-vfio.txt"),
             smi=data("smi-no-driver.txt") + "rc=9")
    found = gpu.host_findings(h)
    assert kinds(found) == ["host-gpu-vfio"]
    assert "0000:01:00.0" in found[0].fix and "vfio-pci" in found[0].what


def test_persistence_off():
    found = gpu.host_findings(host(persistenced="", smi="0, 00000000:01:00.0, Disabled, [N/A], 580.95.05\nrc=0"))
    assert kinds(found) == ["persistence-off"] and found[0].severity == "warning"


def test_driver_lib_mismatch():
    found = everything(host(), ct(libs="575.57.08", smi={"rc": 18, "out": data("smi-mismatch.txt"), "err": ""}, init=803))
    assert kinds(found) == ["driver-lib-mismatch", "cuda-init-failed"]
    assert "libcuda.so.575.57.08" in found[0].what and "580.95.05" in found[0].fix
    assert "803" in found[1].what


def test_driver_lib_mismatch_after_a_host_upgrade_says_reboot():
    # apt upgraded the driver (libraries and module on disk: 580.105.08); the old module stays loaded.
    found = everything(host(modinfo="580.105.08"), ct(libs="580.105.08"))
    assert "host-reboot-pending" in kinds(found) and "driver-lib-mismatch" in kinds(found)
    assert next(f for f in found if f.code == "driver-lib-mismatch").fix.startswith("reboot the host")


def test_container_uvm_missing_with_cuinit_999():
    found = everything(host(), ct(nodes=GOOD_NODES[:2], init=999))
    assert kinds(found) == ["container-uvm-missing", "container-node-missing", "cuda-init-failed"]
    assert [f.node for f in found[:2]] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert "(the host's is 509:0, nvidia-uvm)" in found[0].what
    # its config passes the node (dev2): it was not there at start, or was removed since
    assert found[0].fix.startswith("pct reboot 200: its config's `dev2: /dev/nvidia-uvm` makes the host's node (509:0)")
    assert "999" in found[2].what and "/dev/nvidia-uvm missing, /dev/nvidia-uvm-tools missing (above)" in found[2].what
    assert "doctor" not in found[2].fix


def test_device_not_passed():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    found = gpu.findings(host(configs={200: cfg}), 200, None)
    assert kinds(found) == ["device-not-passed"]
    assert "/dev/nvidia-uvm" in found[0].what and "pct set 200 -dev2 /dev/nvidia-uvm" in found[0].fix


def test_cgroup_major_stale():
    found = gpu.findings(host(configs={201: data("pct-config-raw.txt")}), 201, None)
    assert kinds(found) == ["cgroup-major-stale"]
    assert "509" in found[0].what and "511" in found[0].what
    assert "replace `lxc.cgroup2.devices.allow: c 511:* rwm` with `lxc.cgroup2.devices.allow: c 509:* rwm`" in found[0].fix
    assert "/etc/pve/lxc/201.conf" in found[0].fix and "dev0: /dev/nvidia-uvm" in found[0].fix


def test_mount_optional_missing():
    nodes = "\n".join(line for line in data("nodes-509.txt").splitlines() if "uvm" not in line)
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 509:* rwm")
    found = gpu.findings(host(nodes=nodes, configs={201: raw}), 201, None)
    assert "mount-optional-missing" in kinds(found)
    assert "nvidia-modprobe -u -c=0" in next(f for f in found if f.code == "mount-optional-missing").fix


def test_no_driver_libs():
    found = everything(host(), ct(libs=None, smi={"missing": True}))
    assert kinds(found) == ["no-driver-libs"]
    assert "NVIDIA-Linux-x86_64-580.95.05.run --no-kernel-module" in found[0].fix


def test_libcuda_missing_while_nvml_is_found_is_no_driver_libs():
    """As planted on the H200 machine: every libcuda the container's loader found removed, the machine's own
    libnvidia-ml left: nvidia-smi works, cuInit is never reached (torch ran on the CPU); doctor said healthy."""
    text = ct_text()
    first, second = (json.loads(line) for line in text.splitlines())
    first["libs"]["libcuda.so.1"] = None
    second["cuda"] = {"loaded": False, "driver_version": 0, "driver_version_rc": 0,
                      "error": "libcuda.so.1 not found by the loader"}
    found = everything(host(), gpu.parse_container(json.dumps(first) + "\n" + json.dumps(second) + "\n"))
    assert kinds(found) == ["no-driver-libs"]
    assert "libcuda.so.1 is not found" in found[0].what and "remote gpu fix -c" in found[0].fix


def test_cuda_init_failed_alone():
    found = everything(host(), ct(init=100))
    assert kinds(found) == ["cuda-init-failed"] and "100 (CUDA_ERROR_NO_DEVICE)" in found[0].what


def test_device_permission_in_the_container():
    found = everything(host(), ct(opened={"/dev/nvidia0": 13}))
    assert kinds(found) == ["device-permission"] and "EACCES" in found[0].what
    assert "mode=0666" in found[0].fix


def test_device_permission_from_the_hosts_modes_in_an_unprivileged_container():
    nodes = data("nodes-509.txt").replace(" 0 0 666", " 0 44 660")
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 509:* rwm") + "unprivileged: 1\n"
    found = gpu.findings(host(nodes=nodes, configs={201: raw}), 201, None)
    assert kinds(found) == ["device-permission"] and "660" in found[0].what


def test_mig_caps_missing():
    found = everything(host(smi="0, 00000000:01:00.0, Enabled, Enabled, 580.95.05\nrc=0"), ct())
    assert kinds(found) == ["mig-caps-missing"] and "c 236:* rwm" in found[0].fix


def test_every_kind_is_tested_here():
    source = Path(__file__).read_text()
    assert [k for k in gpu.KINDS if f"def test_{k.replace('-', '_')}" not in source] == []


# -- the probes as programs ------------------------------------------------------------------------------------

def test_container_probe_runs_without_torch_or_a_venv(tmp_path):
    venv = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "torch"
    venv.mkdir(parents=True)
    (venv / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                     "cuda: Optional[str] = '13.0'\n")
    r = subprocess.run(gpu.container_argv(str(tmp_path / "venv")), capture_output=True, text=True, timeout=60)
    c = gpu.parse_container(r.stdout)
    assert (c.torch_cuda, c.torch_version) == ("13.0", "2.11.0+cu130")
    if not c.gpu:
        assert gpu.container_findings(c, 200) == []


# -- where it shows: train's preflight, the known-good record and plain doctor, doctor --gpu's output ------------

@pytest.fixture
def spec(tmp_path):
    from test_doctor import HOSTS

    from remote import config

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return config.load(str(path)).container(200)


def with_gpu(raw: dict, text: str) -> dict:
    return {**raw, "gpu": {"rc": 0, "out": text, "err": ""}}


def test_preflight_refuses_on_an_error_finding_with_its_fix(spec):
    from test_preflight import problems, ready

    found = problems(with_gpu(ready(spec), ct_text(nodes=GOOD_NODES[:2], init=999)), spec)
    assert any("[container-uvm-missing]" in p and "/dev/nvidia-uvm" in p for p in found), found
    assert any("cuInit(0) returned 999" in p for p in found), found


def test_preflight_warns_on_a_pending_reboot_and_launches(spec):
    from test_preflight import ready

    from remote.ops.jobs import check

    pre = check(with_gpu(ready(spec), ct_text()), spec, host(modinfo="580.105.08"))
    assert any(n.startswith("!! ") and "[host-reboot-pending]" in n for n in pre.notes), pre.notes
    assert not any("[host-reboot-pending]" in n for n in check(with_gpu(ready(spec), ct_text()), spec, host()).notes)


def test_preflight_of_a_cpu_container_says_nothing_of_gpus(spec):
    from test_preflight import ready

    from remote.ops.jobs import check

    cpu = ct_text(nodes=[], libs=None, smi={"missing": True}, proc="")
    pre = check(with_gpu(ready(spec), cpu), spec, host(configs={200: data("pct-config-cpu.txt")}))
    assert not any("[" in n and "]" in n and "!!" in n for n in pre.notes)


def test_known_good_keeps_module_and_libraries_and_doctor_names_a_change(spec):
    from test_doctor import COMMIT, healthy_raw

    from remote import facts as fx
    from remote.doctor import findings
    from remote.facts.runs import RunState, manifest_of
    from remote.runs.knowngood import make_record, watch_log

    facts = fx.parse(with_gpu(healthy_raw(spec), ct_text()), spec, (1000.0, 1000.5))
    watch = watch_log(spec, "step 1 | 22.0 Ktok/s\n")
    rec = make_record(facts, spec, RunState("r1", manifest=manifest_of({"commit": COMMIT})), watch, "auto")
    assert rec["host_module"] == "580.95.05"
    assert rec["driver_libs"] == {"libcuda.so.1": "580.95.05", "libnvidia-ml.so.1": "580.95.05"}
    raw = with_gpu(healthy_raw(spec), ct_text())
    raw["known_good"] = {**raw["known_good"], "host_module": "580.95.05", "driver_libs": rec["driver_libs"]}
    codes = lambda r: [f.code for f in findings(fx.parse(r, spec, (1000.0, 1000.5)), spec)]  # noqa: E731
    assert "host-module-changed" not in codes(raw) and "driver-libs-changed" not in codes(raw)
    upgraded = with_gpu(raw, ct_text(libs="580.105.08", proc=data("proc-driver-nvidia-version-open.txt")
                                     .replace("580.95.05", "580.105.08")))
    assert {"host-module-changed", "driver-libs-changed"} <= set(codes(upgraded))


def test_doctor_gpu_render_and_json(spec):
    h = host(configs={200: data("pct-config-dev.txt"), 202: data("pct-config-cpu.txt")}, modinfo="580.105.08")
    hosts = (GpuHost("pve1", h, tuple(gpu.host_findings(h, "pve1"))),)
    bad = ct(nodes=GOOD_NODES[:2], init=999)
    cpu = ct(nodes=[], libs=None, smi={"missing": True}, proc="")
    cts = (GpuContainer(200, "pve1", bad, h.configs[200], tuple(gpu.findings(h, 200, bad, "pve1"))),
           GpuContainer(202, "pve1", cpu, h.configs[202], tuple(gpu.findings(h, 202, cpu, "pve1"))))
    text = fmt.gpu_text(GpuReport(hosts, cts))
    assert "host pve1: 1 finding(s) (NVIDIA module 580.95.05 (open), pve-container 5.2.3, pve-manager 8.3.0)" in text
    assert "(host-reboot-pending)" in text and "(container-uvm-missing)" in text
    assert "container 202 on pve1: no GPU configured (a CPU container)" in text
    out = json.loads(fmt.gpu_json(GpuReport(hosts, cts)))
    assert out["schema"] == 1 and out["healthy"] is False
    assert set(out["containers"][0]["findings"][0]) == {"kind", "severity", "message", "fix", "ctid", "host", "node",
                                                            "why"}
    assert out["containers"][1]["findings"] == [] and out["containers"][1]["healthy"] and not out["containers"][1]["gpu"]


def test_untrusted_text_is_made_printable_before_it_reaches_a_terminal(spec):
    evil = gpu.parse_container(ct_text(libs="575.57.08").replace('"file": "libcuda.so.575.57.08"',
                                                                  '"file": "libcuda.so.575\\u001b[2J"'))
    found = gpu.container_findings(evil, 200)
    assert "\x1b" in found[0].what  # the data keeps what the container said; the terminal gets it escaped
    text = fmt.gpu_text(GpuReport((), (GpuContainer(200, "pve1", evil, None, tuple(found)),)))
    assert "\x1b" not in text and "\\x1b" in text


def test_a_library_whose_version_is_unknown_is_no_missing_library():
    text = ct_text().replace('"version": "580.95.05"', '"version": null')
    assert everything(host(), gpu.parse_container(text)) == []


def test_a_host_whose_proc_hides_the_module_takes_nvidia_smis_version():
    h = host(proc="", sys_version="")
    assert h.loaded == "580.95.05" and gpu.host_findings(h) == []


def test_init_writes_each_containers_gpu_lines_as_comments_and_the_file_loads(tmp_path):
    from remote import config
    from remote.ops import hostsinit

    raw = gpu.parse_pct_config(201, data("pct-config-raw.txt") + "rc=0").lines()
    dev = gpu.parse_pct_config(200, data("pct-config-dev.txt") + "rc=0").lines()
    hostile = ["dev0: /dev/nvidia0\nhosts: {evil: {address: x}}\x1b[2J"]
    h = config.Host(name="pve", address="10.0.0.1")
    text = hostsinit.render(h, {}, [(200, "running", "trainer", dev), (201, "running", "gpu201", raw),
                                    (202, "stopped", "web", []), (203, "running", "x", hostile)])
    assert "    #   dev2: /dev/nvidia-uvm\n" in text and "    #   lxc.cgroup2.devices.allow: c 511:* rwm\n" in text
    assert "#   lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in text
    block_202 = text.split("  202:")[1].split("  203:")[0]
    assert "GPU" not in block_202  # a CPU container: no GPU comment
    hostsinit.write(str(tmp_path / "hosts.yaml"), text, False)  # loads back: the hostile line stayed a comment
    assert set(config.load(str(tmp_path / "hosts.yaml")).hosts) == {"pve"}
    assert "\x1b" not in text


def test_a_container_given_one_gpu_of_several_lacks_nothing():
    nodes = data("nodes-509.txt") + "/dev/nvidia1 character special file c3 1 0 0 666\n"
    assert gpu.findings(host(nodes=nodes), 200, ct()) == []
    none = data("pct-config-dev.txt").replace("dev0: /dev/nvidia0\n", "")
    found = gpu.findings(host(nodes=nodes, configs={200: none}), 200, None)
    assert kinds(found) == ["device-not-passed"] and "/dev/nvidia0" in found[0].what


def test_a_cgroup_line_for_another_device_is_neither_gpu_nor_stale():
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 509:* rwm") + "lxc.cgroup2.devices.allow: c 10:200 rwm\n"
    assert gpu.findings(host(configs={201: raw}), 201, ct(), ) == []
    tun = gpu.parse_pct_config(202, data("pct-config-cpu.txt") + "lxc.cgroup2.devices.allow: c 10:200 rwm\nrc=0")
    assert not tun.gpu and tun.lines() == []


# -- each node compared with the host's (issue 34): the four faults planted on an H200, as data ------------------

def planted(path, major, minor, *, mount=None, opened=None, gone=False, init=999, nodes=GOOD_NODES):
    """The container probe's answer with one node changed (or gone), as remote/sh/gpu_container.py prints it."""
    first, second = ct_text(nodes=[n for n in nodes if not (gone and n[0] == path)], init=init).splitlines()
    raw = json.loads(first)
    raw["devices"] = data("proc-devices-uvm509.txt")
    for n in raw["nodes"]:
        if n["path"] == path:
            n.update(major=major, minor=minor, open=opened)
            if mount:
                n["mount"] = mount
    return json.dumps(raw) + "\n" + second + "\n"


@pytest.mark.fault("A wrong GPU node in the container (a bind of /dev/null, a stale major)",
                   promise="a finding names the node, what it is and the host's numbers, with a fix from its config "
                           "line; cuInit's cause names it; the fix is never the doctor itself")
@pytest.mark.parametrize("path, major, minor, mount, opened, init, is_", [
    ("/dev/nvidia-uvm", 1, 3, "/null", None, 999, "1:3, /dev/null, with /null mounted on it"),
    ("/dev/nvidia-uvm", 511, 0, None, 6, 999, "511:0, a major no driver has now"),
    ("/dev/nvidia0", 1, 3, "/null", None, 100, "1:3, /dev/null, with /null mounted on it"),
])
def test_container_node_wrong(path, major, minor, mount, opened, init, is_):
    h = host()
    want = h.node(path)
    found = gpu.findings(h, 200, gpu.parse_container(planted(path, major, minor, mount=mount, opened=opened, init=init)))
    assert kinds(found) == ["container-node-wrong", "cuda-init-failed"]
    f = found[0]
    assert f.node == path and f.what.startswith(f"{path} in the container is {is_}")
    assert f"the host's is {want.major}:{want.minor}, " in f.what
    assert ("opening it fails with ENXIO" in f.what) == (opened == 6)
    key = next(k for k, p, _ in h.configs[200].devs if p == path)
    assert f"pct reboot 200: its config's `{key}: {path}` makes the host's node ({want.major}:{want.minor})" in f.fix
    assert (f"`umount {path}`" in f.fix) == bool(mount)
    assert found[1].what.endswith(f": {path} wrong (above)") and "no GPU node" not in found[1].what
    assert all("doctor" not in x.fix for x in found)


@pytest.mark.fault("A GPU node missing in the container (/dev/nvidiactl removed)",
                   promise="a finding names the node and the host's numbers, with the devN line, or the mount entry "
                           "and the cgroup line with today's major; cuInit's cause names it, not 'no GPU node passed'")
def test_container_node_missing():
    answer = planted("/dev/nvidiactl", 0, 0, gone=True, init=100)
    found = gpu.findings(host(), 200, gpu.parse_container(answer))
    assert kinds(found) == ["container-node-missing", "cuda-init-failed"]
    assert found[0].node == "/dev/nvidiactl"
    assert found[0].what.startswith("/dev/nvidiactl is not in the container (the host's is 195:255, nvidia)")
    assert found[0].fix == "pct reboot 200: its config's `dev1: /dev/nvidiactl` makes the host's node (195:255) at start"
    assert "/dev/nvidiactl missing (above)" in found[1].what and "no GPU node passed" not in found[1].what
    # Passed by raw lxc keys: the mount entry and the cgroup line with the host's major.
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 509:* rwm")
    found = gpu.findings(host(configs={201: raw}), 201, gpu.parse_container(answer))
    assert found[0].fix == ("pct reboot 201: its config's `lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none "
                            "bind,optional,create=file` binds the host's node (195:255) at start, with "
                            "`lxc.cgroup2.devices.allow: c 195:* rwm`")
    # Not passed at all, and a major that is dynamic: the line to add carries today's major (509, not 511).
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "").replace("dev3: /dev/nvidia-uvm-tools\n", "")
    gone = gpu.parse_container(planted("/dev/nvidia-uvm", 0, 0, gone=True))
    found = gpu.container_findings(gone, 200, host(configs={200: cfg}), host(configs={200: cfg}).configs[200])
    assert found[0].code == "container-uvm-missing"
    assert "`dev2: /dev/nvidia-uvm` (`pct set 200 -dev2 /dev/nvidia-uvm`" in found[0].fix
    assert "`lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file` with " \
           "`lxc.cgroup2.devices.allow: c 509:* rwm`" in found[0].fix


def test_without_the_hosts_facts_a_node_is_compared_with_nvidias_numbers_and_the_containers_proc_devices():
    # train's preflight when the host could not be read: 195 is fixed, nvidia-uvm's major is in /proc/devices.
    found = gpu.findings(None, 200, gpu.parse_container(planted("/dev/nvidia-uvm", 511, 0, opened=6)))
    assert kinds(found) == ["container-node-wrong", "cuda-init-failed"]
    assert "511:0, a major no driver has now; it should be 509:0, nvidia-uvm" in found[0].what
    found = gpu.findings(None, 200, gpu.parse_container(planted("/dev/nvidiactl", 0, 0, gone=True)))
    assert "(it should be 195:255, nvidia)" in found[0].what and "c 195:* rwm" in found[0].fix


def test_a_wrong_node_the_cgroup_denies_is_not_a_permission_to_grant():
    # In a real LXC container a stale 511:0 node fails with EPERM (no cgroup line allows 511): allowing 511 is no fix.
    found = gpu.findings(host(), 200, gpu.parse_container(planted("/dev/nvidia-uvm", 511, 0, opened=1)))
    assert kinds(found) == ["container-node-wrong", "cuda-init-failed"]
    assert "511" not in found[0].fix and "opening it fails with EPERM" in found[0].what


def test_cuinit_100_without_a_gpu_node_says_so_and_with_one_does_not():
    no_gpu = gpu.container_findings(gpu.parse_container(planted("/dev/nvidia0", 0, 0, gone=True, init=100)), 200)
    assert kinds(no_gpu) == ["container-node-missing", "cuda-init-failed"] and no_gpu[0].node == "/dev/nvidia0"
    assert no_gpu[1].what.endswith("/dev/nvidia0 missing (above)")
    bare = gpu.container_findings(ct(nodes=[], init=100), 200)  # the libraries, not one node
    assert kinds(bare) == ["cuda-init-failed"] and "no GPU node (/dev/nvidia0..) in the container" in bare[0].what
    everything_there = gpu.container_findings(gpu.parse_container(planted("/dev/nvidia0", 195, 0, init=100)), 200)
    assert kinds(everything_there) == ["cuda-init-failed"]
    assert "no GPU node" not in everything_there[0].what and "doctor" not in everything_there[0].fix


def test_preflight_names_nvidia_smis_own_text(spec):
    from test_preflight import ready

    from remote.ops.jobs import check

    raw = with_gpu(ready(spec), planted("/dev/nvidiactl", 0, 0, gone=True, init=100))
    raw["gpus"] = {"rc": 9, "out": data("smi-no-driver.txt"), "err": ""}  # nvidia-smi says it on stdout
    with pytest.raises(Exception) as got:
        check(raw, spec, host())
    text = str(got.value)
    assert "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate" in text
    assert "[container-node-missing]" in text and "suits the driver" not in text


# -- cgroup lines of other devices (issue 34) ---------------------------------------------------------------------

HIDRAW = data("proc-devices-uvm509.txt").replace("226 drm\n", "226 drm\n242 hidraw\n")


@pytest.mark.fault("A cgroup line for another device beside a missing NVIDIA one (hidraw `c 242:* rwm`)",
                   promise="left alone: only a line whose major belongs to no driver now, or was an NVIDIA major, is "
                           "called stale; the fix adds the NVIDIA line")
def test_a_hidraw_cgroup_line_is_never_called_stale():
    raw = data("pct-config-raw.txt").replace("c 511:* rwm", "c 242:* rwm")
    found = gpu.findings(host(devices=HIDRAW, configs={201: raw}), 201, None)
    assert kinds(found) == ["cgroup-major-stale"]
    assert "242" not in found[0].fix and "add `lxc.cgroup2.devices.allow: c 509:* rwm`" in found[0].fix
    # The same line where 242 belongs to no driver now: stale, replaced.
    found = gpu.findings(host(configs={201: raw}), 201, None)
    assert "replace `lxc.cgroup2.devices.allow: c 242:* rwm` with `lxc.cgroup2.devices.allow: c 509:* rwm`" in found[0].fix
    assert "belongs to no driver now" in found[0].what
    # 242 is hidraw's now, but the container's own /dev/nvidia-uvm still carries it: it was an NVIDIA major.
    old = gpu.parse_container(planted("/dev/nvidia-uvm", 242, 0))
    found = gpu.findings(host(devices=HIDRAW, configs={201: raw}), 201, old)
    assert "replace `lxc.cgroup2.devices.allow: c 242:* rwm`" in found[0].fix
    assert "belongs to hidraw now, the container's NVIDIA node still carries it" in found[0].what


def test_every_major_of_proc_devices_is_read():
    h = host(devices=HIDRAW)
    assert h.drivers[242] == ("hidraw",) and h.drivers[195] == ("nvidia", "nvidia-modeset", "nvidiactl")
    assert h.drivers[4] == ("/dev/vc/0", "tty", "ttyS") and 8 not in h.drivers and 259 not in h.drivers  # block majors (sd, blkext)
    assert h.majors["nvidia-uvm"] == 509


# -- answers of the wrong JSON type (issue 34) ----------------------------------------------------------------------

def retyped(change) -> str:
    first, second = ct_text().splitlines()
    raw = json.loads(first)
    change(raw)
    return json.dumps(raw) + "\n" + second + "\n"


WRONG_TYPES = {
    "nodes[0].major": lambda r: r["nodes"][0].update(major=[1]),
    "nodes[0]": lambda r: r["nodes"].__setitem__(0, "/dev/nvidia0"),
    "nodes": lambda r: r.update(nodes={"path": "/dev/nvidia0"}),
    "nodes[1].open": lambda r: r["nodes"][1].update(open="EPERM"),
    'libs["libcuda.so.1"]': lambda r: r["libs"].update({"libcuda.so.1": "/usr/lib/libcuda.so.1"}),
    'libs["libnvidia-ml.so.1"].version': lambda r: r["libs"]["libnvidia-ml.so.1"].update(version=580),
    "smi": lambda r: r.update(smi="580.95.05"),
    "smi.out": lambda r: r["smi"].update(out=["580.95.05"]),
    "torch.cuda": lambda r: r["torch"].update(cuda=13.0),
    "proc_version": lambda r: r.update(proc_version={"v": 1}),
}


@pytest.mark.fault("A GPU probe answering with wrong JSON types (`\"major\": [1]`, a library as a string)",
                   promise="that container's error naming the field; never a crash of the fleet-wide command")
@pytest.mark.parametrize("field", sorted(WRONG_TYPES))
def test_a_probe_answer_of_the_wrong_type_is_a_value_error_naming_the_field(field, spec):
    from remote import facts as fx

    text = retyped(WRONG_TYPES[field])
    with pytest.raises(ValueError) as got:
        gpu.parse_container(text)
    assert f"the container's GPU probe gave {field} as " in str(got.value)
    assert fx.gpu_of({"gpu": {"rc": 0, "out": text, "err": ""}}) is None  # preflight and doctor: no GPU answer


def test_a_cuinit_line_of_the_wrong_type_is_a_value_error():
    with pytest.raises(ValueError, match="gave cuda as list"):
        gpu.parse_container(ct_text().splitlines()[0] + '\n{"cuda": [0]}\n')
    with pytest.raises(ValueError, match="gave cuda.init as str"):
        gpu.parse_container(ct_text().splitlines()[0] + '\n{"cuda": {"loaded": true, "init": "0"}}\n')


STRAY = [{"pid": 4242, "name": "python", "used_mib": 133120, "run": None, "command": "python hog.py --hold 130g"},
         {"pid": 51, "name": "python", "used_mib": 20480, "run": "20261202-0700-ab12", "command": "python train.py"}]


@pytest.mark.fault("A GPU process of no run holding 130 GiB (doctor --gpu)", promise="doctor --gpu names it (pid, "
                   "MiB, command) as a warning; a run's own processes are not named")
def test_gpu_foreign_processes():
    first, cuda = ct_text().splitlines()
    c = gpu.parse_container(json.dumps({**json.loads(first), "apps": STRAY}) + "\n" + cuda + "\n")
    found = everything(host(), c)
    assert kinds(found) == ["gpu-foreign-processes"] and found[0].severity == "warning"
    assert found[0].what == "GPU processes of no run hold 130.0 GiB: pid 4242 (133120 MiB): python hog.py --hold 130g"
    assert "remote exec -c 200 'kill PID'" in found[0].fix
    assert everything(host(), ct()) == []  # no process listed: nothing
    with pytest.raises(ValueError):  # untrusted: a wrong type is that container's error, not a crash elsewhere
        gpu.parse_container(json.dumps({**json.loads(first), "apps": [{"pid": "4242"}]}) + "\n")


# -- driver lifecycle and moves (`remote gpu fix`, `doctor --gpu -c ID --node N`) --------------------------------

def test_after_a_driver_upgrade_the_host_names_every_stale_container_with_gpu_fix():
    from remote import gpudoctor

    h = host(proc=data("proc-driver-nvidia-version-open.txt").replace("580.95.05", "580.105.08"),
             sys_version="580.105.08", modinfo="580.105.08",
             configs={200: data("pct-config-dev.txt"), 201: data("pct-config-dev.txt"), 202: data("pct-config-dev.txt")})
    cts = []
    for ctid, libs in ((200, "580.95.05"), (201, "580.95.05"), (202, "580.105.08")):
        c = ct(libs=libs)
        cts.append(GpuContainer(ctid, "pve1", c, h.configs[ctid], tuple(gpu.findings(h, ctid, c, "pve1"))))
    assert gpudoctor.stale("pve1", cts) == (200, 201) and gpudoctor.stale("pve2", cts) == ()
    hosts = (GpuHost("pve1", h, tuple(gpu.host_findings(h, "pve1")), stale=gpudoctor.stale("pve1", cts)),)
    report = GpuReport(hosts, tuple(cts))
    text = fmt.gpu_text(report)
    for ctid in (200, 201):
        assert (f"  container {ctid}: driver user space 580.95.05, not the loaded module 580.105.08: "
                f"`remote gpu fix -c {ctid}`") in text
    assert "container 202: driver user space" not in text
    assert fmt.gpu_document(report)["hosts"][0]["stale_containers"] == [200, 201]
    assert "remote gpu fix -c 200" in next(f.fix for f in cts[0].findings if f.code == "driver-lib-mismatch")


def test_a_pending_driver_change_names_the_reboot_then_gpu_fix_for_the_host():
    found = gpu.host_findings(host(modinfo="580.105.08"), "pve1")
    f = next(f for f in found if f.code == "host-reboot-pending")
    assert "580.95.05" in f.what and "580.105.08" in f.what and "remote gpu fix --host pve1 --all" in f.fix


def test_move_node_missing():
    cfg = gpu.parse_pct_config(200, data("pct-config-dev.txt") + "dev4: /dev/nvidia3\nrc=0")
    no_uvm = "\n".join(line for line in data("nodes-509.txt").splitlines() if "nvidia-uvm" not in line)
    found = gpu.move_findings(cfg, host(), host(nodes=no_uvm), "pve2")
    assert [(f.code, f.node) for f in found] == [("move-node-missing", "/dev/nvidia-uvm"),
                                                ("move-node-missing", "/dev/nvidia-uvm-tools"),
                                                ("move-node-missing", "/dev/nvidia3")]
    assert "Proxmox refuses to start container 200 there" in found[0].what
    assert "remote host setup pve2" in found[0].fix and "pve2 has /dev/nvidia0" in found[2].fix
    assert gpu.move_findings(cfg, host(), host(), "pve2")[0].node == "/dev/nvidia3"  # only the GPU the node lacks
    assert gpu.move_findings(gpu.parse_pct_config(200, data("pct-config-cpu.txt") + "rc=0"), host(), host(nodes=""), "pve2") == []


def test_move_no_driver():
    found = gpu.move_findings(gpu.parse_pct_config(200, data("pct-config-dev.txt") + "rc=0"), host(),
                              host(proc="", sys_version="", modules="", smi=""), "pve2")
    assert [f.code for f in found] == ["move-no-driver"] and "580.95.05" in found[0].fix


def test_move_driver_differs():
    other = host(proc=data("proc-driver-nvidia-version-open.txt").replace("580.95.05", "580.105.08"),
                 sys_version="580.105.08")
    cfg = gpu.parse_pct_config(200, data("pct-config-dev.txt") + "rc=0")
    found = gpu.move_findings(cfg, host(), other, "pve2")
    assert [f.code for f in found] == ["move-driver-differs"] and found[0].severity == "warning"
    assert "remote gpu fix -c 200" in found[0].fix
    assert gpu.move_findings(cfg, host(), other, "pve2", mounts_userspace=True) == []  # the node's own folder
