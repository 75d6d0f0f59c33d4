"""Local tier: the lab's simulated NVIDIA driver (remote/lab/fakegpu.py) in a temporary sysroot: its files and
nodes as a host has them, its tools answering from its state, a driver upgrade (on disk, then loaded after a
reboot, the uvm nodes gone until nvidia-modprobe makes them), and the fake libcuda's answers."""

from __future__ import annotations

import ctypes
import os
import subprocess

import pytest

from remote.lab.fakegpu import FakeGpu


@pytest.fixture(autouse=True)
def _root():
    """mknod of the driver's nodes needs root: the suite runs as root (.ci/run); elsewhere this fails loudly."""
    if os.geteuid() != 0:
        pytest.fail("the simulated driver's tests need root (mknod): run the suite as root, as .ci/run does")


@pytest.fixture
def gpu(tmp_path) -> FakeGpu:
    g = FakeGpu(tmp_path / "gpu")
    g.install(2, "570.148.08")
    return g


def tool(gpu: FakeGpu, name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    path = gpu.root / ("usr/sbin" if name == "modinfo" else "usr/bin") / name  # lspci too
    clean = {k: v for k, v in os.environ.items() if k != "container"}
    return subprocess.run([str(path), *args], capture_output=True, text=True, env={**clean, **env})


def test_a_host_with_the_driver_loaded(gpu):
    root = gpu.root
    assert (root / "sys/module/nvidia/version").read_text() == "570.148.08\n"
    assert "Kernel Module  570.148.08  " in (root / "proc/driver/nvidia/version").read_text()
    assert "511 nvidia-uvm" in (root / "proc/devices").read_text()
    nodes = {p.name: (os.major(p.stat().st_rdev), os.minor(p.stat().st_rdev)) for p in (root / "dev").iterdir()
             if not p.is_dir()}
    assert nodes == {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "nvidia-modeset": (195, 254),
                     "nvidia-uvm": (511, 0), "nvidia-uvm-tools": (511, 1)}
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libcuda.so.1") == "libcuda.so.570.148.08"
    r = tool(gpu, "nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader")
    assert r.stdout == "0, NVIDIA H200, 570.148.08, 143771 MiB\n1, NVIDIA H200, 570.148.08, 143771 MiB\n", r.stderr
    assert "Driver Version: 570.148.08" in tool(gpu, "nvidia-smi").stdout
    assert tool(gpu, "nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")
    assert tool(gpu, "modinfo", "-F", "version", "nvidia").stdout == "570.148.08\n"
    lspci = tool(gpu, "lspci", "-nnk", "-d", "10de:").stdout.splitlines()
    assert lspci[0].startswith("18:00.0 3D controller [0302]: NVIDIA") and "\tKernel driver in use: nvidia" in lspci
    assert len([line for line in lspci if not line.startswith("\t")]) == 2


def test_an_upgrade_then_a_reboot(gpu):
    gpu.upgrade("575.1.2")
    assert tool(gpu, "modinfo", "-F", "version", "nvidia").stdout == "575.1.2\n"
    assert (gpu.root / "sys/module/nvidia/version").read_text() == "570.148.08\n"  # a reboot is pending
    r = tool(gpu, "nvidia-smi")
    assert r.returncode == 18 and "Driver/library version mismatch" in r.stdout and "575.1.2" in r.stdout
    assert not (gpu.root / "usr/lib/x86_64-linux-gnu/libcuda.so.570.148.08").exists()
    gpu.reboot()
    assert (gpu.root / "sys/module/nvidia/version").read_text() == "575.1.2\n"
    assert not (gpu.root / "dev/nvidia-uvm").exists() and (gpu.root / "dev/nvidia0").exists()
    assert tool(gpu, "nvidia-modprobe", "-u", "-c", "0").returncode == 0
    assert os.major((gpu.root / "dev/nvidia-uvm").stat().st_rdev) == 511
    assert tool(gpu, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout == "575.1.2\n575.1.2\n"


def test_no_driver_and_no_user_space(gpu):
    gpu.unload()
    r = tool(gpu, "nvidia-smi")
    assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout
    assert not (gpu.root / "proc/modules").exists() and "nvidia" not in (gpu.root / "proc/devices").read_text()
    assert tool(gpu, "nvidia-modprobe", "-u", "-c", "0").returncode == 1
    (gpu.root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").unlink()
    assert tool(gpu, "nvidia-smi").returncode == 12


def test_the_fake_libcuda_answers_from_what_it_sees(gpu):
    lib = gpu.root / "usr/lib/x86_64-linux-gnu/libcuda.so.1"
    try:
        cu = ctypes.CDLL(str(lib))
    except OSError:
        pytest.fail("no C compiler here: the fake libcuda is a text file (install gcc)")
    v = ctypes.c_int(0)
    assert cu.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value == 12080
    if not os.path.exists("/dev/nvidiactl"):  # this machine's /dev: no driver's nodes
        assert cu.cuInit(0) == 100
    gpu.upgrade("575.1.2")
    gpu.reboot()
    assert cu.cuInit(0) == 803  # the library loaded (570) is not the module loaded (575)
