"""The tasks: `remote ...` anywhere, `invoke ...` in this checkout (tasks.py), the same functions.

Tasks stay thin: parse flags, load the hosts file, call one library function, print. Every
RemoteError becomes a clean `Exit` with its message and exit status, never a traceback. `remote` parses
its own command line (remote/cliparse.py) from the table that `@task` fills (TASKS); the invoke
Collection (`ns`) is made from the same table on first use, so `remote` never imports invoke.

To add a task: write `@task(help={...})` over `@handled` over a function `name(c, ..., hosts=None)` (add
`@fleet_task` between them where `-c all` should run it on every container at once). Its options come
from its parameters; a new option name needs its short letter in SHORT_FLAGS (or none) and, unless it
is a flag or free text, its check in KINDS. Exit statuses: 0 ok, 1 failed (or the job's/command's own,
where the task reports one), 2 bad input, 3 busy, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys

from . import __version__
from . import cliparse
from . import config as cfg
from .cliparse import Kind, number, pattern
from .errors import RemoteError
from .naming import printable
from .ops import fleet

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
    "snapshot": Kind(pattern(r"[A-Za-z][A-Za-z0-9_-]{0,39}", "a snapshot name (`remote snapshots` lists them)"), "NAME"),
}

TASKS: dict[str, cliparse.Spec] = {}  # "deploy", "lab up", ...: what `remote` knows, in --help order


class Exit(Exception):
    """End the task with this exit status, and this message on stderr (what invoke's Exit was here)."""

    def __init__(self, message: str | None = None, code: int = 1):
        super().__init__(message or "")
        self.message, self.code = message, code


def task(*, name: str | None = None, help: dict | None = None, positional: str | None = None,
         argv: str | None = None, usage: str = ""):
    """Register a task in TASKS under `name` (default: the function's, `_` dropped); "lab up" is `up` of
    the group `lab`. `positional`: the parameter a bare word fills; `argv`: the one `-- ARGV...` fills."""
    def register(fn):
        key = name or fn.__name__.rstrip("_").replace("_", "-")
        TASKS[key] = cliparse.spec_of(fn, key, help or {}, short=SHORT_FLAGS, kinds=KINDS, positional=positional,
                                      argv=argv, usage=usage)
        fn.help = help or {}
        return fn
    return register


HOSTS_HELP = "hosts file (default: $REMOTE_HOSTS_FILE, else ./hosts.yaml)"
DRY_HELP = "print the exact remote commands instead of running them"
CT_HELP = ("container id from the hosts file (default: default_container, $REMOTE_CONTAINER, or the only one); "
           "a comma list (200,201), a group from `groups:` or `all` runs the task on each of them at once")
FAIL_FAST_HELP = "with several containers: start no more of them after the first failure"


def exit_status(exc: RemoteError) -> int:
    """A library error's exit status: 2 bad input, 3 busy, else 1 (a command's own status never leaks out of
    a failed step: only tasks that report one, exec, train and logs, exit with it)."""
    return type(exc).exit_code if type(exc).exit_code in (2, 3) else 1


def handled(fn):
    """Turn library errors into a clean exit with the error's message and status."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RemoteError as exc:  # its message may quote a container: escapes shown, lines kept
            raise Exit(f"error: {printable(str(exc), lines=True)}", code=exit_status(exc)) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None

    return wrapper


def _session(hosts: str | None, dry: bool = False):
    # Container commands go through one persistent agent per container (plain pct exec where it can't run).
    from .transport.session import Session

    shared = fleet.shared()
    if shared is not None:  # one container of a fleet task: the fleet's session, closed by the fleet
        return contextlib.nullcontext(shared)
    return Session(cfg.load(hosts), dry=dry, agent=True, keep=True)


def fleet_task(fn):
    """With --container naming several containers (a list, a group, `all`): the task on each of them at
    once (remote.ops.fleet), output lines prefixed `[id] `, a summary table, exit status from them all.
    One id, or none: the task exactly as it is."""
    import inspect

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(c, *args, fail_fast=False, **kwargs):
        if not fleet.is_selection(kwargs.get("container")):
            return fn(c, *args, **kwargs)
        return handled(_run_fleet)(fn, c, args, kwargs, fail_fast)

    wrapper.__signature__ = sig.replace(parameters=[
        *sig.parameters.values(), inspect.Parameter("fail_fast", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=False)])
    return wrapper


def _run_fleet(fn, c, args, kwargs, fail_fast):
    from .transport.session import Session

    config = cfg.load(kwargs.get("hosts"))
    ids = fleet.select(config, kwargs["container"])

    def one(ctid: int) -> None:
        mine = {**kwargs, "container": str(ctid)}
        if fn.__name__ == "pull" and mine.get("dest"):  # never two containers' files in one place
            mine["dest"] = os.path.join(mine["dest"], str(ctid))
        fn(c, *args, **mine)

    with Session(config, dry=bool(kwargs.get("dry")), agent=True, keep=True) as s, fleet.sharing(s, ids):
        outcomes = fleet.run_each(config, ids, one, fail_fast=fail_fast)
    print(fleet.render(outcomes))
    code = fleet.exit_code(outcomes)
    if code:
        raise Exit(code=code)


def _stream(kind: str, chunk: bytes) -> None:
    out = sys.stdout if kind == "stdout" else sys.stderr
    out.buffer.write(chunk)
    out.flush()


@task(help={"json": "print machine-readable JSON", "hosts": HOSTS_HELP,
            "container": "only these containers: an id, a comma list, a group or `all` (default: all)"})
@handled
def status(c, json_=False, hosts=None, container=None):
    """Hosts, containers and their jobs at a glance.

    Each host's reachability; each container's state, running job (uptime, throughput) and last exit
    status, all containers at once; a venv lock that differs from its siblings'; multi-node runs once."""
    from .ops.jobs import container_jobs, lock_outliers

    with _session(hosts) as s:
        hosts_ = fleet.inventory(s)  # every host at once
        if container is not None:
            chosen = set(fleet.select(s.config, container))
            hosts_ = [type(h)(h.host, h.reachable, h.error, {k: v for k, v in h.containers.items() if k in chosen})
                      for h in hosts_ if any(k in chosen for k in h.containers)]
        jobs = container_jobs(s, hosts_)
        outliers = lock_outliers(jobs, s.config)
        kept = {h.host: s.kept_note(h.host) for h in hosts_}
    for entry in jobs:
        if entry["container"] in outliers:
            entry["venv_lock_differs"] = outliers[entry["container"]]
    if json_:
        print(json.dumps({"hosts": [{"host": h.host, "reachable": h.reachable, "error": h.error, "kept": kept[h.host],
                                     "containers": {str(k): v for k, v in h.containers.items()}} for h in hosts_],
                          "containers": jobs}, indent=2))
    else:
        by_ct = {j["container"]: j for j in jobs}
        for h in hosts_:
            print(f"{h.host}: {'reachable' if h.reachable else 'UNREACHABLE'}"
                  + (f" ({kept[h.host]})" if kept[h.host] else ""))
            if h.error:
                print("  " + printable(h.error, lines=True).replace("\n", "\n  "))
            for ctid, state in h.containers.items():  # run ids, states, errors: the container's and the host's
                print(printable(f"  {ctid}: {state}" + _job_line(by_ct.get(ctid)) + _also_live(by_ct.get(ctid))
                                + _lock_note(by_ct.get(ctid))))
        for line in _multinode_lines(jobs):
            print(printable(line))
    if not all(h.reachable for h in hosts_):
        raise Exit(code=1)


def _lock_note(entry: dict | None) -> str:
    if not entry or not entry.get("venv_lock_differs"):
        return ""
    return (f"  !! venv lock {entry['venv_lock'][:12]} differs from its siblings' {entry['venv_lock_differs'][:12]}:"
            " `remote deploy` them together")


def _multinode_lines(jobs: list[dict]) -> list[str]:
    """Each multi-node run once, with its nodes and what each is doing."""
    runs: dict[str, list[dict]] = {}
    for entry in jobs:
        run = entry.get("run") or {}
        if run.get("nodes"):
            runs.setdefault(run["id"], []).append(entry)
    lines = []
    for run_id, entries in runs.items():
        nodes = entries[0]["run"]["nodes"]
        seen = {e["container"]: e["run"] for e in entries}
        parts = []
        for rank, ctid in enumerate(nodes):
            r = seen.get(ctid)
            what = ("not shown" if r is None else "running" if r["alive"] else
                    "LOST" if r.get("lost") else f"exited {r['exit']}")
            parts.append(f"{ctid} (node {rank}{', master' if rank == 0 else ''}): {what}")
        alive = any(r["alive"] for r in seen.values())
        lines.append(f"multi-node run {run_id} {'running' if alive else 'ended'} on {len(nodes)} nodes: "
                     + "; ".join(parts))
    return lines


def _also_live(entry: dict | None) -> str:
    """Live runs besides the latest (a `train --force` beside another, a wrapper without its pid file yet)."""
    from .ops.jobs import live_text

    return f"; ALSO RUNNING: {live_text(entry['also_live'])}" if entry and entry.get("also_live") else ""


def _watch_text(r: dict) -> str:
    """The stall watch's and the wrapper's part of a status line (docs/watch.md)."""
    g, s = r.get("gpu") or {}, r.get("stalled")
    text = f", GPU util {g['util_pct']:g}%" if g.get("util_pct") is not None else ""
    text += f", mem {g['mem_used_mib'] / 1024:.1f} GiB" if g.get("mem_used_mib") is not None else ""
    if (r.get("attempts_max") or 0) > 1 and r.get("attempt"):
        text += f", attempt {r['attempt']} of {r['attempts_max']}"
    return text + (f", STALLED: no output for {s['seconds']:g} s (stacks in {s['stacks']})" if s else "")


def _job_line(entry: dict | None) -> str:
    if not entry or "run" not in entry:
        return "" if not entry or "error" not in entry else f"  ({entry['error']})"
    r = entry["run"]
    unit = f" {r['unit']}" if r.get("unit") else ""
    if r["alive"]:
        tp = f", {r['throughput']:.4g}{unit}" if r["throughput"] is not None else ", no throughput yet"
        base = (f" vs baseline {r['baseline']:g}{unit}{' SLOW' if r['low'] else ''}"
                if r["baseline"] and r["throughput"] is not None else "")
        text = f", job {r['id']} running {r['uptime_s']}s{tp}{base}"
        text += f" {r['spark']}" if r.get("spark") else ""
        text += _watch_text(r)
    elif r.get("lost"):
        text = f", last run {r['id']} LOST (no exit record)" + (
            f"; its processes {r['orphans']} still run" if r.get("orphans") else "")
    else:
        tp = f", last throughput {r['throughput']:.4g}{unit}" if r["throughput"] is not None else ""
        ended = f"stopped by `remote stop` (exit {r['exit']})" if r.get("stopped") else f"exited {r['exit']}"
        text = f", last run {r['id']} {ended}{tp}"
        text += f" {r['spark']}" if r.get("spark") else ""
        text += _watch_text(r)
    return text + (f" [{', '.join(r['problems'])}]" if r["problems"] else "")


@task(name="exec", positional="command", argv="command",
      help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP,
            "command": "a shell command line to run inside the container (bash -c); or the argv after `--`, run as is",
                         "timeout": "seconds before the command is killed inside the container",
                         "dry": DRY_HELP, "hosts": HOSTS_HELP})
