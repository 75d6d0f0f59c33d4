"""The pure naming rules facts and operations share: package names and `name==version` pins, the
per-version compile-cache folder, the operation lease's path. No I/O; below both remote.facts and
remote.ops, so the read side never imports an operation.
"""

from __future__ import annotations

import re
from typing import Mapping
from urllib.parse import unquote, urlsplit

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


def parse_lock(lines) -> dict[str, str]:
    """A lock's (or a spec's) requirements -> {normalized name: version}: `name==version` pins, and direct
    references (`name @ https://…/name-1.0-….whl`, `name @ git+https://…@sha`, as `uv pip compile`
    writes them) as "@ <url>", which `matches` compares by the version in a wheel's or sdist's file name."""
    pins = parse_pins(lines)
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*@\s*(\S+)", line)
        if m and normalize(m.group(1)) not in pins:
            pins[normalize(m.group(1))] = "@ " + m.group(3).rstrip("\\")
    return pins


def direct_version(url: str) -> str | None:
    """The version a direct reference's file name carries (a wheel or an sdist); None for a VCS reference
    or a name that says none."""
    if "+" in url.split("://", 1)[0]:  # git+https:// and the like: the version is whatever the commit says
        return None
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if name.endswith(".whl") and name.count("-") >= 4:
        return name.split("-")[1]
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if name.endswith(ext) and "-" in name:
            return name[: -len(ext)].rsplit("-", 1)[1]
    return None


def matches(locked: str, installed: str) -> bool:
    """Whether an installed version is what the lock says: a pin exactly, a direct reference by the version
    its file name carries (any version for a VCS reference: the commit in the URL is what was locked)."""
    if locked.startswith("@ "):
        want = direct_version(locked[2:])
        return want is None or want == installed
    return locked == installed


def compile_cache(spec, verify: Mapping | None) -> str:
    """The per-version compile cache folder: <warmup.cache_dir>/torch-<v>-cuda-<v>-triton-<v>."""
    v = verify or {}
    return cache_subdir(spec.warmup.cache_dir, {"torch": v.get("torch") or "none", "cuda": v.get("cuda_build"),
                                                "triton": v.get("triton")})


def redact(url: str) -> str:
    """A URL as it may be shown: its user and password (a private index's token) replaced."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}***@{host.rsplit('@', 1)[1]}{slash}{path}" if sep and "@" in host else url


def printable(text: str) -> str:
    """Text a container supplied, safe for a terminal: C0 and C1 control characters but \\t (and so every
    escape sequence) shown as visible escapes such as `\\x1b`."""
    return "".join(ch if ch == "\t" or not (ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0) else f"\\x{ord(ch):02x}"
                   for ch in text)
