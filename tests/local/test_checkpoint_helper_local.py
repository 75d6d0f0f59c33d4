"""Local tier: remote_checkpoint (remote/sh/checkpoint.py) in real processes with the real CPU torch.

A venv of the lab's pinned CPU torch is made once per session, with the helper and remote_ckpt installed under
the names deploy's venv-build.sh gives them (read from that script). The example loop of docs/guide/resume.md is
run as written (read from the page), and `stop --save` is the real container side of it: remote/sh/ckpt.py's
`wait`, which leaves <run>/save-requested, signals the run's processes that catch the signal and waits for a
new complete checkpoint."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, free_port  # noqa: E402

from remote.lab import wheels

SH = ROOT / "remote" / "sh"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def installed_names() -> dict[str, str]:
    """{staging file: module file} of the helper's cp lines in venv-build.sh (the test installs what deploy does)."""
    text = (SH / "venv-build.sh").read_text()
    got = dict(re.findall(r'cp "\$staging/(checkpoint\.py|ckpt\.py)" "\$site/(remote_\w+\.py)"', text))
    assert set(got) == {"checkpoint.py", "ckpt.py"}, "venv-build.sh no longer installs the checkpoint helper"
    return got


def example() -> str:
    text = (ROOT / "docs" / "guide" / "resume.md").read_text()
    section = text.split("## Code written for remote", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "docs/guide/resume.md's remote_checkpoint section has no single python example"
    assert len(blocks[0].splitlines()) <= 25, "the example is meant to be about 20 lines"
    return blocks[0]


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory) -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    wheel = wheels.provide(Path(tmp_path_factory.mktemp("wheels")), sys.executable)
    venv = tmp_path_factory.mktemp("torch-venv") / "v"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "-p", py, str(wheel), "numpy"], check=True)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for source, name in installed_names().items():
        shutil.copy(SH / source, os.path.join(site, name))
    return py


