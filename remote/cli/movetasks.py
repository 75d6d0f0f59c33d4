"""Moves and maintenance: `remote move`, `remote host drain`, `remote host resume` (registered in TASKS when
remote/cli/hosttasks.py imports this module), each as every task: its options, one remote.api call, its lines.
Their words are here, not in format.py: that module is near the 700-line limit."""

from __future__ import annotations

import json

from ..naming import path_words, printable
from ..results import Drained, Moved
from .table import DRY_HELP, HOSTS_HELP, Exit, fleet_of, handled, say, task

ONE_CT_HELP = "container id from the hosts file (default: default_container, $REMOTE_CONTAINER, or the only one)"


def _saved(m: Moved) -> str:
    s = m.saved
    if s is None or s.checkpoint is None:
        return ""
    c = s.checkpoint
    return f", checkpoint {path_words(c.path)}" + (f" at step {c.step}" if c.step is not None else "") + (
        f", {s.steps_lost} step(s) lost" if s.steps_lost is not None else "")


def moved_lines(m: Moved) -> list[str]:
    if m.dry:
        return [f"(dry run) container {m.ctid} would move from {m.source} to {m.node}:"] + [f"  {c}" for c in m.commands]
    lines = [f"container {m.ctid} moved from {m.source} to {m.node} in {m.seconds:.1f} s"]
    if m.stopped:
        lines.append(f"  run {m.stopped} stopped" + (" (saved)" if m.saved else " (unsaved: --force)") + _saved(m))
    if m.resumed:
        lines.append(f"  run {m.resumed} resumes run {m.parent} on {m.node}")
    lines += [f"  {s.name}: {s.seconds:.1f} s" + (f" ({printable(s.detail)})" if s.detail else "") for s in m.steps]
    lines += [f"  note: {printable(n)}" for n in m.notes]
    return lines


def moved_dict(m: Moved) -> dict:
    return {"container": m.ctid, "source": m.source, "node": m.node, "dry": m.dry, "stopped": m.stopped,
            "checkpoint": m.saved.checkpoint.path if m.saved and m.saved.checkpoint else None,
            "steps_lost": m.saved.steps_lost if m.saved else None, "resumed": m.resumed, "parent": m.parent,
            "findings": [{"code": f.code, "severity": f.severity, "what": f.what} for f in m.findings],
            "migrate": m.migrate, "commands": list(m.commands), "seconds": m.seconds,
            "steps": [{"name": s.name, "seconds": s.seconds, "detail": s.detail} for s in m.steps],
            "notes": list(m.notes)}


def drained_lines(d: Drained) -> list[str]:
    lines = []
    for c in d.containers:
        if c.error:
            lines.append(f"container {c.ctid}: error: {printable(c.error, lines=True)}" + (
                f" (then: {c.resume})" if c.resume else ""))
        elif c.moved is not None:
            lines += moved_lines(c.moved)
        elif d.action == "resume":
            lines.append(f"container {c.ctid}: run {c.run} resumed")
        elif c.run is None:
            lines.append(f"container {c.ctid}: no live run")
        else:
            ck = c.saved.checkpoint if c.saved else None
            lines.append(f"container {c.ctid}: run {c.run} stopped" + (f", checkpoint {path_words(ck.path)}" if ck else "")
                         + f"; resume it with: {c.resume}")
    if d.action == "drain" and d.to is None and d.record:
        lines.append(f"remembered in {d.record}: `remote host resume {d.host}` resumes them all")
    return lines or [f"host {d.host}: no containers in the hosts file"]


@task(usage="remote move -c ID --node N [--force] [--dry] [--json]", help={
    "container": ONE_CT_HELP, "node": "the cluster node to move it to (a host of the hosts file)",
    "force": "move while a run is live without saving it (the run is stopped, not resumed)", "dry": DRY_HELP,
    "json": "print the result as JSON", "hosts": HOSTS_HELP})
@handled
def move(c, container=None, node=None, force=False, dry=False, json_=False, hosts=None):
    """Move a container to another node of its cluster, its run with it.

    Checks the node first (doctor --gpu --node: refused, nothing changed, where the container cannot use its
    GPUs there), save-stops the live run (stop --save; --force moves without saving), runs `pct migrate ID N
    --restart` on the node that holds it, waits until it runs there, and resumes the run from its checkpoint
    (train --resume). Every step timed. Exit 0 moved, 1 a step failed, 2 bad input or refused, 3 busy."""
    if not node:
        raise Exit("error: move: name the node (`remote move -c 200 --node pve2`)", code=2)
    with fleet_of(hosts, dry, stderr_progress=json_) as fleet:
        got = fleet.container(container).move(node, force=force)
    say(json.dumps(moved_dict(got), indent=1) if json_ else "\n".join(moved_lines(got)))


@task(name="host drain", positional="host", usage="remote host drain HOST [--to NODE] [--dry]", help={
    "host": "the Proxmox host whose runs to stop (a host of the hosts file)",
    "to": "move each container to this node of its cluster (remote move) instead of leaving it stopped",
    "dry": DRY_HELP, "json": "print the result as JSON", "hosts": HOSTS_HELP})
@handled
def host_drain(c, host=None, to=None, dry=False, json_=False, hosts=None):
    """Save-stop every live run of a host's containers before its maintenance (a driver upgrade's reboot).

    With --to: each container moved to that node and its run resumed there (remote move). Without: each run
    stopped with its checkpoint, the command that resumes it printed, and what was done remembered for
    `remote host resume HOST` (docs/guide/cluster.md). Exit 0 done, 1 a container failed (the others went on)."""
    if not host:
        raise Exit("error: host drain: name the host (`remote host drain pve1`)", code=2)
    with fleet_of(hosts, dry, stderr_progress=json_) as fleet:
        got = fleet.drain(host, to=to)
    _say_drained(got, json_)


@task(name="host resume", positional="host", usage="remote host resume HOST [--dry]", help={
    "host": "the Proxmox host drained before", "dry": DRY_HELP, "json": "print the result as JSON",
    "hosts": HOSTS_HELP})
@handled
def host_resume(c, host=None, dry=False, json_=False, hosts=None):
    """Resume every run `remote host drain HOST` stopped: each container started where it is stopped (after a
    reboot), each run continued from its checkpoint (train --resume). Exit 0 done, 1 a container failed."""
    if not host:
        raise Exit("error: host resume: name the host (`remote host resume pve1`)", code=2)
    with fleet_of(hosts, dry, stderr_progress=json_) as fleet:
        got = fleet.resume_host(host)
    _say_drained(got, json_)


def _say_drained(got: Drained, json_: bool) -> None:
    if json_:
        say(json.dumps({"host": got.host, "action": got.action, "to": got.to, "record": got.record,
                        "seconds": got.seconds, "containers": [
                            {"container": c.ctid, "run": c.run, "resume": c.resume, "error": c.error,
                             "moved": moved_dict(c.moved) if c.moved else None} for c in got.containers]}, indent=1))
    else:
        say("\n".join(drained_lines(got)))
    if not got.ok:
        raise Exit(code=1)
