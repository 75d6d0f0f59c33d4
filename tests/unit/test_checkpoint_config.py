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
    assert c.path == "/o/c.pt\x1b[31m"  # kept exactly (a resume passes it back); its words escape it


@pytest.mark.fault("A checkpoint path with control characters", promise="kept exactly in the Checkpoint, the resume "
                   "command and the run record (never escaped or cut there), named in the words escaped whole as "
                   "a shell $'...' string, never alike with a name that spells the escape; a path no checkpoint "
                   "could have (relative, NUL, over 4096 characters) is none at all")
def test_a_checkpoint_path_with_control_characters_is_kept_exactly_and_named_unambiguously():
    from remote.cli import format as fmt
    from remote.facts.runs import manifest_of

    odd = "/o/ck\x1b[2K\nfake line\\.pt"
    c = checkpoints.checkpoint_of({"path": odd, "complete": True, "step": 7})
    assert c.path == odd
    words = fmt.checkpoint_words(c)
    assert words == "$'/o/ck\\x1b[2K\\x0afake line\\\\.pt' (step 7)", words
    spelled = checkpoints.checkpoint_of({"path": "/o/ck\\x1b[2K", "complete": True})  # a name spelling the escape
    assert fmt.checkpoint_words(spelled) == "/o/ck\\x1b[2K" != fmt.checkpoint_words(c).split(" (")[0]
    assert checkpoints.resume_command(spec({"path": "/o/*.pt", "resume": "--resume {checkpoint}"}), "t",
                                      c.path) == "t --resume '" + odd + "'"
    record = checkpoints.Start("t", "t", c, "R1").manifest()
    assert record["checkpoint"]["path"] == odd
    assert manifest_of(json.loads(json.dumps(record))).checkpoint.path == odd  # the run record names it exactly
    from remote.results import RunSummary

    no_step = checkpoints.checkpoint_of({"path": odd, "complete": True})
    s = RunSummary("R2", None, None, "exited", 0, None, None, "python t.py", None, "/r/R2", no_step, "R1")
    assert "(resumes R1 from $'/o/ck\\x1b[2K\\x0afake line\\\\.pt')" in fmt.runs_text([s], 200, "/r"), \
        fmt.runs_text([s], 200, "/r")
    long = "/o/" + "x" * 4100
    for bad in (long, "/o/a\0b", "o/relative.pt"):
        assert checkpoints.checkpoint_of({"path": bad, "complete": True}) is None, bad
        assert manifest_of({"checkpoint": {"path": bad}}).checkpoint is None


@pytest.mark.fault("A container reports a checkpoint path with a `..` component (`/work/..`)",
                   "no checkpoint at all: a multi-node resume never pulls the master's `/work/..` into the "
                   "controller's temp folder's parent (and pushes that folder's files to another node)")
@pytest.mark.parametrize("bad", ["/work/..", "/work/../ckpt.pt", "/..", "/work/ckpt/../"])
def test_a_reported_checkpoint_path_with_a_dotdot_part_is_none(bad):
    assert checkpoints.checkpoint_of({"path": bad, "complete": True, "step": 3}) is None
    assert checkpoints.checkpoint_of({"path": "/work/..ckpt.pt", "complete": True}) is not None  # a name, not `..`


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


@pytest.mark.fault("The kept checkpoint copy after train.checkpoint.path changed",
                   promise="a resume whose only complete checkpoint is a kept copy taken from another path is refused "
                           "(CheckpointRefused, exit 2) naming the copy, where it came from and the path now, each "
                           "escaped whole")
def test_a_resume_from_a_kept_copy_of_another_path_is_refused_naming_both():
    import remote
    from remote.errors import CheckpointRefused
    from remote.target import resolve
    from remote.testing import MockTransport, Reply

    answer = {"latest": None, "moved": [], "restored": None, "incomplete": [],
              "kept_elsewhere": {"kept": "/r/.checkpoints/ck.pt", "source": "/old/ck\x1b.pt", "path": "/new/ck.pt"}}

    def handler(c):
        if "restore" in c.inner:
            return Reply(json.dumps(answer) + "\n", status=3)
        return Reply(stderr="not mocked", status=1)

    hosts = {"hosts": {"pve1": {"address": "127.0.0.1", "port": 1}},
             "containers": {200: {"host": "pve1", "train": {"command": "python t.py", "run_dir": "/r",
                                                            "checkpoint": {"path": "/new/ck.pt"}}}}}
    with remote.open(hosts, transport=MockTransport(handler)) as fleet:
        with pytest.raises(CheckpointRefused) as caught:
            checkpoints.restore(resolve(fleet._session, 200))
    message = str(caught.value)
    assert "kept copy /r/.checkpoints/ck.pt" in message and "taken from $'/old/ck\\x1b.pt'" in message, message
    assert "train.checkpoint.path is /new/ck.pt now" in message and caught.value.exit_code == 2
