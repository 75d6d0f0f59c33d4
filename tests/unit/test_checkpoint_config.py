"""Unit tier: train.checkpoint in the hosts file (every key checked, errors naming file and key) and the
controller's reading of the checkpoint tool's answers (remote.ops.checkpoints: untrusted JSON in, typed out)."""

from __future__ import annotations

import json

import pytest

from remote import config
from remote.errors import ConfigError
from remote.ops import checkpoints

BASE = {"hosts": {"pve1": {"address": "127.0.0.1"}}, "code": {"path": "/root/code"},
        "containers": {200: {"host": "pve1"}}}


def spec(ck, per_container=None):
    data = {**json.loads(json.dumps(BASE)), "containers": {200: {"host": "pve1"}}}
    data["train"] = {"command": "python train.py", "checkpoint": ck}
    if per_container is not None:
        data["containers"][200]["train"] = {"checkpoint": per_container}
    return config.parse(data, "hosts.yaml").containers[200]


def test_the_checkpoint_section_reads_every_key():
    s = spec({"path": "out/ckpt.pt", "resume": "--init_from=resume", "signal": "SIGusr1", "grace": 30,
              "complete": ".done"})
    ck = s.train.checkpoint
    assert (ck.path, ck.resume, ck.signal, ck.grace, ck.complete) == ("out/ckpt.pt", "--init_from=resume", "USR1",
                                                                      30.0, ".done")
    assert checkpoints.path_of(s) == "/root/code/out/ckpt.pt"  # relative: to code.path
    assert checkpoints.settings(s)["keep"] == "/root/runs/.checkpoints"
    assert spec({"path": "/o/c.pt"}).train.checkpoint.signal is None  # none: wait for the job's next save
    assert spec({"path": "/o/c.pt"}, {"grace": 5}).train.checkpoint.grace == 5  # key by key per container
    assert spec({"path": "/o/c.pt"}, {"grace": 5}).train.checkpoint.path == "/o/c.pt"


@pytest.mark.fault("train.checkpoint written wrong", promise="refused before anything connects, naming the file "
                   "and the key")
@pytest.mark.parametrize("ck,key,words", [
    ({"resume": "x"}, "train.checkpoint.path", "required"),
    ({"path": ""}, "train.checkpoint.path", "must not be empty"),
    ({"path": "../x"}, "train.checkpoint.path", "'..'"),
    ({"path": "x", "signal": "KILL"}, "train.checkpoint.signal", "expected none or a signal name"),
    ({"path": "x", "grace": 0}, "train.checkpoint.grace", "from 1"),
    ({"path": "x", "resume": "--from {ckpt}"}, "train.checkpoint.resume", "only placeholder is {checkpoint}"),
    ({"path": "x", "complete": "/abs"}, "train.checkpoint.complete", "a glob inside"),
    ({"path": "x", "sigal": "TERM"}, "train.checkpoint.sigal", "did you mean signal"),
    ("x", "train.checkpoint", "expected a mapping"),
])
def test_a_wrong_checkpoint_key_is_named(ck, key, words):
    with pytest.raises(ConfigError) as e:
        spec(ck)
    assert f"hosts.yaml: {key}:" in str(e.value) and words in str(e.value)


def test_the_resume_words_quote_the_checkpoint_once():
    s = spec({"path": "/o/*.pt", "resume": "--resume {checkpoint}"})
    assert checkpoints.resume_command(s, "python t.py", "/o/it's.pt") == "python t.py --resume '/o/it'\"'\"'s.pt'"
    assert checkpoints.resume_command(spec({"path": "x"}), "python t.py", "/o") == "python t.py"


def test_the_tools_answer_is_untrusted():
    assert checkpoints.checkpoint_of({"path": 3}) is None
    c = checkpoints.checkpoint_of({"path": "/o/c.pt\x1b[31m", "complete": "yes", "kind": "evil", "size": -5,
                                   "mtime": "x", "step": -1, "step_from": 7})
    assert (c.complete, c.kind, c.size, c.mtime, c.step, c.step_from) == (False, "file", 0, None, None, None)
    assert "\x1b" not in c.path


