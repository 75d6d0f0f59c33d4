"""The command line's task table: what a task is (`@task`), its options' short letters and checks, how a
library error becomes an exit status, and `-c all` (one remote.api call per container at once: each_container).

remote/cli/tasks.py holds the tasks (parse -> one remote.api call -> format), remote/cli/format.py what they
print. Exit statuses: 0 ok, 1 failed (or the job's/command's own, where the task reports one), 2 bad
input, 3 busy, 130 interrupted.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigError, RemoteError, worded
from ..events import Event
from ..naming import printable
from . import format as fmt
from . import parse as cliparse
from .parse import Kind, number, pattern

if TYPE_CHECKING:
    from ..api import Container, Fleet

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# One meaning per short flag in every task; -h is only ever help, and flags not listed have none.
SHORT_FLAGS = {"container": "c", "dry": "n", "json": "j", "timeout": "t", "allow-dirty": "a", "check": "k",
               "force": "F", "warmup": "w", "detach": "d", "follow": "f", "run": "r", "grace": "g",
               "parallel": "p", "export": "e", "import": "i"}

# What each option's value must be, checked before anything connects (one meaning per name, as above).
_IDS = r"[1-9][0-9]{2,8}(,[1-9][0-9]{2,8})*"
KINDS = {
    "container": Kind(pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(,[A-Za-z0-9_][A-Za-z0-9_.-]*)*",
                              "a container id, a comma list (200,201), a group or `all`"), "ID"),
    "timeout": Kind(number(0.001, 7 * 86400, unit=" seconds"), "SECONDS"),
    "grace": Kind(number(0, 3600, integer=True, unit=" seconds"), "SECONDS"),
    "attempts": Kind(number(1, 100, integer=True), "N"),
    "port": Kind(number(1, 65535, integer=True), "PORT"),
    "run": Kind(pattern(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", "a run id (`remote runs` lists them) or `latest`"),
                "RUN"),
    "containers": Kind(pattern(_IDS, "comma-separated container ids from 100 to 999999999"), "IDS"),
    "second": Kind(pattern(_IDS, "comma-separated container ids from 100 to 999999999"), "IDS"),
    "devices": Kind(pattern(r"[A-Za-z0-9:_.-]+(,[A-Za-z0-9:_.-]+)*", "comma-separated devices, e.g. 0,1"), "DEVICES"),
    "hosts": cliparse.text_kind("FILE"),
    "address": Kind(pattern(r"[A-Za-z0-9_.:\[\]%-]+", "a host name, IP address or ~/.ssh/config alias"), "ADDRESS"),
    "user": Kind(pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a user name"), "USER"),
    "key-file": cliparse.text_kind("FILE"),
    "known-hosts": cliparse.text_kind("FILE"),
    "out": cliparse.text_kind("FILE"),
    "pct": cliparse.text_kind("CMD"),
    "command": cliparse.text_kind("STRING"),
    "limit": Kind(number(1, 100000, integer=True), "N"),
    "from": Kind(pattern(r"[1-9][0-9]{2,8}", "a container id"), "ID"),
    "backend": Kind(pattern(r"lxc|ns", "lxc or ns"), "BACKEND"),
    "sudoers": Kind(pattern(r"[a-z_][a-z0-9_.-]*\$?", "a user name of the Proxmox host"), "USER"),
    "ctid": Kind(pattern(r"[1-9][0-9]{2,8}", "a container id from 100 to 999999999"), "CTID"),
    "clone": Kind(pattern(r"[1-9][0-9]{2,8}", "the id of a container (a template) to clone"), "CTID"),
    "gpu": Kind(pattern(r"all|none|[0-9]+(,[0-9]+)*", "all, none or GPU indices like 0,1"), "GPUS"),
    "template": Kind(pattern(r"[A-Za-z][A-Za-z0-9_.-]*:vztmpl/[^/\s]+", "a template volume, STORAGE:vztmpl/NAME.tar.zst "
                             "(`pveam list local`)"), "VOLID"),
    "storage": Kind(pattern(r"[A-Za-z][A-Za-z0-9_.-]*", "a Proxmox storage name (`pvesm status`)"), "STORAGE"),
    "node": Kind(pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a cluster node, a host of the hosts file"), "NODE"),
    "host": Kind(pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a host of the hosts file"), "HOST"),
    "cores": Kind(number(1, 8192, integer=True), "N"),
    "memory": Kind(number(16, 2**31, integer=True, unit=" MiB"), "MIB"),
    "disk": Kind(number(1, 2**20, integer=True, unit=" GiB"), "GIB"),
    "snapshot": Kind(pattern(r"[A-Za-z][A-Za-z0-9_-]{0,39}", "a snapshot name (`remote snapshots` lists them)"), "NAME"),
}

# Old option names still accepted where they shipped: (task, old flag) -> the one name per meaning now.
DEPRECATED = {("report", "dest"): "out"}

TASKS: dict[str, cliparse.Spec] = {}  # "deploy", "lab up", ...: what `remote` knows, in --help order


class Exit(Exception):
    """End the task with this exit status, and this message on stderr (what invoke's Exit was here)."""

    def __init__(self, message: str | None = None, code: int = 1):
        super().__init__(message or "")
        self.message, self.code = message, code


def task(*, name: str | None = None, help: dict | None = None, positional: str | None = None,
         argv: str | None = None, usage: str = "") -> Callable[[Callable], Callable]:
    """Register a task in TASKS under `name` (default: the function's, `_` dropped); "lab up" is `up` of
    the group `lab`. `positional`: the parameter a bare word fills; `argv`: the one `-- ARGV...` fills."""
    def register(fn: Callable) -> Callable:
        key = name or fn.__name__.rstrip("_").replace("_", "-")
        TASKS[key] = cliparse.spec_of(fn, key, help or {}, short=SHORT_FLAGS, kinds=KINDS, positional=positional,
                                      argv=argv, usage=usage)
        fn.help = help or {}  # type: ignore[attr-defined]
        return fn
    return register


HOSTS_HELP = "hosts file (default: $REMOTE_HOSTS_FILE, else ./hosts.yaml)"
ONE_CT_HELP = "container id from the hosts file (default: default_container, $REMOTE_CONTAINER, or the only one)"
DRY_HELP = "print the exact remote commands instead of running them"
CT_HELP = ("container id from the hosts file (default: default_container, $REMOTE_CONTAINER, or the only one); "
           "a comma list (200,201), a group from `groups:` or `all` runs the task on each of them at once")
FAIL_FAST_HELP = "with several containers: start no more of them after the first failure"


def many_help(container: str = CT_HELP, **own: str) -> dict[str, str]:
    """The help of a task that runs on one container or several, with a dry run: -c, --fail-fast, its own
    options, --dry and --hosts (in that order in its --help)."""
    return {"fail_fast": FAIL_FAST_HELP, "container": container, **own, "dry": DRY_HELP, "hosts": HOSTS_HELP}


def exit_status(exc: RemoteError) -> int:
    """A library error's exit status: 2 bad input, 3 busy, else 1 (a command's own status never leaks out of
    a failed step: only tasks that report one, exec, train and logs, exit with it)."""
    return type(exc).exit_code if type(exc).exit_code in (2, 3) else 1


def handled(fn: Callable) -> Callable:
    """Turn library errors into a clean exit with the error's message and status."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RemoteError as exc:
            raise error_exit(exc) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None

    return wrapper


def error_exit(exc: RemoteError) -> Exit:
    """A library error as the command line ends with it: `error: ...` in its words, and the error's status
    (its message may quote a container: escapes shown, lines kept)."""
    exc = cli_words(exc)
    return Exit(f"error: {cli_text(exc)}", code=exit_status(exc))


def cli_words(exc: RemoteError) -> RemoteError:
    """A library error in the command line's words: the container argument is -c/--container here."""
    if isinstance(exc, ConfigError) and (exc.key == "container" or "(the container argument)" in exc.message):
        return worded(ConfigError(exc.file, "--container" if exc.key == "container" else exc.key,
                                  exc.message.replace("name one (the container argument)", "pass --container")),
                      *exc.words)
    return exc


def cli_text(exc: RemoteError) -> str:
    """A library error's message in the command line's words: each phrase it says in the library's words
    (`force=True`, `container(200).stop()`) as the error carries it for the command line (`exc.words`)."""
    text = printable(str(exc), lines=True)
    for said in exc.words:
        text = text.replace(said.library, said.cli)
    return text


# -- printing: `[id] ` in front of each line of a container's part of a `-c all` task (format.marked) -------

_write_lock = threading.Lock()


def say(*values: object, file: Any = None, sep: str = " ", end: str = "\n", flush: bool = True) -> None:
    """print(), with each line marked `[id] ` inside one container's part of a `-c all` task (the library
    says whose work a thread does: remote.api.current_container)."""
    from ..api import current_container

    _write(fmt.marked(sep.join(str(v) for v in values), current_container()) + end,
           file if file is not None else sys.stdout, flush)


def show(event: Event, data_on_stdout: bool = False, hosts: str | None = None) -> None:
    """The command line's event sink (remote.open(events=...)): each event as format.event_text words it,
    on stdout, or on stderr for progress and where stdout carries data (`data_on_stdout`); a hint's
    `remote ...` command given the --hosts FILE this command was given (format.typed)."""
    from ..api import current_container

    text = fmt.event_text(event, current_container())
    if text is not None:
        text = fmt.typed(text, hosts)
        _write(text + "\n", sys.stderr if fmt.event_on_stderr(event, data_on_stdout) else sys.stdout)


def _write(text: str, out: Any, flush: bool = True) -> None:
    with _write_lock:
        try:
            out.write(text)
            if flush:
                out.flush()
        except BrokenPipeError:  # only under keeps_going (SIGPIPE ignored): the reader left, the task goes on
            _to_devnull(out)


def _to_devnull(out: Any) -> None:
    """A stream whose reader has gone (`remote deploy | head -5`): its file descriptor made /dev/null, so what
    the task still writes, and the buffer flushed at exit, goes nowhere instead of failing."""
    import os

    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, out.fileno())
    finally:
        os.close(null)


