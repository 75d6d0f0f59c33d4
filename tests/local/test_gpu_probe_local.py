"""Local tier: the host's GPU probe (remote/sh/gpu-host.sh) run by bash on this machine, with a pct that
prints a GPU container's config (the parsers and findings as data are in tests/unit/test_gpu.py)."""

import os
import subprocess
from pathlib import Path

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
        assert [f.kind for f in gpu.host_findings(h)] == ["host-no-driver"]
