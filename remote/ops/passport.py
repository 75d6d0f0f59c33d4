"""The cache passport: what a per-version compile cache folder's entries were made for. Pure functions.

torch keys its cache entries (torch/_inductor/codecache.py) on the torch build (version and sources),
triton, `torch.version.cuda`, the GPU's name, the inductor configuration (environment variables
included) and the tensors' metadata, the device index among them: an entry made on `cuda:0` never
serves `cuda:1`. The NVIDIA driver is not in the key. A passport records each of those that remote
can know, plus the commit, venv lock and warmup command of the warmup that filled the folder:

    {"format": 1, "torch": "2.11.0+cu130", "torch_git": "…", "cuda": "13.0", "triton": "3.6.0",
     "gpu": "NVIDIA H200", "capability": "sm_90", "driver": "580", "devices": ["0", "1"], "env": "<digest>", "env_keys": {NAME: <digest>},
     "commit": "…", "venv_lock": "…", "command": "<digest>", "made_by": 200, "made_at": "…"}

`expected(...)` is the passport a container's warmup would write (from deploy's records and the hosts
file); `differences(have, want)` names each field in which a cache made for `have` cannot serve `want`
(its devices must include every device `want` warms); `groups(...)` puts containers whose passports
would be the same together: one warmup serves each group.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from ..naming import json_loads, printable  # a passport is what a container said: shown only through it

FORMAT = 1
FILE = "passport.json"  # in the per-version folder, beside inductor/ and triton/ (torch never reads it)
# Compared, in this order, in every message. `devices` is a subset rule; the others are equality.
FIELDS = ("torch", "torch_git", "cuda", "triton", "gpu", "capability", "driver", "env", "commit", "venv_lock",
          "command", "devices")
LABELS = {"torch": "torch version", "torch_git": "torch git version", "cuda": "CUDA build", "triton": "triton",
          "gpu": "GPU name", "capability": "compute capability", "driver": "NVIDIA driver major version",
          "env": "inductor environment", "commit": "commit", "venv_lock": "venv lock",
          "command": "warmup command", "devices": "devices warmed"}
# The environment variables that can change what inductor and triton compile (and so its cache key).
ENV_PREFIXES = ("TORCH", "INDUCTOR", "TRITON", "PYTORCH", "CUDA", "CUBLAS", "CUDNN", "NVIDIA_TF32")
# Where the cache and logs live, not what is compiled: two containers may keep their caches elsewhere.
ENV_IGNORED = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
               "TORCHELASTIC_ERROR_FILE")
# Nothing derived from a path enters a field that must match: a variable that names a place (a home, a
# folder, a file) says where things are, not what is compiled; two containers may keep them elsewhere.
ENV_PLACE_SUFFIXES = ("_DIR", "_HOME", "_PATH", "_ROOT", "_FILE", "_PREFIX", "_CACHE")


def devices_of(p: Mapping | None) -> list[str]:
    """A passport's devices as strings; [] where a (hand-edited, untrusted) passport holds no list."""
    d = (p or {}).get("devices")
    return [str(x) for x in d] if isinstance(d, list) else []


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def compile_env(env: Mapping[str, str]) -> dict[str, str]:
    """The inductor-relevant part of a job's environment: each name with a digest of its value (values can
    be secrets; a passport never holds one)."""
    return {k: _digest(v) for k, v in sorted(env.items())
            if k.startswith(ENV_PREFIXES) and k not in ENV_IGNORED and not k.endswith(ENV_PLACE_SUFFIXES)}


def expected(verify: Mapping | None, *, commit: str | None, venv_lock: str | None, command: str | None,
             devices: Sequence[str], env: Mapping[str, str]) -> dict:
    """The passport a warmup with these inputs would write (made_by/made_at left out)."""
    v = verify or {}
    keys = compile_env(env)
    return {"format": FORMAT, "torch": v.get("torch"), "torch_git": v.get("torch_git"), "cuda": v.get("cuda_build"),
            "triton": v.get("triton"), "gpu": v.get("gpu_name"), "capability": v.get("gpu_capability"),
            "driver": v.get("driver_major"), "devices": sorted({str(d) for d in devices}),
            "env": _digest(keys), "env_keys": keys, "commit": commit, "venv_lock": venv_lock,
            "command": _digest(command or "")}


def differences(have: Mapping | None, want: Mapping) -> list[str]:
    """The fields in which a cache made for `have` cannot serve a container that wants `want`, in FIELDS
    order; every field when there is no passport. A field `have` lacks (an older record) differs only when
    `want` has a value for it."""
    if not have:
        return list(FIELDS)
    out = []
    for name in FIELDS:
        if name == "devices":
            if not set(devices_of(want)) <= set(devices_of(have)):
                out.append(name)
        elif have.get(name) != want.get(name):
            out.append(name)
    return out