@fleet_task
@handled
def exec_(c, command, container=None, timeout=None, dry=False, hosts=None):
    """Run a command in a container, in the checkout with the job's environment.

    `remote exec -c ID -- CMD ARG...` runs that argv as it is (no shell); `--command STRING` (or the
    string as the one word after the task) runs a bash command line. Once deployed, the command runs
    in the checkout with the job's environment (venv, compile cache, train.env); its output streams
    back and `remote` exits with its status."""
    from .ops import jobenv
    from .errors import ContainerCommandNotFound, DeployError
    from .ops.warmup import deployed

    with _session(hosts, dry) as s:
        spec = s.config.container(container)
        ct = s.container(spec.ctid)
        kwargs = dict(timeout=float(timeout) if timeout else None, check=False, on_output=_stream)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        try:
            verify = deployed(ct, spec)["venv"].get("verify")
        except (DeployError, ContainerCommandNotFound):
            # Not deployed yet, or no venv.python to read the deploy records with (a fresh container, where
            # this command may be what installs it): a plain command, from /root.
            result = ct.run(argv, **kwargs)
        else:
            result = jobenv.run(ct, spec, verify, argv, cwd=spec.code.path, **kwargs)
    if result.exit_code:
        raise Exit(code=result.exit_code)


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP, "allow_dirty": "ship uncommitted changes of the local tree (recorded as dirty)",
            "check": "only report what would change and any hand-installed or changed packages (exit 1 if any)",
            "rollback": "switch the venv back to the previous build",
            "force": "deploy even while a training job runs there (the venv it uses is never deleted)",
            "dry": DRY_HELP, "hosts": HOSTS_HELP})
