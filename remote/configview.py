"""`remote config`: the settings a container resolves to (the file's global sections with the container's
own overrides applied), shown without connecting anywhere. train.env's values and the credentials in index
URLs are never shown."""

from __future__ import annotations

import dataclasses
import json

from .config import Config, ContainerSpec
from .naming import redact


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
            "groups": sorted(name for name, ids in config.groups.items() if spec.ctid in ids)}


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
