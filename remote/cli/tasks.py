"""The tasks: `remote ...` anywhere, `invoke ...` in this checkout (tasks.py), the same functions.

Each task is three steps in one place: its options (the function's parameters, checked by
remote/cli/parse.py from remote/cli/table.py's KINDS), one call of the public API (remote.api, as a
script would make it), and printing what came back (remote/cli/format.py). Every RemoteError becomes a
clean `Exit` with its message and exit status, never a traceback. `remote` parses its own command line
from the table that `@task` fills (TASKS); the invoke Collection (remote/cli/invoke.py) is made from the
same table on first use, so `remote` never imports invoke.

To add a task: write `@task(help={...})` over `@handled` over a function `name(c, ..., hosts=None)` whose
body opens `fleet_of(hosts, dry)`, calls one remote.api method and prints with a remote/cli/format.py
function; where `-c all` should run it on every container at once, it takes `fail_fast=False` and, given
several, hands that call to `each_container` (one API call per container, their results and the summary table). Its
options come from its parameters; a new option name needs its short letter in SHORT_FLAGS (or none) and,
unless it is a flag or free text, its check in KINDS. Exit statuses: 0 ok, 1 failed (or the job's/command's
own, where the task reports one), 2 bad input, 3 busy, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .. import __version__
from ..errors import RemoteError
from ..naming import printable
from . import chain
from . import format as fmt
from . import parse as cliparse
from .table import (  # noqa: F401
    CT_HELP,
    DEPRECATED,
    DRY_HELP,
    FAIL_FAST_HELP,
    HOSTS_HELP,
    KINDS,
    SHORT_FLAGS,
    TASKS,
    Exit,
    SayStream,
    checkpoint_flags,
    cli_text,
    each_container,
    error_exit,
    exit_status,
    fleet_of,
    handled,
    is_selection,
    keeps_going,
    many_help,
    no_shell_after_dashes,
    say,
    task,
)


class Streamed:
    """A command's output as it comes (exec's on_output): as it is; with `lines` (one container of several),
    line by line through say, marked `[id] ` (the unfinished last line held until it ends or the command does)."""

    def __init__(self, lines: bool = False):
        self.lines = lines
        self.held: dict[str, tuple[Any, str]] = {}  # per stream: its undecoded bytes' decoder, the unfinished line

    def __call__(self, kind: str, chunk: bytes) -> None:
        out = sys.stdout if kind == "stdout" else sys.stderr
        if not self.lines:
            out.buffer.write(chunk)
            out.flush()
            return
        import codecs

        decoder, text = self.held.get(kind) or (codecs.getincrementaldecoder("utf-8")("replace"), "")
        *lines, text = (text + decoder.decode(chunk)).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.held[kind] = (decoder, text)
        for line in lines:
            say(line, file=out)

    def end(self) -> None:
        """The unfinished last lines of the command, said."""
        for kind, (_, text) in self.held.items():
            if text:
                say(text, file=sys.stdout if kind == "stdout" else sys.stderr)
        self.held.clear()


def _deprecated(task_name: str, old: str, value: Any) -> None:
    """An old option name that still works: say once, on stderr, which name to use."""
    if value is not None:
        say(f"warning: {task_name} --{old} is deprecated: use --{DEPRECATED[(task_name, old)]}", file=sys.stderr)


@task(help={"json": "print machine-readable JSON", "hosts": HOSTS_HELP,
            "container": "only these containers: an id, a comma list, a group or `all` (default: all)"})
@handled
def status(c, json_=False, hosts=None, container=None):
    """Hosts, containers and their jobs at a glance.

    Each host's reachability; each container's state, running job (uptime, throughput) and last exit
    status, all containers at once; a venv lock that differs from its siblings'; multi-node runs once."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        data = fmt.status_dict(fleet.status(container))
    say(fmt.status_json(data) if json_ else "\n".join(fmt.status_lines(data)))
    if not all(h["reachable"] for h in data["hosts"]):
        raise Exit(code=1)


