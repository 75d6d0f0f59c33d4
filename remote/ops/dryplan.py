"""A dry chain's planned state: what the earlier dry steps would have made, for the later ones to plan from.

`remote deploy warmup train --dry` runs nothing; without this, the dry warmup would name the commit the
checkout is at now, not the one the dry deploy before it would check out. A dry deploy records here what it
would deploy (per container: its host and id), and a dry warmup or train reads the deployed state with that
over it. Only dry runs write or read it; it lives as long as the process (one command line, one script).
"""

from __future__ import annotations

import threading

from ..config import ContainerSpec
from ..errors import DeployError
from ..facts.deployed import Deployed, code_record_of, deployed_in, venv_record_of

_planned: dict[tuple[str, int], dict] = {}
_lock = threading.Lock()


def _key(spec: ContainerSpec) -> tuple[str, int]:
    return spec.host.name, spec.ctid


def record(spec: ContainerSpec, **parts: dict) -> None:
    """What a dry step would leave in the container (code=<its deploy record>, venv=<its record>)."""
    with _lock:
        _planned.setdefault(_key(spec), {}).update(parts)


def planned(spec: ContainerSpec) -> dict:
    with _lock:
        return dict(_planned.get(_key(spec), {}))


def forget() -> None:
    """Nothing planned (a new dry chain)."""
    with _lock:
        _planned.clear()


def state_in(raw: dict, spec: ContainerSpec) -> Deployed:
    """facts.deployed_in for a dry step: the deployed state, with what the dry steps before it would have made
    over it (a container never deployed, whose dry deploy came first, has only that)."""
    over = planned(spec)
    try:
        state = deployed_in(raw, spec)
    except DeployError:
        if not {"code", "venv"} <= over.keys():
            raise
        state = Deployed(code_record_of(over["code"]), venv_record_of(over["venv"]))
    return Deployed(code_record_of(over["code"]) if "code" in over else state.code,
                    venv_record_of(over["venv"]) if "venv" in over else state.venv)
