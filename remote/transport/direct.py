"""A cold one-off container command over OpenSSH's own `ssh` (what `ssh host pct exec ID -- CMD` by hand
pays: one handshake, one login shell, one pct), for a `remote exec` that finds no kept connection alive;
its keeper then starts behind it for the next command (remote.transport.keeper).

`plan(host)` says how, or None where only the usual path can: no `ssh` on PATH, a jump host, a host key
file with a certificate authority (ssh would accept what remote refuses), a path ssh's options cannot
carry. The connection is made with exactly what remote resolves (remote.transport.sshconfig: the hosts
file's address, port, user, key and known_hosts over ~/.ssh/config), `-F /dev/null` so nothing else of
ssh's configuration applies, BatchMode (no prompt), StrictHostKeyChecking=yes and UpdateHostKeys=no (a host
key is never added or changed). `run` sends the command through remote/sh/linkguard.py, which ends it in
the container when this link goes (Ctrl-C, a killed client, a dropped connection), as the agent does.
Where ssh itself failed before the command started (a refused or unknown host key, no key accepted, no
connection), `NotReached` says so and the caller takes the usual path, whose errors name the fix. The guard
marks the start on its stderr (STARTED, stripped here): a command that ran and exits 255 with ssh-like words
of its own (an ssh inside the container that failed) is its own result, never run a second time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Host
from ..errors import CommandTimeout, ConnectError
from ..threads import ContextThread
from .base import OutputCallback, Result

# What remote/sh/linkguard.py writes on stderr just before it starts the command (a unit test holds the two
# together): after it, nothing on stderr is ssh's failure to reach the host.
STARTED = b"\x1eremote-linkguard: started\n"
GUARD_GRACE = 5.0  # after Ctrl-C, how long the link stays for the guard to end the command and say so
ALIVE_EVERY, ALIVE_COUNT = 5, 4  # ssh's ServerAlive: a silent link is given up after 20 s (the heartbeat's)

# What ssh prints when it failed before any command ran (its exit status is then 255); a command that
# itself exits 255 prints none of these as ssh does.
_NOT_REACHED = re.compile(
    r"(?m)^(Host key verification failed\.$|\S+@\S+: Permission denied \(|ssh: connect to host \S+ port \d+: |"
    r"ssh: Could not resolve hostname |kex_exchange_identification: |Connection (closed|reset) by \S+ port \d+$|"
    r"Connection timed out during banner exchange$|banner exchange: |Unable to negotiate with |"
    r"Bad owner or permissions on |No \S+ host key is known for )")
# What ssh prints around those (its warning banner): held back with them while the command has said nothing.
_SSH_BANNER = re.compile(r"(?m)^(@@@@|WARNING: |IT IS POSSIBLE THAT )")
# The link went while the command ran: ssh's own last words.
_LOST = re.compile(r"(?m)^(Connection to \S+ closed by remote host\.|client_loop: |Timeout, server \S+ not responding\.|"
                   r"packet_write_wait: |Broken pipe|Connection (closed|reset) by \S+ port \d+$)")


class NotReached(ConnectError):
    """ssh did not get as far as starting the command: nothing ran; the usual path may run it."""


@dataclass(frozen=True)
class Plan:
    """The ssh command line that reaches one host, without the remote command."""

    argv: tuple[str, ...]
    env: dict[str, str] | None  # None: this process's own; else without SSH_AUTH_SOCK (no agent keys)


def plan(host: Host, ssh_config: str | None = None) -> Plan | None:
    """How OpenSSH's ssh reaches `host` exactly as remote would, or None where it cannot (see the module)."""
    ssh = shutil.which("ssh")
    if ssh is None or host.local:
        return None
    from .sshconfig import CONFIG, Target, resolve

    target: Target
    if ssh_config is None and not os.path.exists(os.path.expanduser(CONFIG)):
        target = plain_target(host)  # no ~/.ssh/config: what resolve() makes of none, without paramiko's parser
    elif ssh_config is None:
        from .connect import resolve_host

        target = resolve_host(host)
    else:
        target = resolve(host, ssh_config, local_user=_local_user())
    if target.via is not None:
        return None
    files = [*target.identities, *target.known_hosts]
    # ssh expands `%` tokens and a leading `~` in IdentityFile and UserKnownHostsFile (and splits the latter at
    # blanks): such a path would name another file than the one remote checks host keys with
    if any(not f or any(c.isspace() for c in f) or '"' in f or "%" in f or f.startswith("~") for f in files) \
            or target.hostname.startswith("-"):
        return None
    if any(_has_authority(path) for path in target.known_hosts):
        return None
    opts = {"BatchMode": "yes", "StrictHostKeyChecking": "yes", "UpdateHostKeys": "no", "CheckHostIP": "no",
            "UserKnownHostsFile": " ".join(target.known_hosts), "GlobalKnownHostsFile": "/dev/null",
            "ConnectTimeout": f"{max(1, int(host.connect_timeout))}", "ServerAliveInterval": str(ALIVE_EVERY),
            "ServerAliveCountMax": str(ALIVE_COUNT), "ControlMaster": "no", "ControlPath": "none",
            "IdentitiesOnly": "no" if target.agent else "yes", "PreferredAuthentications": "publickey",
            "LogLevel": "ERROR"}
    argv = [ssh, "-F", "/dev/null", "-T", "-x", "-a", "-e", "none", "-p", str(target.port), "-l", target.user]
    for key, value in opts.items():
        argv += ["-o", f"{key}={value}"]
    for identity in target.identities:
        if os.path.exists(identity):
            argv += ["-i", identity]
    env = None if target.agent else {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    return Plan((*argv, "--", target.hostname), env)


def plain_target(host: Host):
    """remote.transport.sshconfig.resolve(host, "") without importing paramiko (its parser reads the config):
    the hosts file's keys over ssh's defaults (tests/unit/test_direct_plan.py holds the two together)."""
    from .sshconfig import DEFAULT_IDENTITIES, DEFAULT_KNOWN_HOSTS, DEFAULT_USER, GLOBAL_KNOWN_HOSTS, Target

    def home(path: str) -> str:
        return os.path.expanduser(path) if path == "~" or path.startswith("~/") else path

    identities: tuple[str, ...]
    if host.key_file:
        identities = (host.key_file,)
        origin = "connect_kwargs" if "key_filename" in host.given_by.split() else "key_file"
    else:
        identities, origin = tuple(home(p) for p in DEFAULT_IDENTITIES), "default"
    known = (host.known_hosts,) if host.known_hosts else tuple(home(p) for p in DEFAULT_KNOWN_HOSTS) + GLOBAL_KNOWN_HOSTS
    return Target(label=host.name, alias=host.address, hostname=host.address, port=host.port or 22,
                  user=host.user or DEFAULT_USER, identities=identities, identities_from=origin,
                  agent=not host.key_file, known_hosts=known)


def _local_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


def _has_authority(path: str) -> bool:
    """Whether a known_hosts file trusts a certificate authority (remote does not: ssh would then accept a
    host certificate that remote refuses)."""
    try:
        with open(path, "rb") as f:
            return any(line.lstrip().startswith(b"@cert-authority") for line in f)
    except OSError:
        return False


def guarded(argv: Sequence[str]) -> list[str]:
    """argv under remote/sh/linkguard.py (the container's system python3, isolated)."""
    from .. import shell

    return ["python3", "-I", "-S", "-c", shell.load_python("linkguard"), *argv]


def run(p: Plan, name: str, host_argv: Sequence[str], *, stdin: bytes | None, on_output: OutputCallback | None,
        deadline: float | None) -> Result:
    """Run `host_argv` (a `pct exec` whose command is `guarded`) on the host; the command's own status and
    output, streamed to on_output as it comes. ssh's stdin stays open until it exits: the guard's link."""
    argv = tuple(host_argv)
    start = time.monotonic()
    proc = subprocess.Popen([*p.argv, shlex.join(argv)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=p.env, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three PIPE
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    failed: list[BaseException] = []
    held: list[bytes] = []  # ssh's own words of a failure to connect: shown only if the command ran after all
    before = bytearray()  # stderr until the guard's STARTED: ssh's (or pct's) own
    started: list[bool] = []  # the guard said STARTED: the command ran, whatever it exits with

    def emit(kind: str, chunk: bytes) -> None:
        if on_output and not failed:
            try:
                on_output(kind, chunk)
            except BaseException as exc:  # the caller gave up on this command: the link goes, and it with it
                failed.append(exc)
                proc.kill()

    def pump(kind: str, stream) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if kind == "stderr" and not started:
                before.extend(chunk)
                at = before.find(STARTED)
                if at < 0:
                    continue
                started.append(True)
                for part in (bytes(before[:at]), bytes(before[at + len(STARTED):])):
                    if part:
                        take(kind, part)
                continue
            take(kind, chunk)

    def take(kind: str, chunk: bytes) -> None:
        chunks[kind].append(chunk)
        if kind == "stderr" and not chunks["stdout"] and (
                held or _NOT_REACHED.search(_text(chunk)) or _SSH_BANNER.search(_text(chunk))):
            held.append(chunk)
            return
        emit(kind, chunk)

    readers = [ContextThread(target=pump, args=(k, s), daemon=True)
               for k, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    try:
        for t in readers:
            t.start()
        payload = stdin or b""
        try:
            proc.stdin.write(b"%d\n" % len(payload) + payload)
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        try:
            code = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            proc.kill()  # the link goes: the guard ends the command in the container
            proc.wait()
            raise CommandTimeout(shlex.join(argv), deadline or 0, b"".join(chunks["stderr"]).decode("utf-8", "replace"),
                                 name) from None
    except KeyboardInterrupt:
        _hang_up(proc)
        raise
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
    for t in readers:
        t.join()
    if not started and before:  # the guard never said it started: all of stderr is what came before it
        take("stderr", bytes(before))
    if failed:
        raise failed[0]
    out, err = b"".join(chunks["stdout"]), b"".join(chunks["stderr"])
    if code == 255 and not started:
        text = _text(err)
        if not out and _NOT_REACHED.search(text):
            raise NotReached(name, f"{name}: ssh did not reach the host: {text.strip().splitlines()[-1]}")
    for chunk in held:  # the command ran: what it said on stderr is its own
        emit("stderr", chunk)
    if failed:
        raise failed[0]
    if code == 255:
        text = _text(err)
        lines = text.strip().splitlines()
        if lines and _LOST.match(lines[-1]):
            raise ConnectError(name, f"{name}: connection lost while running the command in the container: "
                                     f"{lines[-1]} (the command was ended there)")
    if code < 0:  # ssh itself was killed (not by this process): the link is gone, and with it the command there
        raise ConnectError(name, f"{name}: the ssh link ended (signal {-code}) while the command ran in the "
                                 "container; it was ended there")
    return Result(argv, code, out, err, time.monotonic() - start)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\r\n", "\n")  # ssh ends some of its lines with CR LF


def _hang_up(proc: subprocess.Popen) -> None:
    """Ctrl-C: EOF on the guard's link, so it ends the command in the container; then ssh goes."""
    try:
        assert proc.stdin is not None
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=GUARD_GRACE)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