@task(name="exec", positional="command", argv="command", help=many_help(
    command="a shell command line to run inside the container (bash -c); or the argv after `--`, run as is",
    timeout="seconds before the command is killed inside the container"))
@handled
def exec_(c, command, container=None, timeout=None, dry=False, hosts=None, fail_fast=False):
    """Run a command in a container, in the checkout with the job's environment.

    `remote exec -c ID -- CMD ARG...` runs that argv as it is (no shell); `--command STRING` (or the
    string as the one word after the task) runs a bash command line. Once deployed, the command runs
    in the checkout with the job's environment (venv, compile cache, train.env); its output streams
    back and `remote` exits with its status."""
    several = is_selection(container)
    if not isinstance(command, str) and command:
        no_shell_after_dashes(list(command))

    def one(ct):
        out = Streamed(lines=several)
        try:
            return ct.exec(command if isinstance(command, str) else list(command), timeout=timeout, on_output=out)
        finally:
            out.end()

    with fleet_of(hosts, dry, stderr_progress=not dry) as fleet:  # a dry run prints its commands on stdout
        if several:
            return each_container(fleet, container, one, fail_fast=fail_fast, status=lambda r: r.exit_code)
        result = one(fleet.container(container))
    if result.exit_code:
        raise Exit(code=result.exit_code)


@task(help=many_help(allow_dirty="ship uncommitted changes of the local tree (recorded as dirty)",
                     check="only report what would change and any hand-installed or changed packages (exit 1 if any)",
                     rollback="switch the venv back to the previous build",
                     force="deploy even while a training job runs there (the venv it uses is never deleted)"))
@handled
@keeps_going
def deploy(c, container=None, allow_dirty=False, check=False, rollback=False, force=False, dry=False, hosts=None,
           fail_fast=False):
    """Make the container's venv and checkout exactly what the hosts file pins.

    A no-op when they are."""
    def one(ct):
        return ct.deploy(allow_dirty=allow_dirty, check=check, rollback=rollback, force=force)

    def status(plan):  # --check: 1 where something would change
        return 1 if check and (plan.changed or plan.drift) else 0

    with fleet_of(hosts, dry) as fleet:
        if is_selection(container):
            return each_container(fleet, container, one, fail_fast=fail_fast, status=status, text=fmt.deploy_text)
        plan = one(fleet.container(container))
    say(fmt.deploy_text(plan))
    if status(plan):
        raise Exit(code=1)


@task(help=many_help(CT_HELP + "; several: one warmup per group of containers whose cache passports would match, its "
                     "cache copied to the others", parallel="run the devices' warmups as separate processes at once",
                     devices="comma-separated devices (default: warmup.devices)",
                     export="write the container's compile cache folder to this local bundle file (tar.gz); runs "
                     "nothing", import_="load a bundle made by --export into the container's cache (refused if "
                     "versions differ)"))
@handled
@keeps_going
def warmup(c, container=None, parallel=False, devices=None, export=None, import_=None, dry=False, hosts=None,
           fail_fast=False):
    """Compile the training into the persistent compile cache, one device at a time.

    Several containers: those whose cache passports would match are warmed once and the cache copied to
    the rest (docs/guide/compile-cache.md). One container without a warmup of its own: a matching cache of
    another container of the hosts file is copied instead of compiling."""
    if is_selection(container) and not (export or import_ or devices or dry):
        with fleet_of(hosts) as fleet:
            result = fleet.warm_groups(container, fail_fast=fail_fast, parallel=parallel, prefix_output=True)
        say(fmt.group_table(result))
        if fmt.group_exit_code(result):
            raise Exit(code=fmt.group_exit_code(result))
        return
    if export and is_selection(container):  # at once into one file: the bundle would be anybody's
        raise Exit(f"error: warmup --export {export}: a bundle holds one container's cache: give -c ID", code=2)

    def one(ct):
        if import_:
            return ct.import_cache(import_)
        if export:
            return ct.export_cache(export)
        return ct.warmup(parallel=parallel, devices=[d for d in devices.split(",") if d] if devices else None)

    text = (fmt.imported_line if import_ else (lambda path: f"wrote {export}") if export else
            None if dry else fmt.warmup_line)
    with fleet_of(hosts, dry) as fleet:
        if is_selection(container):
            return each_container(fleet, container, one, fail_fast=fail_fast, text=text)
        done = one(fleet.container(container))
    if text is not None:
        say(text(done))


