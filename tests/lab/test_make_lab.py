"""Lab tier: the pct double's making verbs through the real sshd (create, set, start with devN and mpN, template,
clone, destroy), as `remote create` and `remote gpu fix` drive them; and the hosts file the LXC lab writes for
its own folder and port. The lab of this module is its own (containers 260-263, no deploy)."""

import os
import stat
import tempfile
from pathlib import Path

import pytest
from support import free_port

from remote import config
from remote.transport import SshTransport
from remote.transport.pct import pct_argv

pytestmark = pytest.mark.lab
BASE, MADE, COPY, OWN = 260, 261, 262, 263


@pytest.fixture(scope="module")
def make_lab():
    from remote.lab import Lab

    lab = Lab(dir=Path(tempfile.mkdtemp(prefix="remote-make-lab-", dir="/var/tmp")), port=free_port())
    try:
        lab.up((OWN,), wheels=False)
        yield lab
    finally:
        lab.down(purge=True)


@pytest.fixture(scope="module")
def host(make_lab):
    t = SshTransport(config.Host(name="lab", address="127.0.0.1", port=make_lab.port, user="root",
                                 key_file=str(make_lab.key_file), known_hosts=str(make_lab.known_hosts),
                                 connect_timeout=5.0))
    yield lambda *args: t.run(pct_argv("pct", *args))
    t.close()


@pytest.fixture
def node():
    """A character device of the host's (the numbers of /dev/null) that the containers do not have."""
    path = Path(f"/dev/remote-test-{os.getpid()}")
    null = os.stat("/dev/null")
    os.mknod(path, stat.S_IFCHR | 0o600, null.st_rdev)
    yield path
    path.unlink()


def test_the_lxc_lab_writes_its_own_hosts_file(make_lab):
    """Issue 40 item 7: a lab in another folder on another port gets a hosts file that reaches it, no hand edits."""
    cfg = config.load(str(make_lab.dir / "hosts.yaml"))
    lab_host = cfg.hosts["lab"]
    assert (lab_host.port, lab_host.key_file, lab_host.known_hosts) == (
        make_lab.port, str(make_lab.key_file), str(make_lab.known_hosts))
    assert (make_lab.dir / "hosts.yaml").read_text().startswith((make_lab.dir / "hosts-bare.yaml").read_text())


