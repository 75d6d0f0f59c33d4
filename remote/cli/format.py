"""What the command line prints: remote.api's data as text and JSON (status, stop, warmup, doctor and doctor
--gpu, a fleet's summary table) and the library's events as lines (`[id] ` in front inside a `-c all` task,
progress on stderr). Pure functions, no I/O: each task in remote/cli/tasks.py calls the API, then one of these;
remote/cli/table.py writes the events.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from ..events import Done, Event, Failed, Progress
from ..naming import copied_line, known_good_label, passport_line, path_words, printable, size
from ..results import Checkpoint, DeployPlan, Diagnosis, Finding, GpuHost, GpuReport, Transfer
from .checkwords import resumes_words
from .warmup import warmup_text


def live_text(live: list[dict]) -> str:
    """Live runs for a message: `run A (pid 12), run B (starting)`."""
    return ", ".join(f"run {r['run']} " + (f"(pid {r['pid']})" if r["pid"] else "(starting: no pid file yet)")
                     for r in live)


# -- events: what the library reports while it works ----------------------------------------------------

def marked(text: str, ctid: int | None) -> str:
    """Each line of text with `[ctid] ` in front (a container's part of a `-c all` task); None: as it is."""
    if ctid is None:
        return text
    return "\n".join(f"[{ctid}] {line}" for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def event_text(event: Event, group: int | None) -> str | None:
    """An event as the command line shows it: None for Done and Failed (the summary table says those), else
    its line, marked with its container where it is part of a group call (`group`: the container whose
    part the reporting thread runs, remote.api.current_container)."""
    if isinstance(event, (Done, Failed)):
        return None
    text = warmup_text(event) or event.line
    return marked(text, None if group is None else event.container if event.container is not None else group)


def event_on_stderr(event: Event, data_on_stdout: bool) -> bool:
    """Whether an event goes to stderr: a group's Progress always; every event where stdout carries a
    task's data (a --json document, exec's output)."""
    return data_on_stdout or isinstance(event, Progress)


# -- deploy ------------------------------------------------------------------------------------------

def deploy_text(plan: DeployPlan) -> str:
    """A remote.results.DeployPlan as `remote deploy` prints it: its head line, then what changed (or would),
    was kept, saved, drifted, and the venv's torch."""
    if plan.dry:
        head = (f"deploy {plan.container} (dry run, nothing changed): " + ("nothing would change" if plan.noop else
                f"would make {len(plan.changed)} change(s)"))
    else:
        head = f"deploy {plan.container}: " + ("nothing to do, everything verified" if plan.noop else
                                               f"{len(plan.changed)} change(s)")
    lines = [head + f" ({plan.seconds:.2f}s)"]
    lines += [f"  {'would:  ' if plan.dry else 'changed:'} {c}" for c in plan.changed]
    lines += [f"  kept:    {k}" for k in plan.kept]
    lines += [f"  saved:   {s}" for s in plan.saved]
    lines += [f"  drift:   {d}" for d in plan.drift]
    if plan.torch:
        t = plan.torch
        lines.append(f"  torch {t.get('torch')} (CUDA build {t.get('cuda_build') or 'none'}), triton "
                     f"{t.get('triton') or 'none'}, cuda available: {t.get('cuda_available')}, GPUs: "
                     f"{t.get('gpu_count')}" + (f" ({t['gpu_name']})" if t.get("gpu_name") else ""))
    # The torch and GPU strings, paths and names come from the container: one line each, escapes shown.
    return "\n".join(map(printable, lines))


# -- push and pull ---------------------------------------------------------------------------------

def transfer_text(done: Transfer) -> str:
    """A remote.results.Transfer as `remote push`/`pull` print it: what moved, how fast, verified; then each
    refused member of a pulled tree."""
    what = f"{done.files} file(s)" if done.kind == "tree" else "1 file"
    resumed = f", resumed at {size(done.resumed_from)}" if done.resumed_from else ""
    tries = f", {done.attempts} attempts" if done.attempts > 1 else ""
    text = printable(f"{done.direction}ed {what}, {size(done.bytes)}, {done.src} -> {done.dest} in "
                     f"{done.seconds:.1f}s ({done.mb_per_s:.1f} MB/s{resumed}{tries}), verified by sha256")
    if done.refused:  # the container's member names and link targets: one line each, escapes shown
        text += f"\n{len(done.refused)} refused (not written):\n" + "\n".join(f"  {printable(r)}" for r in done.refused)
    return text


# -- status ------------------------------------------------------------------------------------------

def status_dict(status: Any) -> dict:
    """A remote.results.FleetStatus as the dict `status --json` has always printed (its keys, in order)."""
    clustered = {h.host for h in status.hosts if h.cluster}  # their node and cluster too (docs/guide/cluster.md)
    return {"hosts": [{"host": h.host, "reachable": h.reachable, "error": h.error, "kept": h.kept,
                       **({"node": h.node, "cluster": h.cluster} if h.host in clustered else {}),
                       "containers": dict(h.containers)} for h in status.hosts],
            "containers": [_container_dict(c, c.host in clustered) for c in status.containers]}


def compile_dict(h: Any) -> dict:
    """A remote.results.CompileHealth in `status --json`: its counts, without the events."""
    return {"compiles": h.compiles, "recompiles": h.recompiles, "graph_breaks": h.graph_breaks,
            "eager_fallbacks": h.eager_fallbacks, "seconds": round(h.seconds, 3), "steady_at": h.steady_at,
            "steady_seconds": round(h.steady_seconds, 3), "steady_counts": dict(h.steady_counts),
            "processes": h.processes}


def _container_dict(c: Any, clustered: bool = False) -> dict:
    entry: dict = {"container": c.container, "host": c.host, "state": c.state}
    if clustered:
        entry["node"] = c.node
    if c.also_live:
        entry["also_live"] = [{"run": r.run, "pid": r.pid} for r in c.also_live]
    if c.run is not None:
        run = dataclasses.asdict(c.run)
        for key in ("orphans", "problems"):
            run[key] = list(run[key])
        if c.run.nodes:
            run["nodes"] = list(c.run.nodes)
        else:
            del run["nodes"], run["node_rank"]
        if c.run.compile:
            run["compile"] = compile_dict(c.run.compile)
        else:
            del run["compile"]
        for key in ("moved_from", "checkpoint", "parent", "oom_killed"):  # shown where there is one
            if run[key] in (None, ()):
                del run[key]
        entry["run"] = run
    if c.probed:
        entry["venv_lock"] = c.venv_lock
    if c.error is not None:
        entry["error"] = c.error
    if c.venv_lock_differs is not None:
        entry["venv_lock_differs"] = c.venv_lock_differs
    if c.gpu_memory is not None:
        entry["gpu_memory"] = dict(c.gpu_memory)
    return entry


def runs_text(found: list, ctid: int, run_dir: str) -> str:
    """`runs`: a table of remote.results.RunSummary, newest last, the command cut to the line's end."""
    if not found:
        return f"container {ctid}: no runs in {run_dir} (start one with `remote train`)"
    rows = [("RUN", "STARTED", "STATE", "EXIT", "THROUGHPUT", "COMMAND")]
    for r in found:
        # A folder name or a command from the container can hold anything: printable on one line.
        started = (time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_epoch)) if r.started_epoch
                   else printable(r.started or "-"))
        tp = f"{r.throughput:.4g}{' ' + r.unit if r.unit else ''}" if r.throughput is not None else "-"
        rows.append((printable(r.id), started, "LOST" if r.state == "lost" else r.state,
                     "-" if r.exit is None else str(r.exit), tp,
                     printable(r.command or "-") + (f"  ({resumes_words(r.parent, r.checkpoint)})" if r.resumes else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)) + "  " + row[5] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def runs_json(found: list) -> str:
    """`runs --json`: each remote.results.RunSummary (a lost run's state in capitals, as it has always been)."""
    rows = []
    for r in found:
        row = dataclasses.asdict(r)
        row["state"] = "LOST" if r.state == "lost" else r.state
        row["nodes"] = list(r.nodes) if r.nodes else None
        for key in ("checkpoint", "parent"):  # a resume's only
            if row[key] is None:
                del row[key]
        rows.append(row)
    return json.dumps(rows, indent=2)


def status_json(data: dict) -> str:
    return json.dumps({"hosts": [{**h, "containers": {str(k): v for k, v in h["containers"].items()}}
                                 for h in data["hosts"]], "containers": data["containers"]}, indent=2)


def status_lines(data: dict) -> list[str]:
    by_ct = {j["container"]: j for j in data["containers"]}
    lines = []
    for h in data["hosts"]:
        where = (f" (node {h['node']} of cluster {h['cluster']})" if h.get("cluster") else "")
        lines.append(f"{h['host']}{where}: {'reachable' if h['reachable'] else 'UNREACHABLE'}"
                     + (f" ({h['kept']})" if h["kept"] else ""))
        if h["error"]:
            lines.append("  " + printable(h["error"], lines=True).replace("\n", "\n  "))
        for ctid, state in h["containers"].items():  # run ids, states, errors: the container's and the host's
            lines.append(printable(f"  {ctid}: {state}" + _gpu_memory_text(by_ct.get(ctid)) + _job_line(by_ct.get(ctid))
                                   + _also_live(by_ct.get(ctid)) + _lock_note(by_ct.get(ctid))))
    return lines + [printable(line) for line in _multinode_lines(data["containers"])]


def _gpu_memory_text(entry: dict | None) -> str:
    """`, GPU mem 130.0 of 141.0 GiB in use (no run's: pid 4242 (133120 MiB): python hog.py)`: the container's
    GPU memory in use now, every process's, and the GPU processes of no run."""
    g = (entry or {}).get("gpu_memory") or {}
    if g.get("used_mib") is None:
        return ""
    total = f" of {g['total_mib'] / 1024:.1f}" if g.get("total_mib") is not None else ""
    foreign = g.get("foreign") or []
    stray = "; ".join(f"pid {p['pid']} ({p.get('used_mib')} MiB): {p.get('command') or p.get('name')}"
                      for p in foreign[:3]) + ("; …" if len(foreign) > 3 else "")
    return f", GPU mem {g['used_mib'] / 1024:.1f}{total} GiB in use" + (f" (!! no run's: {stray})" if foreign else "")


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
    return f"; ALSO RUNNING: {live_text(entry['also_live'])}" if entry and entry.get("also_live") else ""


def _watch_text(r: dict) -> str:
    """The stall watch's and the wrapper's part of a status line (docs/guide/watch.md)."""
    g, s = r.get("gpu") or {}, r.get("stalled")
    text = f", GPU util {g['util_pct']:g}%" if g.get("util_pct") is not None else ""
    text += f", mem {g['mem_used_mib'] / 1024:.1f} GiB" if g.get("mem_used_mib") is not None else ""
    if (r.get("attempts_max") or 0) > 1 and r.get("attempt"):
        text += f", attempt {r['attempt']} of {r['attempts_max']}"
    text += "".join(f", attempt {k} was killed by the kernel's OOM killer (exit 137)" for k in r.get("oom_killed") or ())
    return text + (f", STALLED: no output for {s['seconds']:g} s (stacks in {s['stacks']})" if s else "")


def _job_line(entry: dict | None) -> str:
    if not entry or "run" not in entry:
        return "" if not entry or "error" not in entry else f"  ({entry['error']})"
    r = entry["run"]
    unit = f" {r['unit']}" if r.get("unit") else ""
    # the rolling figure, as the run's own line says it (the last interval's alone jumps); the last where none yet
    shown = r.get("rolling") if r.get("rolling") is not None else r["throughput"]
    ck = r.get("checkpoint")
    lineage = f" ({resumes_words(r.get('parent'), Checkpoint(**ck))})" if ck else ""
    if r["alive"]:
        tp = f", {shown:.4g}{unit}" if shown is not None else ", no throughput yet"
        base = (f" vs baseline {r['baseline']:g}{unit}{' SLOW' if r['low'] else ''}"
                if r["baseline"] and shown is not None else "")
        text = f", job {r['id']}{lineage} running {r['uptime_s']}s{tp}{base}"
        text += f" {r['spark']}" if r.get("spark") else ""
        text += _watch_text(r)
    elif r.get("lost"):
        moved = (f": the container moved from node {r['moved_from']} since it started (a restart migration kills "
                 "every process in it; `remote train` starts it again here)") if r.get("moved_from") else ""
        text = f", last run {r['id']} LOST (no exit record{moved})" + (
            f"; its processes {r['orphans']} still run" if r.get("orphans") else "")
    else:
        tp = f", last throughput {shown:.4g}{unit}" if shown is not None else ""
        ended = f"stopped by `remote stop` (exit {r['exit']})" if r.get("stopped") else f"exited {r['exit']}"
        text = f", last run {r['id']}{lineage} {ended}{tp}"
        text += f" {r['spark']}" if r.get("spark") else ""
        text += _watch_text(r)
    return text + _compile_text(r) + (f" [{', '.join(r['problems'])}]" if r["problems"] else "")


def _compile_text(r: dict) -> str:
    """The compile watch's counts (compile_dict): `; compile: 2 compiles, 7 recompiles, ...`."""
    c = r.get("compile")
    if not c:
        return ""
    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('h') else 's'}"

    text = (f"; compile: {n(c['compiles'], 'compile')}, {n(c['recompiles'], 'recompile')}, "
            f"{n(c['graph_breaks'], 'graph break')}, {n(c['eager_fallbacks'], 'eager fallback')}")
    if c.get("steady_at") is not None:
        text += f", {c['steady_seconds']:.1f} s compiling after the first steady step"
    return text