@task(name="cache list", help={"container": "containers to list (an id, a comma list, a group; default: all)",
                               "json": "print JSON", "hosts": HOSTS_HELP})
@handled
def cache_(c, container=None, json_=False, hosts=None):
    """List what each container's compile cache holds: its folder, files, size and passport (`remote cache`)."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        rows = fleet.caches(container or "all")
    say(fmt.caches_json(rows) if json_ else "\n".join(fmt.cache_lines(rows)))


@task(name="cache copy", help={"from_": "the container whose compile cache is copied",
                               "container": "the containers to copy it to (an id, a comma list, a group, `all`)",
                               "fail_fast": FAIL_FAST_HELP, "hosts": HOSTS_HELP})
@handled
def cache_copy(c, from_, container=None, hosts=None, fail_fast=False):
    """Copy one container's compile cache to others whose passports match: only the files they lack."""
    with fleet_of(hosts) as fleet:
        result = fleet.copy_cache(from_, container, fail_fast=fail_fast, prefix_output=True)
    say(fmt.group_table(result))
    if fmt.group_exit_code(result):
        raise Exit(code=fmt.group_exit_code(result))


@task(help={"container": CT_HELP + "; several: one multi-node run across them (train.command formatted per node)",
            "force": "start even if a job is already running there, or the checkout is not the commit the hosts file "
                     "pins (its deployed commit is trained)",
            "warmup": "run the warmup first when the preflight finds it missing",
            "detach": "do not follow the log after starting", "dry": DRY_HELP, "hosts": HOSTS_HELP, "resume":
            "continue from the latest complete checkpoint (train.checkpoint)", "fresh": "start over: the old "
            "checkpoints are moved aside (renamed, never deleted) first"})
@handled
def train(c, container=None, force=False, warmup=False, detach=False, dry=False, hosts=None, resume=False, fresh=False):
    """Preflight, start the training job detached, then follow its log.

    With train.checkpoint, where a complete checkpoint exists: --resume or --fresh (else refused, exit 2).
    Ctrl-C stops following and leaves the job running (exit status 130)."""
    with fleet_of(hosts, dry) as fleet:
        checkpoint_flags(fleet.config.file, container, resume, fresh)
        if is_selection(container):  # one run across these containers (a multi-node run)
            code = fleet.train_nodes(container, force=force, warmup=warmup, follow=not detach, resume=resume,
                                     fresh=fresh)
        else:
            run = fleet.container(container).train(detach=detach or dry, force=force, warmup=warmup, resume=resume, fresh=fresh)
            code = 0 if detach or dry else run.exit_code or 0
    if code:
        raise Exit(code=code)


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP,
            "run": "run id (default: every live run, and the latest's leftovers)", "follow": "keep printing until the job ends",
            "hosts": HOSTS_HELP})
