"""`remote move` and `remote host drain/resume` (remote.ops.move): the plan as data, a refusal that changes
nothing, an offline move's one pct command, and the session following every container a drain moved, over
FakeCluster's transports (remote/lab/testing.py). The lab runs them for real: tests/lab/test_move_lab.py."""

from __future__ import annotations

import json

import pytest
import yaml

from remote import cluster, config
from remote.errors import ConfigError, GpuConfigError
from remote.lab.testing import FakeCluster
from remote.ops import move as mv
from remote.results import Finding
from remote.target import resolve
from remote.transport.session import Session

HOSTS = """
hosts:
  pve1: {address: 10.0.0.1, cluster: c1}
  gpu-b: {address: 10.0.0.2, cluster: c1, node: pve2}
  solo: {address: 10.0.0.9}
containers:
  200: {cluster: c1}
  201: {cluster: c1}
  300: {host: solo}
train:
  command: python train.py
"""


def load() -> config.Config:
    return config.parse(yaml.safe_load(HOSTS), "hosts.yaml")


def plan(**over):
    facts = dict(ctid=200, cluster="c1", source="pve1", node="pve2", live=("r1",), running=True, checkpoint=True,
                 force=False, file="hosts.yaml")
    return mv.plan(**{**facts, **over})


def test_the_plan_of_a_live_run_with_a_checkpoint_saves_migrates_with_restart_and_resumes():
    p = plan()
    assert p.steps == ("check", "save-stop", "migrate", "wait", "resume")
    assert p.migrate == ("migrate", "200", "pve2", "--restart") and p.save and p.resume


def test_the_plan_of_a_stopped_container_is_an_offline_migrate_and_nothing_else():
    p = plan(live=(), running=False)
    assert p.steps == ("check", "migrate") and p.migrate == ("migrate", "200", "pve2")
    assert not (p.save or p.stop or p.resume or p.restart)


def test_the_plan_without_a_live_run_checks_and_migrates_a_running_container_with_restart():
    p = plan(live=())
    assert p.steps == ("check", "migrate", "wait") and p.migrate[-1] == "--restart" and not p.resume


@pytest.mark.fault("remote move of a live run without train.checkpoint", promise="refused (exit 2) before anything "
                   "changes, naming train.checkpoint and --force; --force stops it unsaved and does not resume it")
def test_a_live_run_without_a_checkpoint_is_refused_unless_force():
    with pytest.raises(ConfigError, match=r"hosts.yaml: train.checkpoint: .*run r1 is live.*--force") as e:
        plan(checkpoint=False)
    assert e.value.exit_code == 2
    p = plan(checkpoint=False, force=True)
    assert p.steps == ("check", "stop", "migrate", "wait") and p.stop and not p.save and not p.resume
    assert plan(force=True).steps == ("check", "stop", "migrate", "wait")  # force: never saved, even with one


@pytest.mark.parametrize("over, words", [
    (dict(node="pve1"), "is on node pve1 already"),
    # the words must be typable: train resumes several containers at one step (remote/ops/nodeckpt.py)
    (dict(nodes=(200, 201)), r"run r1 is a multi-node run on 200,201.*remote stop -c 200,201 --save` first, then "
                             r"move, then `remote train -c 200,201 --resume`"),
    (dict(cluster=None), "is in no cluster"),
])
def test_a_move_that_cannot_be_done_is_bad_input(over, words):
    with pytest.raises(ConfigError, match=words):
        plan(**over)


def session(fake: FakeCluster) -> Session:
    return Session(load(), transport_factory=fake.transport)


def pct_calls(fake: FakeCluster) -> list[tuple[str, ...]]:
    return [a for t in fake.transports.values() for a in t.calls if a[0] == "pct" and a[1] != "status"]


@pytest.mark.fault("a move the GPU check refuses", promise="GpuConfigError (exit 2) naming each finding and the "
                   "doctor command; no stop, no migrate: nothing changed")
