"""The programs remote runs on a Proxmox host, and `sudo: true`: a login user limited to them.

PROGRAMS is the one list of what remote runs on a host, one entry per command line (a program and the
arguments it is given, variable ones as `Arg`s): `remote init --sudoers USER` prints the sudoers drop-in
from it, `host_argv` builds every host command from it, and the tests check every command remote builds
against it and ask the real sudo, of every pct subcommand remote does not use, to say no. pct with any
arguments would be root on the host (`pct push`/`pull` copy host files, `pct set -mp0 /,mp=/host` mounts
its root), so pct is allowed only as `pct exec CTID --keep-env 0 -- ...`, status, config and the others
below, each with its fixed arguments.
On a host with `sudo: true` each program marked `root` runs as `sudo -n <exact path> ARGS...`: never a
shell, never `sudo sh -c`, and `-n` so that a rule that wants a password fails at once instead of
waiting on a prompt nobody sees. Programs not marked `root` run as the login user (the stream mux is a
`python3 -I -S -c` of the standard library; its children are `sudo -n pct ...`).

No file is staged on the host: container files travel on a `pct exec` command's stdin and stdout
(remote.ops.files), never through `pct push`/`pull` and a host-side copy. The one exception, a rollback's
checkpoint carry (remote.ops.carry), pulls and pushes ONE fixed container path to and from root's own
/var/lib/remote/carry/CTID/ only: the rule allows no other path on either side.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SUDO = ("sudo", "-n")


@dataclass(frozen=True)
class Arg:
    """A variable argument in a program's allowed argv: what it stands for and the POSIX extended regular
    expression the sudo rule matches it with (no `,` `:` `=` `\\`: sudoers would read them as syntax)."""
    name: str
    regex: str


CTID = Arg("CTID", "[1-9][0-9]*")  # a drop-in made from a hosts file allows only its container ids
COMMAND = Arg("COMMAND...", ".+")  # what runs in the container: `pct exec` is the point of the rule
OURS = Arg("remote-DATE-N", "remote-[0-9]{8}-[0-9]+")  # remote's own snapshots: the only ones it deletes
# What deploy.snapshot writes (remote.ops.snapshots.before_deploy): the commit, or the venv spec's hash; nothing
# more can follow, so no other argument (an option of pct's) passes inside the description.
DESCRIPTION = Arg("before deploy of COMMIT", "before deploy of (venv spec )?[0-9a-f]{7}[0-9a-f]*")
BOOL = Arg("0|1", "[01]")
# A checkpoint carried across a rollback (remote.ops.carry): pull and push move ONE file between ONE fixed path
# in the container and remote's own root-only folder on the host, never any other host path (pct pull/push with
# free paths would read and write any host file as root).
CARRY_STAGE = "/var/tmp/remote-carry-checkpoint"
CARRY_ROOT = "/var/lib/remote/carry"
CARRY_DIR = Arg("/var/lib/remote/carry/CTID", "/var/lib/remote/carry/[1-9][0-9]*")
CARRY_FILE = Arg("/var/lib/remote/carry/CTID/RUN.ckpt", "/var/lib/remote/carry/[1-9][0-9]*/[0-9A-Za-z_-]+[.]ckpt")


@dataclass(frozen=True)
class HostProgram:
    name: str
    path: str  # where a Proxmox VE host has it (pct's own path comes from the hosts file's `pct` key)
    args: tuple[str | Arg, ...] | None  # the arguments the sudo rule allows (one entry per allowed form); None: any
    root: bool  # runs through `sudo -n` on a host with `sudo: true`
    why: str
    system: bool = False  # the system's own program (coreutils) at its path, never looked for beside pct


# One entry per command line remote runs, so that the drop-in allows nothing else: an entry is one line.
PROGRAMS: tuple[HostProgram, ...] = (
    HostProgram("pct", "/usr/sbin/pct", ("exec", CTID, "--keep-env", "0", "--", COMMAND), True,
                "every container command, the in-container agent and the transfers' streams"),
    HostProgram("pct", "/usr/sbin/pct", ("status", CTID), True, "whether a container runs"),
    HostProgram("pct", "/usr/sbin/pct", ("start", CTID), True, "the library's Container.start()"),
    HostProgram("pct", "/usr/sbin/pct", ("stop", CTID), True, "the library's Container.stop()"),
    HostProgram("pct", "/usr/sbin/pct", ("config", CTID), True,
                "a container's settings: its GPU passthrough (doctor --gpu), its rootfs storage and mount points"),
    HostProgram("pct", "/usr/sbin/pct", ("list",), True, "the host's containers (remote init)"),
    HostProgram("pct", "/usr/sbin/pct", ("listsnapshot", CTID), True, "`remote snapshots`, the snapshot names"),
    HostProgram("pct", "/usr/sbin/pct", ("snapshot", CTID, OURS, "--description", DESCRIPTION), True,
                "the snapshot before a deploy that changes something (deploy.snapshot)"),
    HostProgram("pct", "/usr/sbin/pct", ("delsnapshot", CTID, OURS), True,
                "remote's own snapshots beyond deploy.keep_snapshots (never another's)"),
    HostProgram("pct", "/usr/sbin/pct", ("rollback", CTID, OURS, "--start", BOOL), True,
                "`remote rollback` to remote's own snapshots (a rollback restores the snapshot's container config too: "
                "another's may be older and wider)"),
    HostProgram("pct", "/usr/sbin/pct", ("pull", CTID, CARRY_STAGE, CARRY_FILE), True,
                "a rollback carries the run's checkpoint out of the rootfs it reverts (remote.ops.carry)"),
    HostProgram("pct", "/usr/sbin/pct", ("push", CTID, CARRY_FILE, CARRY_STAGE), True,
                "... and back in after it"),
    HostProgram("install", "/usr/bin/install", ("-d", "-m", "0700", CARRY_DIR), True,
                "the carried checkpoint's folder on the host, root's only", system=True),
    HostProgram("sha256sum", "/usr/bin/sha256sum", ("--", CARRY_FILE), True,
                "the carried copy verified before the rollback (pct pull may exit 0 on a failed copy)", system=True),
    HostProgram("rm", "/usr/bin/rm", ("-f", "--", CARRY_FILE), True,
                "the carried copy removed once it is back in place and verified", system=True),
    HostProgram("df", "/usr/bin/df", None, False,
                "the host's free space checked before a checkpoint is carried there", system=True),
    HostProgram("pvesh", "/usr/bin/pvesh", ("get", "/cluster/resources", "--type", "vm", "--output-format", "json"), True,
                "a cluster's guest list: which node holds each container (remote.cluster, hosts with cluster:)"),
    HostProgram("pvesm", "/usr/sbin/pvesm", ("status",), True,
                "the storages' types: whether a container's rootfs can take a snapshot (deploy.snapshot)"),
    HostProgram("uname", "/usr/bin/uname", ("-n",), False,
                "a cluster node's host name, its Proxmox node name, where its entry is named otherwise (remote.cluster)"),
    HostProgram("python3", "/usr/bin/python3", None, False,
                "the host's stream mux (remote.transport.hostmux), as the login user"),
    # The host-side GPU probe (doctor --gpu) adds its programs here: modinfo, nvidia-smi and lspci read
    # /proc and /sys as the login user (root=False); only a program that must run as root gets root=True
    # (and so a line in the drop-in). Its `pct config` is pct's, already allowed.
)

# pct subcommands that only a root login runs, never through the rule: `remote create` and `remote gpu fix`
# write devN and mount lines (root-equivalent: Proxmox allows devN to root@pam only) and refuse a host with
# `sudo: true` before anything runs (docs/guide/safety.md#which-command-needs-which-login).
ROOT_ONLY = ("create", "clone", "set", "destroy")


def program(name: str) -> HostProgram:
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(name)


def pct_path(pct: str) -> str:
    """The exact path of pct that a sudo rule names, from the hosts file's `pct` key (of an older file's
    `sudo -n /usr/sbin/pct`, its last absolute path)."""
    paths = [w for w in shlex.split(pct) if w.startswith("/")]
    return paths[-1] if paths else program("pct").path


def program_path(name: str, pct: str = "pct", exact: bool = True) -> str:
    """A program's path on a host. pct's comes from the hosts file's `pct` key; Proxmox's other root
    programs are looked for beside it (a Proxmox VE host has them all in /usr/sbin; the lab in its bin
    folder). Not `exact` (no sudo) with a bare `pct`: bare names, found on the login shell's PATH as pct is."""
    p = program(name)
    if name == "pct":
        return pct_path(pct) if exact else pct
    if not p.root or p.system:
        return p.path
    if pct == "pct":
        return p.path if exact else p.name
    if pct == program("pct").path:  # Proxmox VE's own layout: pvesh is in /usr/bin, pct and pvesm in /usr/sbin
        return p.path
    return pct.rsplit("/", 1)[0] + "/" + p.path.rsplit("/", 1)[1] if "/" in pct else p.name


