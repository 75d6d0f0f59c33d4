"""Lab tier: `remote gpu fix` after each plantable fault, and a simulated driver upgrade re-matched by one command,
on a lab whose host has the simulated NVIDIA driver (remote/lab/fakegpu.py, 2 GPUs): real sshd, real LXC, the
pct double applying devN and mpN at start. Each container is given its GPU lines as `remote create` writes them
(remote.ops.gpuconfig: devN lines, the host's driver folder mounted read-only), then a fault is planted, doctor
--gpu names it, gpu fix repairs it, and cuInit(0) in the container is 0 again. The lab of this module is its own
(containers 280, 281; no deploy)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support import free_port

import remote
from remote import shell
from remote.cli import format as fmt
from remote.facts import gpu
from remote.ops import gpuconfig
from remote.transport import SshTransport
from remote.transport.pct import pct_argv

pytestmark = pytest.mark.lab
A, B = 280, 281
VERSION, NEW = "570.148.08", "575.51.2"
ROOT = Path(__file__).resolve().parents[2]
CUINIT = "python3 -c 'import ctypes; print(ctypes.CDLL(\"libcuda.so.1\").cuInit(0))'"


@pytest.fixture(scope="module")
def gpu_lab():
    from remote.lab import Lab

    lab = Lab(dir=Path(tempfile.mkdtemp(prefix="remote-gpufix-lab-", dir="/var/tmp")), port=free_port(), fake_gpu=2,
              fake_gpu_version=VERSION)
    try:
        lab.up((A, B), wheels=False)
        yield lab
    finally:
        lab.down(purge=True)


@pytest.fixture(scope="module")
def host(gpu_lab):
    from remote import config

    t = SshTransport(config.Host(name="lab", address="127.0.0.1", port=gpu_lab.port, user="root",
                                 key_file=str(gpu_lab.key_file), known_hosts=str(gpu_lab.known_hosts),
                                 connect_timeout=5.0))
    yield t
    t.close()


def pct(host, *args: str):
    r = host.run(pct_argv("pct", *args))
    assert r.exit_code == 0, f"pct {shlex.join(args)}: {r.err}"
    return r


def inside(host, ctid: int, script: str):
    """`script` in the container as remote runs its commands: none of the host's login environment (a PATH
    with a pyenv shim first, as on a developer's machine, made each python3 here wait on pyenv's lock)."""
    return host.run(pct_argv("pct", "exec", str(ctid), "--keep-env", "0", "--", "env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                             "bash", "-c", script))


def cuinit(host, ctid: int) -> str:
    return inside(host, ctid, CUINIT).out.strip()


def given_a_gpu(host, ctid: int, index: int) -> None:
    """The container as `remote create --gpu INDEX` leaves it: the host's folder filled, the devN and mpN lines
    of gpuconfig's plan, started, the loader pointed at the mounted libraries (remote/sh/nvidia-link.sh)."""
    r = host.run(["bash", "-c", shell.load("nvidia-userspace"), "nvidia-userspace", gpuconfig.USERSPACE_HOST])
    assert r.exit_code == 0, r.out + r.err
    argv, mark = gpu.host_argv(["pct"], [])
    facts = gpu.parse_host(host.run(argv).out, mark)
    assert facts.loaded == VERSION, facts
    plan = gpuconfig.plan(pct(host, "config", str(ctid)).out,
                          gpuconfig.wanted_lines(gpuconfig.Selection("list", (index,)), facts))
    host.run(pct_argv("pct", "stop", str(ctid)))
    pct(host, "set", str(ctid), *plan.pct_args())
    pct(host, "start", str(ctid))
    r = host.run(pct_argv("pct", "exec", str(ctid), "--", "bash", "-c", shell.load("nvidia-link"), "nvidia-link",
                          gpuconfig.USERSPACE_CT))
    assert r.exit_code == 0, r.err
    assert cuinit(host, ctid) == "0"


@pytest.fixture(scope="module")
def gpus_given(gpu_lab, host):
    for ctid, index in ((A, 0), (B, 1)):
        given_a_gpu(host, ctid, index)
        # The lab's /etc/pve/lxc/ID.conf (where gpu fix drops raw lines pct cannot): the double's config file.
        conf = Path(gpu_lab.gpu_sysroot_path()) / f"etc/pve/lxc/{ctid}.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        if not conf.is_symlink():
            conf.symlink_to(gpu_lab.lxc / str(ctid) / "pve.conf")


@pytest.fixture
def fleet(gpu_lab, gpus_given):
    with remote.open(str(gpu_lab.dir / "hosts-bare.yaml")) as f:  # per test: its kept connection in the test's runtime dir
        yield f


def kinds_of(fleet, ctid: int) -> set[str]:
    report = fleet.doctor_gpu(ctid)
    return {f.code for c in report.containers for f in c.findings} | {f.code for h in report.hosts for f in h.findings}


@pytest.mark.fault("A devN line deleted from a GPU container's config (the lab's simulated driver)",
                   promise="doctor --gpu names it; `remote gpu fix` shows the line as a diff, writes it, restarts the "
                           "container and proves cuInit 0")