@fleet_task
@handled
def deploy(c, container=None, allow_dirty=False, check=False, rollback=False, force=False, dry=False, hosts=None):
    """Make the container's venv and checkout exactly what the hosts file pins.

    A no-op when they are."""
    from .ops.deploy import deploy as run_deploy

    with _session(hosts, dry) as s:
        from .ops.deploy import LockOnce

        lock = fleet.shared_value("deploy-lock", LockOnce) if fleet.shared() is not None else None
        summary = run_deploy(s, container, allow_dirty=allow_dirty, check=check, rollback=rollback, force=force,
                             lock=lock)
    print(summary.render())
    if check and (summary.changed or summary.drift):
        raise Exit(code=1)


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP + "; several: one warmup per group of containers "
            "whose cache passports would match, its cache copied to the others",
            "parallel": "run the devices' warmups as separate processes at once",
            "devices": "comma-separated devices (default: warmup.devices)",
            "export": "write the container's compile cache folder to this local bundle file (tar.gz); runs nothing",
            "import_": "load a bundle made by --export into the container's cache (refused if versions differ)",
            "dry": DRY_HELP, "hosts": HOSTS_HELP})
@handled
def warmup(c, container=None, parallel=False, devices=None, export=None, import_=None, dry=False, hosts=None,
           fail_fast=False):
    """Compile the training into the persistent compile cache, one device at a time.

    Several containers: those whose cache passports would match are warmed once and the cache copied to
    the rest (docs/compile-cache.md). One container without a warmup of its own: a matching cache of
    another container of the hosts file is copied instead of compiling."""
    if fleet.is_selection(container) and not (export or import_ or devices or dry):
        from .ops import cachecopy
        from .transport.session import Session

        config = cfg.load(hosts)
        ids = fleet.select(config, container)
        with Session(config, agent=True, keep=True) as s, fleet.sharing(s, ids):
            outcomes = cachecopy.warm_fleet(s, ids, fail_fast=fail_fast, parallel=parallel)
        print(fleet.render(outcomes))
        if fleet.exit_code(outcomes):
            raise Exit(code=fleet.exit_code(outcomes))
        return
    return _warmup_each(c, container=container, parallel=parallel, devices=devices, export=export, import_=import_,
                        dry=dry, hosts=hosts, fail_fast=fail_fast)