# -- the other tasks' results ---------------------------------------------------------------------------

def stop_lines(stopped: Any) -> list[str]:
    """A remote.api.Stopped (and the other live runs stopped with it) as `remote stop` reports it."""
    lines: list[str] = []
    for one in [*stopped.others, stopped]:  # without --run: every live run, not only the latest
        if one.saves:  # a multi-node run: each node's save, then the step every rank resumes at
            lines += [f"node {c}: {saved_line(one.run, s)}" for c, s in one.saves.items()] + [printable(one.resume_note)]
        elif one.saved is not None:
            lines.append(saved_line(one.run, one.saved))
        if not one.was_alive:
            lines.append(printable(f"run {one.run} was not running (exit status {one.exit_code}); no process of it is left"))
        else:  # the run id and the signal's name come from the container
            lines.append(printable(f"run {one.run} stopped with SIG{one.signal} (exit status {one.exit_code}); "
                                   "verified: no process of it is left"
                                   + (", none on a GPU" if one.gpu_left == () else "")))
    return lines


def checkpoint_words(c: Any) -> str:
    """A remote.results.Checkpoint in a line: its path, step and (where given) why it is not complete."""
    return printable(path_words(c.path) + (f" (step {c.step})" if c.step is not None else "")
                     + ("" if c.complete else f": not complete, {c.why}"))