PLAIN_PATH = re.compile(r"/[A-Za-z0-9_.+/-]+")


def plain_path(path: str) -> bool:
    """Whether `path` is a plain absolute path that can stand in a sudoers line as it is: no `,`, `:`,
    `=`, space or other character sudoers reads, and no `..` component."""
    return bool(PLAIN_PATH.fullmatch(path)) and ".." not in path.split("/")


def pct_command(pct: str, sudo: bool) -> str:
    """What `Host.pct` holds: how pct is called on the host (a command line for pct_argv)."""
    return shlex.join([*SUDO, pct_path(pct)]) if sudo else pct


def forms(name: str) -> list[tuple[str | Arg, ...] | None]:
    """Every argv (after the program) the rule allows program `name`, as PROGRAMS lists them."""
    return [p.args for p in PROGRAMS if p.name == name]


def _regex(form: tuple[str | Arg, ...], ctids: Sequence[int] = ()) -> str:
    """The form as the POSIX extended regular expression sudo matches the arguments with (joined by spaces)."""
    parts = []
    for a in form:
        if isinstance(a, Arg):
            parts.append("(" + "|".join(map(str, ctids)) + ")" if a is CTID and ctids else a.regex)
        elif re.fullmatch(r"[A-Za-z0-9_/-]+", a):
            parts.append(a)
        else:
            raise ValueError(f"{a!r}: a fixed argument of a regular-expression rule is letters, digits, _ / -")
    return "^" + " ".join(parts) + "$"