@handled
def logs(c, container=None, run=None, follow=False, hosts=None, fail_fast=False):
    """Print a run's log (what is there now; with --follow, until the job ends). Exits with the run's
    status once it has ended (1 when it was lost)."""
    with fleet_of(hosts) as fleet:
        if is_selection(container):  # each container's own log (a multi-node run: follow one of its nodes)
            return each_container(fleet, container, lambda ct: ct.stream_log(run, follow=follow), fail_fast=fail_fast,
                                  status=lambda final: final.exit_code or 0)
        ct = fleet.container(container)
        if follow:  # a multi-node run: every node's log, merged
            code = fleet.follow_nodes(ct.id, run)
            if code is not None:
                if code:
                    raise Exit(code=code)
                return
        final = ct.stream_log(run, follow=follow)
    if final.exit_code:
        raise Exit(code=final.exit_code)


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP,
            "run": "run id (default: every live run, and the latest's leftovers)",
            "grace": "seconds between TERM and KILL (default 10)", "dry": DRY_HELP, "hosts": HOSTS_HELP, "save":
            "first a checkpoint: its signal sent, or the job's next save awaited (train.checkpoint.grace at most)"})
@handled
def stop(c, container=None, run=None, grace=10, dry=False, hosts=None, fail_fast=False, save=False):
    """Stop a job and verify that nothing of it is left.

    TERM its process group, KILL after the grace period, then check by the run's marker. --save: a checkpoint
    first (which, its step and age, the steps lost; or that none existed yet)."""
    several = is_selection(container)  # each container's own runs (a multi-node run's other nodes: not from here)

    def text(stopped):
        return "" if dry else "\n".join(fmt.stop_lines(stopped))

    with fleet_of(hosts, dry) as fleet:
        if several and save and not dry:  # a multi-node run's nodes: one save for the run, asked of every rank
            ids = fleet.select(container)
            members = fleet.run_nodes(ids[0], run)
            if len(members) > 1 and set(ids) <= set(members):
                several, container = False, ids[0]
        if several:
            return each_container(fleet, container, lambda ct: ct.stop(run, grace=int(grace), nodes=False, save=save),
                                  fail_fast=fail_fast, text=text)
        stopped = fleet.container(container).stop(run, grace=int(grace), save=save)
    if not dry:
        say(text(stopped))


@task(help={"container": "container id(s), comma-separated (default: every container in the hosts file)",
            "json": "print the findings and facts as JSON (schema: docs/guide/doctor.md)", "hosts": HOSTS_HELP,
            "fresh": "import torch again in each container even where an earlier probe's answer still holds",
            "gpu": "check the hosts' NVIDIA driver and each container's GPU passthrough (docs/guide/gpu-passthrough.md)",
            "node": "with --gpu -c ID: before a move, check that cluster node N (a host of the hosts file) has every "
                    "device node the container's devN lines name"})
@handled
def doctor(c, container=None, json_=False, hosts=None, fresh=False, gpu=False, node=None):
    """Find what differs from what deploy made and from the last known-good run.

    Each finding says why it matters and the command that fixes it. Exit 0 healthy, 1 with findings,
    2 on bad input."""
    if node:
        if not gpu or not container or is_selection(container):
            raise Exit("error: doctor --node N: give it with --gpu and one container (`remote doctor --gpu -c ID "
                       "--node N`)", code=2)
        with fleet_of(hosts, stderr_progress=json_) as fleet:
            moved = fleet.doctor_gpu_move(container, node)
        say(fmt.gpu_move_json(moved) if json_ else fmt.gpu_move_text(moved))
        if not moved.healthy:
            raise Exit(code=1)
        return
    if gpu:  # one probe per host, one per container
        with fleet_of(hosts, stderr_progress=json_) as fleet:
            report = fleet.doctor_gpu(container)
        say(fmt.gpu_json(report) if json_ else fmt.gpu_text(report))
        if not report.healthy:
            raise Exit(code=1)
        return
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        ids = ([fleet.container(p.strip()).id for p in str(container).split(",") if p.strip()] if container
               else fleet.ids)
        found = fleet.doctor(ids, fresh=fresh)
    say(fmt.doctor_json(found) if json_ else "\n".join(fmt.doctor_text(d) for d in found))
    if not all(d.healthy for d in found):
        raise Exit(code=1)