def test_a_refused_check_runs_no_stop_and_no_migrate():
    fake = FakeCluster({200: "pve1"}, running=set())
    bad = Finding("move-no-driver", "error", "node pve2 has no NVIDIA module loaded", None, "", "install it",
                  200, "pve2")
    with session(fake) as s:
        with pytest.raises(GpuConfigError, match=r"refused, nothing changed: .*no NVIDIA module loaded.*doctor --gpu "
                           r"-c 200 --node pve2") as e:
            mv.move(resolve(s, 200), "pve1", "pve2", check=lambda: (True, (bad,)))
    assert e.value.exit_code == 2 and pct_calls(fake) == []


def test_an_offline_move_runs_one_pct_migrate_on_the_node_holding_it_and_is_timed():
    fake = FakeCluster({200: "pve1"}, running=set())
    moved: list[str] = []
    with session(fake) as s:
        got = mv.move(resolve(s, 200), "pve1", "pve2", check=lambda: (False, ()), moved=lambda: moved.append("pve2"))
    assert pct_calls(fake) == [("pct", "migrate", "200", "pve2")]
    assert [c for c in fake.transports["pve1"].calls if c[1] == "migrate"]  # on the node that held it
    assert [st.name for st in got.steps] == ["check", "migrate"] and all(st.seconds >= 0 for st in got.steps)
    assert got.migrate == "pct migrate 200 pve2" and got.resumed is None and got.stopped is None and moved == ["pve2"]


@pytest.mark.fault("a drain moving several containers of one node in one process", promise="each moved container's "
                   "next command goes to its new node with no re-read of the guest list and no 'does not exist'")
def test_the_session_follows_every_container_a_drain_moved_without_a_reread():
    fake = FakeCluster({200: "pve1", 201: "pve1"})
    with session(fake) as s:
        lookup = cluster.lookup_of(s.config)
        assert [resolve(s, c).host.name for c in (200, 201)] == ["pve1", "pve1"]
        for ctid in (200, 201):
            fake.placement[ctid] = "pve2"  # pct migrate did it
            lookup.moved(ctid, "pve2")
        for ctid in (200, 201):
            s.container(ctid).run(["true"])
        assert [resolve(s, c).host.name for c in (200, 201)] == ["gpu-b", "gpu-b"] and lookup.reads == 1


def test_resume_without_a_drain_is_named_and_the_record_is_written_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    fake = FakeCluster({200: "pve1"})
    with session(fake) as s:
        with pytest.raises(ConfigError, match="no drain of host pve1 to resume"):
            mv.resume_host(s, "pve1")
    path = mv.record_path("pve1", "hosts.yaml")
    assert path.parent == tmp_path / "remote" / "drained" and path != mv.record_path("pve1", "other.yaml")
    mv._write_record(path, {"host": "pve1", "containers": {"200": {"run": "r1"}}})
    assert json.loads(path.read_text())["containers"] == {"200": {"run": "r1"}} and not path.with_suffix(".tmp").exists()
    path.write_text("{torn")
    with pytest.raises(ConfigError, match="drain's record cannot be read"):
        mv._read_record(path)
    for odd in ({"x": {"run": "r1"}}, {"200": "r1"}):  # edited by hand: a clear error, not a ValueError from int()
        path.write_text(json.dumps({"host": "pve1", "containers": odd}))
        with pytest.raises(ConfigError, match="names no container id"):
            mv._read_record(path)


def test_the_command_line_words_a_move_and_a_drain():
    from remote.cli import movetasks
    from remote.results import Checkpoint, Drained, DrainedRun, Moved, MoveStep, Saved

    saved = Saved("saved", Checkpoint("/root/out/ckpt.pt", True, "torch", step=21), steps_lost=0)
    m = Moved(200, "pve1", "pve2", False, "r1", saved, (), "pct migrate 200 pve2 --restart", "r2", "r1",
              (MoveStep("check", 0.5), MoveStep("migrate", 1.25, "from pve1 to pve2")), (), 9.0)
    lines = movetasks.moved_lines(m)
    assert lines[0] == "container 200 moved from pve1 to pve2 in 9.0 s"
    assert "  run r1 stopped (saved), checkpoint /root/out/ckpt.pt at step 21, 0 step(s) lost" in lines
    assert "  run r2 resumes run r1 on pve2" in lines and "  migrate: 1.2 s (from pve1 to pve2)" in lines
    assert movetasks.moved_dict(m)["checkpoint"] == "/root/out/ckpt.pt"
    d = Drained("pve1", "drain", None, (DrainedRun(200, "r1", saved, None, "remote train -c 200 --resume"),
                                         DrainedRun(201, None, None, None, None, "container 201: \x1b[2Jbad")),
                "/state/pve1.json", 3.0)
    text = "\n".join(movetasks.drained_lines(d))
    assert "container 200: run r1 stopped, checkpoint /root/out/ckpt.pt; resume it with: remote train -c 200 " \
           "--resume" in text and "`remote host resume pve1` resumes them all" in text
    assert "container 201: error:" in text and "\x1b" not in text and not d.ok