@fleet_task
@handled
def _warmup_each(c, container=None, parallel=False, devices=None, export=None, import_=None, dry=False, hosts=None):
    from .ops import cachecopy
    from .ops import warmup as wm

    with _session(hosts, dry) as s:
        if import_:
            got = wm.import_cache(s, container, import_)
            print(printable(f"imported {got['files']} cache file(s) into {got['cache_dir']}; " + (
                f"warmup recorded for {', '.join(got['warmups'])}" if got["warmups"] else
                "the bundle's warmups were for another commit, venv, command or environment: run `remote warmup` "
                "(it starts from the imported cache)")))
            if got.get("refused"):
                print(f"{len(got['refused'])} refused (not imported):\n" + "\n".join(f"  {printable(r)}" for r in got["refused"]))
            return
        if export:
            wm.export_cache(s, container, export)
            print(f"wrote {export}")
            return
        if devices or fleet.shared() is not None:
            results = wm.warmup(s, container, parallel=parallel, devices=[d for d in devices.split(",") if d] if devices else None)
        else:
            results = cachecopy.warmup_or_copy(s, container, parallel=parallel)
    if dry:
        return
    if isinstance(results, cachecopy.Copied):
        print(f"warmup done: {results.line()}")
        return
    new_files, new_bytes = sum(r.new_files for r in results), sum(r.new_bytes for r in results)
    guard = (f"; guard: {sum(r.hits for r in results)} hits, {sum(r.misses for r in results)} misses"
             if any(r.report for r in results) else "")
    print(f"warmup done: {len(results)} device(s) in {sum(r.end - r.start for r in results):.1f}s; cache "
          + (f"+{new_files} files, +{new_bytes / 2**20:.1f} MiB" if new_files or new_bytes else "nothing new (warm)")
          + guard)


@task(name="cache list", help={"container": "containers to list (an id, a comma list, a group; default: all)",
                          "json": "print JSON", "hosts": HOSTS_HELP})
@handled
def cache_(c, container=None, json_=False, hosts=None):
    """List what each container's compile cache holds: its folder, files, size and passport (`remote cache`)."""
    from .ops import cachecopy
    from .transport.session import Session

    config = cfg.load(hosts)
    ids = fleet.select(config, container or "all")
    with Session(config, agent=True, keep=True) as s:
        rows = cachecopy.inventory(s, ids)
    if json_:
        print(json.dumps([{"container": c_, "error": str(r)} if isinstance(r, RemoteError) else
                          {"container": r.ctid, "folder": r.folder, "files": len(r.files), "bytes": r.bytes,
                           "passport": r.passport, "serves_itself": r.serves_itself} for c_, r in zip(ids, rows)],
                         indent=1))
        return
    from .doctor import passport_line
    from .naming import printable

    for ctid, r in zip(ids, rows):
        if isinstance(r, RemoteError):
            print(f"{ctid}: cannot read its cache: {printable(str(r))}")
            continue
        print(f"{ctid}: {printable(r.folder)}: {len(r.files)} file(s), {r.bytes / 2**20:.1f} MiB")
        print("    passport: " + (printable(passport_line(r.passport)) if r.passport else "none"))
        if r.files:
            print("    serves what it runs now: " + ("yes" if r.serves_itself else "no: " + cachecopy.pp.describe(
                r.passport, r.want)))


@task(name="cache copy", help={"from_": "the container whose compile cache is copied",
                               "container": "the containers to copy it to (an id, a comma list, a group, `all`)",
                               "fail_fast": FAIL_FAST_HELP, "hosts": HOSTS_HELP})
@handled
def cache_copy(c, from_, container=None, hosts=None, fail_fast=False):
    """Copy one container's compile cache to others whose passports match: only the files they lack."""
    from .ops import cachecopy
    from .transport.session import Session

    config = cfg.load(hosts)
    src = config.container(from_).ctid
    ids = [i for i in fleet.select(config, container) if i != src]
    with Session(config, agent=True, keep=True) as s, fleet.sharing(s, [src, *ids]):
        outcomes = fleet.run_each(config, ids, lambda ctid: cachecopy.copy(s, src, ctid), fail_fast=fail_fast)
    print(fleet.render(outcomes))
    if fleet.exit_code(outcomes):
        raise Exit(code=fleet.exit_code(outcomes))


@task(help={"container": CT_HELP + "; several: one multi-node run across them (train.command formatted per node)",
            "force": "start even if a job is already running there",
            "warmup": "run the warmup first when the preflight finds it missing",
            "detach": "do not follow the log after starting", "dry": DRY_HELP, "hosts": HOSTS_HELP})
@handled
def train(c, container=None, force=False, warmup=False, detach=False, dry=False, hosts=None):
    """Preflight, start the training job detached, then follow its log.

    Ctrl-C stops following and leaves the job running."""
    from .ops.jobs import final_status, train as run_train
    from .runs.knowngood import after_run

    if fleet.is_selection(container):  # one run across these containers (remote.ops.multinode)
        from .ops import multinode

        with _session(hosts, dry) as s:
            result = multinode.train(s, fleet.select(s.config, container), force=force, warmup=warmup,
                                     follow=not detach)
        if result and multinode.final_status(result):
            raise Exit(code=multinode.final_status(result))
        return
    with _session(hosts, dry) as s:
        final = run_train(s, container, force=force, warmup=warmup, follow=not detach, on_end=after_run)
    if final and not final["alive"] and final_status(final):
        raise Exit(code=final_status(final))


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP,
            "run": "run id (default: every live run, and the latest's leftovers)", "follow": "keep printing until the job ends",
            "hosts": HOSTS_HELP})
