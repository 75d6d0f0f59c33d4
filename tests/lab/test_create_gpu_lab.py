"""Lab tier: `remote create --gpu` on a lab host with the simulated NVIDIA driver (remote/lab/fakegpu.py, two
GPUs): the uvm node made first when the host lacks it, devN lines for exactly the chosen GPUs, the host's own
user space of the loaded version mounted read-only and found by the loader, the proof (the fake libcuda's
cuInit answers as the real one from what the container sees; nvidia-smi lists the chosen GPUs); a GPU index
the host lacks refused naming what it has. The lab of this module is its own (containers 293, 298, 299)."""

import tempfile
from pathlib import Path

import pytest
from support import free_port

from remote import config
from remote.errors import GpuConfigError
from remote.transport import SshTransport
from remote.transport.pct import pct_argv

pytestmark = pytest.mark.lab
OWN, ONE, MISSING = 293, 298, 299


@pytest.fixture(scope="module")
def gpu_lab():
    from remote.lab import Lab

    lab = Lab(dir=Path(tempfile.mkdtemp(prefix="remote-create-gpu-", dir="/var/tmp")), port=free_port(), fake_gpu=2)
    try:
        lab.up((OWN,), wheels=False)
        yield lab
    finally:
        lab.down(purge=True)


@pytest.fixture(scope="module")
def hosts(gpu_lab, tmp_path_factory):
    path = tmp_path_factory.mktemp("create-gpu") / "hosts.yaml"
    path.write_text((gpu_lab.dir / "hosts-bare.yaml").read_text())
    return path


def host_run(lab, *argv):
    t = SshTransport(config.Host(name="lab", address="127.0.0.1", port=lab.port, user="root",
                                 key_file=str(lab.key_file), known_hosts=str(lab.known_hosts), connect_timeout=5.0))
    try:
        return t.run(list(argv))
    finally:
        t.close()


@pytest.mark.fault("remote create --gpu on a host whose /dev/nvidia-uvm is missing (after a reboot)",
                   "the uvm nodes are made first (nvidia-modprobe -u -c 0) and said so; the container gets them")
def test_create_with_one_gpu_passes_it_mounts_the_user_space_and_proves_cuda(gpu_lab, hosts):
    import remote

    gpu_lab.fake_gpu_remove_node("nvidia-uvm")
    with remote.open(str(hosts)) as fleet:
        got = fleet.create(ONE, host="lab", template=gpu_lab.template, gpu="1", storage="local", disk=4)
    assert got.made and got.gpus == (1,) and got.driver == gpu_lab.fake_gpu_version
    assert any("nvidia-modprobe -u -c 0" in n for n in got.notes)
    assert [s.name for s in got.steps] == ["preflight", "create", "gpu config", "start", "packages", "driver", "proof",
                                           "mark", "hosts file"]
    conf = host_run(gpu_lab, *pct_argv("pct", "config", str(ONE))).out
    assert "dev0: /dev/nvidia1,gid=44,mode=0666" in conf and "/dev/nvidia0," not in conf
    assert "mp0: /var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1" in conf and "lxc.cgroup" not in conf
    inside = host_run(gpu_lab, *pct_argv("pct", "exec", str(ONE), "--", "sh", "-c",
                                         "ls /dev/nvidia*; cat /opt/remote/nvidia/current/VERSION; "
                                         "ldconfig -p | grep libcuda.so.1; nvidia-smi -L | wc -l"))
    out = inside.out
    assert "/dev/nvidia1" in out and "/dev/nvidia0" not in out and "/dev/nvidia-uvm" in out, out + inside.err
    assert gpu_lab.fake_gpu_version in out and "/opt/remote/nvidia/current/lib/libcuda.so.1" in out
    assert out.strip().endswith("1")
    assert config.load(str(hosts)).containers[ONE].host.name == "lab"


def test_a_gpu_index_the_host_lacks_is_refused_naming_what_it_has(gpu_lab, hosts):
    import remote

    before = hosts.read_text()
    with remote.open(str(hosts)) as fleet:
        with pytest.raises(GpuConfigError, match=r"no GPU 5 \(it has: 0, 1\)"):
            fleet.create(MISSING, host="lab", template=gpu_lab.template, gpu="0,5", storage="local", disk=4)
    assert "does not exist" in host_run(gpu_lab, *pct_argv("pct", "config", str(MISSING))).err
    assert hosts.read_text() == before
