"""remote's command line: one package, a client of the public API (remote.api) and its errors, as a script is.

    parse.py   the parser, help and dispatch over the task table (argv -> calls; nothing heavy imported)
    table.py   the task table (@task, TASKS, SHORT_FLAGS, KINDS) and what every task shares: `fleet_of`,
               `@handled` (a RemoteError -> a clean exit and its status), `-c all` (`each_container`: one
               remote.api call per container)
    tasks.py   the tasks: their options, one remote.api call, printing; `run(argv)` and `main()`
    format.py  what the tasks print: pure functions over what the API returns
    invoke.py  the same tasks as an invoke Collection (`invoke ...` in a checkout, `collection()` below)

`remote = "remote.cli:main"` is the console script. The library never imports this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .table import SHORT_FLAGS, TASKS, Exit, exit_status
from .tasks import Program, main, program, run

if TYPE_CHECKING:
    from invoke import Collection

__all__ = ["main", "run", "program", "Program", "collection", "TASKS", "SHORT_FLAGS", "Exit", "exit_status"]


def collection() -> Collection:
    """A new invoke Collection of every remote task, for a user's own tasks.py (remote/cli/invoke.py)."""
    from .invoke import collection as make

    return make()


def __getattr__(name: str) -> Any:
    """`ns`, the invoke Collection of the same tasks (tasks.py, `invoke ...` in a checkout): made on first use."""
    if name == "ns":
        globals()["ns"] = value = collection()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
