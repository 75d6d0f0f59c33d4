"""A chain's settings, checked before its first task runs: `remote deploy warmup train` with no warmup.command
says so at once (exit 2), before deploy changes anything, instead of after it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .table import is_selection

# Each task of a chain that needs a setting of the hosts file: (section, key, how to set it), given the task's
# arguments, or None where these arguments need none. What the task itself checks when it runs, said first.
NEEDS: dict[str, Callable[[dict[str, Any]], tuple[str, str, str] | None]] = {
    "warmup": lambda kw: None if kw.get("export") or kw.get("import_") else (
        "warmup", "command", "set the command that compiles the training configuration (e.g. a few training steps)"),
    "train": lambda kw: ("train", "command", "set the training command to run"),
}


def check(calls: list) -> None:
    """ConfigError for the first setting a task of a chain of several needs that its containers lack, naming
    the task and the containers; nothing connects (the hosts file is only read)."""
    if len(calls) < 2:
        return  # one task checks its own settings before it changes anything
    from .. import api

    chain = " ".join(call.spec.name for call in calls)
    for call in calls:
        need = NEEDS.get(call.spec.name, lambda kw: None)(call.kwargs)
        if need is None:
            continue
        section, key, how = need
        which = call.kwargs.get("container")
        with api.open(call.kwargs.get("hosts")) as fleet:  # reads the file; connects nothing
            ids = fleet.select(which) if is_selection(which) else [fleet.container(which).id]
            lacking = [i for i in ids if not getattr(getattr(fleet.container(i).spec, section), key)]
            if lacking:
                raise ConfigError(fleet.file, f"{section}.{key}",
                                  f"not set (container {', '.join(map(str, lacking))}): {how}. `{call.spec.name}` "
                                  f"needs it, so nothing of `remote {chain}` ran")
