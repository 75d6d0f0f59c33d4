"""Local tier: the host's GPU probe (remote/sh/gpu-host.sh) run by bash on this machine, with a pct that
prints a GPU container's config, and the container's probe (remote/sh/gpu_container.py) in a mount
namespace whose /dev holds planted /dev/nvidia* nodes (the parsers and findings as data are in
tests/unit/test_gpu.py)."""

import os
import subprocess
from pathlib import Path

import pytest

from remote.facts import gpu

DATA = Path(__file__).parent.parent / "data" / "gpu"


def test_host_probe_script_runs_and_parses(tmp_path):
    """The real remote/sh/gpu-host.sh on this machine, with a pct that prints a GPU container's config."""
    pct = tmp_path / "pct"
    pct.write_text(f"#!/bin/sh\n[ \"$1\" = config ] && [ \"$2\" = 200 ] && cat {DATA / 'pct-config-dev.txt'} && exit 0\n"
                   "echo \"Configuration file 'nodes/x/lxc/$2.conf' does not exist\" >&2; exit 2\n")
    pct.chmod(0o755)
    argv, mark = gpu.host_argv([str(pct)], [200, 999])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    h = gpu.parse_host(r.stdout, mark)
    assert [p for _, p, _ in h.configs[200].devs][:1] == ["/dev/nvidia0"]
    assert h.configs[999].error and "does not exist" in h.configs[999].error
    if not os.path.exists("/proc/driver/nvidia/version"):  # a CPU machine: the container is configured, no driver
        assert [f.code for f in gpu.host_findings(h)] == ["host-no-driver"]


def data_host() -> gpu.HostGpu:
    """A healthy host as tests/data/gpu has it: nvidia-uvm at major 509, container 200 passed by devN lines."""
    return gpu.HostGpu("6.8.12-4-pve", {}, "580.95.05", True, "580.95.05", ("nvidia_uvm", "nvidia"),
                       gpu.parse_devices((DATA / "proc-devices-uvm509.txt").read_text()),
                       gpu.parse_nodes((DATA / "nodes-509.txt").read_text()), (), True, (), None,
                       {200: gpu.parse_pct_config(200, (DATA / "pct-config-dev.txt").read_text() + "rc=0")},
                       gpu.parse_char_devices((DATA / "proc-devices-uvm509.txt").read_text()))


PLANT = ("mount -t tmpfs gpu-probe-dev /dev && mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/nvidia-uvm c 511 0 "
         "&& mknod -m 666 /dev/nvidiactl c 195 255 && : > /dev/nvidia0 && mount --bind /dev/null /dev/nvidia0 "
         '&& exec "$@"')


@pytest.mark.fault("A wrong GPU node in the container (a bind of /dev/null, a stale major)",
                   promise="a finding names the node, what it is and the host's numbers, with a fix from its config "
                           "line; cuInit's cause names it; the fix is never the doctor itself")
def test_the_real_probe_names_a_node_bound_to_dev_null_and_one_of_a_stale_major(tmp_path):
    """remote/sh/gpu_container.py in a mount namespace whose /dev holds /dev/nvidia0 bound to /dev/null, a
    /dev/nvidia-uvm of the stale major 511 and a right /dev/nvidiactl; compared with a host whose nvidia-uvm
    is 509 (tests/data/gpu), each wrong node is named with what it is and what it should be."""
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", PLANT, "plant", *gpu.container_argv(str(tmp_path))]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ct = gpu.parse_container(r.stdout)
    h = data_host()
    assert ct.node("/dev/nvidia0") == gpu.Node("/dev/nvidia0", 1, 3, 0, 0, 0o666, True, None, "/null")
    assert ct.node("/dev/nvidia-uvm").open_errno == 6  # ENXIO: no driver has major 511 here
    assert 1 in ct.drivers and ct.drivers[1] == ("mem",)  # /proc/devices read in the container
    found = {f.node: f for f in gpu.container_findings(ct, 200, h, h.configs[200])}
    assert found["/dev/nvidia0"].code == "container-node-wrong"
    assert found["/dev/nvidia0"].what.startswith("/dev/nvidia0 in the container is 1:3, /dev/null, with /null "
                                                    "mounted on it; the host's is 195:0, nvidia")
    assert found["/dev/nvidia0"].fix.startswith("in the container `umount /dev/nvidia0`")
    assert found["/dev/nvidia-uvm"].what.startswith("/dev/nvidia-uvm in the container is 511:0, a major no driver "
                                                       "has now; the host's is 509:0, nvidia-uvm; opening it fails "
                                                       "with ENXIO")
    assert "`dev2: /dev/nvidia-uvm`" in found["/dev/nvidia-uvm"].fix
    assert "/dev/nvidiactl" not in found  # its numbers are the host's
    assert all("doctor" not in f.fix for f in found.values())
