"""Progress as typed events through one sink: the library reports, whoever called it renders.

An operation reports what it does as a typed event, at the source, marked with the container whose work it
is: through its Target (remote.target: t.step, t.note, t.warn, t.output, ...), or, for what is no one
container's, the session's sink (a cluster's notes, a dry run's commands) or remote.target.reporter (a
multi-node run as a whole). Each event's `line` is its text as the library words it (`==> step`,
`!! warning`, `-- note`, a line of output). The library drops events unless given a sink
(`remote.open(..., events=...)`, or `progress=` for the lines as text); the command line renders them, with
`[id] ` in front when several containers run at once (the executor, remote.group, sets `CONTAINER` in each
container's thread). Nothing here prints or touches sys.stdout.

    Event
    ├── StepStarted   a step begins ("==> venv: build ...")
    ├── Output        a line of a command's or a log's output
    │   └── DryCommand  a command a dry run would run (one line, long arguments elided; its argv whole)
    ├── Note          something to know (level info: "-- ...", warning: "!! ...")
    ├── Progress      a group call's periodic word on what each running container is doing
    ├── Resumed       a followed log picked up again after a lost connection, at its byte offset
    ├── SnapshotTaken a Proxmox snapshot taken before a change (its name, and why)
    ├── CheckpointSeen  a run's checkpoint found complete (stop(save=True)'s, or the one a resume starts from)
    ├── RunResumed    a run started from a checkpoint (its path and step, the run it continues)
    ├── DeviceWarmed  one device's warmup ended: its seconds, cache gain and hits (remote.results.WarmupDevice's)
    ├── WarmupUnserved  what a device's warmup compiled will not serve the run (each function's reason)
    ├── Done          a container's part of a group call ended well
    └── Failed        ... or with an error (its exit status and message)

Resumed comes from a followed log's `on_resume` (Target.resumed: Run.follow, and jobs.show_log, which train,
stream_log and a multi-node follow read through), SnapshotTaken from deploy's snapshot (Target.snapshot_taken),
each where it happened.
A new kind is a subclass here (its fields typed), the call that emits it (`target.session.sink(Kind(...))`),
its row in docs/reference/library.md's table of kinds, and, where the command line shows it otherwise than by
its line, its case in remote/cli/format.py's `event_text` (docs/internals/contributing.md; the guards in
tests/unit/test_layers_seams.py read the kinds from this file).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

CONTAINER: ContextVar[int | None] = ContextVar("remote_container", default=None)
"""The container whose work the current thread does (set by remote.group's executor; None outside it)."""


@dataclass(frozen=True)
class Event:
    container: int | None  # whose work it reports (None: not one container's)
    line: str  # the text as the library words it


@dataclass(frozen=True)
class StepStarted(Event):
    step: str


@dataclass(frozen=True)
class Output(Event):
    pass


@dataclass(frozen=True)
class Note(Event):
    level: Literal["info", "warning"]

    @classmethod
    def of(cls, container: int | None, text: str, level: Literal["info", "warning"] = "info") -> Note:
        """A note as the library words it: `-- text`, a warning `!! text`."""
        return cls(container, ("!! " if level == "warning" else "-- ") + text, level)


@dataclass(frozen=True)
class Progress(Event):
    running: tuple[tuple[int, str, float], ...]  # each running container: (id, the step it is at, seconds so far)


@dataclass(frozen=True)
class Resumed(Event):
    offset: int  # the byte of the log it resumed at
    reason: str  # what was lost (the connection error's text)


@dataclass(frozen=True)
class SnapshotTaken(Event):
    name: str
    reason: str


@dataclass(frozen=True)
class CheckpointSeen(Event):
    path: str
    step: int | None  # None where the checkpoint does not tell it
    age_s: float | None  # how old it was when seen


@dataclass(frozen=True)
class RunResumed(Event):
    run: str  # the new run
    parent: str | None  # the run it continues (None: not known)
    path: str  # the checkpoint it starts from
    step: int | None


@dataclass(frozen=True)
class DeviceWarmed(Event):
    """One device's warmup ended (remote.ops.warmup): the figures of its remote.results.WarmupDevice, each a
    field (an event imports no results), worded by the command line (remote/cli/warmup.py)."""

    device: str
    seconds: float
    new_files: int
    new_bytes: int
    cache_files: int  # the compile cache after it
    cache_bytes: int
    hits: int
    misses: int
    counted_by: Literal["", "guard", "torch"]  # who counted the hits: the compile guard, torch, neither


@dataclass(frozen=True)
class WarmupUnserved(Event):
    """What a device's warmup compiled will not serve the run (remote.ops.warmup.unserved): a function that ran
    eagerly, or one compiled again for each value a guard checks; one reason each, worded by the command line
    as a warning after the device's compile lines (remote/cli/warmup.py)."""

    device: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class DryCommand(Output):
    """A command a dry run would have run (not run): `line` with its long arguments elided, `argv` whole.
    An Output (what a dry run shows, as it always was), the kind telling it from a command's own output."""

    argv: tuple[str, ...]  # the command as the host would run it


@dataclass(frozen=True)
class Done(Event):
    seconds: float


@dataclass(frozen=True)
class Failed(Event):
    exit_code: int
    seconds: float


Sink = Callable[[Event], None]


def drop(event: Event) -> None:
    """The sink of a library call given none: events go nowhere."""
