"""Unit tier: a multi-node run's one checkpoint. The rule (remote.ops.checkpoints.common_step) over what each node
holds, pure; and ckpt.py's `pick`, which brings a node to the run's common step (files in tmp_path, as the
container has them)."""

from __future__ import annotations

import importlib.util
import io
import os
import pickle
import time
import zipfile

import pytest
from support import ROOT

from remote.errors import FRESH, RESUME, CheckpointRefused
from remote.ops.checkpoints import common_step, sig
from remote.results import Checkpoint


def ck(path: str, step: int | None, *, complete: bool = True, size: int = 100, mtime: float = 1000.0,
       kept: bool = False) -> Checkpoint:
    return Checkpoint(path, complete, "torch", size, mtime, step, "data.pkl iter_num" if step is not None else None,
                      "" if complete else "truncated", kept)


NONE: dict = {}


@pytest.mark.fault("A multi-node run whose nodes each save their own checkpoint, one node's newest torn or missing",
                   promise="every rank resumes at the newest step complete on every node (each node's own at that "
                           "step), never each node's own latest")
def test_every_node_its_own_resumes_at_the_newest_step_all_have():
    held = {270: [ck("/o/c-30.pt", 30, mtime=3), ck("/o/c-20.pt", 20, mtime=2), ck("/o/c-10.pt", 10, mtime=1)],
            271: [ck("/o/c-30.pt", 30, complete=False, mtime=3), ck("/o/c-20.pt", 20, mtime=2)]}
    got = common_step(held, NONE)
    assert got is not None and (got.mode, got.step, got.copy_to) == ("each", 20, ())
    assert {c: x.path for c, x in got.chosen.items()} == {270: "/o/c-20.pt", 271: "/o/c-20.pt"}
    # the watch's kept copy counts as the node's own: an in-place saver torn on one node resumes from it
    held = {270: [ck("/o/ckpt.pt", 40)], 271: [ck("/o/ckpt.pt", None, complete=False), ck("/k/ckpt.pt", 40, kept=True)]}
    got = common_step(held, NONE)
    assert got is not None and got.step == 40 and got.chosen[271].kept


@pytest.mark.fault("A multi-node run's nodes hold checkpoints of different steps (no step in common)",
                   promise="the resume is refused (exit 2) naming each node and its steps; nothing is started or "
                           "moved; ranks never resume from different steps")
def test_no_common_step_is_refused_naming_each_nodes_steps():
    held = {270: [ck("/o/ckpt.pt", 20)], 271: [ck("/o/ckpt.pt", 10, mtime=900)]}
    with pytest.raises(CheckpointRefused) as exc:
        common_step(held, NONE)
    text = str(exc.value)
    assert "270 (node rank 0): step 20" in text and "271 (node rank 1): step 10" in text and "fresh=True" in text
    assert exc.value.exit_code == 2
    # one node with its own, another with none, beside a master that has its own: which saves is unclear
    held = {270: [ck("/o/ckpt.pt", 20)], 271: [ck("/o/ckpt.pt", 20)], 272: []}
    with pytest.raises(CheckpointRefused, match=r"272 \(node rank 2\): no complete checkpoint"):
        common_step(held, NONE)
    held = {270: [ck("/o/a.pt", None)], 271: [ck("/o/a.pt", None)]}
    with pytest.raises(CheckpointRefused, match="a checkpoint that tells no step"):
        common_step(held, NONE)


@pytest.mark.fault("A multi-node DDP run that saves on rank 0 only (nanoGPT) resumed without shared storage",
                   promise="the master's latest complete checkpoint is the run's: every node that lacks it is "
                           "given it before the resume; a copy remote made earlier is never taken for the node's own")
