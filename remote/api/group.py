"""Several containers of a fleet at once (`fleet.containers("all")`): one call per container through the
one executor (remote.executor), a GroupResult back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..results import DeployPlan, Finding, GroupResult, Result, Transfer, Warmup

if TYPE_CHECKING:
    from .base import FleetBase
    from .container import Container

T = TypeVar("T")


class Group:
    """Several containers of a fleet: each call runs per container (at most `max_parallel` per host at
    once) and returns a GroupResult; one failing does not stop the others unless fail_fast."""

    def __init__(self, fleet: FleetBase, members: list[Container]):
        self.fleet, self.members = fleet, members

    @property
    def ids(self) -> list[int]:
        return [c.id for c in self.members]

    def __iter__(self) -> Iterator[Container]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def map(self, fn: Callable[[Container], T], *, fail_fast: bool = False,
            prefix_output: bool = False) -> GroupResult[T]:
        """fn(container) for each member at once: a GroupResult of their values and errors. With fail_fast,
        containers not started yet are skipped after the first failure. prefix_output (for a command
        line): what fn prints goes out line by line with `[id] ` in front, a progress line every 15 s on
        stderr; without it nothing is printed."""
        from .. import executor

        by_id = {c.id: c for c in self.members}
        with self.fleet._grouped():
            return executor.each(self.fleet.config, self.ids, lambda ctid: fn(by_id[ctid]), fail_fast=fail_fast,
                                 **self.fleet._watching(prefix_output))

    def exec(self, argv: Sequence[str] | str, **kwargs: Any) -> GroupResult[Result]:
        return self.map(lambda c: c.exec(argv, **kwargs))

    def deploy(self, **kwargs: Any) -> GroupResult[DeployPlan]:
        return self.map(lambda c: c.deploy(**kwargs))

    def warmup(self, **kwargs: Any) -> GroupResult[Warmup]:
        return self.map(lambda c: c.warmup(**kwargs))

    def doctor(self, **kwargs: Any) -> GroupResult[list[Finding]]:
        return self.map(lambda c: c.doctor(**kwargs))

    def push(self, src: str | os.PathLike, dest: str, **kwargs: Any) -> GroupResult[Transfer]:
        return self.map(lambda c: c.push(src, dest, **kwargs))

    def pull(self, src: str, dest: str | os.PathLike, **kwargs: Any) -> GroupResult[Transfer]:
        """Each container's files into dest/<id>/: never two containers' files in one place."""
        return self.map(lambda c: c.pull(src, os.path.join(os.fspath(dest), str(c.id)), **kwargs))
