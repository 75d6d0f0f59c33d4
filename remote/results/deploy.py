"""Deploys, compile caches and snapshots: what a deploy changed, a warmup, a cache held or copied, a snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .runs import Checkpoint, Saved

# -- deploy ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeployPlan:
    """What a deploy changed (applied) or would (check=True, or a dry run); cli.format.deploy_text words it."""

    container: int
    applied: bool
    changed: tuple[str, ...]
    kept: tuple[str, ...]
    saved: tuple[str, ...]  # patches and tarballs of container edits
    drift: tuple[str, ...]  # hand-installed or changed packages
    torch: Mapping[str, Any] | None  # the venv's verify report (torch, cuda_build, triton, gpu_count, ...)
    seconds: float
    dry: bool = field(default=False, repr=False)  # a dry run: `changed` is what would have been

    @property
    def noop(self) -> bool:
        return not self.changed


# -- compile caches ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheCopy:
    """A compile cache copied from one container to another (only the files it lacked; sha256-verified)."""

    src: int
    dst: int
    via: str  # "host <name>", "controller", "nothing to send" or "dry run"
    files: int  # written now
    bytes: int
    present: int  # already there (skipped)
    total: int  # files the source holds
    seconds: float


@dataclass(frozen=True)
class WarmupDevice:
    """One device's warmup: how long it took, what it added to the compile cache (and the cache after it),
    and the compile cache's hits and misses as the compile guard (`counted_by` "guard") or torch's own
    counters ("torch") told them ("": neither did)."""

    device: str
    seconds: float
    new_files: int
    new_bytes: int
    cache_files: int  # the cache after it
    cache_bytes: int
    hits: int
    misses: int
    counted_by: Literal["", "guard", "torch"] = ""

    @property
    def warm(self) -> bool:
        """Nothing new in the cache: everything it compiles was there already."""
        return self.new_files == 0 and self.new_bytes == 0


@dataclass(frozen=True)
class Warmup:
    """A warmup: per device, seconds and what it added to the compile cache."""

    container: int
    devices: tuple[str, ...]
    seconds: float
    new_files: int
    new_bytes: int
    hits: int
    misses: int
    guarded: bool  # the compile guard reported hits and misses
    copied: CacheCopy | None = None  # no compile ran: a matching cache of another container was copied
    per_device: tuple[WarmupDevice, ...] = ()  # each device's own figures, in the order they started


@dataclass(frozen=True)
class CacheHolding:
    """What a container's compile cache holds (`remote cache`): its folder, files, size and passport, or
    why it could not be read (error)."""

    container: int
    folder: str = ""
    files: int = 0
    bytes: int = 0
    passport: Mapping[str, Any] | None = None
    serves_itself: bool = False  # made for exactly what the container runs now
    mismatch: str = ""  # where it holds files but does not serve itself: how its passport differs
    error: str | None = None
    host: str = ""  # the container's host (a copy prefers a source on the target's)
    sizes: Mapping[str, int] = field(default_factory=dict, repr=False)  # each file's size, by its path in folder
    want: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the passport its own warmup would write now


@dataclass(frozen=True)
class ImportedCache:
    """A bundle made by export_cache, loaded into a container's compile cache."""

    files: int
    cache_dir: str
    warmups: tuple[str, ...]  # the devices whose warmup records were kept (they match what runs now)
    refused: tuple[str, ...]  # the bundle's members not imported, each "<name>: <why>"


# -- snapshots -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """A Proxmox snapshot of a container: name, time (the host's local time, as pct prints it),
    description; ours: made by remote's deploy (the only ones remote ever deletes)."""

    name: str
    time: str
    description: str
    ours: bool = False
    depth: int = 0  # its place in pct's tree (0: a snapshot of the current state's line)


@dataclass(frozen=True)
class RolledBack:
    """A container rolled back to a snapshot: what was restored (its rootfs), kept (mount points), started again."""

    container: int
    snapshot: Snapshot
    started: bool
    kept: tuple[str, ...]
    restored: tuple[str, ...]
    carried: Checkpoint | None = None  # the latest complete checkpoint, carried across and put back at its path
    carried_via: str | None = None  # the host's copy it travelled through (removed once it was back)
    stopped: str | None = None  # the live run saved and stopped for the rollback
    saved: Saved | None = None  # what it saved
    resumed: str | None = None  # the run that continues it from the checkpoint
    carried_runs: tuple[str, ...] = ()  # the run folders carried across and put back (the rollback took them)