def allows(name: str, args: Sequence[str], ctids: Sequence[int] = ()) -> bool:
    """Whether the drop-in lets `sudo -n PROGRAM args...` run: the rule's own regular expressions,
    matched as sudo matches them (on the arguments joined by spaces)."""
    for form in forms(name):
        if form is None:
            return True
        if all(isinstance(a, str) for a in form):
            if tuple(args) == form:
                return True
        elif re.fullmatch(_regex(form, ctids)[1:-1], " ".join(args), re.DOTALL):
            return True
    return False


def host_argv(host, name: str, *args: str) -> list[str]:
    """The argv that runs host program `name` on `host` (a config.Host), through sudo where it asks for it."""
    p = program(name)
    if name == "pct":
        return [*shlex.split(host.pct), *args]
    if p.root and not allows(name, args):
        raise ValueError(f"{name} {shlex.join(args)}: the sudo rule allows only "
                         + "; ".join(usage(name, f) for f in forms(name)))
    sudo = bool(getattr(host, "sudo", False))
    raw = getattr(host, "pct_path", None) or (host.pct if len(shlex.split(host.pct)) == 1 else "pct")
    path = program_path(name, raw, exact=sudo)
    return [*SUDO, path, *args] if (p.root and sudo) else [path, *args]


def usage(name: str, form: tuple[str | Arg, ...] | None) -> str:
    """`pct exec CTID --keep-env 0 -- COMMAND...`: an allowed form as a reader reads it."""
    return " ".join([name, *("ARGS..." if form is None else (a.name if isinstance(a, Arg) else a for a in form))])