def saved_line(run: str, saved: Any) -> str:
    """What `stop --save` left (a remote.results.Saved)."""
    c = saved.checkpoint
    age = f", {saved.age_s:g} s old" if saved.age_s is not None else ""
    lost = (f"; {saved.steps_lost} step(s) after it lost (the log's last: {saved.last_step})"
            if saved.steps_lost is not None else "")
    if saved.outcome == "saved":
        return printable(f"run {run}: saved checkpoint {checkpoint_words(c)}{age} in {saved.waited_s:g} s{lost}")
    if saved.outcome == "not-running":
        return printable(f"run {run} was not running: nothing to save" +
                         (f"; its latest checkpoint is {checkpoint_words(c)}{age}" if c else ""))
    if c is None:
        return printable(f"run {run}: no checkpoint existed yet and none came in {saved.waited_s:g} s: "
                         "nothing to resume from (it had not saved once)")
    return printable(f"run {run}: no new checkpoint in {saved.waited_s:g} s (train.checkpoint.grace, or the job "
                     f"ended first); it left {checkpoint_words(c)}{age}{lost}")


def warmup_line(w: Any) -> str:
    if w.copied is not None:  # no warmup of its own: a matching cache of another container was copied
        return f"warmup done: {copied_line(w.copied)}"
    guard = f"; guard: {w.hits} hits, {w.misses} misses" if w.guarded else ""
    return (f"warmup done: {len(w.devices)} device(s) in {w.seconds:.1f}s; cache "
            + (f"+{w.new_files} files, +{w.new_bytes / 2**20:.1f} MiB" if w.new_files or w.new_bytes
               else "nothing new (warm)") + guard)