@task(name="known-good", help={"container": CT_HELP, "run": "run id (default: the latest)", "hosts": HOSTS_HELP})
@handled
def known_good(c, container=None, run=None, hosts=None):
    """Record a finished run and the container's facts as its known-good, for doctor.

    The run must have exited 0; train records one by itself when a run meets the baseline."""
    from ..naming import known_good_label

    with fleet_of(hosts) as fleet:
        ct = fleet.container(container)
        record = ct.known_good(run)
    say(printable(f"recorded {known_good_label(dict(record.record))} (commit {str(record.commit)[:12]}, torch "
                    f"{record.torch}) in {record.path}"))


@task(help={"container": CT_HELP, "run": "run id (default: the latest)",
            "out": "the HTML file to write (default: ./report-<container>-<run>.html, in the current folder)",
            "dest": "deprecated: the old name of --out", "hosts": HOSTS_HELP})
@handled
def report(c, container=None, run=None, out=None, hosts=None, dest=None):
    """Write one self-contained HTML file of a run.

    Its metric over time against the baseline and the known-good run, its manifest, warmup times and
    any crash hints; it opens offline in any browser."""
    _deprecated("report", "dest", dest)
    if out and dest and out != dest:
        raise Exit(f"error: report: --out {out} and --dest {dest} (its old name) both given; give --out", code=2)
    with fleet_of(hosts) as fleet:
        path = fleet.container(container).report(run, out or dest)
    say(f"wrote {path}")


from . import labtasks  # noqa: E402,F401  (`remote lab up`, `lab down`: registered here, in --help order)

# -- a way in: init, config, runs, shell -------------------------------------------------------------------

@task(help={"address": "the Proxmox host: a host name, an IP address or a ~/.ssh/config alias",
            "port": "its SSH port (default 22)", "user": "the user to log in as (default root)",
            "key_file": "private key to log in with (default: ssh-agent)",
            "known_hosts": "known_hosts file holding the host's key (default ~/.ssh/known_hosts)",
            "pct": "how to run pct there (default `pct`; with --sudo: its exact path, default /usr/sbin/pct)",
            "out": "the file to write (default: $REMOTE_HOSTS_FILE, else ./hosts.yaml)",
            "force": "replace the file if it exists",
            "sudo": "log in as a non-root user whose sudo rule allows pct (writes `sudo: true`; see --sudoers)",
            "sudoers": "instead: print the sudoers drop-in that lets USER run what remote needs (sudo: true)",
            "hosts": "with --sudoers: the hosts file whose `pct` path and containers the rule names (default: "
                     "/usr/sbin/pct, any container)",
            "host": "with --sudoers --hosts: the `sudo: true` host the rule is for (where the file has several)"})
@handled
def init(c, address=None, port=None, user=None, key_file=None, known_hosts=None, pct=None, out=None, force=False,
         sudo=False, sudoers=None, hosts=None, host=None):
    """Write a hosts file listing every container of a Proxmox host, ready to fill in.

    Connects to the host, reads `pct list` and each container's hostname (`pct config`), and writes a
    commented hosts file; an existing file is never overwritten without --force. With --sudoers USER:
    prints a sudoers drop-in for /etc/sudoers.d/ instead (stdout holds only the drop-in)."""
    from .. import api

    if sudoers:
        sys.stdout.write(api.sudoers_dropin(sudoers, hosts, host))
        say("# check it before installing: visudo -cf FILE (then install -m 0440 FILE /etc/sudoers.d/remote)",
              file=sys.stderr)
        return
    if not address:
        raise Exit("error: init needs --address ADDRESS", code=2)
    for flag, path in (("--key-file", key_file), ("--known-hosts", known_hosts)):
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise Exit(f"error: {flag} {path}: no such file", code=2)
    wrote = api.write_hosts_file(address, out=out, port=port, user=user, key_file=key_file, known_hosts=known_hosts,
                                 pct=pct, force=force, sudo=sudo)
    if not wrote.containers:
        say(f"wrote {wrote.path}: host {wrote.host}, no containers yet; `remote create CTID --host {wrote.host} "
            "--template VOLID [--gpu all]` makes one and adds it (docs/guide/bare-node.md)")
        return
    first = wrote.containers[0][0]
    say(f"wrote {wrote.path}: host {wrote.host} with container(s) {', '.join(str(f[0]) for f in wrote.containers)}; "
          f"fill in venv, code and train, then `remote config -c {first}` and `remote deploy -c {first}`")