def rule_commands(pct_paths: Iterable[str], ctids: Sequence[int] = ()) -> list[str]:
    """The commands of the sudo rule: each root program at its exact path, with each argv it is allowed:
    fixed arguments as they are, a form with variable ones as sudo's `^...$` regular expression (sudo
    1.9.10 or later: Proxmox VE 8 and 9 have it). `ctids`: the only container ids allowed (none: any)."""
    commands: list[str] = []
    for pct in dict.fromkeys(pct_paths) or [program("pct").path]:
        if pct != "pct" and not plain_path(pct):  # the hosts file checks it too: a second line of defence
            raise ValueError(f"pct path {pct!r} is not a plain absolute path (letters, digits, _ . + - and /, "
                             "no `..`): it cannot stand in a sudo rule")
        for p in PROGRAMS:
            if not p.root:
                continue
            path = program_path(p.name, pct)
            if p.args is None:
                command = path
            elif all(isinstance(a, str) for a in p.args):
                command = path + "".join(" " + _escape(str(a)) for a in p.args)
            else:
                command = path + " " + _regex(p.args, ctids)
            if command not in commands:
                commands.append(command)
    return commands


def _escape(arg: str) -> str:
    # sudoers command arguments: `,`, `:`, `=`, `\` and spaces must be escaped
    return re.sub(r"([,:=\\ ])", r"\\\1", arg)


def rule_paths(pct: str) -> list[str]:
    """The exact paths of the programs a drop-in for a host with this `pct` path names (pct, pvesh, pvesm)."""
    return list(dict.fromkeys(program_path(p.name, pct) for p in PROGRAMS if p.root))


# How rootchain.sh runs on the host: with an empty environment and no start-up files, so that nothing the login
# account exports (a BASH_FUNC_stat%% function, PATH, BASH_ENV) answers for it (its programs are absolute paths).
CLEAN_BASH = ("/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/bin/bash", "--norc", "--noprofile")

# Proxmox VE's own programs, Perl scripts of its packages that load their modules from /usr/share/perl5: their
# interpreter's chain is checked, what lies beside them in /usr/sbin is not (docs/guide/safety.md).
PROXMOX_OWN = ("/usr/sbin/pct", "/usr/sbin/pvesm", "/usr/bin/pvesh")
SHELLS = ("sh", "bash", "dash", "ksh", "mksh", "zsh", "busybox")


def chain_argv(paths: Sequence[str]) -> list[str]:
    """The read-only host command (remote/sh/rootchain.sh) that lists who owns each folder above `paths`, hop
    by hop through links, and what each program is (an ELF binary, or a script and its interpreter's chain)."""
    from . import shell

    return [*CLEAN_BASH, "-c", shell.load("rootchain"), "rootchain", *paths]


STAT_KINDS = ("directory", "regular file", "regular empty file", "symbolic link")


def _owner_problem(what: str, stat: str, kinds: Sequence[str] = STAT_KINDS) -> str | None:
    """Why `what` (a folder or file others must not be able to change) is unsafe, from `UID MODE TYPE`."""
    fields = stat.split(" ", 2)
    if len(fields) != 3 or not fields[0].isdigit() or not re.fullmatch(r"[0-7]{1,5}", fields[1]) \
            or fields[2] not in kinds:
        return f"{what}: unreadable answer {stat!r}"
    uid, mode = int(fields[0]), int(fields[1], 8)
    if fields[2] in ("symbolic link", "l"):
        return None  # replaced only through its folder (checked: the line before); its target is the next hop
    if uid != 0:
        return f"{what} is owned by uid {uid}, not root"
    if mode & 0o022:
        return f"{what} is writable by {'others' if mode & 0o002 else 'its group'} (mode {mode:o})"
    return None


