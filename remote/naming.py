"""The pure naming rules facts and operations share: package names and `name==version` pins, the
per-version compile-cache folder, the operation lease's path. No I/O; below both remote.facts and
remote.ops, so the read side never imports an operation.
"""

from __future__ import annotations

import re
from typing import Mapping

from .guard import cache_subdir  # a pure function: the one naming rule shared with remote_guard

LEASE = "/run/remote/ops.lock"  # the operation lease (remote.ops.oplock) that the facts probe reads


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(lines) -> dict[str, str]:
    """`name==version` requirement lines (a lock or the spec's packages) -> {normalized name: version}."""
    pins = {}
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\#]+)", line)
        if m:
            pins[normalize(m.group(1))] = m.group(3)
    return pins


def compile_cache(spec, verify: Mapping | None) -> str:
    """The per-version compile cache folder: <warmup.cache_dir>/torch-<v>-cuda-<v>-triton-<v>."""
    v = verify or {}
    return cache_subdir(spec.warmup.cache_dir, {"torch": v.get("torch") or "none", "cuda": v.get("cuda_build"),
                                                "triton": v.get("triton")})
