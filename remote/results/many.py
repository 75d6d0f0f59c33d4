"""One call on many containers: each one's outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


# -- one call on many containers -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One container's part of a GroupResult: its value, or the error it failed with (and the exit
    status and message the command line shows for it)."""

    container: int
    host: str
    value: T | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    skipped: bool = False
    exit_code: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.skipped


class GroupResult(dict[int, Outcome[T]], Generic[T]):
    """A result per container ({ctid: Outcome}), as Fabric's GroupResult: `.succeeded`, `.failed`.
    `callback_errors`: what a caller's on_done/on_tick callback raised, by container (None: an on_tick), caught
    so that it neither killed a worker nor stopped the work (and logged, with its traceback, to `remote`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.callback_errors: dict[int | None, BaseException] = {}

    @property
    def succeeded(self) -> dict[int, T | None]:
        return {k: o.value for k, o in self.items() if o.ok}

    @property
    def failed(self) -> dict[int, BaseException]:
        return {k: o.error for k, o in self.items() if o.error is not None}

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.values())
