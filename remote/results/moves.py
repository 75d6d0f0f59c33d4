"""Moves and maintenance: `remote move` (a container carried to another node of its cluster with its run) and
`remote host drain/resume` (every run of a host save-stopped, then moved or resumed)."""

from __future__ import annotations

from dataclasses import dataclass

from .health import Finding
from .runs import Saved


@dataclass(frozen=True)
class MoveStep:
    """One step of a move, with the time it took (0 in a dry run: nothing ran)."""

    name: str  # check | save-stop | stop | migrate | wait | resume
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class Moved:
    """A container moved from node `source` to node `node` (or, dry, what would be done): the run stopped and
    what it saved, the GPU check's findings, the migration's command, the run that continues it there."""

    ctid: int
    source: str  # the node it was on
    node: str  # the node it is on now (dry: would be)
    dry: bool
    stopped: str | None  # the run stopped for the move (None: none was live)
    saved: Saved | None  # what its stop left (None: no run, or moved with force, unsaved)
    findings: tuple[Finding, ...]  # the GPU check of node `node` (warnings only: an error refuses the move)
    migrate: str  # the migration as run on the source node (`pct migrate ID N --restart`)
    resumed: str | None  # the run started there from the checkpoint (None: nothing to resume)
    parent: str | None  # the run it continues
    steps: tuple[MoveStep, ...]
    commands: tuple[str, ...]  # what it runs (dry) or ran, as a user would type it
    seconds: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DrainedRun:
    """One container of a drained (or resumed) host: what was done to it, and the command that resumes it."""

    ctid: int
    run: str | None  # the run save-stopped (drain) or started (resume); None: none was live / none resumed
    saved: Saved | None
    moved: Moved | None  # drain --to: the move
    resume: str | None  # the one command that resumes it (drain without --to), or None
    error: str | None = None  # this container failed; the others went on


@dataclass(frozen=True)
class Drained:
    """`remote host drain H [--to N]` or `remote host resume H`: each container of the host and its part."""

    host: str
    action: str  # drain | resume
    to: str | None  # drain --to's node
    containers: tuple[DrainedRun, ...]
    record: str | None  # where drain remembered what it did (resume reads it), or None
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.error is None for c in self.containers)