from . import hosttasks  # noqa: E402,F401  (`remote create`: registered here, after init, in --help order)


@task(name="config", help={"container": "only these containers: an id, a comma list, a group or `all` "
                                        "(default: the one tasks use without -c, else all)",
                           "json": "print the settings as JSON", "hosts": HOSTS_HELP})
@handled
def config_(c, container=None, json_=False, hosts=None):
    """Print the settings a container resolves to, without connecting anywhere.

    The hosts file's sections with the container's own overrides applied, as the tasks will use them;
    train.env's values are not shown."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        if container is not None:
            ids, why = fleet.select(container), f"--container {container}"
        else:
            try:
                ids = [fleet.container(None).id]
                why = ("$REMOTE_CONTAINER" if os.environ.get("REMOTE_CONTAINER", "").strip() else
                       "default_container" if fleet.config.default_container else "the only container")
            except RemoteError:  # several, and none chosen: all of them
                ids, why = fleet.ids, "every container"
        say(json.dumps(fleet.settings(ids), indent=2) if json_ else fleet.render_settings(ids, why))


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP, "json": "print the runs as JSON",
            "limit": "show the latest N runs (default 20)", "hosts": HOSTS_HELP})
@handled
def runs(c, container=None, json_=False, limit=20, hosts=None, fail_fast=False):
    """List a container's runs: id, start, state, exit status, throughput, command."""
    with fleet_of(hosts, stderr_progress=json_) as fleet:
        if is_selection(container):
            return each_container(fleet, container, lambda ct: (ct, ct.runs(limit=limit)), fail_fast=fail_fast,
                                  text=lambda got: fmt.runs_json(got[1]) if json_ else
                                  fmt.runs_text(got[1], got[0].id, got[0].spec.train.run_dir))
        ct = fleet.container(container)
        found = ct.runs(limit=limit)
    say(fmt.runs_json(found) if json_ else fmt.runs_text(found, ct.id, ct.spec.train.run_dir))


@task(help={"container": "container id from the hosts file (default: default_container, $REMOTE_CONTAINER, "
                         "or the only one)", "hosts": HOSTS_HELP})
@handled
def shell(c, container=None, hosts=None):
    """Open a shell in a container, in the checkout with the job's environment.

    A real terminal (a pty there): the venv first on PATH, the compile cache and train.env set, as warmups
    and jobs have them. `exit` (or Ctrl-D) leaves it; remote exits with the shell's status."""
    if is_selection(container):
        raise Exit(f"error: --container: one container for a shell, got {container!r}", code=2)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise Exit("error: remote shell needs a terminal on stdin and stdout; for a command, "
                   "use `remote exec -c ID -- CMD ARG...`", code=2)
    with fleet_of(hosts) as fleet:
        code = fleet.container(container).shell()
    if code:
        raise Exit(code=code)


# -- push / pull: data in, results out ---------------------------------------------------------------------

def _need(**flags) -> None:
    missing = [f"--{name}" for name, value in flags.items() if not value]
    if missing:
        raise Exit(f"error: {' and '.join(missing)} required", code=2)


def _progress(quiet: bool, dry: bool, label: str, several: bool = False):
    """push/pull's progress on stderr; one container of several: its lines through say, marked `[id] `."""
    from .. import api

    if quiet or dry:
        return None
    return api.progress_printer(label, SayStream() if several else None)