def imported_line(got: Any) -> str:
    """warmup --import's result, and the bundle's members it refused (their names are the bundle's)."""
    line = printable(f"imported {got.files} cache file(s) into {got.cache_dir}; " + (
        f"warmup recorded for {', '.join(got.warmups)}" if got.warmups else
        "the bundle's warmups were for another commit, venv, command or environment: run `remote warmup` "
        "(it starts from the imported cache)"))
    if got.refused:
        line += f"\n{len(got.refused)} refused (not imported):\n" + "\n".join(f"  {printable(r)}" for r in got.refused)
    return line


def pulled_run_line(got: Any) -> str:
    return printable(f"run {got.run}: " + ", ".join(f"{k} ({v})" for k, v in got.pulled.items())
                     + f" in {got.dest}")


def caches_json(rows: list) -> str:
    """`remote cache --json`: each container's remote.api.CacheHolding (or its error)."""
    return json.dumps([{"container": r.container, "error": r.error} if r.error is not None else
                       {"container": r.container, "folder": r.folder, "files": r.files, "bytes": r.bytes,
                        "passport": r.passport, "serves_itself": r.serves_itself} for r in rows], indent=1)


def cache_lines(rows: list) -> list[str]:
    """`remote cache`: each container's cache folder, files, size and passport (the container's text escaped)."""

    lines = []
    for r in rows:
        if r.error is not None:
            lines.append(f"{r.container}: cannot read its cache: {printable(r.error)}")
            continue
        lines.append(f"{r.container}: {printable(r.folder)}: {r.files} file(s), {r.bytes / 2**20:.1f} MiB")
        lines.append("    passport: " + (printable(passport_line(r.passport)) if r.passport else "none"))
        if r.files:
            lines.append("    serves what it runs now: " + ("yes" if r.serves_itself else "no: " + printable(r.mismatch)))
    return lines


