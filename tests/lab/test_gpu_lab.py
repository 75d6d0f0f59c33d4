"""Lab tier: the GPU probes against the lab (real sshd, real LXC, the pct double answering `pct config`).

This machine has no NVIDIA driver: a container configured with NVIDIA device lines must give
`host-no-driver`, a CPU container nothing, in one round trip per host and one per container; and a
container whose probe answers with wrong JSON types is that container's error, not the command's.
"""

import json
import os
import subprocess
import sys

import pytest
from support import LAB_CONTAINERS, CountingTransport

from remote import config, gpudoctor
from remote.transport import for_host
from remote.transport.pct import pct_argv
from remote.transport.session import Session

pytestmark = pytest.mark.lab
GPU_LINES = ("dev0: /dev/nvidia0\ndev1: /dev/nvidiactl\n"
             "lxc.cgroup2.devices.allow: c 195:* rwm\n"
             "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n")
GPU_CT, CPU_CT = LAB_CONTAINERS[0], LAB_CONTAINERS[1]


@pytest.fixture
def gpu_configured(lab):
    """The first lab container's Proxmox config with NVIDIA lines (raw lxc lines first in the file, a key after
    them, to see pct config sort); put back afterwards."""
    conf = lab.lxc / str(GPU_CT) / "pve.conf"
    before = conf.read_text()
    lxc_first = "".join(line + "\n" for line in GPU_LINES.splitlines() if line.startswith("lxc."))
    devs = "".join(line + "\n" for line in GPU_LINES.splitlines() if not line.startswith("lxc."))
    conf.write_text(lxc_first + before + devs + "cores: 4\n[before-deploy]\ndev9: /dev/nvidia9\n")
    yield conf
    conf.write_text(before)


def test_pct_config_answers_from_the_containers_config_as_proxmox_does(lab_session, gpu_configured):
    t = lab_session.transport(lab_session.config.hosts["lab"])
    r = t.run(pct_argv("pct", "config", str(GPU_CT)))
    lines = r.out.splitlines()
    keys = [line.split(":")[0] for line in lines]
    first_raw = next(i for i, k in enumerate(keys) if k.startswith("lxc."))
    assert keys[:first_raw] == sorted(keys[:first_raw]) and "cores" in keys and "dev0" in keys
    assert lines[first_raw:] == ["lxc.cgroup2.devices.allow: c 195:* rwm",
                                 "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"]
    assert "dev9" not in keys  # a snapshot's section is not the current config
    r = t.run(pct_argv("pct", "config", "999"))
    assert "Configuration file 'nodes/lab/lxc/999.conf' does not exist" in r.err


def counting_session(lab_hosts):
    made = []

    def factory(host):
        made.append(CountingTransport(for_host(host)))
        return made[-1]

    return Session(config.load(str(lab_hosts)), agent=False, transport_factory=factory), made


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="this machine has an NVIDIA driver")
def test_doctor_gpu_on_a_host_without_a_driver_in_one_round_trip_each(lab_hosts, gpu_configured):
    s, made = counting_session(lab_hosts)
    with s:
        report = gpudoctor.diagnose(s, [GPU_CT, CPU_CT])
    hosts, cts = report.hosts, report.containers
    assert [h.host for h in hosts] == ["lab"] and hosts[0].error is None
    assert [f.code for f in hosts[0].findings] == ["host-no-driver"]
    assert str(GPU_CT) in hosts[0].findings[0].what
    by = {c.container: c for c in cts}
    assert by[GPU_CT].config.gpu and by[GPU_CT].error is None
    assert by[CPU_CT].findings == () and not by[CPU_CT].gpu and by[CPU_CT].healthy  # a CPU container: silent
    calls = [c for t in made for c in t.calls]
    host_calls = [c for c in calls if "gpu-host" in c]
    ct_calls = {ctid: [c for c in calls if "exec" in c and str(ctid) in c] for ctid in (GPU_CT, CPU_CT)}
    assert len(host_calls) == 1 and len(calls) == 3, calls  # <= 2 per host, <= 1 per container
    assert all(len(v) == 1 for v in ct_calls.values())


def test_a_cpu_lab_gives_nothing_and_the_command_line_exits_0(lab_hosts, tmp_path):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "doctor", "--gpu",
                        "-c", f"{GPU_CT},{CPU_CT}", "--json"], capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out["healthy"] and all(c["findings"] == [] and not c["gpu"] for c in out["containers"])
    assert out["hosts"][0]["findings"] == []


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="this machine has an NVIDIA driver")
def test_the_command_line_names_host_no_driver_and_exits_1(lab_hosts, gpu_configured):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "doctor", "--gpu",
                        "-c", str(GPU_CT)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "(host-no-driver)" in r.stdout and f"container {GPU_CT} on lab:" in r.stdout


HOSTILE = """#!/bin/sh
# The GPU probe answered with wrong JSON types; everything else runs the real python3.
case "$4" in
  *"The GPU container probe"*)
    echo '{"nodes": [{"path": "/dev/nvidia0", "char": true, "major": [1], "minor": 0}], "libs": {"libcuda.so.1": "x"}}'
    exit 0 ;;
esac
exec /usr/bin/python3 "$@"
"""


@pytest.fixture
def hostile_probe(lab_session):
    ct = lab_session.container(GPU_CT)
    ct.run(["sh", "-c", 'cat > /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3'], stdin=HOSTILE.encode())
    yield
    ct.run(["rm", "-f", "/usr/local/bin/python3"])


@pytest.mark.fault("A GPU probe answering with wrong JSON types (`\"major\": [1]`, a library as a string)",
                   promise="that container's error naming the field; never a crash of the fleet-wide command")
def test_a_probe_answering_wrong_types_is_one_containers_error(lab_hosts, hostile_probe):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "doctor", "--gpu",
                        "-c", f"{GPU_CT},{CPU_CT}", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert "internal error" not in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stdout + r.stderr
    by = {c["container"]: c for c in json.loads(r.stdout)["containers"]}
    assert "the container's GPU probe gave nodes[0].major as list [1], not int" in by[GPU_CT]["error"]
    assert by[CPU_CT]["error"] is None and by[CPU_CT]["healthy"]
