"""`remote move` and `remote host drain/resume`: a container carried to another node of its cluster, its run with it.

move: the target node's GPU check first (doctor --gpu --node, handed in by the API: the check sits above the
operations); a refusal changes nothing. Then the live run save-stopped (stop(save=True); `force` the one way to
move without saving: the run is stopped, not resumed), `pct migrate ID N --restart` on the node that holds it
(offline for a stopped container), the container waited for on N, and the run resumed there from its checkpoint
(train(resume=True): the new run's record names the run it continues). Each step said as it starts and timed.

drain: every live run of a host save-stopped, each container moved (`to`) or left with the one command that
resumes it. What drain did is remembered on the controller ($XDG_STATE_HOME/remote/drained/), not in the
containers: after a host's reboot they may all be stopped, and a stopped container cannot be read, while
resume must know which to start. resume reads it, starts each container that is stopped, resumes its run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, GpuConfigError, RemoteError, SaveRefused
from ..results import Drained, DrainedRun, Finding, Moved, MoveStep, Saved
from ..target import Target, resolve
from ..transport.session import Session
from . import jobs

Check = Callable[[], tuple[bool, tuple[Finding, ...]]]  # the GPU check of the target node: (gpu configured, findings)


@dataclass(frozen=True)
class MovePlan:
    """What a move does, decided from what was read (pure: tests give it data)."""

    save: bool  # stop the live runs with save=True
    stop: bool  # stop them (save or not)
    resume: bool  # train(resume=True) on the target node
    restart: bool  # the container runs: `pct migrate --restart`, then wait for it there
    migrate: tuple[str, ...]  # pct's arguments
    steps: tuple[str, ...]


def plan(*, ctid: int, cluster: str | None, source: str, node: str, live: tuple[str, ...], running: bool,
         checkpoint: bool, force: bool, file: str = "", nodes: tuple[int, ...] = ()) -> MovePlan:
    """The move's steps from its facts; ConfigError for a move that cannot be done as asked (nothing changed).
    `nodes`: the containers of a live multi-node run (a move would leave its other ranks waiting)."""
    if cluster is None:
        raise ConfigError(file, f"containers.{ctid}", f"container {ctid} is in no cluster (its hosts-file entry has `host:`, not "
                          "`cluster:`): pct migrate moves a container between nodes of one Proxmox cluster")
    if node == source:
        raise ConfigError(file, "--node", f"container {ctid} is on node {node} already: nothing to move")
    if live and len(nodes) > 1:
        ids = ",".join(map(str, nodes))
        raise ConfigError(file, "--node", f"container {ctid}: run {live[0]} is a multi-node run on {ids}: moving one "
                          f"node leaves the others waiting; `remote stop -c {ids} --save` first, then move, then "
                          f"`remote train -c {ids} --resume` (every rank at the run's common step)")
    if live and not checkpoint and not force:
        raise ConfigError(file, "train.checkpoint", f"container {ctid}: run {', '.join(live)} is live and the hosts file "
                          "has no train.checkpoint, so the move cannot save and resume it: set train.checkpoint (path, "
                          "resume), or pass --force to stop it unsaved and move (it is not resumed)")
    save = bool(live) and checkpoint and not force
    steps = ["check"] + (["save-stop" if save else "stop"] if live else []) + ["migrate"] \
        + (["wait"] if running else []) + (["resume"] if save else [])
    return MovePlan(save, bool(live), save, running,
                    ("migrate", str(ctid), node, *(("--restart",) if running else ())), tuple(steps))


@dataclass
class _Steps:
    """One move's bookkeeping: each step said as it starts, then timed."""

    t: Target
    dry: bool
    steps: list[MoveStep] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str, what: str) -> Iterator[list[str]]:
        self.t.step(f"{name}: {what}")
        detail: list[str] = []
        t0 = time.monotonic()
        yield detail
        took = 0.0 if self.dry else round(time.monotonic() - t0, 3)
        self.steps.append(MoveStep(name, took, "; ".join(detail)))
        if not self.dry:
            self.t.note(f"{name}: {took:.1f} s")


def _live(t: Target, running: bool) -> tuple[str, ...]:
    return _runs(t, running)[0]