XFER_HELP = {"container": CT_HELP, "fail_fast": FAIL_FAST_HELP, "dry": DRY_HELP, "hosts": HOSTS_HELP,
             "attempts": "tries after a lost connection, each resuming what the last left (default 3)",
             "quiet": "no progress on stderr"}


@task(help={**XFER_HELP, "src": "local file or folder", "dest": "path in the container (a folder's contents are "
                                                                 "merged into it; a file lands inside an existing folder)"})
@handled
def push(c, src=None, dest=None, container=None, attempts=3, quiet=False, dry=False, hosts=None, fail_fast=False):
    """Copy a local file or folder into a container.

    Streamed, verified by sha256, resumed after a lost connection."""
    _need(src=src, dest=dest)
    if not (os.path.isfile(src) or os.path.isdir(src)):  # bad input: before anything connects
        raise Exit(f"error: --src {src}: no such file or folder on this machine", code=2)
    several = is_selection(container)

    def one(ct):
        return ct.push(src, dest, attempts=int(attempts), on_bytes=_progress(quiet, dry, f"push {src}", several))

    with fleet_of(hosts, dry) as fleet:
        if several:
            return each_container(fleet, container, one, fail_fast=fail_fast, text=None if dry else fmt.transfer_text)
        done = one(fleet.container(container))
    if not dry:
        say(fmt.transfer_text(done))


@task(help={**XFER_HELP, "src": "file or folder in the container", "dest": "local path (a folder's contents are "
                                                                           "merged into it; a file lands inside an existing folder)",
            "run": "pull this run's outputs, log and manifest instead of --src (a run id, or `latest`)"})
@handled
def pull(c, src=None, dest=None, container=None, run=None, attempts=3, quiet=False, dry=False, hosts=None,
         fail_fast=False):
    """Copy a file or folder out of a container, or a run's outputs.

    Streamed, verified by sha256, resumed after a lost connection. With --run (an id, or `latest`):
    the run's outputs (train.outputs), log, manifest, metrics.jsonl,
    gpu.csv and stacks, into DEST/<run id>/."""
    _need(dest=dest) if run else _need(src=src, dest=dest)
    several = is_selection(container)

    def one(ct):
        where = os.path.join(dest, str(ct.id)) if several else dest  # never two containers' files in one place
        if run:
            return ct.pull_run(where, run, on_bytes=not quiet)
        return ct.pull(src, where, attempts=int(attempts), on_bytes=_progress(quiet, dry, f"pull {src}", several))

    text = None if dry else fmt.pulled_run_line if run else fmt.transfer_text
    with fleet_of(hosts, dry) as fleet:
        if several:
            return each_container(fleet, container, one, fail_fast=fail_fast, text=text)
        done = one(fleet.container(container))
    if text is not None:
        say(text(done))


@task(help={"host": "only this host's kept connection (default: every host's of the hosts file)", "hosts": HOSTS_HELP,
            "all_": "every kept connection of yours, whatever hosts file made it"})
@handled
def disconnect(c, host=None, hosts=None, all_=False):
    """End kept connections now (this hosts file's; --all: every one of yours).

    Each host's kept connection holds the SSH connection and the agents for control_persist seconds."""
    from .. import api

    pids = api.disconnect(hosts, host, every=all_)
    say(f"ended {len(pids)} kept connection(s)" + (f" (pid {', '.join(map(str, pids))})" if pids else ""))


# `remote gpu fix`, `remote host setup`; `remote snapshots`, `remote rollback`: registered on import
from . import gputasks, snaptasks  # noqa: E402,F401

# The order of `remote --help`: the way in, the daily loop, then the rest (tasks not named here follow).
HELP_ORDER = ("init", "create", "config", "status", "deploy", "warmup", "train", "logs", "runs", "stop", "exec", "shell",
              "push", "pull", "doctor", "known-good", "report", "snapshots", "rollback")

