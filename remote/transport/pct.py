"""Commands inside an LXC container through `pct`: argv builders, output parsers, `Container`.

`pct exec` runs an argv without a shell, with PATH reset and HOME unset (pve-container 6.1.10),
so every command here is wrapped as
    pct exec <ctid> --keep-env 0 -- env -C <cwd> HOME=.. PATH=.. [K=V..] [timeout -k G T] <argv>
which makes the environment explicit and the timeout hold inside the container. pct's own
failures are told apart from the command's by their stderr, never by the exit code alone.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .. import sudo as sudomod
from ..config import Host, setting
from ..errors import (
    CommandError,
    CommandTimeout,
    ContainerCommandNotFound,
    ContainerLocked,
    ContainerNotFound,
    ContainerNotRunning,
    HostPermissionError,
    PctError,
)
from ..events import Output, Sink, drop
from . import NotStarted, OutputCallback, Result, Stream, Transport, dryline

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KILL_GRACE = 5  # seconds between TERM and KILL when a command's timeout expires
DEADLINE_SLACK = 15  # the controller waits this much longer than the in-container timeout


def pct_argv(pct: str, *args: str) -> list[str]:
    """`pct` as configured for the host (e.g. "sudo -n /usr/sbin/pct") followed by args."""
    return [*shlex.split(pct), *args]


def exec_env(env: Mapping[str, str] | None = None, path: str = DEFAULT_PATH) -> dict[str, str]:
    """The whole environment of a command in the container: nothing is inherited from pct or SSH."""
    variables = {"HOME": "/root", "PATH": path, "LANG": "C.UTF-8", **(env or {})}
    for key in variables:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"invalid environment variable name {key!r}")
    return variables


def exec_argv(pct: str, ctid: int, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str = "/root", path: str = DEFAULT_PATH, timeout: float | None = None) -> list[str]:
    """The host-side argv that runs `argv` in container `ctid` with an explicit environment."""
    argv = list(argv)
    if not argv:
        raise ValueError("empty argv")
    if "=" in argv[0]:
        raise ValueError(f"program name {argv[0]!r} contains '=': env would read it as a variable; use a path")
    variables = exec_env(env, path)
    inner = ["env", "-C", cwd, *(f"{k}={v}" for k, v in variables.items())]
    if timeout is not None:
        inner += ["timeout", "-k", str(KILL_GRACE), f"{timeout:g}"]
    return pct_argv(pct, "exec", str(ctid), "--keep-env", "0", "--", *inner, *argv)


# pct's own failures, matched at the start of a line among the first lines of stderr. A command could
# print such a text itself, but only pct (or the host shell, for a missing pct) prints it first.
_PCT_ERRORS: list[tuple[re.Pattern, type, bool, str]] = [
    # (pattern, error class, only with exit status 126/127, what to do)
    (re.compile(r"(?m)^Configuration file 'nodes/[^']*/lxc/\d+\.conf' does not exist"), ContainerNotFound, False,
     "container {ctid} does not exist on host {host}: check containers.{ctid} in the hosts file "
     "(`pct list` on the host lists them)"),
    (re.compile(r"(?m)^(container '\d+' not running!|can only (push files to a running CT|pull files from a running VM))"),
     ContainerNotRunning, False,
     "container {ctid} on {host} is stopped: start it with `pct start {ctid}` on the host (the lab's too)"),
    (re.compile(r"(?m)^(trying to acquire lock\.\.\.\s*)?can't lock file '[^']*' - got timeout"), ContainerLocked, False,
     "container {ctid} on {host} is locked by another pct operation (a backup, a push?): retry when it is done"),
    (re.compile(r"(?m)^lxc-attach: \d+: .*Failed to exec \"(?P<prog>[^\"]*)\""), ContainerCommandNotFound, True,
     "container {ctid}: cannot execute {prog!r} there: is it installed, and on PATH?"),
    # The same failure reported by our own wrappers (env, timeout) inside the container.
    (re.compile(r"(?m)^(env|timeout): (failed to run command )?'(?P<prog>[^']*)': (No such file|Permission denied)"),
     ContainerCommandNotFound, True, "container {ctid}: cannot execute {prog!r} there: is it installed, and on PATH?"),
    (re.compile(r"(?m)^please run as root"), HostPermissionError, False,
     "pct on {host} must run as root and the login user is not: set `sudo: true` for hosts.{host} in the hosts "
     "file, with the sudo rule that `remote init --sudoers USER` prints (a drop-in for /etc/sudoers.d/), or log "
     "in as root"),
    (sudomod.PASSWORD, HostPermissionError, False,
     "sudo on {host} would ask for a password (remote runs `sudo -n`, never a prompt): the rule needs NOPASSWD; "
     "`remote init --sudoers USER` prints the drop-in"),
    (sudomod.NOT_SUDO, HostPermissionError, True,
     "sudo is not installed on {host} (hosts.{host}.sudo is true): apt-get install sudo there, then install the "
     "drop-in that `remote init --sudoers USER` prints"),
    (re.compile(r"(?m)^\S+: (line )?\d+: \S*pct: (command )?not found|^\S+: \S*pct: No such file or directory"),
     PctError, True, "pct was not found on {host}: is it a Proxmox host? set {pct_setting} to its full path"),
    (re.compile(r"(?m)^(ERROR: unknown command 'pct|400 Parameter verification failed|400 unable to parse option)"),
     PctError, False, "pct on {host} rejected the command line (a bug in remote, please report): {first}"),
]


def classify(stderr: str, exit_code: int, ctid: int, host: str | Host) -> PctError | None:
    """The PctError that stderr shows pct raised, or None when the command itself ran. `host`: its name,
    or the Host (then a fix names where its settings come from: a hosts file or a Fabric Connection)."""
    if exit_code == 0 or not stderr:
        return None
    pct_setting = setting(host, "pct") if isinstance(host, Host) else f"hosts.{host}.pct"
    host = host.name if isinstance(host, Host) else host
    head = "\n".join(stderr.lstrip().splitlines()[:3])
    for pattern, cls, exec_failure, template in _PCT_ERRORS:
        m = pattern.search(head)
        if m and (exit_code in (126, 127) or not exec_failure):
            first = head.splitlines()[0]
            return cls(ctid, template.format(ctid=ctid, host=host, first=first, pct_setting=pct_setting, **m.groupdict()), stderr)
    return None


def parse_status(stdout: str) -> str:
    """`pct status` prints exactly 'status: running' or 'status: stopped'."""
    m = re.fullmatch(r"status: (\w+)\s*", stdout)
    if not m:
        raise ValueError(f"unexpected `pct status` output: {stdout!r}")
    return m.group(1)


def parse_list(stdout: str) -> dict[int, str]:
    """`pct list`: a fixed-width table (VMID, Status, Lock, Name), or nothing when empty."""
    states = {}
    for line in stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            states[int(parts[0])] = parts[1]
    return states


class Exec(Protocol):
    """Runs one argv in one container, with exactly the environment and working directory given.

    Two implementations: `PctExec` (a `pct exec` per command, any transport) and the in-container
    agent (remote.transport.agent.Agent: one `pct exec` for many commands, over the transport's `open_stream`)."""

    def run(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, timeout: float | None,
            stdin: bytes | None, on_output: OutputCallback | None, deadline: float | None) -> Result: ...


@dataclass
class PctExec:
    """A `pct exec ... -- env ...` per command."""

    transport: Transport
    pct: str
    ctid: int

    def run(self, argv, *, env, cwd, timeout, stdin, on_output, deadline) -> Result:
        full = exec_argv(self.pct, self.ctid, argv, env=env, cwd=cwd, path=env.get("PATH", DEFAULT_PATH),
                         timeout=timeout)
        return self.transport.run(full, stdin=stdin, deadline=deadline, on_output=on_output)


@dataclass
class Container:
    """One LXC container on one host, reached through that host's transport."""

    transport: Transport
    ctid: int
    pct: str = "pct"
    dry: bool = False
    events: Sink = drop  # where a dry run's commands go (DryCommand events: remote.transport.dryline)
    path: str = DEFAULT_PATH
    env: dict[str, str] = field(default_factory=dict)
    agent: Callable[[], Exec | None] | None = None  # the container's agent (remote.transport.agent); None: plain pct exec
    # A container of a cluster: after Proxmox's "does not exist", where it is now ((transport, pct), or None).
    relocate: Callable[[], tuple[Transport, str] | None] | None = None

    def _moved(self, error: PctError) -> bool:
        """Whether `error` says the container is not on this node and it was found on another (now used)."""
        if not isinstance(error, ContainerNotFound) or self.relocate is None:
            return False
        found, self.relocate = self.relocate(), None  # one re-read per container
        if found is None:
            return False
        self.transport, self.pct = found
        return True

    @property
    def where(self) -> str:
        return f"{self.transport.name}/{self.ctid}"

    def show_dry(self, argv: Sequence[str]) -> None:
        """A host command as a dry run shows it: one line, its embedded scripts elided; in full to the
        `remote.dry` logger (remote.transport.dryline)."""
        dryline.show(self.transport.describe, argv, self.events, self.ctid)

    def dry_comment(self, text: str) -> None:
        """What a dry run would do beside its commands, as it shows it (`# text`): an Output of this container."""
        self.events(Output(self.ctid, f"# {text}"))

    def _host_run(self, argv: list[str], *, stdin=None, deadline=None, on_output=None, mutates=True) -> Result:
        if self.dry and mutates:
            self.show_dry(argv)
            return Result(tuple(argv), 0, b"", b"", 0.0)
        return self.transport.run(argv, stdin=stdin, deadline=deadline, on_output=on_output)

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str = "/root",
            timeout: float | None = None, stdin: bytes | None = None, check: bool = True,
            on_output: OutputCallback | None = None, mutates: bool = True, label: str | None = None) -> Result:
        """Run argv in the container. pct failures raise PctError; with check, so does a non-zero exit.

        `label` names the command in errors instead of its argv (for long scripts)."""
        variables = exec_env({**self.env, **(env or {})}, self.path)
        deadline = timeout + KILL_GRACE + DEADLINE_SLACK if timeout is not None else None
        start = time.monotonic()
        if self.dry and mutates:
            full = exec_argv(self.pct, self.ctid, argv, env=variables, cwd=cwd, path=self.path, timeout=timeout)
            result = self._host_run(full, mutates=True)
        else:
            for again in (True, False):
                runner = (self.agent() if self.agent else None) or PctExec(self.transport, self.pct, self.ctid)
                try:
                    result = runner.run(argv, env=variables, cwd=cwd, timeout=timeout, stdin=stdin,
                                        on_output=on_output, deadline=deadline)
                    break
                except NotStarted:
                    if not again:  # the agent died unseen since its last command; a new one (or pct exec) runs it
                        raise
        pct_error = classify(result.err, result.exit_code, self.ctid, getattr(self.transport, "host", None) or self.transport.name)
        if pct_error and self._moved(pct_error):
            return self.run(argv, env=env, cwd=cwd, timeout=timeout, stdin=stdin, check=check, on_output=on_output,
                            mutates=mutates, label=label)
        if pct_error:
            raise self._refine(pct_error, ["exec", str(self.ctid)])
        shown = label or shlex.join(argv)
        if timeout is not None and result.exit_code in (124, 137) and time.monotonic() - start >= timeout:
            raise CommandTimeout(shown, timeout, result.err, self.where)
        if check and result.exit_code != 0:
            # Streamed output was already shown; don't repeat it in the message.
            raise CommandError(shown, result.exit_code, "" if on_output else result.err, self.where)
        return result

    def script(self, script: str, *args: str, **kwargs) -> Result:
        """Run a bash script (strict mode) with positional args $1.. — the only way to get a shell there."""
        kwargs.setdefault("label", "bash script " + shlex.join(args))
        return self.run(["bash", "-c", "set -euo pipefail\n" + script, "remote", *args], **kwargs)

    def script_argv(self, script: str, *args: str, env: Mapping[str, str] | None = None,
                    cwd: str = "/root") -> list[str]:
        """The host-side argv that runs a bash script (strict mode) in the container, as `script` does."""
        return exec_argv(self.pct, self.ctid, ["bash", "-c", "set -euo pipefail\n" + script, "remote", *args],
                         env={**self.env, **(env or {})}, cwd=cwd, path=self.path)

    def open_stream(self, script: str, *args: str, **kwargs) -> Stream:
        """Start a bash script in the container with its stdin/stdout as streams (bulk data: transfers).

        Its own `pct exec`, never the agent: data is not framed, encoded or held whole anywhere."""
        return self.transport.open_stream(self.script_argv(script, *args, **kwargs))

    # -- lifecycle (host-side pct commands) ----------------------------------------------------
    def run_pct(self, *args: str, mutates: bool, deadline: float = 120) -> Result:
        """`pct ARGS` on the container's host (the one verb for pct's host-side subcommands: config, set,
        snapshot, ...), pct's errors classified (PctError kinds, a moved cluster container followed);
        `mutates`: a dry run describes it instead of running it."""
        result = self._host_run(pct_argv(self.pct, *args), mutates=mutates, deadline=deadline)
        pct_error = classify(result.err, result.exit_code, self.ctid, getattr(self.transport, "host", None) or self.transport.name)
        if pct_error and self._moved(pct_error):
            return self.run_pct(*args, mutates=mutates, deadline=deadline)
        if pct_error:
            raise self._refine(pct_error, list(args[:2]))
        return result

    def _refine(self, error: PctError, args: list[str]) -> PctError:
        """sudo's 'a password is required' is also what `sudo -n` says for a program its rule does not
        allow: `sudo -n -l` tells the two apart, and the message names which."""
        argv = pct_argv(self.pct, *args)
        if isinstance(error, HostPermissionError) and sudomod.sudo_failure(argv, error.stderr_tail) == "password":
            user = getattr(getattr(self.transport, "host", None), "user", None)
            return HostPermissionError(self.ctid, sudomod.diagnose(self.transport.run, argv, self.transport.name, user),
                                       error.stderr_tail)
        return error

    def status(self) -> str:
        """'running' or 'stopped'."""
        result = self.run_pct("status", str(self.ctid), mutates=False)
        result.check(self.where)
        return parse_status(result.out)

    def start(self) -> None:
        result = self.run_pct("start", str(self.ctid), mutates=True)
        if result.exit_code != 0 and "already running" not in result.err:
            result.check(self.where)

    def stop(self) -> None:
        result = self.run_pct("stop", str(self.ctid), mutates=True)
        if result.exit_code != 0 and "not running" not in result.err:
            result.check(self.where)

    def wait_running(self, timeout: float = 60, poll: float = 0.5, sleep=time.sleep) -> None:
        """Block until `pct status` says running."""
        end = time.monotonic() + timeout
        while self.status() != "running":
            if time.monotonic() > end:
                raise ContainerNotRunning(self.ctid, f"container {self.ctid} did not reach 'running' in {timeout:g}s")
            sleep(poll)