def test_create_set_start_and_destroy(make_lab, host, node, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello").write_text("hi\n")
    r = host("create", str(MADE), make_lab.template, "--hostname", "made", "--cores", "2", "--memory", "2048",
             "--dev0", f"{node},gid=44,mode=0660", "--mp0", f"{shared},mp=/data,ro=1")
    assert r.exit_code == 0 and "extracting archive" in r.out, r.err
    r = host("create", str(MADE), make_lab.template)
    assert r.err == f"unable to create CT {MADE} - CT {MADE} already exists on node 'lab'\n"
    assert host("start", str(MADE)).exit_code == 0
    r = host("exec", str(MADE), "--", "sh", "-c", f"hostname; stat -c '%t:%T %g %a' {node}; cat /data/hello; "
                                                    "touch /data/x 2>/dev/null || echo read-only")
    null = os.stat("/dev/null").st_rdev
    assert r.out.split("\n") == ["made", f"{os.major(null):x}:{os.minor(null):x} 44 660", "hi", "read-only", ""], r.err
    assert host("destroy", str(MADE)).err == f"CT {MADE} is running - destroy failed\n"
    # A devN line deleted takes effect at the next start; a device gone from the host fails the start.
    assert host("set", str(MADE), "--delete", "dev0").exit_code == 0
    assert host("stop", str(MADE)).exit_code == 0 and host("start", str(MADE)).exit_code == 0
    assert host("exec", str(MADE), "--", "test", "-e", str(node)).exit_code == 1
    assert host("set", str(MADE), "--dev0", "/dev/remote-test-none").err == "Device /dev/remote-test-none does not exist\n"
    assert host("stop", str(MADE)).exit_code == 0
    assert host("destroy", str(MADE), "--purge").exit_code == 0
    assert not (make_lab.lxc / str(MADE)).exists() and str(MADE) not in host("list").out


def test_a_template_cloned(make_lab, host):
    assert host("create", str(BASE), make_lab.template, "--hostname", "base").exit_code == 0
    assert host("start", str(BASE)).exit_code == 0
    assert host("exec", str(BASE), "--", "sh", "-c", "echo baked > /root/baked").exit_code == 0
    assert host("template", str(BASE)).err == "you can't convert a CT to template if the CT is running\n"
    host("stop", str(BASE))
    assert host("template", str(BASE)).exit_code == 0
    assert host("start", str(BASE)).err == "you can't start a CT if it's a template\n"
    r = host("clone", str(BASE), str(COPY), "--hostname", "copy", "--full", "1")
    assert r.exit_code == 0, r.err
    assert host("start", str(COPY)).exit_code == 0
    assert host("exec", str(COPY), "--", "sh", "-c", "hostname; cat /root/baked").out == "copy\nbaked\n"
    assert "template" not in host("config", str(COPY)).out
    host("stop", str(COPY))
    for vmid in (COPY, BASE):
        assert host("destroy", str(vmid)).exit_code == 0


GPU_CT = 264
LIB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def gpu_lab():
    """A lab whose host has a simulated NVIDIA driver (2 GPUs, remote/lab/fakegpu.py)."""
    from remote.lab import Lab

    lab = Lab(dir=Path(tempfile.mkdtemp(prefix="remote-gpu-lab-", dir="/var/tmp")), port=free_port(), fake_gpu=2)
    try:
        lab.up((), wheels=False)
        yield lab
    finally:
        lab.down(purge=True)


def test_a_simulated_driver_behind_the_seam(gpu_lab):
    """The host's commands see REMOTE_GPU_SYSROOT; its tools answer from the driver's state; a container given the
    nodes by devN (resolved in the sysroot) and the user space by bind mounts has CUDA; a driver upgrade, a reboot
    and a removed uvm node behave as on a host."""
    t = SshTransport(config.Host(name="lab", address="127.0.0.1", port=gpu_lab.port, user="root",
                                 key_file=str(gpu_lab.key_file), known_hosts=str(gpu_lab.known_hosts), connect_timeout=5.0))
    root = gpu_lab.gpu_sysroot_path()

    def host(script: str):
        return t.run(["bash", "-c", 'PATH="$REMOTE_GPU_SYSROOT/usr/sbin:$REMOTE_GPU_SYSROOT/usr/bin:$PATH"; ' + script])

    assert host('echo "$REMOTE_GPU_SYSROOT"; modinfo -F version nvidia').out == f"{root}\n570.148.08\n"
    assert host("nvidia-smi --query-gpu=index --format=csv,noheader").out == "0\n1\n"
    lib = "libcuda.so.570.148.08"
    ml = "libnvidia-ml.so.570.148.08"
    r = t.run(pct_argv("pct", "create", str(GPU_CT), gpu_lab.template, "--hostname", "gpu",
                       "--dev0", "/dev/nvidia1", "--dev1", "/dev/nvidiactl", "--dev2", "/dev/nvidia-uvm",
                       "--dev3", "/dev/nvidia-uvm-tools",
                       "--mp0", f"{root}/{LIB}/{lib},mp={LIB}/{lib},ro=1", "--mp1", f"{root}/{LIB}/{ml},mp={LIB}/{ml},ro=1"))
    assert r.exit_code == 0, r.err
    assert t.run(pct_argv("pct", "start", str(GPU_CT))).exit_code == 0

    def inside(script: str):
        return t.run(pct_argv("pct", "exec", str(GPU_CT), "--", "bash", "-c", script))

    # What a create would do in the container: the sonames' links, then the driver's nvidia-smi by its host path.
    assert inside(f"ln -sf {lib} {LIB}/libcuda.so.1 && ln -sf {ml} {LIB}/libnvidia-ml.so.1").exit_code == 0
    r = inside(f"{root}/usr/bin/nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader")
    assert r.out == "0, 00000000:28:00.0\n", r.err  # the host's second GPU, the container's first
    cuinit = "python3 -c 'import ctypes; print(ctypes.CDLL(\"libcuda.so.1\").cuInit(0))'"
    assert inside(cuinit).out == "0\n"
    # A removed uvm node: the start fails as Proxmox's does, until nvidia-modprobe makes it again.
    gpu_lab.fake_gpu_remove_node("nvidia-uvm")
    assert t.run(pct_argv("pct", "stop", str(GPU_CT))).exit_code == 0
    assert t.run(pct_argv("pct", "start", str(GPU_CT))).err == "Device /dev/nvidia-uvm does not exist\n"
    assert host("nvidia-modprobe -u -c 0").exit_code == 0
    assert t.run(pct_argv("pct", "start", str(GPU_CT))).exit_code == 0 and inside(cuinit).out == "0\n"
    # A raw mount entry binding another node over the uvm one (after the devN nodes, as LXC applies it).
    conf = gpu_lab.lxc / str(GPU_CT) / "pve.conf"
    good = conf.read_text()
    conf.write_text(good + "lxc.mount.entry: /dev/nvidia1 dev/nvidia-uvm none bind,optional,create=file\n")
    t.run(pct_argv("pct", "stop", str(GPU_CT)))
    assert t.run(pct_argv("pct", "start", str(GPU_CT))).exit_code == 0
    assert inside("stat -c %t:%T /dev/nvidia-uvm").out == "c3:1\n" and inside(cuinit).out == "999\n"
    conf.write_text(good)
    t.run(pct_argv("pct", "stop", str(GPU_CT)))
    assert t.run(pct_argv("pct", "start", str(GPU_CT))).exit_code == 0 and inside(cuinit).out == "0\n"
    # An upgrade: on disk first (the host's nvidia-smi: mismatch), loaded after the reboot; the container's
    # libraries are the old version's: cuInit answers 803 until they are re-matched.
    gpu_lab.fake_gpu_upgrade("575.1.2")
    assert host("nvidia-smi").exit_code == 18
    gpu_lab.fake_gpu_reboot()
    assert host("nvidia-smi --query-gpu=driver_version --format=csv,noheader").out == "575.1.2\n575.1.2\n"
    assert inside(cuinit).out == "803\n"
    t.run(pct_argv("pct", "stop", str(GPU_CT)))
    assert t.run(pct_argv("pct", "destroy", str(GPU_CT))).exit_code == 0
    t.close()