def keeps_going(fn: F) -> F:
    """A task that changes a container (deploy, warmup, create, destroy): a closed stdout must never end it half-way.
    The console script lets SIGPIPE end a task that only reads (`remote logs -f | head` ends quietly); for the
    duration of this one it is ignored, and a write to the closed pipe sends that stream to /dev/null instead."""
    import signal

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        before = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.signal(signal.SIGPIPE, before)

    return wrapper  # type: ignore[return-value]


class SayStream:
    """A text stream (for a progress printer) whose lines go through say, to stderr."""

    def __init__(self) -> None:
        self.pending = ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text.replace("\r", "\n")).split("\n")
        for line in lines:
            if line:
                say(line, file=sys.stderr)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False  # redraws (\r) would garble the lines of other containers


# -- the fleet a task uses, and `-c LIST`: one remote.api call per container -----------------------------

def fleet_of(hosts: str | None, dry: bool = False, stderr_progress: bool = False) -> Fleet:
    """The fleet a task runs on, printing its events as they come (on stderr with `stderr_progress`: a task
    whose stdout is data, --json's document or exec's output); its kept connection stays for the next command."""
    from .. import api

    return api.open(hosts, dry=dry, keep=True, events=functools.partial(show, data_on_stdout=stderr_progress,
                                                                         hosts=hosts))


