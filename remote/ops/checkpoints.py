"""A run's checkpoints (train.checkpoint): list them, decide which is the latest complete one, restore it before
a resume, move them aside for a fresh start, and read what `stop(save=True)` left. The deciding is done in the
container by remote/sh/ckpt.py (standard-library Python under the system python3); its JSON is untrusted input,
read here into typed Checkpoints. Nothing is ever deleted: what is set aside is renamed beside itself."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import facts, shell
from ..config import ContainerSpec
from ..errors import FORCE, FRESH, RESUME, CheckpointRefused, ConfigError, JobError, SaveRefused, worded
from ..events import CheckpointSeen, RunResumed
from ..facts.runs import CHECKPOINT_KINDS, RunState
from ..naming import json_loads, path_words, printable
from ..results import Checkpoint, Saved, SaveOutcome
from ..target import Target

KEEP = ".checkpoints"  # under train.run_dir: the watch's copy of the last complete checkpoint (ckpt.py keep_once)
KINDS = CHECKPOINT_KINDS
NO_CHECKPOINT = 3  # ckpt.py's exit status where no complete checkpoint exists


def path_of(spec: ContainerSpec) -> str | None:
    """train.checkpoint.path made absolute (relative: to code.path, the checkout the job runs in)."""
    ck = spec.train.checkpoint
    if ck is None:
        return None
    return ck.path if ck.path.startswith("/") else f"{spec.code.path.rstrip('/')}/{ck.path}"


def settings(spec: ContainerSpec) -> dict | None:
    """What remote/sh/ckpt.py is told (its SETTINGS): None without train.checkpoint."""
    ck = spec.train.checkpoint
    if ck is None:
        return None
    return {"path": path_of(spec), "complete": ck.complete, "keep": f"{spec.train.run_dir.rstrip('/')}/{KEEP}",
            "signal": ck.signal, "grace": ck.grace}


def tool() -> tuple[str, str, str]:
    """(path, sha256, text) of ckpt.py as launch puts it in the container (named by its content, as the wrapper)."""
    text = shell.load_python("ckpt")
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{facts.UV_HOME}/bin/ckpt-{digest[:12]}.py", digest, text  # where jobs.installed puts the others


def resume_command(spec: ContainerSpec, command: str, path: str | None) -> str:
    """The command a resume runs: `command` and train.checkpoint.resume, its {checkpoint} the path quoted once
    (path None: left for the container's wrapper to fill in at a restart)."""
    ck = spec.train.checkpoint
    words = ck.resume if ck else ""
    if path is not None:
        words = words.replace("{checkpoint}", shlex.quote(path))
    return f"{command} {words}".rstrip() if words.strip() else command


def _call(t: Target, command: str, *args: str, mutates: bool, timeout: float = 120) -> tuple[dict, int]:
    """Run ckpt.py COMMAND in the container with the system python3; its JSON answer (untrusted) and status."""
    conf = settings(t.spec)
    if conf is None:
        raise JobError(f"container {t.spec.ctid}: no train.checkpoint in the hosts file: remote does not know "
                       "where its job saves (docs/reference/hosts-file.md, train.checkpoint)")
    r = t.system.run(["python3", "-I", "-S", "-c", shell.load_python("ckpt"), command, json.dumps(conf), *args],
                     check=False, mutates=mutates, timeout=timeout, label=f"checkpoint {command}")
    if t.system.dry and mutates:
        return {}, 0
    if r.exit_code not in (0, NO_CHECKPOINT):
        raise JobError(printable(f"container {t.spec.ctid}: its checkpoint tool failed (exit {r.exit_code}): "
                                 f"{r.err.strip()[-300:]}"))
    try:
        data = json_loads(r.out.strip().splitlines()[-1]) if r.out.strip() else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise JobError(printable(f"container {t.spec.ctid}: its checkpoint tool answered no JSON object: "
                                 f"{r.out[:200]!r}"))
    return data, r.exit_code


def _num(value: Any, kind: type | tuple = (int, float)) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def reported_path(value: Any) -> str | None:
    """A checkpoint path the container reported, kept exactly (a resume passes it back to the job, the run
    record names it): an absolute path of at most 4096 characters without NUL and without a `..` component (the
    config refuses one in train.checkpoint.path, so no match has it; a multi-node resume names its copy here by
    the path's last part), else None. Never escaped or cut here: the words escape it (remote.naming.path_words)."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096 or "\0" in value \
            or ".." in value.split("/"):
        return None
    return value


def checkpoint_of(d: Any, *, kept: bool = False) -> Checkpoint | None:
    """One candidate of ckpt.py's answer as a Checkpoint (each field checked: the container wrote it)."""
    path = reported_path(d.get("path")) if isinstance(d, Mapping) else None
    if path is None:
        return None
    step = _num(d.get("step"), int)
    return Checkpoint(path, d.get("complete") is True,
                      d["kind"] if d.get("kind") in KINDS else "file", max(0, _num(d.get("size"), int) or 0),
                      _num(d.get("mtime")), step if step is not None and step >= 0 else None,
                      printable(str(d["step_from"]))[:80] if isinstance(d.get("step_from"), str) else None,
                      printable(str(d.get("why") or ""))[:300], kept or d.get("kept") is True)


def listing(t: Target) -> list[Checkpoint]:
    """Every checkpoint the path matches, newest first, then the watch's kept copy (kept=True)."""
    data, _ = _call(t, "list", mutates=False)
    cands = data.get("candidates")
    cands = cands if isinstance(cands, list) else []
    out = [c for c in (checkpoint_of(d) for d in cands[:1000]) if c is not None]
    k = checkpoint_of(data.get("kept"), kept=True)
    return out + ([k] if k is not None else [])


def latest(found: list[Checkpoint]) -> Checkpoint | None:
    """The latest complete checkpoint of a listing (the job's own before the kept copy)."""
    return next((c for c in found if c.complete), None)


def refuse_plain(t: Target) -> None:
    """A plain train where a complete checkpoint exists: refused (a new run would overwrite it)."""
    found = listing(t)
    c = latest(found)
    if c is None:
        return
    raise worded(CheckpointRefused(
        f"container {t.spec.ctid} has a complete checkpoint {path_words(c.path)}{_step(c)}: a new run would overwrite it. "
        f"Continue from it with {RESUME}, or start over with {FRESH} (the old checkpoints are moved "
        "aside, never deleted)", c.path), RESUME, FRESH)


def _words(value: Any) -> str:
    """A path of ckpt.py's answer in words: escaped whole, never cut (remote.naming.path_words)."""
    return path_words(value) if isinstance(value, str) else printable(str(value))


def _step(c: Checkpoint) -> str:
    return f" (step {c.step})" if c.step is not None else ""


def restore(t: Target) -> Checkpoint:
    """Before a resume: the latest complete checkpoint, an incomplete newer one moved aside and the kept copy
    put back where the job reads it (ckpt.py restore); CheckpointRefused, naming what is there, where none is."""
    data, rc = _call(t, "restore", mutates=True)
    if t.system.dry:
        return Checkpoint(path_of(t.spec) or "", True, "file")
    for m in data.get("moved") or []:
        if isinstance(m, Mapping):
            t.note(f"checkpoint {_words(m.get('path'))} is not complete: moved aside to {_words(m.get('to'))}")
    restored = data.get("restored")
    if isinstance(restored, Mapping):
        t.note(f"checkpoint {_words(restored.get('to'))} restored from the kept copy {_words(restored.get('from'))}")
    c = checkpoint_of(data.get("latest"))
    _refuse_elsewhere(t, rc, data)
    if rc == NO_CHECKPOINT or c is None or not c.complete:
        bad = [x for x in (checkpoint_of(d) for d in data.get("incomplete") or []) if x is not None]
        why = (f"{path_words(bad[0].path)} is not complete ({bad[0].why})" if bad else
               f"nothing matches {path_of(t.spec)}")
        raise worded(CheckpointRefused(f"container {t.spec.ctid}: no complete checkpoint to resume from: {why}. "
                                       f"{FRESH} starts over", bad[0].path if bad else None), FRESH)
    return c


def _refuse_elsewhere(t: Target, rc: int, data: Mapping) -> None:
    """CheckpointRefused where ckpt.py found only a kept copy taken from another path than the configured one."""
    elsewhere = data.get("kept_elsewhere")
    if rc != NO_CHECKPOINT or not isinstance(elsewhere, Mapping):
        return
    kept, source = _words(elsewhere.get("kept")), _words(elsewhere.get("source"))
    raise worded(CheckpointRefused(
        f"container {t.spec.ctid}: the kept copy {kept} of the last complete checkpoint was taken from {source}, "
        f"but train.checkpoint.path is {_words(elsewhere.get('path'))} now: it is not put back at a path it did not "
        f"come from. Set train.checkpoint.path back to {source} to resume from it, copy it there yourself, or "
        f"start over with {FRESH}", source), FRESH)


def pick(t: Target, step: int) -> Checkpoint:
    """A multi-node resume at the run's common step: what is newer than this node's checkpoint at `step` moved
    aside, the kept copy put back where only it holds that step (ckpt.py pick); that checkpoint."""
    data, rc = _call(t, "pick", str(step), mutates=True)
    if t.system.dry:
        return Checkpoint(path_of(t.spec) or "", True, "file", step=step)
    for m in data.get("moved") or []:
        if isinstance(m, Mapping):
            t.note(f"checkpoint {_words(m.get('path'))} is newer than the run's common step {step}: moved aside "
                   f"to {_words(m.get('to'))}")
    restored = data.get("restored")
    if isinstance(restored, Mapping):
        t.note(f"checkpoint {_words(restored.get('to'))} restored from the kept copy {_words(restored.get('from'))}")
    c = checkpoint_of(data.get("latest"))
    _refuse_elsewhere(t, rc, data)
    if rc == NO_CHECKPOINT or c is None or not c.complete or c.step != step:
        raise CheckpointRefused(f"container {t.spec.ctid}: no complete checkpoint at step {step} any more (it "
                                "changed since it was listed): nothing was started")
    return c


def wait_save(t: Target, st: RunState) -> str:
    """stop --save's first half alone (ckpt.py wait: the save asked for, a new complete checkpoint awaited,
    train.checkpoint.grace at most), the job left running: its answer as JSON text, for saved_of."""
    ck = t.spec.train.checkpoint
    data, _ = _call(t, "wait", st.path, st.run or "", mutates=True, timeout=(ck.grace if ck else 0) + 60)
    return json.dumps(data)


def set_aside(t: Target) -> list[tuple[str, str]]:
    """A fresh start: every checkpoint (and the kept copy) renamed aside; (path, where it went) each, noted."""
    data, _ = _call(t, "fresh", mutates=True)
    moved = [(_words(m.get("path")), _words(m.get("to"))) for m in data.get("moved") or [] if isinstance(m, Mapping)]
    for path, to in moved:
        t.note(f"fresh start: checkpoint {path} moved aside to {to} (nothing deleted)")
    return moved


def seen(t: Target, c: Checkpoint, now: float | None) -> None:
    """The CheckpointSeen event: its path, step and age."""
    age = round(now - c.mtime, 1) if now is not None and c.mtime is not None else None
    t.session.sink(CheckpointSeen(t.ctid, f"-- checkpoint {path_words(c.path)}{_step(c)}"
                                  + (f", {age:g} s old" if age is not None else ""), c.path, c.step, age))


STEP_LINE = re.compile(r"\b(?:iter(?:ation)?|step|global_step)[\s:=#]+(\d+)", re.I)


def last_step(tail: str) -> int | None:
    """The last step a job's log shows (`iter 250: loss ...`, `step 40 ...`), where it shows any."""
    last = None
    for m in STEP_LINE.finditer(tail[-65536:]):
        last = int(m.group(1))
    return last


def _object(text: str | None) -> Mapping | None:
    try:
        data = json_loads(text) if text and text.strip() else None
    except ValueError:
        return None
    return data if isinstance(data, Mapping) else None


def saved_of(text: str, tail: str, restored: str | None = None) -> Saved:
    """ckpt.py wait's answer (save.sh's `saved=` line), restore's after the stop (saved.sh's `restored=`: what
    the path holds now) and the log's tail as a Saved. All untrusted."""
    data = _object(text)
    if data is None:
        return Saved("no-new", None)
    new = checkpoint_of(data.get("saved"))
    after = _object(restored)
    now_there = checkpoint_of(after.get("latest")) if after is not None else None
    left = now_there or new or checkpoint_of(data.get("latest"))
    now = _num(data.get("now"))
    step = last_step(tail)
    outcome: SaveOutcome = "saved" if new else "no-new" if left else "none-yet"
    lost = step - left.step if left and left.step is not None and step is not None and step >= left.step else None
    return Saved(outcome, left, round(now - left.mtime, 1) if left and left.mtime and now else None, step, lost,
                 float(_num(data.get("waited")) or 0.0), int(_num(data.get("signals"), int) or 0))


def save_script() -> str:
    """stop(save=True) in one container script: ckpt.py wait (the save, bounded by grace), then stop.sh at once,
    then a torn in-place checkpoint put right from the kept copy (saved.sh)."""
    return "\n".join(shell.load(name) for name in ("lib", "save", "stop", "saved"))


@dataclass(frozen=True)
class Start:
    """How a train starts with train.checkpoint: the run's command, the command its restarts resume with (before
    {checkpoint} is known), and for a resume the checkpoint and the run it continues."""

    command: str
    base: str  # the command without resume words: what a restart inside the run adds them to
    checkpoint: Checkpoint | None = None
    parent: str | None = None
    configured: bool = True  # train.checkpoint is set

    def manifest(self) -> dict | None:
        """The run record's fields: the checkpoint it starts from (path, step) and the run it continues (None
        without train.checkpoint: nothing is added)."""
        c = self.checkpoint
        if not self.configured:
            return None
        return {"checkpoint": {"path": c.path, "step": c.step, "kind": c.kind} if c else None, "parent": self.parent}


def prepare(t: Target, command: str, *, resume: bool, fresh: bool, live: bool,
            latest: Callable[[], object]) -> Start:
    """Before a launch: without a checkpoint configured, the command as it is (resume or fresh refused); with one,
    a resume's restore (CheckpointRefused where none is complete), a fresh start's moves, or a plain train's
    refusal where a complete checkpoint exists. Nothing is touched while a run is live (`live`: launch refuses).
    `latest`: reads the latest run's id (the run a resume continues)."""
    spec = t.spec
    if spec.train.checkpoint is None:
        if resume or fresh:
            raise ConfigError(t.session.config.file, "train.checkpoint", f"{'resume' if resume else 'fresh'}=True "
                              "needs train.checkpoint (path, resume): where the job saves and how it resumes")
        return Start(command, command, configured=False)
    if live:
        return Start(command, command)
    if fresh:
        set_aside(t)
        return Start(command, command)
    if not resume:
        refuse_plain(t)
        return Start(command, command)
    c = restore(t)
    parent = None if t.system.dry else latest()
    seen(t, c, None)
    return Start(resume_command(spec, command, c.path), command, c, parent if isinstance(parent, str) else None)


def started(t: Target, start: Start, launched: tuple[str, int]) -> tuple[str, int]:
    """The RunResumed event of a run started from a checkpoint; launch's (run id, pid) passed on."""
    c, run_id = start.checkpoint, launched[0]
    if c is not None:
        t.session.sink(RunResumed(t.ctid, f"==> run {run_id} resumes " + (f"run {start.parent} " if start.parent else "")
                                  + f"from {path_words(c.path)}{_step(c)}", run_id, start.parent, c.path, c.step))
    return launched


def launch_args(spec: ContainerSpec, base: str) -> list[str]:
    """launch.sh's checkpoint arguments: the tool (path, sha256, text), the command a restart resumes with and
    the tool's settings; five empty strings without train.checkpoint."""
    conf = settings(spec)
    if conf is None:
        return [""] * 5
    return [*tool(), resume_command(spec, base, None), json.dumps(conf)]


def watch_conf(spec: ContainerSpec) -> dict | None:
    """The watch's `checkpoint` setting: the tool's settings and its file (the watch keeps the last complete one)."""
    conf = settings(spec)
    return {**conf, "tool": tool()[0]} if conf is not None else None


def save_args(spec: ContainerSpec) -> list[str]:
    """save.sh's own arguments ($4, $5): the tool's text and its settings."""
    return [shell.load_python("ckpt"), json.dumps(settings(spec))]


def save_refused(t: Target, st: RunState, what: str, text: str | None, tail: str) -> SaveRefused:
    """Save-or-refuse's refusal (save.sh printed `kept=running`): the run still runs; the error names what was
    refused, the grace, the last complete checkpoint (and its age) and FORCE."""
    got = saved_of(text or "", tail)
    ck = t.spec.train.checkpoint
    grace = ck.grace if ck else 0
    c = got.checkpoint
    last = (f"its last complete checkpoint is {path_words(c.path)}{_step(c)}" + (f", {got.age_s:g} s old" if got.age_s is not None
                                                                      else "") if c else
            "it has no complete checkpoint at all")
    sent = f" (the {ck.signal} it was sent reaches only a handler the job installed: it ends nothing)" \
        if ck and ck.signal and got.signals else ""
    return worded(SaveRefused(t.ctid, f"container {t.ctid}: {what} refused, nothing was changed: run {st.run} saved "
                              f"no new complete checkpoint within train.checkpoint.grace ({grace:g} s) and is still "
                              f"running{sent}; {last}. Raise the grace, or pass {FORCE} to go on without saving (the "
                              "run is ended; its last complete checkpoint is what a resume starts from)",
                              st.run, grace, c.path if c else None, c.step if c else None, got.age_s), FORCE)


def after_stop(t: Target, st: RunState, text: str | None, restored: str | None, tail: Callable[[], str]) -> Saved:
    """What stop(save=True) left: save.sh's `saved=` and saved.sh's `restored=` answers and the log's last step
    after the stop (`tail`: one more read of the run's state); a run that was not running: its latest checkpoint."""
    if not st.alive or text is None:
        return Saved("not-running", latest(listing(t)))
    got = saved_of(text, tail(), restored)
    if got.checkpoint is not None:
        c = got.checkpoint
        t.session.sink(CheckpointSeen(t.ctid, f"-- checkpoint {path_words(c.path)}{_step(c)}" + (
            f", {got.age_s:g} s old" if got.age_s is not None else ""), c.path, c.step, got.age_s))
    return got


# -- a multi-node run: one checkpoint for the run ------------------------------------------------------------
@dataclass(frozen=True)
class Common:
    """Where a multi-node run's checkpoint is and which step every rank resumes at (common_step's answer).
    mode "each": every node holds its own (shards or copies), each resumes from its own at `step`; "master":
    only the master (node rank 0) saves, the other nodes are given its checkpoint (`copy_to`) first."""

    mode: str  # each | master
    step: int | None  # None: the master's checkpoint tells no step (mode master only)
    chosen: Mapping[int, Checkpoint]  # ctid -> the checkpoint it resumes from (mode master: the master's only)
    copy_to: tuple[int, ...] = ()  # mode master: the nodes that do not hold the master's checkpoint yet


def _node_words(ctid: int, rank: int, found: list[Checkpoint]) -> str:
    steps = sorted({c.step for c in found if c.complete and c.step is not None}, reverse=True)
    unknown = any(c.complete and c.step is None for c in found)
    said = ("step " + ", ".join(map(str, steps[:5])) + (" ..." if len(steps) > 5 else "")) if steps else \
        "a checkpoint that tells no step" if unknown else "no complete checkpoint"
    return f"{ctid} (node rank {rank}): {said}"


def sig(c: Checkpoint) -> tuple[int, float]:
    """What a checkpoint is known by across nodes: its size and mtime (a copy remote makes keeps the master's
    mtime, and the watch's kept copy records its source's)."""
    return c.size, round(c.mtime or 0.0, 3)


def common_step(held: Mapping[int, list[Checkpoint]], copies: Mapping[int, frozenset[tuple[int, float]]]
                ) -> Common | None:
    """The rule for a multi-node run's resume, from each node's checkpoints (`held`: ctid -> listing, in node
    rank order, the master first) and what of them remote copied there from the master (`copies`: ctid ->
    (size, mtime) of each copy). None: no node holds a complete checkpoint. Pure.

    No node but the master holds one of its own (DDP code saving on rank 0): the master's latest complete one,
    given to every node that lacks it. Every node holds its own: the newest step complete on every node (each
    node's own at that step). Anything else, or no common step: CheckpointRefused naming each node's steps --
    ranks are never resumed from different steps."""
    ids = list(held)
    master, others = ids[0], ids[1:]

    def own(ctid: int) -> list[Checkpoint]:
        mine = copies.get(ctid, frozenset())
        return [c for c in held[ctid] if c.complete and sig(c) not in mine]

    mastered = latest(held[master])
    if not any(own(c) for c in others):
        if mastered is not None:
            # the job's own path holding it, not the watch's kept copy of it (a resume reads the path)
            lacking = tuple(c for c in others
                            if not any(x.complete and not x.kept and sig(x) == sig(mastered) for x in held[c]))
            return Common("master", mastered.step, {master: mastered}, lacking)
        if not any(latest(held[c]) for c in others):
            return None
    elif all(own(c) for c in ids):
        sets = [{c.step for c in own(ctid) if c.step is not None} for ctid in ids]
        shared = set.intersection(*sets)
        if shared:
            step = max(shared)
            # each node's own at that step: the job's file before the watch's kept copy (listing's order)
            return Common("each", step, {ctid: next(c for c in own(ctid) if c.step == step) for ctid in ids})
    text = "; ".join(_node_words(ctid, rank, held[ctid]) for rank, ctid in enumerate(ids))
    raise worded(CheckpointRefused(
        f"the nodes' checkpoints have no step in common ({text}): a multi-node run resumes every rank from the "
        f"same step, never from different ones. Bring the nodes' checkpoints to one step, or start over with "
        f"{FRESH} (every node's checkpoints are moved aside, never deleted)"), FRESH)