def test_only_the_master_saves_its_checkpoint_goes_to_the_nodes_that_lack_it():
    master = ck("/o/ckpt.pt", 50, size=400, mtime=5000.0)
    got = common_step({270: [master], 271: [], 272: []}, NONE)
    assert got is not None and (got.mode, got.step, got.copy_to) == ("master", 50, (271, 272))
    assert got.chosen == {270: master}
    # 271 holds the copy remote made at the last resume (step 30), 272 the current one already
    old_copy = ck("/o/ckpt.pt", 30, size=300, mtime=3000.0)
    copies = {271: frozenset({sig(old_copy)}), 272: frozenset({sig(old_copy), sig(master)})}
    got = common_step({270: [master], 271: [old_copy], 272: [ck("/o/ckpt.pt", 50, size=400, mtime=5000.0)]}, copies)
    assert got is not None and (got.mode, got.step, got.copy_to) == ("master", 50, (271,))
    # 272 holds it only as the watch's kept copy (its path was removed): the job reads the path, so it is given again
    kept = ck("/k/ckpt.pt", 50, size=400, mtime=5000.0, kept=True)
    got = common_step({270: [master], 271: [], 272: [kept]}, copies)
    assert got is not None and got.copy_to == (271, 272)
    # without the record, 271's old copy would be its own: no common step, refused
    with pytest.raises(CheckpointRefused):
        common_step({270: [master], 271: [old_copy]}, NONE)
    assert common_step({270: [], 271: []}, NONE) is None
    assert common_step({270: [ck("/o/ckpt.pt", None, complete=False)], 271: []}, NONE) is None
    with pytest.raises(CheckpointRefused, match=r"270 \(node rank 0\): no complete checkpoint"):
        common_step({270: [], 271: [old_copy]}, copies)  # only copies left, the master's own gone


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("ckpt_pick_under_test", ROOT / "remote" / "sh" / "ckpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_like(path, step: int, age: float) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps({"iter_num": step}, protocol=2))
    path.write_bytes(buf.getvalue())
    os.utime(path, (time.time() - age, time.time() - age))
    return buf.getvalue()


def test_pick_moves_what_is_newer_aside_and_puts_the_kept_copy_back(tool, tmp_path):
    conf = {"path": str(tmp_path / "c-*.pt"), "complete": None, "keep": str(tmp_path / "keep"), "signal": None,
            "grace": 5}
    torch_like(tmp_path / "c-10.pt", 10, 30)
    torch_like(tmp_path / "c-20.pt", 20, 20)
    newest = torch_like(tmp_path / "c-30.pt", 30, 10)
    out, rc = tool.cmd_pick(conf, 20)
    assert rc == 0 and out["latest"]["step"] == 20 and [m["path"] for m in out["moved"]] == [str(tmp_path / "c-30.pt")]
    assert not (tmp_path / "c-30.pt").exists() and open(out["moved"][0]["to"], "rb").read() == newest  # aside
    assert (tmp_path / "c-10.pt").exists() and tool.cmd_pick(conf, 40)[1] == 3
    # one path saved in place: only the watch's kept copy holds the step; the newer file goes aside
    one = {**conf, "path": str(tmp_path / "ckpt.pt")}
    kept = torch_like(tmp_path / "ckpt.pt", 40, 20)
    tool.keep_once(one)
    later = torch_like(tmp_path / "ckpt.pt", 50, 5)
    out, rc = tool.cmd_pick(one, 40)
    assert rc == 0 and out["latest"]["step"] == 40 and (tmp_path / "ckpt.pt").read_bytes() == kept
    assert open(out["moved"][0]["to"], "rb").read() == later and ".old-" in out["moved"][0]["to"]


class _Node:
    def __init__(self, ctid: int, grace: float):
        from types import SimpleNamespace

        self.ctid = ctid
        self.spec = SimpleNamespace(train=SimpleNamespace(checkpoint=SimpleNamespace(grace=grace)))

    def warn(self, text: str) -> None:
        raise AssertionError(text)


@pytest.mark.parametrize("mode,saver", [("master", None), ("each", 271), ("unknown", 271)])
def test_stop_save_waits_for_the_runs_checkpoint_then_stops_every_node(monkeypatch, mode, saver):
    """The wait, as save_stop orders it (the container's parts replaced): where only the master saves, the nodes
    are stopped as soon as its save is in (271, which never saves, is not waited for: its wait ends with its
    job); where each saves its own, not before 271's is in; where it is not known yet, 271 gets a moment."""
    import threading
    from types import SimpleNamespace

    from remote.ops import checkpoints, jobs, nodeckpt
    from remote.results import Saved, Stopped

    nodes = {270: _Node(270, 30), 271: _Node(271, 30)}
    stopped = threading.Event()
    when: dict[str, float] = {}
    t0 = time.monotonic()

    def wait_save(t, st):
        if t.ctid == 270 or t.ctid == saver:
            time.sleep(0.2 if t.ctid == 270 else 0.6)  # 271's own save comes a little after the master's
            when[f"saved {t.ctid}"] = time.monotonic() - t0
            return '{"saved": null}'
        stopped.wait(40)  # never saves: its job's end ends its wait
        return '{"saved": null}'

    def stop(t, run_id, grace=10):
        when.setdefault("stopped", time.monotonic() - t0)
        stopped.set()
        return Stopped(run_id, True, "TERM", 143, None)

    common = None if mode == "unknown" else checkpoints.Common(mode, 5, {270: ck("/o/ckpt.pt", 5)})
    monkeypatch.setattr(nodeckpt, "resolve", lambda session, c: nodes[c])
    monkeypatch.setattr(nodeckpt.executor, "values", lambda config, ids, fn: [fn(i) for i in ids])
    monkeypatch.setattr(jobs, "state", lambda t, run=None: SimpleNamespace(alive=True, tail="", path="/r", run=run))
    monkeypatch.setattr(jobs, "stop", stop)
    monkeypatch.setattr(nodeckpt, "plan", lambda session, nodes_, ids: common)
    monkeypatch.setattr(checkpoints, "wait_save", wait_save)
    monkeypatch.setattr(checkpoints, "after_stop", lambda t, st, text, restored, tail: Saved("saved", None))
    monkeypatch.setattr(nodeckpt, "OTHERS_S", 2.0)
    monkeypatch.setattr(nodeckpt, "reporter", lambda session: SimpleNamespace(note=lambda text: None))
    got = nodeckpt.save_stop(SimpleNamespace(config=None), [270, 271], "R1")
    assert set(got.nodes) == {270, 271} and when["stopped"] >= when["saved 270"]
    if mode == "master":
        assert when["stopped"] < 1.5 and "saved 271" not in when  # 271 not awaited for its grace (30 s)
    else:
        assert when["stopped"] >= when["saved 271"] and when["stopped"] < 1.5  # 271's save, then at once


@pytest.mark.fault("A multi-node resume whose nodes' checkpoints change between the rule's two reads (the master's "
                   "kept copy put back, another node saving meanwhile)",
                   "refused naming what changed and what to run, nothing started: no traceback, no rank resumed "
                   "from a step the rule did not pick")
def test_a_rule_that_changes_under_the_resume_is_refused_in_words(monkeypatch):
    from types import SimpleNamespace

    from remote.ops import checkpoints, nodeckpt

    ids = [270, 271]
    nodes = {c: SimpleNamespace(ctid=c, spec=SimpleNamespace(train=SimpleNamespace(checkpoint=object()))) for c in ids}
    session = SimpleNamespace(config=SimpleNamespace(file="hosts.toml"), dry=False)
    mastered = ck("/w/ck.pt", 20, mtime=1000.0)
    answers = iter([checkpoints.Common("master", 20, {270: mastered}, (271,)),
                    checkpoints.Common("each", 10, {270: ck("/w/ck.pt", 10), 271: ck("/w/ck.pt", 10)})])
    monkeypatch.setattr(nodeckpt, "plan", lambda session, nodes_, ids_: next(answers))
    monkeypatch.setattr(checkpoints, "restore", lambda t: ck("/w/ck.pt", 25, mtime=2000.0))  # the kept copy, newer
    given = []
    monkeypatch.setattr(nodeckpt, "give", lambda *a: given.append(a))
    with pytest.raises(CheckpointRefused, match="changed while the resume read them") as got:
        nodeckpt.prepare(session, nodes, ids, {270: "t", 271: "t"}, resume=True, fresh=False, live=False)
    assert FRESH in got.value.words and RESUME in got.value.words and not given