def describe(have: Mapping | None, want: Mapping, fields: Sequence[str] | None = None, *,
             theirs: str = "cache", ours: str = "here") -> str:
    """Each differing field with both values: `torch version 2.12.0 (cache) != 2.13.0 (here); …`."""
    if not have:
        return "no passport (a cache made before passports, or never warmed)"
    return printable(_describe(have, want, fields, theirs, ours))


def _describe(have: Mapping, want: Mapping, fields, theirs: str, ours: str) -> str:
    parts = []
    for name in fields if fields is not None else differences(have, want):
        if name == "devices":
            lacking = sorted(set(devices_of(want)) - set(devices_of(have)))
            parts.append(f"{LABELS[name]} {','.join(devices_of(have)) or 'none'} ({theirs}) lack "
                         f"{','.join(lacking)} ({ours})")
        elif name == "env":
            a, b = have.get("env_keys"), want.get("env_keys")
            a, b = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
            names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            parts.append(f"{LABELS[name]} differs ({', '.join(names) or 'digest'})")
        elif name in ("command", "venv_lock", "commit", "torch_git"):
            parts.append(f"{LABELS[name]} {str(have.get(name))[:12]} ({theirs}) != {str(want.get(name))[:12]} ({ours})")
        else:
            parts.append(f"{LABELS[name]} {have.get(name)} ({theirs}) != {want.get(name)} ({ours})")
    return "; ".join(parts)


def group_key(passport: Mapping) -> str:
    """Containers with the same key would write the same passport: one warmup serves them all."""
    return _digest({k: passport.get(k) for k in FIELDS})


def groups(passports: Mapping[int, Mapping]) -> list[list[int]]:
    """Container ids grouped by the passport their warmup would write, in the order first seen."""
    out: dict[str, list[int]] = {}
    for ctid, p in passports.items():
        out.setdefault(group_key(p), []).append(ctid)
    return list(out.values())


def why_alone(ctid: int, passports: Mapping[int, Mapping]) -> str:
    """Why a container shares its passport with no other selected one: what differs from the nearest."""
    mine = passports[ctid]
    others = [(len(differences(p, mine)), other) for other, p in passports.items() if other != ctid]
    if not others:
        return "no other container selected"
    _, nearest = min(others)
    text = describe(passports[nearest], mine, theirs=str(nearest), ours=str(ctid))
    if not text:  # it wants fewer devices than the nearest: the same passport it is not
        theirs = ",".join(devices_of(passports[nearest]))
        text = f"devices to warm {','.join(devices_of(mine)) or 'none'} ({ctid}) != {theirs} ({nearest})"
    return f"unlike {nearest}: {text}"


def merged(old: Mapping | None, new: Mapping) -> dict:
    """The passport after a warmup: `new`, with the devices an earlier warmup of the same passport warmed."""
    if old and not [f for f in differences(old, {**new, "devices": []}) if f != "devices"]:
        return {**new, "devices": sorted(set(devices_of(old)) | set(devices_of(new)))}
    return dict(new)


# What each field of a passport file must hold (None allowed everywhere: an older record lacks fields).
STRINGS = ("torch", "torch_git", "cuda", "triton", "gpu", "capability", "driver", "env", "commit", "venv_lock", "command", "made_at",
           "copied_at", "imported_from")
INTS = ("made_by", "copied_from")


def well_typed(p: Mapping) -> bool:
    """Whether every field a passport holds has the type remote writes (untrusted: a container wrote it)."""
    if any(p.get(k) is not None and not isinstance(p[k], str) for k in STRINGS):
        return False
    if any(p.get(k) is not None and (not isinstance(p[k], int) or isinstance(p[k], bool)) for k in INTS):
        return False
    d, keys = p.get("devices"), p.get("env_keys")
    if d is not None and not (isinstance(d, list) and all(isinstance(x, (str, int)) for x in d)):
        return False
    return keys is None or (isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values()))


def parse(text) -> dict | None:
    """A passport file's text -> a dict, or None (missing, torn, not a passport, or a field of another type
    than remote writes). Anything but a string (a probe that answered with another JSON type) is None too."""
    if not isinstance(text, (str, bytes)):
        return None
    try:
        p = json_loads(text or "")
    except ValueError:
        return None
    return p if isinstance(p, dict) and p.get("format") == FORMAT and well_typed(p) else None