def _program_problem(path: str, rows: list[tuple[str, str]]) -> str | None:
    """Why the program `path` is unsafe, from rootchain.sh's rows for it (components, then what it is), or None."""
    kinds = {what: answer for what, answer in rows if what.startswith("@") and ":" not in what}
    if kinds.get("@end") != "done" or "@program" not in kinds:
        return "the host did not say who owns its folders"  # nothing, or an answer cut short
    for key in ("@program", "@interpreter-is", "@end"):  # said once each: a second (a name with a newline) is forged
        if sum(what == key for what, _ in rows) > 1:
            return f"unreadable answer: {key} said twice (a name with a newline in it?)"
    for what, answer in rows:
        if what.startswith("/") or what.startswith("@interpreter:"):
            where = what.removeprefix("@interpreter:")
            if answer == "unsearchable":
                hidden = (f"{where}: the login user cannot look inside its folder, so what it is (a link, and to "
                          "where) cannot be checked: run `remote init --sudoers` as root on the host")
                return hidden if where == what else f"its interpreter's chain: {hidden}"
            if answer != "missing":
                problem = _owner_problem(where, answer)
                if problem:
                    return problem if where == what else f"its interpreter's chain: {problem}"
    kind, _, rest = kinds["@program"].partition(" ")
    real, _, interpreter = rest.partition("\t")
    if kind == "loop":
        return "more than 40 symbolic links on the way: it resolves nowhere"
    if kind == "unreadable":
        return f"{real} cannot be read by the login user: what it runs cannot be checked"
    if kind == "other":
        return f"{real} is neither an ELF binary nor a `#!` script"
    if kind != "script":
        return None  # an ELF binary, or a missing name below folders only root can write
    ikind, _, ireal = kinds.get("@interpreter-is", "missing").partition(" ")
    if ikind == "relative":
        return f"{real} names a relative interpreter ({interpreter}): it runs whatever the working folder holds"
    if ikind != "elf":
        why = {"script": "a script itself", "missing": "missing", "loop": "a link loop"}.get(ikind, "no ELF binary")
        return f"{real}'s interpreter {interpreter} is {why}: only an ELF interpreter is checked"
    if ireal.rsplit("/", 1)[-1] == "env" or interpreter.rsplit("/", 1)[-1] == "env":
        return f"{real} finds its interpreter through {interpreter}, which looks it up on PATH"
    if real in PROXMOX_OWN:
        return None
    for what, answer in rows:
        if what == "@sources":
            return f"{real} is a shell script that runs other files as root (line {answer}): put it in one file"
        if what.startswith("@beside:"):
            where = what.removeprefix("@beside:")
            if answer.endswith(" l"):
                return f"{where}, beside the script {real}, is a symbolic link (the script may load it)"
            problem = _owner_problem(where, answer, ("f", "d"))
            if problem:
                return f"beside the script (it may load it): {problem}"
    return None


def unsafe(output: str, paths: Sequence[str]) -> dict[str, str]:
    """Of `paths`, those a user other than root could replace or change, each with why: a component of any hop
    of the path (links followed one at a time) not owned by root, or writable by its group or by others (a
    sticky /tmp included: a name missing there can be made by anyone, a link there repointed by its owner); a
    program that is neither an ELF binary nor a script whose interpreter passes the same check; a script (not
    Proxmox's own) that sources a file, or beside which lies a file others can change. rootchain.sh's output,
    read purely; a path it did not answer for to the end (or a missing name) counts as unsafe."""
    rows: dict[str, list[tuple[str, str]]] = {p: [] for p in paths}
    for line in output.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[0] in rows:
            rows[parts[0]].append((parts[1], parts[2]))
    bad = {}
    for path in paths:
        problem = _program_problem(path, rows[path])
        if problem:
            bad[path] = problem
    return bad


USER_RE = re.compile(r"[a-z_][a-z0-9_.-]*\$?")


