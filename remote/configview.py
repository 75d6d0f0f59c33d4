"""`remote config`: the settings a container resolves to (the file's global sections with the container's
own overrides applied), shown without connecting anywhere. train.env's values and the credentials in index
URLs are never shown."""

from __future__ import annotations

import dataclasses
import json

from .config import Config, ContainerSpec
from .naming import redact
from .ops import passport as pp


def resolved(config: Config, spec: ContainerSpec) -> dict:
    """Plain data: every setting of the container, as the tasks will use it."""
    data = dataclasses.asdict(spec)
    train = data["train"]
    train["env"] = {k: "(set, hidden)" for k, _ in spec.train.env}
    venv = data["venv"]
    venv["index_url"] = venv["index_url"] and redact(venv["index_url"])
    venv["extra_index_urls"] = [redact(u) for u in venv["extra_index_urls"]]
    venv["find_links"] = [redact(u) for u in venv["find_links"]]
    data["host"] = {k: v for k, v in data["host"].items() if k != "name"}
    return {"host_name": spec.host.name, **data,
            "groups": sorted(name for name, ids in config.groups.items() if spec.ctid in ids),
            "cache_passport": passport_inputs(spec)}


def passport_inputs(spec: ContainerSpec) -> dict:
    """What of a cache passport (remote/ops/passport.py) this file decides: the devices a warmup warms and
    the inductor-relevant variables of the job's environment (names only). The torch, CUDA, triton and GPU
    fields come from the deployed venv, the commit and lock from deploy: `remote cache` shows whole ones."""
    devices = list(spec.warmup.devices) if "{device}" in (spec.warmup.command or "") else ["all"]
    env = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", **dict(spec.train.env)}
    return {"devices": devices, "inductor_env": sorted(pp.compile_env(env))}


def render(config: Config, specs: list[ContainerSpec], why: str) -> str:
    """YAML-like text: one block per container, keys in the hosts file's terms."""
    out = [f"# {config.file}: {why}"]
    for spec in specs:
        d = resolved(config, spec)
        out.append(f"container {spec.ctid}:")
        out.append(f"  host {spec.host.name}:")
        for key, value in d["host"].items():
            out.append(f"    {key}: {_scalar(value)}")
        if spec.address:
            out.append(f"  address: {_scalar(spec.address)}")
        if d["groups"]:
            out.append(f"  groups: {', '.join(d['groups'])}")
        for section in ("venv", "code", "warmup", "train"):
            out.append(f"  {section}:")
            for key, value in d[section].items():
                if isinstance(value, dict) and value:
                    out.append(f"    {key}:")
                    out += [f"      {k}: {_scalar(v)}" for k, v in value.items()]
                else:
                    out.append(f"    {key}: {_scalar(value)}")
        cp = d["cache_passport"]
        out.append("  cache passport (from this file; torch, CUDA, triton, GPU, commit, lock from deploy):")
        out.append(f"    devices: {_scalar(cp['devices'])}")
        out.append(f"    inductor_env: {_scalar(cp['inductor_env'])}")
    return "\n".join(out)


def _scalar(value) -> str:
    if value is None:
        return "~"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else json.dumps(value)
    if isinstance(value, str):
        plain = value and all(ch.isalnum() or ch in "/._-+=:@ ,{}()" for ch in value) and value.strip() == value
        return value if plain else json.dumps(value)
    return json.dumps(value)