def start(py: str, tmp_path: Path, signal_name: str | None):
    """The example as a run's job: REMOTE_RUN_ID and REMOTE_RUN_DIR set, checkpoint.json as launch.sh writes it."""
    run, rid = tmp_path / f"run-{secrets.token_hex(3)}", secrets.token_hex(6)
    run.mkdir()
    conf = {"path": str(tmp_path / "out" / "ckpt.pt"), "complete": None, "keep": str(tmp_path / "keep"),
            "signal": signal_name, "grace": 60}
    (run / "checkpoint.json").write_text(json.dumps(conf) + "\n")
    (tmp_path / "train.py").write_text(example())
    env = {**os.environ, "REMOTE_RUN_ID": rid, "REMOTE_RUN_DIR": str(run), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([py, str(tmp_path / "train.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, run, rid, conf


def first_lines(proc, until: str) -> list[str]:
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip())
        if line.startswith(until):
            return seen
    raise AssertionError(f"no {until!r} line: {seen[-20:]}")


def stop_save(proc, run: Path, rid: str, conf: dict) -> dict:
    """`remote stop --save`'s container side (ckpt.py wait), then the job's own exit."""
    r = subprocess.run([PY, "-I", "-S", str(SH / "ckpt.py"), "wait", json.dumps(conf), str(run), rid],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, rest[-2000:]
    return json.loads(r.stdout)


def listed(conf: dict) -> dict:
    r = subprocess.run([PY, "-I", "-S", str(SH / "ckpt.py"), "list", json.dumps(conf)], capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("signal_name", ["USR1", None])
@pytest.mark.fault("stop --save of a job written with remote_checkpoint (the documented example)",
                   promise="the job saves a complete checkpoint at once and exits 0; ckpt.py's wait sees it saved "
                           "(with its step); a resume starts after that step")
def test_the_documented_example_saves_on_stop_save_and_resumes(torch_python, tmp_path, signal_name):
    proc, run, rid, conf = start(torch_python, tmp_path, signal_name)
    assert first_lines(proc, "step 200:")[0] == "starting at step 0"
    out = stop_save(proc, run, rid, conf)
    saved = out["saved"]
    assert out["why"] == "saved" and saved and saved["complete"] and saved["path"] == conf["path"], out
    assert saved["step"] is not None and saved["step"] >= 200, out
    assert out["signals"] == (1 if signal_name else 0), out  # signalled only where a handler is installed
    assert out["waited"] < 30, out  # at once, not at the next 1000-step save
    assert not [p for p in os.listdir(tmp_path / "out") if ".remote-tmp" in p]  # save() left no temp file
    # What the job left when it exited: complete, and no older than what wait saw (without a signal the file is
    # seen within 0.5 s, so a periodic save in between may be the one wait reports; the job's own save follows).
    left = listed(conf)["candidates"][0]
    assert left["complete"] and left["step"] >= saved["step"], left
    # The resume: the example finds that checkpoint itself (latest()) and continues after it.
    proc, run, rid, conf = start(torch_python, tmp_path, signal_name)
    assert first_lines(proc, "starting at")[-1] == f"starting at step {left['step'] + 1}"
    again = stop_save(proc, run, rid, conf)
    assert again["saved"]["step"] > left["step"], again


AGREE = r'''
import os, sys, torch, torch.distributed as dist, remote_checkpoint
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1000):
    if rank == 0 and step == 7:
        os.kill(os.getpid(), remote_checkpoint.signal.SIGUSR1)   # only rank 0 is asked
    if remote_checkpoint.stop_requested():
        print(step, flush=True)
        dist.barrier()                  # both here: then each leaves its group before exiting (rank 0 holds the
        dist.destroy_process_group()    # store; exiting with gloo's threads joinable aborts: `terminate called`)
        sys.exit(0)
print("never", flush=True)
'''


@pytest.mark.fault("stop --save reaches only some ranks of a job written with remote_checkpoint",
                   promise="stop_requested() is agreed across ranks (all_reduce MAX): every rank sees it at the "
                           "same step, so all save and exit together")
def test_ranks_agree_on_a_stop_only_one_was_asked(torch_python, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.json").write_text(json.dumps({"path": str(tmp_path / "c.pt"), "signal": "USR1"}))
    port = str(free_port())  # a free one: a random pick could be a port in use (the ephemeral range)
    procs = [subprocess.Popen([torch_python, "-c", AGREE], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "REMOTE_RUN_DIR": str(run), "RANK": str(r), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"})
             for r in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
    assert [o[0].strip() for o in outs] == ["7", "7"]


PERIODIC_FIRST = r'''
import os, sys, time, remote_checkpoint
run = os.environ["REMOTE_RUN_DIR"]
remote_checkpoint.stop_requested()                          # the loop's first look: nothing asked yet
print("ready", flush=True)
while not os.path.exists(os.path.join(run, "save-requested")):
    time.sleep(0.05)
remote_checkpoint.save({"step": 1})                         # a periodic save that lands after the request,
time.sleep(2)                                               # before the loop looks again
while not remote_checkpoint.stop_requested():
    time.sleep(0.05)
remote_checkpoint.save({"step": 2})                         # the save made on the request
sys.exit(0)
'''


@pytest.mark.fault("stop --save of a remote_checkpoint job whose periodic save lands after the request",
                   promise="the save the job made on the request is the one reported (ckpt.py wait waits for it: "
                           "the helper names it in <run>/saved-on-request), not the periodic one before it")
def test_stop_save_reports_the_save_made_on_its_request_not_a_periodic_one(torch_python, tmp_path):
    run, rid = tmp_path / "run", secrets.token_hex(6)
    run.mkdir()
    conf = {"path": str(tmp_path / "out" / "ckpt.pt"), "complete": None, "keep": str(tmp_path / "keep"),
            "signal": None, "grace": 60}
    (run / "checkpoint.json").write_text(json.dumps(conf) + "\n")
    env = {**os.environ, "REMOTE_RUN_ID": rid, "REMOTE_RUN_DIR": str(run), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([torch_python, "-c", PERIODIC_FIRST], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    first_lines(proc, "ready")
    assert (run / "save-aware").exists()  # the helper said it answers requests
    out = stop_save(proc, run, rid, conf)
    assert out["why"] == "saved" and out["on_request"] and out["saved"]["step"] == 2, out
    assert out["saved"]["path"] == conf["path"] and out["waited"] >= 2, out  # it waited past the periodic save