def _runs(t: Target, running: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The container's live runs, and the containers of the latest one where it is a live multi-node run."""
    if not running:
        return (), ()
    st = jobs.state(t)
    return tuple(r.run for r in st.live), (st.manifest.nodes or ()) if st.alive else ()


def refusal(ctid: int, node: str, findings: tuple[Finding, ...]) -> GpuConfigError:
    errors = [f for f in findings if f.severity == "error"]
    return GpuConfigError(f"move of container {ctid} to node {node} refused, nothing changed: it could not use its "
                          f"GPUs there: " + "; ".join(f.what + (f" (fix: {f.fix})" if f.fix else "") for f in errors)
                          + f" (`remote doctor --gpu -c {ctid} --node {node}` shows it)")


def move(t: Target, source: str, node: str, *, check: Check, force: bool = False,
         moved: Callable[[], None] | None = None) -> Moved:
    """Move container `t` to host `dest` (cluster node `node`): check, (save-)stop, migrate, wait, resume.
    `source`: the node it is on; `check`: the GPU check of the target node; `moved`: tells the session the
    container is on `node` now."""
    started = time.monotonic()
    session, ctid, dry = t.session, t.ctid, t.session.dry
    running = t.system.status() == "running"
    live, nodes = _runs(t, running)
    ck = t.spec.train.checkpoint is not None
    p = plan(ctid=ctid, cluster=t.spec.cluster, source=source, node=node, live=live, running=running,
             checkpoint=ck, force=force, file=session.config.file, nodes=nodes)
    run = _Steps(t, dry)
    commands: list[str] = []
    notes: list[str] = []
    with run.step("check", f"doctor --gpu -c {ctid} --node {node}") as detail:
        gpu, findings = check()
        detail.append("no GPU configured" if not gpu else f"{len(findings)} finding(s)")
        if any(f.severity == "error" for f in findings):
            raise refusal(ctid, node, findings)
    for f in findings:
        t.warn(f"node {node}: {f.what}")
    stopped: str | None = None
    saved: Saved | None = None
    if p.stop:
        word = "--save" if p.save else "(unsaved: --force)"
        commands.append(f"remote stop -c {ctid}" + (" --save" if p.save else ""))
        with run.step("save-stop" if p.save else "stop", f"run {', '.join(live)} {word}") as detail:
            if dry:
                t.output(f"(dry run) remote stop -c {ctid}" + (" --save" if p.save else ""))
            else:
                # Save or refuse: a run that saves nothing new within the grace is left running (SaveRefused).
                got = jobs.stop(t, None, save=p.save, refuse=f"the move to node {node}" if p.save else None)
                stopped, saved = got.run, got.saved
                if saved is not None and saved.checkpoint is not None:
                    detail.append(f"checkpoint {saved.checkpoint.path}" + (
                        f" at step {saved.checkpoint.step}" if saved.checkpoint.step is not None else ""))
    if p.stop and not p.save:
        t.warn(f"--force: run {', '.join(live)} stopped without saving; it is not resumed on {node}")
    resume = p.resume and (dry or (saved is not None and saved.checkpoint is not None))
    if p.resume and not resume:
        notes.append(f"run {stopped} left no complete checkpoint: not resumed on {node}; `remote train -c {ctid} "
                     "--fresh` starts over there")
        t.warn(notes[-1])
    shown = "pct " + shlex.join(p.migrate)
    commands.append(f"{t.host.name}: {shown}")
    with run.step("migrate", f"{shown} on {t.host.name}") as detail:
        r = t.system.run_pct(*p.migrate, mutates=True, deadline=900)
        if r.exit_code != 0:
            raise RemoteError(f"container {ctid}: `{shown}` on {t.host.name} failed (exit {r.exit_code}): "
                              f"{(r.err.strip() or r.out.strip())[-300:]}" + (
                                  f"; run {stopped} was stopped: `remote train -c {ctid} --resume` resumes it "
                                  "where it is" if stopped else ""))
        detail.append(f"from {source} to {node}")
    if not dry and moved is not None:
        moved()
    there = resolve(session, ctid) if not dry else t
    resumed = None
    try:
        if p.restart:
            with run.step("wait", f"container {ctid} running on {node}"):
                if not dry:
                    there.system.wait_running(timeout=180)
        if resume:
            commands.append(f"remote train -c {ctid} --resume")
            with run.step("resume", f"train --resume on {node}") as detail:
                if dry:
                    t.output(f"(dry run) remote train -c {ctid} --resume")
                else:
                    resumed, _ = jobs.start(there, resume=True)
                    detail.append(f"run {resumed} continues {stopped}")
    except RemoteError as exc:
        # The container is on `node` now: say so, and what resumes the run there, with what went wrong.
        again = f"; `remote train -c {ctid} --resume` resumes run {stopped} there" if resume else ""
        exc.args = (f"container {ctid} moved to {node}, then: {exc}{again}",)
        raise
    return Moved(ctid, source, node, dry, stopped, saved, findings, shown, resumed, stopped if resumed else None,
                 tuple(run.steps), tuple(commands), round(time.monotonic() - started, 3), tuple(notes))


# -- drain and resume ------------------------------------------------------------------------------------------

def record_path(host: str, hosts_file: str) -> Path:
    """Where drain remembers a host's drained containers: one file per host and hosts file."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "remote" / "drained"
    key = hashlib.sha256(os.path.abspath(hosts_file or "<dict>").encode()).hexdigest()[:12]
    return base / f"{host}-{key}.json"


def _read_record(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), "", f"drain's record cannot be read ({exc}): move it away to start over") from None
    if not isinstance(data, dict) or not isinstance(data.get("containers"), dict):
        return {}
    bad = next((k for k, v in data["containers"].items() if not (k.isdigit() and isinstance(v, dict))), None)
    if bad is not None:  # resume reads each key as a container id and each entry as an object
        raise ConfigError(str(path), f"containers.{bad}", "drain's record names no container id with its run there: "
                          "move the file away to start over")
    return data


def _write_record(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)  # whole or not at all: a resume never reads half of it


def host_containers(session: Session, host: str) -> list[int]:
    """The hosts file's containers on `host` now (a cluster's: on the node that holds it)."""
    return sorted(ctid for ctid, spec in session.config.containers.items() if spec.host.name == host)


def drain(session: Session, host: str, *, to: str | None, mover: Callable[[int], Moved]) -> Drained:
    """Every live run of `host`'s containers save-stopped; `to`: each container moved there (`mover`), else left
    stopped with the command that resumes it. Remembered for resume; one container's failure is its own."""
    started = time.monotonic()
    path = record_path(host, session.config.file)
    record = _read_record(path) or {"host": host, "containers": {}}
    out: list[DrainedRun] = []
    for ctid in host_containers(session, host):
        t = resolve(session, ctid)
        try:
            if to is not None:
                m = mover(ctid)
                out.append(DrainedRun(ctid, m.stopped, m.saved, m, None))
                continue
            running = t.system.status() == "running"
            live = _live(t, running)
            if not live:
                out.append(DrainedRun(ctid, None, None, None, None))
                continue
            if t.spec.train.checkpoint is None:
                raise ConfigError(session.config.file, "train.checkpoint", f"container {ctid}: run {live[0]} is "
                                  "live and cannot be saved (no train.checkpoint): stop it (`remote stop`) first")
            t.step(f"drain: run {', '.join(live)} --save")
            # Save or refuse: a run that saves nothing new within the grace is left running, and reported (below).
            got = jobs.stop(t, None, save=True, refuse=f"the drain of host {host}") if not session.dry else None
            command = f"remote train -c {ctid} --resume"
            if got is not None:
                record["containers"][str(ctid)] = {"run": got.run, "at": time.time(), "checkpoint": (
                    got.saved.checkpoint.path if got.saved and got.saved.checkpoint else None)}
                _write_record(path, record)
            out.append(DrainedRun(ctid, got.run if got else live[0], got.saved if got else None, None, command))
        except SaveRefused as exc:
            # This container only: the others go on. Its run is left running (the reboot that follows a drain
            # would end it unsaved), so the drain fails (exit 3) and says what ends it.
            last = (f"its last complete checkpoint is {exc.checkpoint}" + (f" (step {exc.step})" if exc.step is not None
                                                                           else "")
                    + (f", {exc.age_s:g} s old" if exc.age_s is not None else "")) if exc.checkpoint else \
                "it has no complete checkpoint"
            out.append(DrainedRun(ctid, exc.run, None, None, None,
                                  f"NOT drained: run {exc.run} is STILL RUNNING: it saved no new complete checkpoint "
                                  f"within train.checkpoint.grace ({exc.grace or 0:g} s); {last}. `remote stop -c {ctid}` "
                                  f"ends it unsaved, then `remote host drain {host}` again"))
        except RemoteError as exc:
            out.append(DrainedRun(ctid, None, None, None, None, str(exc)))
    return Drained(host, "drain", to, tuple(out),
                   str(path) if record["containers"] else None, round(time.monotonic() - started, 3))