@fleet_task
@handled
def logs(c, container=None, run=None, follow=False, hosts=None):
    """Print a run's log (what is there now; with --follow, until the job ends). Exits with the run's
    status once it has ended (1 when it was lost)."""
    from .ops.jobs import final_status, show_log

    with _session(hosts) as s:
        spec = s.config.container(container)
        if follow and fleet.shared() is None:  # a multi-node run: every node's log, merged
            from .ops import multinode

            run_id, nodes = multinode.nodes_of(s, spec.ctid, run)
            if len(nodes) > 1:
                result = multinode.follow_run(s, nodes, run_id)
                if multinode.final_status(result):
                    raise Exit(code=multinode.final_status(result))
                return
        final = show_log(s.container(spec.ctid), spec, run, follow=follow)
    if not final["alive"] and final_status(final):
        raise Exit(code=final_status(final))


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP,
            "run": "run id (default: every live run, and the latest's leftovers)",
            "grace": "seconds between TERM and KILL (default 10)", "dry": DRY_HELP, "hosts": HOSTS_HELP})
@fleet_task
@handled
def stop(c, container=None, run=None, grace=10, dry=False, hosts=None):
    """Stop a job and verify that nothing of it is left.

    TERM its process group, KILL after the grace period, then check by the run's marker."""
    from .ops.jobs import stop as stop_job

    with _session(hosts, dry) as s:
        spec = s.config.container(container)
        result = stop_job(s.container(spec.ctid), spec, run, grace=int(grace))
        others = [n for n in result.get("nodes") or [] if n != spec.ctid and n in s.config.containers]
        if others and fleet.shared() is None and not dry:  # a multi-node run: stop it on every node
            from .ops.multinode import stop_nodes

            for ctid, got in stop_nodes(s, others, result["run"], grace=int(grace)).items():
                if isinstance(got, Exception):
                    raise got
                print(f"node {ctid}: " + ("stopped" if got["was_alive"] else "was not running")
                      + ", verified: no process of it is left")
    if dry:
        return
    for one in [*result.get("others", []), result]:  # without --run: every live run, not only the latest
        if not one["was_alive"]:
            print(printable(f"run {one['run']} was not running (exit status {one['exit']}); no process of it is left"))
        else:  # the run id and the signal's name come from the container
            print(printable(f"run {one['run']} stopped with SIG{one['signal']} (exit status {one['exit']}); "
                            "verified: no process of it is left" + (", none on a GPU" if one.get("gpu_left") == [] else "")))


def _containers(s: Session, container: str | None) -> list[int]:
    """A comma-separated --container list (every configured container when empty); bad ids exit 2."""
    if not container:
        return list(s.config.containers)
    return [s.config.container(c.strip()).ctid for c in str(container).split(",") if c.strip()]


@task(help={"container": "container id(s), comma-separated (default: every container in the hosts file)",
            "json": "print the findings and facts as JSON (schema: docs/doctor.md)", "hosts": HOSTS_HELP,
            "fresh": "import torch again in each container even where an earlier probe's answer still holds",
            "gpu": "check the hosts' NVIDIA driver and each container's GPU passthrough (docs/gpu-passthrough.md)"})
@handled
def doctor(c, container=None, json_=False, hosts=None, fresh=False, gpu=False):
    """Find what differs from what deploy made and from the last known-good run.

    Each finding says why it matters and the command that fixes it. Exit 0 healthy, 1 with findings,
    2 on bad input."""
    from . import doctor as dr
    from .transport.session import Session

    if gpu:  # remote.gpudoctor: one probe per host, one per container
        from . import gpudoctor

        with Session(cfg.load(hosts), agent=False, keep=True) as s:
            found = gpudoctor.diagnose(s, fleet.select(s.config, container) if container else list(s.config.containers))
        print(json.dumps(gpudoctor.to_json(*found), indent=2) if json_ else gpudoctor.render(*found))
        if not gpudoctor.to_json(*found)["healthy"]:
            raise Exit(code=1)
        return
    # One probe per container: plain pct exec is one round trip, an agent would add its own start-up.
    with Session(cfg.load(hosts), agent=False, keep=True) as s:
        reports = dr.diagnose(s, _containers(s, container), fresh=fresh)
    if json_:
        print(json.dumps(dr.to_json(reports), indent=2))
    else:
        print("\n".join(r.render() for r in reports))
    if not all(r.healthy for r in reports):
        raise Exit(code=1)


@task(name="known-good", help={"container": CT_HELP, "run": "run id (default: the latest)", "hosts": HOSTS_HELP})
@handled
def known_good(c, container=None, run=None, hosts=None):
    """Record a finished run and the container's facts as its known-good, for doctor.

    The run must have exited 0; train records one by itself when a run meets the baseline."""
    from .doctor import known_good_label
    from .runs.knowngood import path_of, record_run

    with _session(hosts) as s:
        record = record_run(s, container, run)
        where = path_of(s.config.container(container))
    print(printable(f"recorded {known_good_label(record)} (commit {str(record['commit'])[:12]}, torch "
                    f"{record['torch']}) in {where}"))


