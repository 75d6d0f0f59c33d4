"""A multi-node run's one checkpoint (train.checkpoint on every node): where it is, which step every rank resumes
at, the master's checkpoint given to the nodes that lack it, and `stop --save` across the nodes.

The rule is checkpoints.common_step's: every node holds its own (each at the same step: the newest step complete
on every node), or only the master (node rank 0) saves, as DDP code like nanoGPT does, and every other node is
given the master's checkpoint before the resume (it loads the same path). What remote copied there is recorded
in the node's keep folder (`copied.json`: the size and mtime of each copy, which keeps the master's mtime), so a
copy is never taken for a checkpoint of the node's own. A copy goes through remote's own transfer (pulled here,
pushed to a temp name beside the path, sha256-verified each way), and what the node had at the path is renamed
aside first, never overwritten. Ranks are never resumed from different steps: no common step is a refusal that
names each node's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping

from .. import executor
from ..config import unset as config_unset
from ..errors import FRESH, RESUME, CheckpointRefused, ConfigError, RemoteError, worded
from ..naming import json_loads, path_words, printable
from ..results import Checkpoint, Stopped
from ..target import Target, reporter, resolve
from ..threads import ContextThread
from ..transport.session import Session
from . import checkpoints, files, jobs

COPIES = "copied.json"  # in a node's keep folder: the sig of each checkpoint remote copied there from the master
OTHERS_S = 10.0  # stop --save: how long the other nodes may take to save after the master did, when unknown


def _keep(t: Target) -> str:
    return f"{t.spec.train.run_dir.rstrip('/')}/{checkpoints.KEEP}"


def copies_of(t: Target) -> list[list]:
    """The sigs ([size, mtime]) of what remote copied to this node (untrusted: the container's file)."""
    r = t.system.run(["cat", "--", f"{_keep(t)}/{COPIES}"], check=False, mutates=False, timeout=30)
    try:
        data = json_loads(r.out) if r.exit_code == 0 and r.out.strip() else []
    except ValueError:
        return []
    return [x for x in data if isinstance(x, list) and len(x) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)][:1000] \
        if isinstance(data, list) else []


def held(session: Session, nodes: Mapping[int, Target], ids: list[int]
         ) -> tuple[dict[int, list[Checkpoint]], dict[int, frozenset[tuple[int, float]]]]:
    """Every node's checkpoints (listing) and the sigs of the copies remote made there, read at once."""
    got = executor.values(session.config, ids, lambda c: (checkpoints.listing(nodes[c]), copies_of(nodes[c])))
    return ({c: found for c, (found, _) in zip(ids, got, strict=True)},
            {c: frozenset((int(s), round(float(m), 3)) for s, m in sigs) for c, (_, sigs) in zip(ids, got, strict=True)})


def plan(session: Session, nodes: Mapping[int, Target], ids: list[int]) -> checkpoints.Common | None:
    """The run's checkpoint per the rule (CheckpointRefused where the nodes have no common step)."""
    found, copies = held(session, nodes, ids)
    return checkpoints.common_step(found, copies)


def give(master: Target, node: Target, c: Checkpoint) -> str:
    """The master's checkpoint `c` (at the path its job reads) put where `node`'s job reads it: pulled here and
    pushed beside that path, each verified by sha256, then renamed into place with the master's mtime; what
    was there renamed aside first. Recorded in the node's copied.json. Returns the path on the node."""
    own = checkpoints.path_of(node.spec) or c.path
    dest = c.path if any(ch in own for ch in "*?[") else own  # a glob: the master's name, in the same place
    tmp = f"{dest}.remote-tmp-copy"
    ct = node.system
    if ct.dry:  # nothing pulled: nothing to push
        ct.dry_comment(f"the master's checkpoint {path_words(c.path)} (container {master.ctid}) pulled here, pushed "
                       f"to {path_words(tmp)} (sha256 verified), what is at {path_words(dest)} renamed aside, "
                       f"{path_words(tmp)} renamed to {path_words(dest)}")
        return dest
    with tempfile.TemporaryDirectory(prefix="remote-ckpt-") as here:
        local = os.path.join(here, "checkpoint")  # never a name of the container's: `..` would be here's parent
        files.pull(master.system, c.path, local)
        ct.run(["rm", "-rf", "--", tmp], timeout=120)  # our own temp name: an earlier copy cut off
        files.push(ct, local, tmp)
    there = ct.run(["test", "-e", dest], check=False, mutates=False, timeout=30).exit_code == 0
    if there:
        aside = f"{dest}.old-{time.strftime('%Y%m%d-%H%M%S')}"
        n = 1
        while ct.run(["test", "-e", aside], check=False, mutates=False, timeout=30).exit_code == 0:
            n += 1
            aside = f"{dest}.old-{time.strftime('%Y%m%d-%H%M%S')}.{n}"
        ct.run(["mv", "-T", "--", dest, aside], timeout=120)
        node.note(f"checkpoint {path_words(dest)} moved aside to {path_words(aside)}: the master's takes its place")
    ct.run(["mv", "-T", "--", tmp, dest], timeout=120)
    if c.mtime is not None:  # the master's mtime: the copy is known by it (sig) here and in the watch's kept copy
        ct.run(["touch", "-m", "-d", f"@{c.mtime:.6f}", "--", dest], timeout=30)
    sigs = [*copies_of(node), [c.size, c.mtime or 0.0]][-100:]
    files.push_bytes(ct, json.dumps(sigs).encode(), f"{_keep(node)}/{COPIES}")
    node.note(printable(f"checkpoint {path_words(dest)} is the master's ({master.ctid})"
                        + (f", step {c.step}" if c.step is not None else "") + ", copied and verified"))
    return dest


