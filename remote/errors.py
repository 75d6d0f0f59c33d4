"""The exception tree. Every error says what went wrong and what to do next.

    RemoteError
    ├── ConfigError                  hosts.yaml is wrong (exit status 2, nothing connected)
    ├── TransportError               reaching the host
    │   ├── HostKeyError             unknown or changed host key: never auto-added
    │   ├── AuthenticationError      key refused
    │   ├── ConnectError             refused, reset, lost (retried)
    │   └── ConnectTimeout           no answer within connect_timeout (not retried: it would wait as long again)
    ├── CommandError                 a command ran and failed (.command_status, .stderr_tail)
    │   └── CommandTimeout           it ran past its timeout and was killed where it ran
    ├── PctError                     pct itself failed, told apart from the command by stderr
    │   ├── HostPermissionError      pct may not run as the login user (no `sudo: true`, a rule that refuses)
    │   ├── ContainerNotFound
    │   ├── ContainerNotRunning
    │   ├── ContainerLocked
    │   └── ContainerCommandNotFound
    ├── TransferError                a push or pull that did not arrive intact, or could not start
    │   └── TransferPathError        a --src or --dest that is no file or folder of the kind needed (exit 2)
    ├── SnapshotError                a Proxmox snapshot not taken, listed, deleted or rolled back to
    ├── GpuConfigError, CreateRefused  a GPU selection or a create the host cannot give (exit 2, nothing changed)
    ├── CreateError                  create failed part-way (what is left and the command that removes it)
    ├── RootRequired                 gpu fix, host setup asked of a `sudo: true` login (exit 2, nothing read)
    ├── GpuFixError                  a gpu fix step failed (which, and what was done before it)
    ├── HostSetupError               host setup could not write its files
    ├── DeployError, WarmupError     feature-level failures
    ├── JobError
    │   ├── UnknownRun               a --run the container lacks (exit 2)
    │   ├── CheckpointRefused        a train that would overwrite a checkpoint, or resume from none (exit 2)
    │   └── JobTimeout               Run.wait(timeout) ran out (also a TimeoutError)
    └── BusyError                    another controller's lease, or a running job (exit 3)
        ├── JobRunning               train while a job runs there (also a JobError)
        └── SaveRefused              save-or-refuse: no new checkpoint within the grace; the run left running

remote's exit status comes from the error's class alone (`exit_code`, a class attribute: 1, or 2 for bad
input, 3 for busy); the exit status of a step that failed (tar's, a command's) is `command_status`, never
remote's own: a command that exits 3 is no "busy", a tar that exits 2 on a full disk no "bad input".

A message that names what to pass or call next says it in the library's words (`force=True`,
`container(200).stop()`) and carries each such phrase with the command line's words for it (`words`: `--force`,
`remote stop -c 200`), which the command line shows instead: no pattern reads the text back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Said:
    """A phrase of a message in the library's words and in the command line's; in an f-string, the library's."""

    library: str  # what a library caller passes or calls: force=True, container(200).stop()
    cli: str  # what a command line user types: --force, `remote stop -c 200`

    def __str__(self) -> str:
        return self.library


FORCE = Said("force=True", "--force")
ALLOW_DIRTY = Said("allow_dirty=True", "--allow-dirty")
RESUME = Said("resume=True", "--resume")
FRESH = Said("fresh=True", "--fresh")
SAVE = Said("save=True", "--save")
WARMUP_TO_TRAIN = Said("pass warmup=True to train", "`remote train --warmup`")
OUT_FILE = Said("give out=FILE", "give --out FILE")
ANOTHER_OUT = Said("another out= writes another", "--out FILE writes another")
SNAPSHOT_NAME = Said("snapshot=NAME", "--snapshot NAME")
EXPORT_CACHE = Said("container.export_cache(FILE)", "`remote warmup --export FILE`")


def snapshot_named(name: str) -> Said:
    return Said(f"snapshot={name}", f"--snapshot {name}")


def call(ctid: int, method: str) -> Said:
    """`container(ID).METHOD` of the library, and the task the command line has for it."""
    task = {"snapshots()": "snapshots", "runs()": "runs", "stop()": "stop", "log(follow=True)": "logs"}[method]
    return Said(f"container({ctid}).{method}", f"`remote {task} -c {ctid}{' --follow' if 'follow' in method else ''}`")


E = TypeVar("E", bound="RemoteError")


def worded(error: E, *words: Said) -> E:
    """`error`, carrying the phrases its message says in the library's words (each with the command line's)."""
    error.words = error.words + words
    return error


class RemoteError(Exception):
    """Base class: everything this library raises on purpose."""

    exit_code = 1  # remote's exit status for this kind of error: per class, never per error
    command_status: int | None = None  # the exit status of the step that failed, where one ran
    words: tuple[Said, ...] = ()  # its message's phrases in the library's words, with the command line's (worded)


class ConfigError(RemoteError):
    """The hosts file (or a task argument) is invalid."""

    exit_code = 2

    def __init__(self, file: str, key: str, message: str):
        self.file, self.key, self.message = file, key, message
        where = f"{file}: {key}: " if key else f"{file}: "
        super().__init__(where + message)


class TransportError(RemoteError):
    """The host could not be reached or used."""

    def __init__(self, host: str, message: str):
        self.host = host
        super().__init__(message)


class HostKeyError(TransportError):
    """The host's key is unknown or differs from known_hosts."""


class AuthenticationError(TransportError):
    """The host refused our key."""


