"""The GPU passthrough repaired, a host set up, a container created."""

from __future__ import annotations

from dataclasses import dataclass

# -- GPU passthrough repaired ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuFix:
    """`remote gpu fix` on one container: what doctor --gpu found before (finding kinds), what was done (or,
    dry, would be) for them, the config change as diff lines (`- dev2: ...`, `+ dev2: ...`) and the commands,
    what it cannot fix (kind, message, the manual step), the snapshot taken first, whether the container was
    restarted and why it had to be, cuInit(0) afterwards, and the finding kinds left after."""

    container: int
    host: str
    dry: bool
    before: tuple[str, ...]
    fixed: tuple[str, ...]
    diff: tuple[str, ...]
    commands: tuple[str, ...]
    manual: tuple[tuple[str, str, str], ...]
    snapshot: str | None
    restarted: bool
    restart_reason: str | None
    cuda_init: int | None
    after: tuple[str, ...]
    probe_error: str | None = None  # why the container could not be probed (stopped), where it could not
    resumed: str | None = None  # a run saved before the restart (train.checkpoint) and resumed after: the new run

    @property
    def noop(self) -> bool:
        """Nothing to do: no fixable finding."""
        return not self.fixed and not self.diff and not self.commands

    @property
    def ok(self) -> bool:
        """Nothing of an error left that gpu fix could fix, and CUDA starts (cuInit 0) where it was probed."""
        return (self.dry or self.cuda_init in (0, None)) and not (set(self.after) - {m[0] for m in self.manual}
                                                                   - {"host-reboot-pending", "persistence-off"})


@dataclass(frozen=True)
class HostSetup:
    """`remote host setup`: the files written (dry: that would be), those already as they should be, and the
    unit enabled (or that would be). Nothing written and nothing enabled: the host was set up already."""

    host: str
    dry: bool
    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    enabled: tuple[str, ...]

    @property
    def noop(self) -> bool:
        return not self.written and not self.enabled

# -- create ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CreateStep:
    """One step of `remote create`, with the time it took (0 in a dry run: nothing ran)."""

    name: str  # preflight | create | gpu config | start | packages | driver | proof | hosts file
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class Created:
    """A container `remote create` made (or found already made as asked: `made` False), on `host`."""

    ctid: int
    host: str
    made: bool  # False: it was there already, as asked (a no-op), or a dry run
    dry: bool
    source: str  # the template volume, or `clone N`
    gpus: tuple[int, ...]  # the host's /dev/nvidiaN numbers passed (empty: --gpu none)
    driver: str | None  # the loaded module's version the driver's user space matches (None: no GPU)
    config: tuple[str, ...]  # the GPU lines as pct config shows them (devN, mpN)
    commands: tuple[str, ...]  # the commands that change something, as run (or, dry, as they would run)
    steps: tuple[CreateStep, ...]
    hosts_file: str | None  # the hosts file the entry was added to (None: already there, or dry)
    seconds: float
    notes: tuple[str, ...] = ()  # what the user should know (packages installed, an entry already there, ...)


@dataclass(frozen=True)
class Destroyed:
    """A container `remote destroy` removed from its host (and its hosts-file entry), or, dry, would have."""

    ctid: int
    host: str
    destroyed: bool  # False: a dry run, or the host had no such container (only its entry was removed)
    dry: bool
    state: str  # what pct said before: running, stopped, or missing (the host has no such container)
    snapshots: tuple[str, ...]  # its Proxmox snapshots, gone with it
    commands: tuple[str, ...]  # the commands that changed something, as run (dry: as they would run)
    hosts_file: str | None  # the hosts file its entry was removed from (None: dry, not in it, or no file)
    removed: tuple[str, ...]  # the hosts file's lines removed: the entry, its comments, its id in groups
    seconds: float