def test_gpu_fix_after_a_devn_line_deleted(fleet, host, gpu_lab):
    key = next(line.split(":")[0] for line in pct(host, "config", str(A)).out.splitlines()
               if line.startswith("dev") and "/dev/nvidia-uvm," in line)
    pct(host, "stop", str(A))
    pct(host, "set", str(A), "--delete", key)
    pct(host, "start", str(A))
    assert cuinit(host, A) == "999"
    assert "device-not-passed" in kinds_of(fleet, A)
    before = pct(host, "config", str(A)).out
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "gpu", "fix", "-c",
                        str(A), "--dry", "--hosts", str(gpu_lab.dir / "hosts-bare.yaml")], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert f"container {A} on lab: would fix" in r.stdout and "  + dev" in r.stdout and "/dev/nvidia-uvm," in r.stdout
    assert "would run: pct set" in r.stdout and pct(host, "config", str(A)).out == before  # dry: nothing written
    done = fleet.container(A).gpu_fix()
    assert any(line.startswith("+ dev") and "/dev/nvidia-uvm," in line for line in done.diff), done.diff
    assert done.restarted and done.cuda_init == 0 and done.ok, done
    assert cuinit(host, A) == "0"


@pytest.mark.fault("A GPU node bound over in the container by a raw lxc.mount.entry line (the lab's simulated driver)",
                   promise="doctor --gpu names the node and its numbers; `remote gpu fix` shows the raw line as a "
                           "diff, drops it from the config, restarts the container and proves cuInit 0")
def test_gpu_fix_after_a_node_bound_over(fleet, host, gpu_lab):
    line = "lxc.mount.entry: /dev/nvidia-modeset dev/nvidia-uvm none bind,create=file"
    conf = gpu_lab.lxc / str(A) / "pve.conf"
    conf.write_text(conf.read_text() + line + "\n")
    pct(host, "stop", str(A))
    pct(host, "start", str(A))
    assert cuinit(host, A) == "999"
    report = fleet.doctor_gpu(A)
    wrong = [f for c in report.containers for f in c.findings if f.code == "container-node-wrong"]
    assert [f.node for f in wrong] == ["/dev/nvidia-uvm"] and "195:254" in wrong[0].what
    done = fleet.container(A).gpu_fix()
    assert done.diff == (f"- {line}",) and done.restarted and done.ok and done.cuda_init == 0, done
    assert line not in conf.read_text() and cuinit(host, A) == "0"


@pytest.mark.fault("The uvm node missing on the host (the lab's simulated driver)",
                   promise="doctor --gpu names it; `remote gpu fix` makes it with nvidia-modprobe -u -c 0, restarts "
                           "only a container that lacks it, and proves cuInit 0")
def test_gpu_fix_after_the_hosts_uvm_node_removed(fleet, host, gpu_lab):
    gpu_lab.fake_gpu_remove_node("nvidia-uvm")
    gpu_lab.fake_gpu_remove_node("nvidia-uvm-tools")
    assert "host-uvm-not-loaded" in kinds_of(fleet, B)
    done = fleet.container(B).gpu_fix()
    assert not done.restarted and done.diff == () and done.ok, done  # its own node was made at its start
    assert (Path(gpu_lab.gpu_sysroot_path()) / "dev/nvidia-uvm").is_char_device()
    pct(host, "stop", str(B))
    pct(host, "start", str(B))  # Proxmox's start checks the devN node: there again
    assert cuinit(host, B) == "0"


@pytest.mark.fault("The host's /dev/nvidia-uvm-tools alone missing (CUDA run as root remakes /dev/nvidia-uvm, never -tools)",
                   promise="doctor --gpu names it (the container's next start would be refused); `remote gpu fix` "
                           "makes it, and the container restarts")
def test_gpu_fix_after_the_hosts_uvm_tools_node_alone_removed(fleet, host, gpu_lab):
    gpu_lab.fake_gpu_remove_node("nvidia-uvm-tools")
    assert "host-uvm-not-loaded" in kinds_of(fleet, B)
    done = fleet.container(B).gpu_fix()
    assert done.ok, done
    assert (Path(gpu_lab.gpu_sysroot_path()) / "dev/nvidia-uvm-tools").is_char_device()
    pct(host, "stop", str(B))
    assert pct(host, "start", str(B)).exit_code == 0  # Proxmox's start checks every devN node: there again
    assert cuinit(host, B) == "0"


@pytest.mark.fault("The container's driver user space removed, or replaced by another version's",
                   promise="doctor --gpu names it; `remote gpu fix` refills the host's folder and points the "
                           "container's loader at it again, without a restart; cuInit 0")
