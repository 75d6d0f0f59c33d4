"""GPU passthrough facts: the Proxmox host's NVIDIA driver and each container's view of it, and the findings.

Two probes, one round trip each: remote/sh/gpu-host.sh on the host (the loaded and the on-disk module,
/proc/devices, the /dev/nvidia* nodes, the PCI driver, persistence and MIG, each container's `pct config`)
and remote/sh/gpu_container.py in a container (its nodes, the driver libraries its loader finds, nvidia-smi,
cuInit(0) through ctypes, the venv's torch CUDA build read from a file). Pure parsers turn their text into
frozen dataclasses, and `findings(...)` turns those into remote.results.Findings with a stable code (a `kind`
of KINDS), a one-line message (`what`), why it matters and a fix a user can paste, computed from what the
host reports (majors, paths, versions).

    host.py       the host's facts (HostGpu, CtConfig, Node, Pci), their parsers and the host probe
    container.py  a container's facts (CtGpu), their parser and the container probe
    finding.py    the rules that turn facts into findings

A container with no NVIDIA line in its config, no /dev/nvidia* node and no driver library is a CPU
container: it gives no finding at all. Everything a host or container printed is untrusted text: it is
parsed, never run, and the command line shows it through remote.naming.printable.
"""

from __future__ import annotations

from .container import CONTAINER_SOURCE, CtGpu, container_argv, parse_container, read_container
from .finding import (
    CUDA_CAUSE,
    CUDA_ERRORS,
    CUDA_FIX,
    ERRNO,
    GPU_NODE,
    KINDS,
    KNOWN_NODES,
    MISMATCH_TEXT,
    NO_DRIVER_TEXT,
    PURPOSE,
    SEVERITY,
    WHY,
    config_findings,
    container_findings,
    findings,
    host_findings,
    move_findings,
    node_findings,
    versions,
)
from .host import (
    NVIDIA_MAJOR,
    REQUIRED,
    CtConfig,
    HostGpu,
    Node,
    Pci,
    host_argv,
    module_version,
    parse_char_devices,
    parse_devices,
    parse_host,
    parse_lspci,
    parse_nodes,
    parse_pct_config,
    parse_smi,
    read_host,
    sections,
)

__all__ = [
    "CONTAINER_SOURCE", "CUDA_CAUSE", "CUDA_ERRORS", "CUDA_FIX", "ERRNO", "GPU_NODE", "KINDS", "KNOWN_NODES",
    "MISMATCH_TEXT", "NO_DRIVER_TEXT", "NVIDIA_MAJOR", "PURPOSE", "REQUIRED", "SEVERITY", "WHY",
    "CtConfig", "CtGpu", "HostGpu", "Node", "Pci",
    "config_findings", "container_argv", "container_findings", "findings", "host_argv", "host_findings", "move_findings",
    "module_version", "node_findings", "parse_char_devices", "parse_container", "parse_devices", "parse_host",
    "parse_lspci", "parse_nodes", "parse_pct_config", "parse_smi", "read_container", "read_host", "sections",
    "versions",
]