FOOTER = ("Hosts file: --hosts FILE, else $REMOTE_HOSTS_FILE, else ./hosts.yaml (`remote init` writes one). "
          "A dry run (-n) prints one line per remote command, its embedded scripts elided (`bash -c <oplock.sh, 55 "
          "lines>`); --verbose adds each in full. "
          "Exit status: 0 ok; 1 failed (exec, train and logs: the command's or the job's own status); "
          "2 bad input; 3 busy; 130 interrupted.")


def run(argv: list[str]) -> int:
    """Parse argv, check every value, run the tasks in order; the exit status (printing what went wrong)."""
    argv = _verbose(list(argv))
    try:
        calls = cliparse.Parser(TASKS).parse(argv)
    except cliparse.Help as h:
        if h.topic is None:
            text = cliparse.program_help(TASKS, __version__, FOOTER, HELP_ORDER)
        elif h.topic in TASKS:
            text = cliparse.task_help(TASKS[h.topic])
        else:
            text = cliparse.group_help(TASKS, h.topic)
        sys.stdout.write(text)
        return 0 if any(a in cliparse.HELP for a in argv) else 2
    except cliparse.Version:
        say(f"remote {__version__}")
        return 0
    except cliparse.Usage as u:
        say(f"error: {u}", file=sys.stderr)
        return 2
    try:
        chain.check(calls)  # every task's settings before the first runs
    except RemoteError as exc:
        return _said(error_exit(exc))
    for call in calls:
        code = _call(call)
        if code:
            return code
    return 0


def _verbose(argv: list[str]) -> list[str]:
    """--verbose (anywhere before `--`): a dry run's commands in full as well, each under its line (the library
    logs them to `remote.dry`); argv without it."""
    import logging

    class SayHandler(logging.Handler):
        remote_cli = True

        def emit(self, record: logging.LogRecord) -> None:
            say(self.format(record))

    end = argv.index("--") if "--" in argv else len(argv)
    dry_log = logging.getLogger("remote.dry")
    for handler in [h for h in dry_log.handlers if getattr(h, "remote_cli", False)]:
        dry_log.removeHandler(handler)
    if "--verbose" not in argv[:end]:
        return argv
    handler = SayHandler()
    handler.setFormatter(logging.Formatter("  full: %(message)s"))
    dry_log.addHandler(handler)
    dry_log.setLevel(logging.DEBUG)
    return [a for i, a in enumerate(argv) if i >= end or a != "--verbose"]


def _said(e: Exit) -> int:
    if e.message:
        say(e.message, file=sys.stderr)
    return e.code if isinstance(e.code, int) and 0 <= e.code <= 255 else 1


def _call(call: cliparse.Call) -> int:
    try:
        call.spec.fn(None, **call.kwargs)
    except Exit as e:
        return _said(e)
    except RemoteError as exc:  # a task without @handled
        say(f"error: {cli_text(exc)}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        say("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a local file: --dest in a folder that does not exist, a full disk
        where = f": {exc.filename}" if exc.filename else ""  # a path may come from a container: escaped
        say(f"error: {printable(f'{exc.strerror or exc}{where}')}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: say so in one line; REMOTE_DEBUG=1 shows where
        if os.environ.get("REMOTE_DEBUG"):
            raise
        say(f"error: internal error in `remote {call.spec.name}`: {type(exc).__name__}: {printable(str(exc))}\n"
              "(a bug in remote: please report it; REMOTE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    return 0


class Program:
    """What `remote` runs (kept as `program.run()` for the tests that start it so)."""

    def run(self, argv: list[str] | None = None, exit: bool = True) -> int:
        code = run(sys.argv[1:] if argv is None else list(argv))
        sys.stdout.flush()
        if exit:
            sys.exit(code)
        return code


program = Program()


def main() -> None:
    """The `remote` console script: the same tasks, anywhere. A closed pipe (`remote ... | head`) ends it quietly."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    program.run()