def test_what_a_save_left_and_the_steps_lost():
    tail = "iter 240: loss 1.2\niter 250: loss 1.1\nsaving checkpoint to out\niter 251: loss 1.0\n"
    text = json.dumps({"saved": {"path": "/o/c.pt", "complete": True, "kind": "torch", "mtime": 100.0, "step": 250},
                       "waited": 1.5, "signals": 0, "now": 103.0})
    s = checkpoints.saved_of(text, tail)
    assert (s.outcome, s.checkpoint.step, s.last_step, s.steps_lost, s.age_s, s.waited_s) == \
        ("saved", 250, 251, 1, 3.0, 1.5)
    s = checkpoints.saved_of(json.dumps({"saved": None, "latest": None, "now": 1}), "")
    assert (s.outcome, s.checkpoint) == ("none-yet", None)
    s = checkpoints.saved_of(json.dumps({"saved": None, "latest": {"path": "/o/c.pt", "complete": True}}), tail)
    assert s.outcome == "no-new" and s.checkpoint.path == "/o/c.pt"
    assert checkpoints.saved_of("garbage", tail).outcome == "no-new"


def test_a_resumes_lineage_is_typed_from_its_manifest_and_shown_by_status_and_runs():
    from remote.cli import format as fmt
    from remote.facts.runs import manifest_of
    from remote.results import ContainerStatus, JobStatus, RunSummary

    m = manifest_of({"checkpoint": {"path": "/root/out/ckpt.pt", "step": 250, "kind": "torch"},
                     "parent": "20261206-031500-ab12"})
    assert (m.checkpoint.path, m.checkpoint.step, m.checkpoint.kind, m.parent) == \
        ("/root/out/ckpt.pt", 250, "torch", "20261206-031500-ab12")
    bad = manifest_of({"checkpoint": {"path": 5}, "parent": ["x"]})  # the job may rewrite its manifest
    assert bad.checkpoint is None and bad.parent is None and "not an object with a path" in bad.problem("checkpoint")
    job = JobStatus("R2", False, False, (), 0, None, False, None, None, None, None, True, None, False, (), "", None,
                    None, None, None, checkpoint=m.checkpoint, parent=m.parent)
    line = fmt._job_line(fmt._container_dict(ContainerStatus(200, "pve1", "running", job)))
    assert "last run R2 (resumes 20261206-031500-ab12 at step 250) exited 0" in line, line
    s = RunSummary("R2", None, None, "exited", 0, None, None, "python train.py", None, "/r/R2", m.checkpoint, m.parent)
    assert "python train.py  (resumes 20261206-031500-ab12 at step 250)" in fmt.runs_text([s], 200, "/root/runs")


def test_train_refuses_resume_with_fresh_for_one_and_several_containers(tmp_path, capsys):
    from remote import cli

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: {pve1: {address: pve1.invalid}}\ncontainers: {200: {host: pve1}, 201: {host: pve1}}\n"
                     "train: {command: python t.py, checkpoint: {path: out/ckpt.pt}}\n")
    assert cli.run(["train", "-c", "200", "--resume", "--fresh", "--hosts", str(hosts)]) == 2
    assert "--resume and --fresh exclude each other" in capsys.readouterr().err
    assert cli.run(["train", "-c", "200,201", "--resume", "--fresh", "--hosts", str(hosts)]) == 2
    assert "--resume and --fresh exclude each other" in capsys.readouterr().err


@pytest.mark.fault("train.checkpoint.path a glob or folder that reaches the run folder, the checkout or the venv",
                   promise="refused when the hosts file loads, naming the key and what it would reach: `train --fresh` "
                           "moves every match aside, and would move those with the checkpoints")
@pytest.mark.parametrize("path,reaches", [("/root/*", "/root/runs"), ("/*", "/root"), ("/root/**", "/root/runs"),
                                          ("/root/mytrainer", "/root/mytrainer"), ("/root/venv*", "/root/venv"),
                                          ("/root/out/ckpt-*.pt", None), ("out/*.pt", None), ("out", None)])
def test_a_checkpoint_path_that_reaches_what_remote_keeps_is_refused(path, reaches):
    from remote import config as cfg
    from remote.errors import ConfigError

    data = {"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}}, "code": {"path": "/root/mytrainer"},
            "train": {"command": "python train.py", "checkpoint": {"path": path}}}
    if reaches is None:
        assert cfg.parse(data, "hosts.yaml").containers[200].train.checkpoint.path == path
        return
    with pytest.raises(ConfigError) as caught:
        cfg.parse(data, "hosts.yaml")
    assert "train.checkpoint.path" in str(caught.value) and f"matches {reaches}," in str(caught.value)