@task(help={"container": CT_HELP, "run": "run id (default: the latest)",
            "dest": "the HTML file to write (default: ~/.local/share/remote/reports/report-<container>-<run>.html)", "hosts": HOSTS_HELP})
@handled
def report(c, container=None, run=None, dest=None, hosts=None):
    """Write one self-contained HTML file of a run.

    Its metric over time against the baseline and the known-good run, its manifest, warmup times and
    any crash hints; it opens offline in any browser."""
    from .runs.report import write

    with _session(hosts) as s:
        path = write(s, container, run, dest)
    print(f"wrote {path}")


@task(name="lab up", help={"containers": "comma-separated container ids (default 200)",
                       "port": "sshd port on 127.0.0.1 (default 2222)",
                       "second": "comma-separated container ids on a second look-alike host, lab2 (sshd on port + 1)",
                       "backend": "lxc (sshd + LXC containers) or ns (Linux namespaces, no sshd: the host is "
                                  "`local: true`); default: lxc where it is installed, else ns"})
@handled
def lab_up(c, containers="200", port=None, second=None, backend=None):
    """Start the local lab: sshd on loopback, LXC containers, the pct double.

    With --second, a second look-alike host as well; with --backend ns, namespace containers and the pct
    double only."""
    from .lab import DEFAULT_PORT
    from .lab.ns import open_lab

    lab = open_lab(backend=backend, port=int(port or DEFAULT_PORT))
    ids = [int(x) for x in str(containers).split(",") if x.strip()]
    more = [int(x) for x in str(second or "").split(",") if x.strip()]
    lab.up(ids, second=more)
    if lab.backend == "ns":
        print(f"lab up (namespaces, no sshd): containers {', '.join(map(str, ids))} running ({lab.dir}); "
              f"hosts file: {lab.dir / 'hosts.yaml'}")
        return
    print(f"lab up: sshd on 127.0.0.1:{lab.port}, containers {', '.join(map(str, ids))} running ({lab.dir})")
    if more:
        print(f"lab2 up: sshd on 127.0.0.1:{lab.port + 1}, containers {', '.join(map(str, more))} running "
              f"({lab.second().dir})")


@task(name="lab down", help={"purge": "also delete the containers' files (venvs, checkouts, compile caches)"})
@handled
def lab_down(c, purge=False):
    """Stop the local lab's containers and sshd."""
    from .lab.ns import open_lab

    lab = open_lab()
    lab.down(purge=purge)
    print("lab down" + (" and purged" if purge else " (container files kept; --purge deletes them)"))


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
            "hosts": "with --sudoers: the hosts file whose `pct` paths the rule names (default /usr/sbin/pct)"})
@handled
def init(c, address=None, port=None, user=None, key_file=None, known_hosts=None, pct=None, out=None, force=False,
         sudo=False, sudoers=None, hosts=None):
    """Write a hosts file listing every container of a Proxmox host, ready to fill in.

    Connects to the host, reads `pct list` and each container's hostname (`pct config`), and writes a
    commented hosts file; an existing file is never overwritten without --force. With --sudoers USER:
    prints a sudoers drop-in for /etc/sudoers.d/ instead (stdout holds only the drop-in)."""
    from .ops import hostsinit

    from . import sudo as sudomod

    if sudoers:
        paths = [sudomod.pct_path(h.pct_path or "pct") for h in cfg.load(hosts).hosts.values()] if hosts else []
        sys.stdout.write(sudomod.sudoers(sudoers, paths))
        print(f"# check it before installing: visudo -cf FILE (then install -m 0440 FILE /etc/sudoers.d/remote)",
              file=sys.stderr)
        return
    if not address:
        raise Exit("error: init needs --address ADDRESS", code=2)

    out = out or cfg.find_file(None)
    hostsinit.check_target(out, force)
    for flag, path in (("--key-file", key_file), ("--known-hosts", known_hosts)):
        if path and not os.path.isfile(os.path.expanduser(path)):
            raise Exit(f"error: {flag} {path}: no such file", code=2)
    given = {"port": port, "user": user, "pct": pct, "sudo": True if sudo else None,
             "key_file": os.path.abspath(os.path.expanduser(key_file)) if key_file else None,
             "known_hosts": os.path.abspath(os.path.expanduser(known_hosts)) if known_hosts else None}
    # Port and user not given: ~/.ssh/config's for the address, else 22 and root (as the hosts file will).
    host = cfg.Host(name=hostsinit.host_name(address), address=address, port=port, user=user,
                    key_file=given["key_file"], known_hosts=given["known_hosts"],
                    pct=sudomod.pct_command(pct or "pct", sudo), sudo=sudo, pct_path=pct or "pct")
    found = hostsinit.read_host(host)
    if not found:
        raise Exit(f"error: `pct list` on {address} shows no containers: create one first (pct create), "
                   "then run remote init again", code=1)
    hostsinit.write(out, hostsinit.render(host, given, found), force)
    print(f"wrote {out}: host {host.name} with container(s) {', '.join(str(f[0]) for f in found)}; fill in venv, "
          f"code and train, then `remote config -c {found[0][0]}` and `remote deploy -c {found[0][0]}`")