@pytest.mark.parametrize("how", ["removed", "libcuda-only", "replaced"])
def test_gpu_fix_after_the_user_space_removed_or_replaced(fleet, host, how):
    lib = "/usr/lib/x86_64-linux-gnu"
    if how == "removed":
        plant = "rm -f /etc/ld.so.conf.d/000-remote-nvidia.conf && ldconfig"
    elif how == "libcuda-only":  # as on the H200 machine: libnvidia-ml still found (nvidia-smi works), libcuda not
        plant = (f"mkdir -p /opt/other && cp -L {gpuconfig.USERSPACE_CT}/current/lib/libnvidia-ml.so.1 /opt/other/ && "
                 "echo /opt/other > /etc/ld.so.conf.d/zz-nvml.conf && rm -f /etc/ld.so.conf.d/000-remote-nvidia.conf && "
                 "ldconfig && ! ldconfig -p | grep -q 'libcuda\\.so\\.1 '")
    else:  # another version's files found first (the same binary under another version's name)
        plant = (f"mkdir -p /opt/other && cp -L {gpuconfig.USERSPACE_CT}/current/lib/libcuda.so.1 "
                 f"/opt/other/libcuda.so.560.35.03 && ln -sf libcuda.so.560.35.03 /opt/other/libcuda.so.1 && "
                 "echo /opt/other > /etc/ld.so.conf.d/000-remote-nvidia.conf && ldconfig")
    assert inside(host, A, plant).exit_code == 0
    want = "driver-lib-mismatch" if how == "replaced" else "no-driver-libs"
    assert want in kinds_of(fleet, A)
    done = fleet.container(A).gpu_fix()
    assert not done.restarted and done.ok and done.cuda_init == 0, done
    assert want not in kinds_of(fleet, A)
    inside(host, A, f"rm -rf /opt/other /etc/ld.so.conf.d/zz-nvml.conf; ldconfig; ls {lib} > /dev/null")


@pytest.mark.fault("A driver upgrade and a reboot of the host (the lab's simulated driver)",
                   promise="doctor --gpu names the pending reboot, then every container whose user space no longer "
                           "matches with `remote gpu fix -c ID`; `remote gpu fix --host H --all` re-matches them all")
def test_a_driver_upgrade_is_named_for_every_container_and_rematched_by_one_command(fleet, host, gpu_lab):
    gpu_lab.fake_gpu_upgrade(NEW)
    assert "host-reboot-pending" in kinds_of(fleet, A)
    gpu_lab.fake_gpu_reboot()
    for ctid in (A, B):
        assert cuinit(host, ctid) == "803"
    report = fleet.doctor_gpu([A, B])
    text = fmt.gpu_text(report)
    for ctid in (A, B):
        assert f"not the loaded module {NEW}: `remote gpu fix -c {ctid}`" in text, text
    t0 = time.monotonic()
    result = fleet.gpu_fix_host("lab")
    seconds = time.monotonic() - t0
    assert set(result) == {A, B} and result.ok, {k: (o.error, o.value) for k, o in result.items()}
    for ctid in (A, B):
        assert result[ctid].value.cuda_init == 0 and cuinit(host, ctid) == "0"
    assert "stale_containers" in fmt.gpu_document(report)["hosts"][0]
    print(f"re-matched {len(result)} containers after the upgrade in {seconds:.2f} s")


@pytest.mark.fault("A host rebooted after a driver upgrade, with `remote host setup`'s boot unit installed",
                   promise="host setup writes the unit and its scripts once (dry writes nothing, again changes "
                           "nothing); its boot script makes the uvm nodes and refills the driver folder, so a "
                           "container that mounts it runs CUDA on the new module with no command of its own")
def test_host_setup_installs_the_boot_unit_once_and_its_boot_script_rematches_the_containers(fleet, host, gpu_lab):
    from remote.ops import hostsetup

    root = Path(gpu_lab.gpu_sysroot_path())
    dry = fleet.host_setup("lab", dry=True)
    assert dry.dry and set(dry.written) == {p for p, _ in hostsetup.FILES} and dry.enabled == ("remote-gpu.service",)
    assert not (root / hostsetup.UNIT.lstrip("/")).exists()
    done = fleet.host_setup("lab")
    assert set(done.written) == {p for p, _ in hostsetup.FILES} and not done.noop
    assert "Before=pve-guests.service" in (root / hostsetup.UNIT.lstrip("/")).read_text()
    assert (root / "etc/systemd/system/multi-user.target.wants/remote-gpu.service").is_symlink()
    assert fleet.host_setup("lab").noop
    newer = "580.65.06"
    gpu_lab.fake_gpu_upgrade(newer)
    gpu_lab.fake_gpu_reboot()
    assert not (root / "dev/nvidia-uvm").exists() and cuinit(host, A) == "803"
    r = host.run(["bash", str(root / "usr/local/lib/remote/gpu-boot.sh")])  # what remote-gpu.service runs at boot
    assert r.exit_code == 0, r.out + r.err
    assert (root / "dev/nvidia-uvm").is_char_device()
    assert (root / "var/lib/remote/nvidia/current/VERSION").read_text().strip() == newer
    for ctid in (A, B):
        assert cuinit(host, ctid) == "0"
    # The libraries the containers' loaders find are the new module's (the folder they mount, refilled at boot).
    # (Their nvidia-smi is not asked here: the simulated one reads the lab's sysroot through the container's
    # overlay root, which can show it as it was before the upgrade.)
    report = fleet.doctor_gpu([A, B])
    assert {c.container: set(c.facts.lib_versions.values()) for c in report.containers} == {A: {newer}, B: {newer}}