class ConnectError(TransportError):
    """A transient connection failure (refused, reset, lost)."""


class ConnectTimeout(TransportError):
    """The host did not answer within connect_timeout (TCP, the SSH greeting, the handshake): not retried."""


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class CommandError(RemoteError):
    """A command ran and exited non-zero: its own status is `command_status` (remote's stays 1)."""

    def __init__(self, command: str, command_status: int, stderr: str = "", where: str = ""):
        self.command, self.command_status, self.where = command, command_status, where
        self.stderr_tail = _tail(stderr)
        msg = f"{where + ': ' if where else ''}command exited {command_status}: {command}"
        if self.stderr_tail:
            msg += "\n" + self.stderr_tail
        super().__init__(msg)


class CommandTimeout(CommandError):
    """A command ran past its timeout; it was killed where it ran, not just disconnected."""

    def __init__(self, command: str, timeout: float, stderr: str = "", where: str = ""):
        self.timeout = timeout
        super().__init__(command, 124, stderr, where)
        self.args = (f"{where + ': ' if where else ''}timed out after {timeout:g}s and was killed: {command}",)


class PctError(RemoteError):
    """pct itself failed (as opposed to the command it ran)."""

    def __init__(self, ctid: int, message: str, stderr: str = ""):
        self.ctid, self.stderr_tail = ctid, _tail(stderr)
        super().__init__(message)


class HostPermissionError(PctError):
    """pct could not run as the login user: not root and no `sudo: true`, or sudo refused (a password wanted,
    a program the rule does not allow)."""


class SnapshotError(RemoteError):
    """A Proxmox snapshot could not be taken, listed, deleted or rolled back to."""


class ContainerNotFound(PctError):
    pass


class ContainerNotRunning(PctError):
    pass


class ContainerLocked(PctError):
    pass


class ContainerCommandNotFound(PctError):
    pass


class TransferError(RemoteError):
    """A file transfer did not arrive intact, or could not start (`command_status`: a transfer script's own)."""

    def __init__(self, message: str, command_status: int | None = None):
        self.command_status = command_status
        super().__init__(message)


class TransferPathError(TransferError):
    """A transfer's --src or --dest names nothing of the kind it needs (no such file or folder, a folder
    pushed onto a file): bad input, exit status 2; nothing was written."""

    exit_code = 2


class DeployError(RemoteError):
    """Deploy could not complete; the current venv and checkout were left as they were."""


class WarmupError(RemoteError):
    """A warmup run failed."""


class JobError(RemoteError):
    """Launching, following or stopping a training job failed."""


class JobTimeout(JobError, TimeoutError):
    """A run still running when the time given to wait for it ran out (Run.wait(timeout)); also a TimeoutError."""


class UnknownRun(JobError):
    """A run id (--run) that the container does not have: bad input, exit status 2."""

    exit_code = 2


class CheckpointRefused(JobError):
    """A train refused for its checkpoint: one exists and neither a resume nor a fresh start was asked for, or
    a resume was asked for and no complete checkpoint exists (the message names it): exit status 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)


class BusyError(RemoteError):
    """The container is busy: another controller holds its operation lease, or a job runs there.

    The message names the holder (host, pid, command, since when) and what to do; exit status 3."""

    exit_code = 3

    def __init__(self, ctid: int, message: str, holder: dict | None = None):
        self.ctid, self.holder = ctid, holder or {}
        super().__init__(message)


class JobRunning(BusyError, JobError):
    """A job runs in the container already (train without force): busy, exit status 3; also a JobError, as
    this refusal was before 0.2."""


class SaveRefused(BusyError):
    """Save-or-refuse (gpu fix's restart, a move, a drain, a rollback): the live run was asked to save and no new
    complete checkpoint came within train.checkpoint.grace, so it was LEFT RUNNING and nothing was changed; the
    message names the grace, the last complete checkpoint and its age, and FORCE (the one way past it: the run
    is ended unsaved). Busy, exit status 3."""

    def __init__(self, ctid: int, message: str, run: str | None = None, grace: float | None = None,
                 checkpoint: str | None = None, step: int | None = None, age_s: float | None = None,
                 holder: dict | None = None):
        self.run, self.grace, self.checkpoint, self.step, self.age_s = run, grace, checkpoint, step, age_s
        super().__init__(ctid, message, holder)


class GpuConfigError(RemoteError):
    """A GPU selection or GPU config the host cannot give (an index it lacks, --gpu without the NVIDIA
    module, a malformed --gpu): bad input, exit status 2; nothing was changed."""

    exit_code = 2


class CreateRefused(RemoteError):
    """`remote create` refused before changing anything: an id Proxmox already has, an unknown template or
    storage, a different spec for a container it made, a login that is not root: bad input, exit status 2."""

    exit_code = 2


class CreateError(RemoteError):
    """`remote create` failed part-way; the message says what was undone, or exactly what is left and the
    command that removes it (`.left`: that command, None when nothing is left)."""

    def __init__(self, message: str, left: str | None = None):
        self.left = left
        super().__init__(message)


class RootRequired(RemoteError):
    """An operation that only root on the host can do (devN and mount lines, device nodes, a boot unit:
    `remote gpu fix`, `remote host setup`) asked of a host whose login uses `sudo: true`: refused before
    anything is read or changed, exit status 2."""

    exit_code = 2


class GpuFixError(RemoteError):
    """`remote gpu fix` could not do a step (the message says which, and what was done before it)."""


class HostSetupError(RemoteError):
    """`remote host setup` could not write its files (the message names which and why)."""