@task(name="config", help={"container": "only these containers: an id, a comma list, a group or `all` "
                                        "(default: the one tasks use without -c, else all)",
                           "json": "print the settings as JSON", "hosts": HOSTS_HELP})
@handled
def config_(c, container=None, json_=False, hosts=None):
    """Print the settings a container resolves to, without connecting anywhere.

    The hosts file's sections with the container's own overrides applied, as the tasks will use them;
    train.env's values are not shown."""
    from . import configview

    config = cfg.load(hosts)
    if container is not None:
        specs, why = [config.containers[i] for i in fleet.select(config, container)], f"--container {container}"
    else:
        try:
            specs = [config.container(None)]
            why = ("$REMOTE_CONTAINER" if os.environ.get(cfg.CONTAINER_VAR, "").strip() else
                   "default_container" if config.default_container else "the only container")
        except RemoteError:  # several, and none chosen: all of them
            specs, why = list(config.containers.values()), "every container"
    if json_:
        print(json.dumps([configview.resolved(config, s) for s in specs], indent=2))
    else:
        print(configview.render(config, specs, why))


@task(help={"fail_fast": FAIL_FAST_HELP, "container": CT_HELP, "json": "print the runs as JSON",
            "limit": "show the latest N runs (default 20)", "hosts": HOSTS_HELP})
@fleet_task
@handled
def runs(c, container=None, json_=False, limit=20, hosts=None):
    """List a container's runs: id, start, state, exit status, throughput, command."""
    from .runs.listing import list_runs, render

    with _session(hosts) as s:
        spec = s.config.container(container)
        found = list_runs(s.container(spec.ctid), spec, limit=limit)
    print(json.dumps(found, indent=2) if json_ else render(found, spec))


@task(help={"container": "container id from the hosts file (default: default_container, $REMOTE_CONTAINER, "
                         "or the only one)", "hosts": HOSTS_HELP})
@handled
def shell(c, container=None, hosts=None):
    """Open a shell in a container, in the checkout with the job's environment.

    A real terminal (a pty there): the venv first on PATH, the compile cache and train.env set, as warmups
    and jobs have them. `exit` (or Ctrl-D) leaves it; remote exits with the shell's status."""
    from .ops.interactive import open_shell
    from .transport.session import Session

    if fleet.is_selection(container):
        raise Exit(f"error: --container: one container for a shell, got {container!r}", code=2)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise Exit("error: remote shell needs a terminal on stdin and stdout; for a command, "
                   "use `remote exec -c ID -- CMD ARG...`", code=2)
    with Session(cfg.load(hosts)) as s:  # a pty session of its own; no agent to start for one shell
        code = open_shell(s, container)
    if code:
        raise Exit(code=code)


# -- push / pull: data in, results out ---------------------------------------------------------------------

def _need(**flags) -> None:
    missing = [f"--{name}" for name, value in flags.items() if not value]
    if missing:
        raise Exit(f"error: {' and '.join(missing)} required", code=2)


XFER_HELP = {"container": CT_HELP, "fail_fast": FAIL_FAST_HELP, "dry": DRY_HELP, "hosts": HOSTS_HELP,
             "attempts": "tries after a lost connection, each resuming what the last left (default 3)",
             "quiet": "no progress on stderr"}


@task(help={**XFER_HELP, "src": "local file or folder", "dest": "path in the container (a folder's contents are "
                                                                 "merged into it; a file lands inside an existing folder)"})
@fleet_task
@handled
def push(c, src=None, dest=None, container=None, attempts=3, quiet=False, dry=False, hosts=None):
    """Copy a local file or folder into a container.

    Streamed, verified by sha256, resumed after a lost connection."""
    from .ops import files

    _need(src=src, dest=dest)
    if not (os.path.isfile(src) or os.path.isdir(src)):  # bad input: before anything connects
        raise Exit(f"error: --src {src}: no such file or folder on this machine", code=2)
    with _session(hosts, dry) as s:
        ct = s.container(container)
        stats = files.push(ct, src, dest, attempts=int(attempts),
                           progress=None if quiet or dry else files.ProgressPrinter(f"push {src}"))
    if not dry:
        print(stats.render())


@task(help={**XFER_HELP, "src": "file or folder in the container", "dest": "local path (a folder's contents are "
                                                                           "merged into it; a file lands inside an existing folder)",
            "run": "pull this run's outputs, log and manifest instead of --src (a run id, or `latest`)"})