def snapshots_json(found: list) -> str:
    return json.dumps([{"name": x.name, "time": x.time, "description": x.description, "depth": x.depth, "ours": x.ours}
                       for x in found], indent=2)


def snapshot_lines(found: list) -> list[str]:
    """`remote snapshots`: one line each, remote's own marked (the description is the host's text)."""
    if not found:
        return ["no snapshots"]
    return [f"{'remote' if x.ours else '      '}  {x.name:<40}  {x.time}  {printable(x.description)}" for x in found]


NO_HOSTS_FLAG = ("init", "lab ")  # tasks a hint names that take no --hosts of the file's


def typed(text: str, hosts: str | None) -> str:
    """A hint as it can be typed again: each `remote TASK ...` in backticks given `--hosts FILE` where this
    command's hosts file was given and is not the one found without it (./hosts.yaml, $REMOTE_HOSTS_FILE)."""
    import os
    import re
    import shlex

    # The file found without --hosts, as remote.config.find_file finds it (the command line imports no config).
    found = os.environ.get("REMOTE_HOSTS_FILE") or "hosts.yaml"
    if not hosts or os.path.abspath(hosts) == os.path.abspath(found):
        return text
    flag = f"--hosts {shlex.quote(hosts)}"

    def add(m: Any) -> str:
        cmd = m.group(1)
        if "--hosts" in cmd.split() or cmd.startswith(NO_HOSTS_FLAG):
            return m.group(0)
        head, sep, tail = cmd.partition(" -- ")  # before exec's argv, which takes no option
        return f"`remote {head} {flag}{sep}{tail}`"
    return re.sub(r"`remote ([^`]+)`", add, text)


def created_lines(got: Any) -> list[str]:
    """`remote create`: what was made (or that nothing was), the GPU lines, each step with its time, what next."""
    if got.dry:
        return [f"dry run: nothing changed; the {len(got.commands)} command(s) above are what create {got.ctid} runs"]
    if not got.made:
        out = [f"container {got.ctid} on {got.host}: already made as asked ({printable(got.source)}): nothing to do"]
        return out + ([f"  added to {got.hosts_file}"] if got.hosts_file else [])
    gpus = f"GPU {', '.join(map(str, got.gpus))} (driver {got.driver}, its own user space mounted)" if got.gpus \
        else "no GPU"
    out = [f"made container {got.ctid} on {got.host} from {printable(got.source)}, {gpus}, in {got.seconds:.1f}s"]
    out += [f"  {line}" for line in got.config]
    out += [f"  {s.name:<11} {s.seconds:6.1f}s  {printable(s.detail)}" for s in got.steps]
    out += [f"  note: {printable(n)}" for n in got.notes]
    if got.hosts_file:
        out.append(typed(f"added containers.{got.ctid} to {got.hosts_file}; next: `remote deploy -c {got.ctid}`",
                         got.hosts_file))
    return out


def created_json(got: Any) -> str:
    return json.dumps(dataclasses.asdict(got), indent=2)