@pytest.mark.fault("a move whose resume fails on the new node", promise="the error says the container is on the new "
                   "node now and names the command that resumes the run there; the save-stop came before the migrate")
def test_a_live_run_is_save_stopped_before_the_migrate_and_a_failed_resume_names_the_command(monkeypatch):
    from remote.errors import CheckpointRefused
    from remote.results import Checkpoint, Saved, Stopped

    fake = FakeCluster({200: "pve1"})
    cfg = HOSTS.replace("  command: python train.py\n", "  command: python train.py\n  checkpoint: {path: out/c.pt, "
                        "resume: --resume}\n")
    order: list[str] = []
    saved = Saved("saved", Checkpoint("/root/out/c.pt", True, "torch", step=9))

    def stop(t, run_id, save=False, refuse=None):
        order.append(f"stop save={save}")
        return Stopped("r1", True, "none", 0, None, saved=saved)

    def start(t, resume=False):
        order.append(f"start resume={resume} on {t.host.name}")
        raise CheckpointRefused("no complete checkpoint to resume from")

    monkeypatch.setattr(mv, "_runs", lambda t, running: (("r1",), ()))
    monkeypatch.setattr(mv.jobs, "stop", stop)
    monkeypatch.setattr(mv.jobs, "start", start)
    with Session(config.parse(yaml.safe_load(cfg), "hosts.yaml"), transport_factory=fake.transport) as s:
        lookup = cluster.lookup_of(s.config)

        def moved():
            order.append("migrated")
            fake.placement[200] = "pve2"
            lookup.moved(200, "pve2")

        with pytest.raises(CheckpointRefused, match=r"container 200 moved to pve2, then: no complete checkpoint.*"
                           r"`remote train -c 200 --resume` resumes run r1 there"):
            mv.move(resolve(s, 200), "pve1", "pve2", check=lambda: (False, ()), moved=moved)
    assert order == ["stop save=True", "migrated", "start resume=True on gpu-b"]
    assert ("pct", "migrate", "200", "pve2", "--restart") in fake.transports["pve1"].calls


@pytest.mark.fault("a move of a run that saves nothing new within its grace", promise="refused (SaveRefused, exit 3) "
                   "before the migrate: the run is left running where it is, the container not moved")
def test_a_move_whose_run_does_not_save_in_time_is_refused_before_the_migrate(monkeypatch):
    from remote.errors import SaveRefused

    fake = FakeCluster({200: "pve1"})
    cfg = HOSTS.replace("  command: python train.py\n", "  command: python train.py\n  checkpoint: {path: out/c.pt, "
                        "resume: --resume}\n")
    asked: list = []

    def stop(t, run_id, save=False, refuse=None):
        asked.append((save, refuse))
        raise SaveRefused(200, f"container 200: {refuse} refused, nothing was changed", "r1", 30.0)

    monkeypatch.setattr(mv, "_runs", lambda t, running: (("r1",), ()))
    monkeypatch.setattr(mv.jobs, "stop", stop)
    with Session(config.parse(yaml.safe_load(cfg), "hosts.yaml"), transport_factory=fake.transport) as s:
        with pytest.raises(SaveRefused, match="the move to node pve2 refused") as e:
            mv.move(resolve(s, 200), "pve1", "pve2", check=lambda: (False, ()))
    assert e.value.exit_code == 3 and asked == [(True, "the move to node pve2")]
    assert not any(a[:2] == ("pct", "migrate") for a in fake.transports["pve1"].calls)