@fleet_task
@handled
def pull(c, src=None, dest=None, container=None, run=None, attempts=3, quiet=False, dry=False, hosts=None):
    """Copy a file or folder out of a container, or a run's outputs.

    Streamed, verified by sha256, resumed after a lost connection. With --run (an id, or `latest`):
    the run's outputs (train.outputs), log, manifest, metrics.jsonl,
    gpu.csv and stacks, into DEST/<run id>/."""
    from .ops import files

    if run:
        from .ops.jobs import pull_run

        _need(dest=dest)
        with _session(hosts, dry) as s:
            got = pull_run(s, container, run, dest, progress=not quiet)
        if not dry:
            print(printable(f"run {got['run']}: " + ", ".join(f"{k} ({v})" for k, v in got["pulled"].items())
                            + f" in {got['dest']}"))
        return
    _need(src=src, dest=dest)
    with _session(hosts, dry) as s:
        ct = s.container(container)
        stats = files.pull(ct, src, dest, attempts=int(attempts),
                           progress=None if quiet or dry else files.ProgressPrinter(f"pull {src}"))
    if not dry:
        print(stats.render())


ONE_CT_HELP = "container id from the hosts file (default: default_container, $REMOTE_CONTAINER, or the only one)"


@task(help={"container": ONE_CT_HELP, "json": "print the snapshots as JSON", "hosts": HOSTS_HELP})
@handled
def snapshots(c, container=None, json_=False, hosts=None):
    """List the container's Proxmox snapshots: name, time, description, and which are remote's own."""
    from dataclasses import asdict

    from .naming import printable
    from .ops import snapshots as snaps

    with _session(hosts) as s:
        found = snaps.list_snapshots(s, container)
    if json_:
        print(json.dumps([{**asdict(x), "ours": x.ours} for x in found], indent=2))
        return
    if not found:
        print("no snapshots")
    for x in found:
        print(f"{'remote' if x.ours else '      '}  {x.name:<40}  {x.time}  {printable(x.description)}")


@task(help={"container": ONE_CT_HELP, "snapshot": "the snapshot (default: the newest of remote's own)",
            "force": "roll back even while a run is live (the container is killed, and the run with it)",
            "hosts": HOSTS_HELP})
@handled
def rollback(c, container=None, snapshot=None, force=False, hosts=None):
    """Roll the whole container back to a Proxmox snapshot (`pct rollback`), then start it again.

    Refused while a run is live unless --force. Mount points are not part of a snapshot: what lives on
    one (run folders, the known-good record, where configured so) stays as it is."""
    from .naming import printable
    from .ops import snapshots as snaps

    with _session(hosts) as s:
        done = snaps.rollback(s, container, snapshot=snapshot, force=force, echo=print)
    print(f"rolled back container {done.ctid} to {done.snapshot.name} ({done.snapshot.time}, "
          f"{printable(done.snapshot.description) or 'no description'})"
          + ("; started again" if done.started else ""))
    for line in done.restored:
        print(f"  restored: {line}")
    for line in done.kept:
        print(f"  kept:     {line}")


@task(help={"host": "only this host's kept connection (default: every one of yours)", "hosts": HOSTS_HELP})
@handled
def disconnect(c, host=None, hosts=None):
    """End kept connections now.

    Each host's kept connection holds the SSH connection and the agents for control_persist seconds."""
    from .transport import keeper

    config_file = cfg.find_file(hosts)
    if host is not None and host not in cfg.load(hosts).hosts:
        raise Exit(f"error: {config_file}: --host: unknown host {host!r}", code=2)
    pids = keeper.disconnect(config_file, host)
    print(f"ended {len(pids)} kept connection(s)" + (f" (pid {', '.join(map(str, pids))})" if pids else ""))


def __getattr__(name: str):
    """`ns`, the invoke Collection of the same tasks (tasks.py, `invoke ...` in a checkout): made on first use."""
    if name == "ns":
        from .invoke_tasks import collection

        globals()["ns"] = value = collection(TASKS, SHORT_FLAGS, Exit)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The order of `remote --help`: the way in, the daily loop, then the rest (tasks not named here follow).
HELP_ORDER = ("init", "config", "status", "deploy", "warmup", "train", "logs", "runs", "stop", "exec", "shell",
              "push", "pull", "doctor", "known-good", "report", "snapshots", "rollback")

FOOTER = ("Hosts file: --hosts FILE, else $REMOTE_HOSTS_FILE, else ./hosts.yaml (`remote init` writes one). "
          "Exit status: 0 ok; 1 failed (exec, train and logs: the command's or the job's own status); "
          "2 bad input; 3 busy; 130 interrupted.")


def run(argv: list[str]) -> int:
    """Parse argv, check every value, run the tasks in order; the exit status (printing what went wrong)."""
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
        print(f"remote {__version__}")
        return 0
    except cliparse.Usage as u:
        print(f"error: {u}", file=sys.stderr)
        return 2
    for call in calls:
        code = _call(call)
        if code:
            return code
    return 0


def _call(call: cliparse.Call) -> int:
    try:
        call.spec.fn(None, **call.kwargs)
    except Exit as e:
        if e.message:
            print(e.message, file=sys.stderr)
        return e.code if isinstance(e.code, int) and 0 <= e.code <= 255 else 1
    except RemoteError as exc:  # a task without @handled
        print(f"error: {printable(str(exc), lines=True)}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a local file: --dest in a folder that does not exist, a full disk
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: say so in one line; REMOTE_DEBUG=1 shows where
        if os.environ.get("REMOTE_DEBUG"):
            raise
        print(f"error: internal error in `remote {call.spec.name}`: {type(exc).__name__}: {printable(str(exc))}\n"
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