def destroy_plan_lines(plan: Any) -> list[str]:
    """`remote destroy` before it asks: what goes (the container as pct says, its snapshots, its entry)."""
    if plan.state == "missing":
        return [f"container {plan.ctid} is not on {plan.host} (pct has no such container): only its entry in the "
                "hosts file would be removed"]
    snaps = f", its snapshots {', '.join(map(printable, plan.snapshots))}" if plan.snapshots else ""
    return [f"container {plan.ctid} on {plan.host} ({printable(plan.state)}) would be destroyed: its disks{snaps} "
            "and its hosts-file entry; no snapshot survives it (back it up first: `vzdump "
            f"{plan.ctid}` on {plan.host})"] + [f"  would run: {c}" for c in plan.commands]


def destroyed_lines(got: Any) -> list[str]:
    """`remote destroy`: what was removed (or, dry, would be)."""
    if got.dry:
        return destroy_plan_lines(got) + ["dry run: nothing changed"]
    out = [f"destroyed container {got.ctid} on {got.host} ({printable(got.state)} before) in {got.seconds:.1f}s"
           if got.destroyed else f"container {got.ctid} was not on {got.host}: nothing to destroy there"]
    out += [f"  its snapshots, gone with it: {', '.join(map(printable, got.snapshots))}"] if got.snapshots else []
    if got.hosts_file:
        out.append(f"removed containers.{got.ctid} from {got.hosts_file}:")
        out += [f"  - {printable(line)}" for line in got.removed]
    return out


def destroyed_json(got: Any) -> str:
    return json.dumps(dataclasses.asdict(got), indent=2)


# -- doctor -------------------------------------------------------------------------------------------

DOCTOR_SCHEMA = 1  # doctor --json's and doctor --gpu --json's `schema` (docs/guide/doctor.md, gpu-passthrough.md)


def finding_line(f: Finding) -> str:
    """A doctor finding: `[severity] what (since) — fix`, then `why:` on a line of its own."""
    since = f" ({f.since})" if f.since else ""
    fix = f" — {f.fix}" if f.fix else ""
    # what and since quote the container (versions, paths, names): each one line, escapes shown
    return printable(f"[{f.severity}] {f.what}{since}{fix}") + "\n    why: " + printable(f.why)


def doctor_text(d: Diagnosis) -> str:
    """One container's doctor: its head line (healthy, or how many findings, against which known-good), then
    each finding; or its error."""

    head = f"container {d.container} on {d.host}: "
    if d.error:
        return head + "ERROR " + printable(d.error, lines=True)
    bad = [f for f in d.findings if not f.healthy]
    lines = [head + ("healthy" if not bad else f"{len(bad)} finding(s)")
             + (f", against {known_good_label(d.known_good)}" if d.known_good else "")]
    lines += ["  " + finding_line(f).replace("\n", "\n  ") for f in d.findings]
    return "\n".join(lines)


def doctor_document(diagnoses: list[Diagnosis]) -> dict:
    """`remote doctor --json` (docs/guide/doctor.md): the schema's version, whether all are healthy, each container's
    findings and facts."""
    return {"schema": DOCTOR_SCHEMA, "healthy": all(d.healthy for d in diagnoses),
            "containers": [{"container": d.container, "host": d.host, "healthy": d.healthy, "error": d.error,
                            "known_good": d.known_good,
                            "findings": [{"code": f.code, "severity": f.severity, "what": f.what, "since": f.since,
                                          "why": f.why, "fix": f.fix} for f in d.findings],
                            "facts": d.facts.to_dict() if d.facts else None} for d in diagnoses]}


def doctor_json(diagnoses: list[Diagnosis]) -> str:
    return json.dumps(doctor_document(diagnoses), indent=2)


# -- doctor --gpu ---------------------------------------------------------------------------------------

def _gpu_finding_lines(f: Finding) -> str:
    return (f"  [{f.severity}] {printable(f.what)} ({f.code}) — {printable(f.fix or '')}\n"
            f"      why: {f.why}")


def _gpu_finding_dict(f: Finding) -> dict:
    """A GPU finding as doctor --gpu --json has always written it (docs/guide/gpu-passthrough.md#json)."""
    return {"kind": f.code, "severity": f.severity, "message": f.what, "fix": f.fix, "ctid": f.container,
            "host": f.host, "node": f.node, "why": f.why or None}