def prepare(session: Session, nodes: Mapping[int, Target], ids: list[int], commands: Mapping[int, str], *,
            resume: bool, fresh: bool, live: bool) -> dict[int, checkpoints.Start]:
    """Before a multi-node launch (checkpoints.prepare for the run): each node's Start. Without train.checkpoint
    on any node, the commands as they are (resume or fresh refused); on some only, refused. With it: a plain
    train refused where any node holds a complete checkpoint, a fresh start's moves on every node, or a resume's
    common step (the master's checkpoint given to the nodes that lack it, each node brought to the step)."""
    file = session.config.file
    have = [c for c in ids if nodes[c].spec.train.checkpoint is not None]
    plain = {c: checkpoints.Start(commands[c], commands[c], configured=bool(have)) for c in ids}
    if not have:
        if resume or fresh:
            raise ConfigError(file, "train.checkpoint", f"{'--resume' if resume else '--fresh'} needs "
                              "train.checkpoint (path, resume): where the job saves and how it resumes")
        return plain
    if len(have) != len(ids):
        lacking = ", ".join(str(c) for c in ids if c not in have)
        raise config_unset(file, "train.checkpoint", f"containers {lacking} of this multi-node run have none while "
                           "the others do: set it for every node (one checkpoint for the run)")
    if live:  # launch refuses (or --force starts beside it): nothing of a live run's checkpoints is touched
        return plain
    if fresh:
        executor.values(session.config, ids, lambda c: checkpoints.set_aside(nodes[c]))
        return plain
    if not resume:
        executor.values(session.config, ids, lambda c: checkpoints.refuse_plain(nodes[c]))
        return plain
    common = plan(session, nodes, ids)
    if common is None:
        raise worded(CheckpointRefused(f"no node of {', '.join(map(str, ids))} holds a complete checkpoint to "
                                       f"resume from: {FRESH} starts over"), FRESH)
    paths: dict[int, Checkpoint] = {}
    if common.mode == "master":
        master = nodes[ids[0]]
        c = checkpoints.restore(master)  # its newest incomplete moved aside, the kept copy back in place
        if checkpoints.sig(c) != checkpoints.sig(common.chosen[ids[0]]):
            common = plan(session, nodes, ids)  # the restore put the kept copy back: read again
            if common is None or common.mode != "master":  # a node saved meanwhile: not the rule read a moment ago
                raise worded(CheckpointRefused(
                    f"the nodes' checkpoints changed while the resume read them (container {ids[0]}'s kept copy "
                    f"put back, and now {'none holds one' if common is None else 'every node holds its own'}): "
                    f"nothing was started; resume again ({RESUME}), or start over with {FRESH}"), RESUME, FRESH)
        paths[ids[0]] = c
        for ctid in ids[1:]:
            dest = give(master, nodes[ctid], c) if ctid in common.copy_to else checkpoints.path_of(nodes[ctid].spec)
            paths[ctid] = dataclasses.replace(c, path=dest or c.path, kept=False)
    else:
        assert common.step is not None, "mode each compares steps"
        step = common.step
        got = executor.values(session.config, ids, lambda c: checkpoints.pick(nodes[c], step))
        paths = dict(zip(ids, got, strict=True))
    starts = {}
    for ctid in ids:
        t, c = nodes[ctid], paths[ctid]
        parent = None if session.dry else jobs.state(t).run
        checkpoints.seen(t, c, None)
        starts[ctid] = checkpoints.Start(checkpoints.resume_command(t.spec, commands[ctid], c.path), commands[ctid],
                                         c, parent)
    reporter(session).step(f"every rank resumes at step {common.step if common.step is not None else '(unknown)'}: "
                           + ("the master's checkpoint" + (f", given to {', '.join(map(str, common.copy_to))}"
                                                           if common.copy_to else "") if common.mode == "master"
                              else "each node's own at that step"))
    return starts