def sudoers(user: str, pct_paths: Sequence[str] = (), ctids: Sequence[int] = (), host: str | None = None) -> str:
    """A drop-in for /etc/sudoers.d/: `user` may run exactly the command lines remote runs as root, without a
    password; with `ctids`, on those containers only; `host`: the hosts file's host it is for."""
    if not USER_RE.fullmatch(user):
        raise ValueError(f"{user!r} is not a user name sudo accepts")
    ctids = sorted({int(c) for c in ctids})
    commands = rule_commands(pct_paths, ctids)
    where = f"host {host} of the hosts file" if host else "this Proxmox host"
    lines = [
        f"# remote: what {user} may run as root on {where} (remote init --sudoers {user}).",
        f"# Install: remote init --sudoers {user} > remote.sudoers; visudo -cf remote.sudoers &&",
        "#          install -m 0440 -o root -g root remote.sudoers /etc/sudoers.d/remote",
        f"# Then set `sudo: true` and `user: {user}` for this host in the hosts file.",
        "# Each program at its exact path with only the arguments remote gives it (sudo's ^...$ regular",
        "# expressions: sudo 1.9.10 or later); nothing else, no shell. remote runs them as `sudo -n PROGRAM ...`.",
        ("# Containers: " + ", ".join(map(str, ctids)) + " only (the hosts file's on this host; a new one needs a new "
         "drop-in)."
         if ctids else "# Containers: any id (`remote init --sudoers USER --hosts FILE` allows only the file's)."),
        *[f"#   {usage(p.name, p.args)}: {p.why}" for p in PROGRAMS if p.root],
        f"Defaults:{user} !requiretty",
        f"{user} ALL=(root) NOPASSWD: " + ", \\\n    ".join(commands),
    ]
    return "\n".join(lines) + "\n"


def rule_of(text: str, user: str) -> list[str]:
    """The commands a drop-in allows `user` (for the tests and doctor: what the rule says)."""
    for line in re.sub(r"\\\n", " ", text).splitlines():
        m = re.fullmatch(rf"{re.escape(user)}\s+ALL=\(root\)\s+NOPASSWD:\s*(.+)", line.strip())
        if m:
            return [c.strip() for c in re.split(r"(?<!\\),", m.group(1))]
    return []


# -- failures ------------------------------------------------------------------------------------------

PASSWORD = re.compile(r"(?m)^sudo: (a password is required|a terminal is required)")
NOT_SUDO = re.compile(r"(?m)^sudo: (\S+: )?command not found|^\S+: (line \d+: )?sudo: (command )?not found")


def sudo_failure(argv: Sequence[str], stderr: str) -> str | None:
    """'password' (or not allowed: told apart by `diagnose`), 'missing' (no sudo on the host), else None."""
    if tuple(argv[:2]) != SUDO:
        return None
    if PASSWORD.search(stderr):
        return "password"
    if NOT_SUDO.search(stderr):
        return "missing"
    return None


def diagnose(run, argv: Sequence[str], host: str, user: str | None) -> str:
    """Why `sudo -n argv...` failed with 'a password is required': `sudo -n -l` of the same command says
    whether the rule lacks that program (it exits 1, silent, where the user has a NOPASSWD rule) or
    wants a password for everything. `run(argv) -> Result` on the same host."""
    who = user or "the login user"
    program = argv[2] if len(argv) > 2 else "?"
    command = " ".join(argv[2:4]) if len(argv) > 3 and not argv[3].startswith("-") else program
    try:
        listed = run([*SUDO, "-l", *argv[2:]])
    except Exception:  # the diagnosis is a courtesy: the failure itself is reported either way
        listed = None
    drop_in = f"`remote init --sudoers {user or 'USER'}` prints the drop-in for /etc/sudoers.d/"
    if listed is not None and listed.exit_code != 0 and not PASSWORD.search(listed.err):
        return (f"sudo on {host} does not allow {who} to run {command} ({program}): the sudo rule lacks it; "
                f"{drop_in} (every command line remote runs, at its exact path; one made with --hosts FILE allows "
                "only that file's containers)")
    return (f"sudo on {host} wants a password for {who} to run {program} (remote runs `sudo -n`, never a "
            f"prompt): the rule needs NOPASSWD; {drop_in}")