def _stale_lines(report: GpuReport, h: GpuHost) -> list[str]:
    module = h.facts.loaded if h.facts else None
    out = []
    for c in (c for c in report.containers if c.container in h.stale):
        libs = ", ".join(sorted(set((c.facts.lib_versions if c.facts else {}).values()))) or "none found"
        out.append(f"  container {c.container}: driver user space {printable(libs)}, not the loaded module "
                   f"{printable(module or '?')}: `remote gpu fix -c {c.container}`")
    return out


def gpu_text(report: GpuReport) -> str:
    """`doctor --gpu`: each host (its module and Proxmox packages, its findings, its stale containers), then each
    container (its driver libraries and cuInit, its findings; a CPU container said as such)."""
    lines = []
    for h in report.hosts:
        f = h.facts
        if h.error or f is None:  # the probe gave the facts or the error
            lines.append(f"host {h.host}: ERROR {printable(h.error or '')}")
            continue
        module = f"NVIDIA module {f.loaded}" + (" (open)" if f.open_module else "") if f.loaded else "no NVIDIA module"
        pve = ", ".join(f"{k} {v}" for k, v in sorted(f.packages.items()))
        lines.append(f"host {h.host}: " + ("healthy" if h.healthy else f"{len(h.findings)} finding(s)")
                     + f" ({printable(module)}{', ' + printable(pve) if pve else ''})")
        lines += [_gpu_finding_lines(x) for x in h.findings]
        lines += _stale_lines(report, h)
    for c in report.containers:
        head = f"container {c.container} on {c.host}: "
        if c.error and not c.findings:
            lines.append(head + f"ERROR {printable(c.error)}")
            continue
        if not c.gpu and not c.findings:
            lines.append(head + "no GPU configured (a CPU container)")
            continue
        libs = c.facts.lib_versions if c.facts else {}
        what = ", ".join(f"{k} {v}" for k, v in sorted(libs.items()))
        if c.facts and c.facts.cuda_init is not None:
            what += f"{', ' if what else ''}cuInit {c.facts.cuda_init}"
        lines.append(head + ("healthy" if c.healthy else f"{len(c.findings)} finding(s)")
                     + (f" ({printable(what)})" if what else ""))
        lines += [_gpu_finding_lines(x) for x in c.findings]
    return "\n".join(lines)


def gpu_document(report: GpuReport) -> dict:
    """`doctor --gpu --json` (docs/guide/gpu-passthrough.md#json)."""
    return {"schema": DOCTOR_SCHEMA, "healthy": report.healthy,
            "hosts": [{"host": h.host, "healthy": h.healthy, "error": h.error, "seconds": h.seconds,
                       "facts": dataclasses.asdict(h.facts) if h.facts else None,
                       "findings": [_gpu_finding_dict(f) for f in h.findings],
                       "stale_containers": list(h.stale)} for h in report.hosts],
            "containers": [{"container": c.container, "host": c.host, "healthy": c.healthy, "gpu": c.gpu,
                            "error": c.error, "seconds": c.seconds,
                            "facts": dataclasses.asdict(c.facts) if c.facts else None,
                            "config": dataclasses.asdict(c.config) if c.config else None,
                            "findings": [_gpu_finding_dict(f) for f in c.findings]} for c in report.containers]}


def gpu_json(report: GpuReport) -> str:
    return json.dumps(gpu_document(report), indent=2)


def gpu_move_text(moved: Any) -> str:
    """`doctor --gpu -c ID --node N` (remote.gpudoctor's MoveReport): what node N lacks for the container."""
    head = f"container {moved.ctid} ({moved.source}) to node {moved.node}: "
    if not moved.gpu:
        return head + "no GPU configured: nothing to check"
    if not moved.findings:
        return head + "every device node its devN lines name is there"
    return "\n".join([head + f"{len(moved.findings)} finding(s)"] + [_gpu_finding_lines(f) for f in moved.findings])


def gpu_move_json(moved: Any) -> str:
    return json.dumps({"schema": DOCTOR_SCHEMA, "container": moved.ctid, "node": moved.node, "source": moved.source,
                       "healthy": moved.healthy, "gpu": moved.gpu,
                       "findings": [_gpu_finding_dict(f) for f in moved.findings]}, indent=2)


# -- a fleet: one line per container ----------------------------------------------------------------------