@dataclasses.dataclass(frozen=True)
class NodesSaved:
    """`stop --save` of a multi-node run: each node's Stopped (its Saved: what it saved), the step every rank
    resumes at (None: none, `note` says why) and the note."""

    run: str
    nodes: dict[int, Stopped]
    step: int | None
    note: str


def save_stop(session: Session, ids: list[int], run_id: str, grace: int = 10) -> NodesSaved:
    """stop --save for a multi-node run: the save asked of every rank (each node's job signalled, or its next
    save awaited, train.checkpoint.grace at most), the stop once the run's checkpoint is there (the master's,
    or every node's where each saves its own), then every node stopped; what each saved and the common step."""
    nodes = {i: resolve(session, i) for i in ids}
    for c in ids:
        if nodes[c].spec.train.checkpoint is None:
            raise config_unset(session.config.file, "train.checkpoint", f"stop --save of multi-node run {run_id} "
                               f"needs it on every node (container {c} has none): where the job saves")
    states = dict(zip(ids, executor.values(session.config, ids, lambda c: jobs.state(nodes[c], run_id)), strict=True))
    try:
        before = plan(session, nodes, ids)
        mode = before.mode if before else "unknown"
    except CheckpointRefused:
        mode = "unknown"
    answers: dict[int, str | RemoteError] = {}
    ended = {c: threading.Event() for c in ids}

    def wait(ctid: int) -> None:
        try:
            answers[ctid] = checkpoints.wait_save(nodes[ctid], states[ctid])
        except RemoteError as exc:
            answers[ctid] = exc
        finally:
            ended[ctid].set()

    alive = [c for c in ids if states[c].alive]
    threads = [ContextThread(target=wait, args=(c,), daemon=True) for c in alive]
    for th in threads:
        th.start()
    limit = max(nodes[c].spec.train.checkpoint.grace for c in ids) + 60  # type: ignore[union-attr]
    t0 = time.monotonic()
    master = ids[0]
    if mode == "each" or master not in alive:
        for c in alive:
            ended[c].wait(max(0.0, limit - (time.monotonic() - t0)))
    else:  # the master saves the run's checkpoint: the others get a moment where it is not known they don't save
        ended[master].wait(limit)
        if mode == "unknown":
            for c in alive:
                ended[c].wait(max(0.0, min(OTHERS_S, limit - (time.monotonic() - t0))))
    stopped = executor.values(session.config, ids, lambda c: jobs.stop(nodes[c], run_id, grace=grace))
    for th in threads:
        th.join(timeout=60)  # each wait ends once its job's processes are gone
    out: dict[int, Stopped] = {}
    for ctid, one in zip(ids, stopped, strict=True):
        text = answers.get(ctid)
        if isinstance(text, RemoteError):
            nodes[ctid].warn(f"node {ctid}: the save could not be asked for ({text}); stopped anyway")
            text = None
        t = nodes[ctid]
        saved = checkpoints.after_stop(t, states[ctid], text if isinstance(text, str) else None, None,
                                       lambda: jobs.state(t, run_id).tail)  # noqa: B023 -- called at once
        out[ctid] = dataclasses.replace(one, saved=saved)
    try:
        after = plan(session, nodes, ids)
        step, note = (after.step, _words(after, out)) if after else (None, "no node holds a complete checkpoint: "
                                                                      "nothing to resume from")
    except CheckpointRefused as exc:
        after, step, note = None, None, str(exc)
    if after is not None and after.mode == "master":  # the others save nothing of their own: not theirs to report
        out = {c: one if c == master else dataclasses.replace(one, saved=None) for c, one in out.items()}
    reporter(session).note(printable(f"multi-node run {run_id}: {note}"))
    return NodesSaved(run_id, out, step, note)


def _words(common: checkpoints.Common, out: Mapping[int, Stopped]) -> str:
    """The common step and each node's steps lost after it (its log's last step less that step)."""
    parts = []
    for ctid, one in out.items():
        last = one.saved.last_step if one.saved else None
        lost = f", {last - common.step} step(s) after it lost" if last is not None and common.step is not None \
            and last >= common.step else ""
        parts.append(f"{ctid}: log at step {last if last is not None else '?'}{lost}")
    where = ("the master's checkpoint (given to every other node at the resume)" if common.mode == "master"
             else "each node's own checkpoint")
    return (f"every rank resumes at step {common.step if common.step is not None else '(unknown)'} from {where} "
            f"({'; '.join(parts)}); a resume ({RESUME.cli}, {RESUME.library}) over the same nodes continues it")