def resume_host(session: Session, host: str) -> Drained:
    """Each container drain left stopped on `host`: started where it is stopped, its run resumed; each one
    resumed is taken off the record (the record is kept while any is left)."""
    started = time.monotonic()
    path = record_path(host, session.config.file)
    record = _read_record(path)
    if not record.get("containers"):
        raise ConfigError(str(path), "", f"no drain of host {host} to resume (`remote host drain {host}` "
                          "records the runs it stops here)")
    out: list[DrainedRun] = []
    for key, entry in sorted(record["containers"].items()):
        ctid = int(key)
        try:
            t = resolve(session, ctid)
            if t.system.status() != "running":
                t.step(f"resume: start container {ctid}")
                t.system.start()
                if not session.dry:
                    t.system.wait_running(timeout=180)
            run_id, _ = jobs.start(t, resume=True)
            out.append(DrainedRun(ctid, run_id, None, None, None))
            if not session.dry:
                del record["containers"][key]
                _write_record(path, record)
                t.note(f"run {run_id} resumes run {entry.get('run')}")
        except RemoteError as exc:
            out.append(DrainedRun(ctid, None, None, None, f"remote train -c {ctid} --resume", str(exc)))
    if not session.dry and not record["containers"]:
        os.replace(path, path.with_suffix(".resumed.json"))  # kept: what the last drain did, for who asks
    return Drained(host, "resume", None, tuple(out), str(path), round(time.monotonic() - started, 3))