def checkpoint_flags(file: str, container: object, resume: bool, fresh: bool) -> None:
    """train's --resume and --fresh: not both."""
    if resume and fresh:
        raise ConfigError(file, "--fresh", "--resume and --fresh exclude each other: continue from the latest "
                          "checkpoint, or start over")


def is_selection(value: object) -> bool:
    """True when a --container value names several containers (a list, a group, `all`), not one id."""
    if value is None or isinstance(value, int):
        return False
    return not str(value).strip().isdigit()


class Ended(Exit):
    """One container's part of a `-c LIST` task that ended with a status of its own (a command's, a run's, a
    check that found changes): a failure with that status whose result is still shown."""

    def __init__(self, value: object, code: int):
        super().__init__(None, code)
        self.value = value


def each_container(fleet: Fleet, which: str, call: Callable[[Container], T], *, fail_fast: bool = False,
                   status: Callable[[T], int] | None = None, text: Callable[[T], str] | None = None) -> None:
    """`-c LIST`: call(container), one remote.api call, on each of these containers at once (Group.map: their
    events marked `[id] ` as they come, a progress line every 15 s). A library error is that container's
    failure, said in the command line's words as it ends; a result that `status` gives a non-zero status
    fails with it. Then each result as `text` words it, in the order of `which`, and the summary table
    (format.group_text); Exit with their status (format.group_exit_code) when one failed."""
    def one(ct: Container) -> T:
        try:
            value = call(ct)
        except RemoteError as exc:
            raise error_exit(exc) from exc
        code = status(value) if status is not None else 0
        if code:
            raise Ended(value, code)
        return value

    result = fleet.containers(which).map(one, fail_fast=fail_fast, prefix_output=True)
    say(fmt.group_text(result, text))
    code = fmt.group_exit_code(result)
    if code:
        raise Exit(code=code)


def no_shell_after_dashes(argv: list[str]) -> None:
    """`remote exec -- 'a && b'`: the words after `--` run as they are, with no shell, so a first word that is a
    shell command line (spaces, operators, expansions) would only be `not found` in the container's words."""
    import shlex

    first = argv[0]
    if first.startswith(("/", "./")) or not re.search(r"\s|&&|\|\||[|;<>`]|\$\(", first):
        return
    raise Exit(f"error: exec: the words after `--` run as they are, with no shell, and {first!r} is one word: no "
               f"program has that name. For a shell command line: remote exec --command {shlex.quote(' '.join(argv))}"
               + (f" (or split it: remote exec -- {' '.join(shlex.split(first))})"
                  if not re.search(r"&&|\|\||[|;<>`]|\$\(", first) and len(argv) == 1 else ""), code=2)