def group_table(result: Any) -> str:
    """The summary table of a remote.api.GroupResult: container, host, result, time (and the first line of
    each failure)."""
    rows = [("container", "host", "result", "time", "")]
    for o in result.values():
        what = "ok" if o.ok else "skipped" if o.skipped else f"FAILED ({o.exit_code})"
        first = o.message.strip().splitlines()[0] if o.message.strip() else ""
        rows.append((str(o.container), o.host, what, f"{o.seconds:.1f}s" if not o.skipped else "-",
                     printable(first[:100])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + (f"  {r[4]}" if r[4] else "") for r in rows]
    failed = sum(1 for o in result.values() if not o.ok and not o.skipped)
    skipped = sum(1 for o in result.values() if o.skipped)
    lines.append(f"{len(result) - failed - skipped} ok, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return "\n".join(line.rstrip() for line in lines)


def group_text(result: Any, text: Any = None) -> str:
    """The end of a `-c LIST` task: each container's result as `text` words it, its lines marked `[id] `, in
    the table's order (one that failed with a status of its own keeps its result, as its error's .value),
    then the summary table (group_table)."""
    parts = []
    for ctid, o in result.items():
        value = o.value if o.ok else getattr(o.error, "value", None)
        words = text(value) if text is not None and value is not None else ""
        if words:
            parts.append(marked(words, ctid))
    return "\n".join([*parts, group_table(result)])


def group_exit_code(result: Any) -> int:
    """0 when every container succeeded; else the status they failed with when they agree, otherwise 1."""
    codes = {o.exit_code for o in result.values() if not o.ok and not o.skipped}
    if not codes and all(o.ok for o in result.values()):
        return 0
    return codes.pop() if len(codes) == 1 else 1


# -- gpu fix, host setup --------------------------------------------------------------------------------------

def gpu_fix_lines(done: Any) -> list[str]:
    """A remote.results.GpuFix: what was found, the config diff, what was (or, dry, would be) done, what is
    left for the user with its manual step, and CUDA afterwards."""
    head = f"container {done.container} on {done.host}: "
    out: list[str] = []
    if done.noop and not done.manual:
        return [head + "nothing to fix" + (" (cuInit 0)" if done.cuda_init == 0 else "")]
    if done.noop:
        out.append(head + "nothing gpu fix can change")
    else:
        out.append(head + ("would fix" if done.dry else "fixed") + f" {', '.join(sorted(set(done.before)))}")
        out += [f"  {printable(line)}" for line in done.diff]
        out += [f"  {'would run' if done.dry else 'ran'}: {printable(c)}" for c in done.commands]
    if done.snapshot:
        out.append(f"  snapshot {done.snapshot} first (`remote rollback -c {done.container} --snapshot "
                   f"{done.snapshot}` returns the config as it was)")
    if done.restart_reason:
        out.append(f"  {'restarted' if done.restarted else 'restart ' + ('needed' if not done.dry else 'would be')}: "
                   f"{printable(done.restart_reason)}")
    if done.resumed:
        out.append(f"  the live run was saved first and resumed after: run {printable(done.resumed)}")
    for kind, message, step in done.manual:
        out.append(f"  not fixed ({kind}): {printable(message)}\n      by hand: {printable(step)}")
    if not done.dry:
        if done.probe_error:
            out.append(f"  CUDA not re-proved: {printable(done.probe_error)}")
        elif done.cuda_init is not None:
            out.append(f"  cuInit(0) = {done.cuda_init}" + ("" if done.cuda_init == 0 else " (doctor --gpu names why)"))
        left = [k for k in done.after if k not in {m[0] for m in done.manual}]
        if left:
            out.append(f"  still found: {', '.join(left)} (`remote doctor --gpu -c {done.container}`)")
    return out


def host_setup_lines(done: Any) -> list[str]:
    """A remote.results.HostSetup: each file written (or, dry, that would be), or that it was set up already."""
    if done.noop:
        return [f"host {done.host}: set up already ({len(done.unchanged)} files as they should be, unit enabled)"]
    verb = "would write" if done.dry else "wrote"
    out = [f"host {done.host}: {verb} {p}" for p in done.written]
    out += [f"host {done.host}: {'would enable' if done.dry else 'enabled'} {u} (runs at boot, before pve-guests)"
            for u in done.enabled]
    return out
