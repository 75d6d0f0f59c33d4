"""Local tier: remote/sh/jobexec.sh, `remote exec` as one container command, run here with bash over a
folder laid out as deploy leaves a container: once deployed, the command runs in the checkout with the
job's environment (the per-version cache folder read from the venv, train.env from stdin); before, plainly
from /root with none of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from remote import shell
from remote.config import CodeSpec, ContainerSpec, Host, TrainSpec, VenvSpec, WarmupSpec
from remote.ops import jobenv

SCRIPT = shell.load("jobexec")
SHOW = [sys.executable, "-c", "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"]


def spec(tmp_path, *, repo="git@example:repo.git") -> ContainerSpec:
    return ContainerSpec(ctid=200, host=Host("lab", "127.0.0.1"), venv=VenvSpec(path=str(tmp_path / "venv")),
                         code=CodeSpec(repo=repo, path=str(tmp_path / "co")),
                         warmup=WarmupSpec(cache_dir=str(tmp_path / "cache")),
                         train=TrainSpec(env=(("SECRET_TOKEN", "s3cret value"),), run_dir=str(tmp_path / "runs")))


def deploy_layout(tmp_path, *, cache_file=True):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "remote-venv.json").write_text(json.dumps({"verify": {"torch": "2.13.0+cpu", "cuda_build": None,
                                                                  "triton": None}}))
    if cache_file:
        (venv / jobenv.CACHE_FOLDER_FILE).write_text("torch-2.13.0+cpu-cuda-none-triton-none\n")
    (tmp_path / "co" / ".git").mkdir(parents=True)
    (tmp_path / "co" / ".git" / "remote-deploy.json").write_text("{}")


def run(s: ContainerSpec) -> dict:
    """What jobenv.run_as_deployed sends, run here: the same argv, environment and stdin."""
    env = jobenv.tool_env_at(s, f"{s.warmup.cache_dir}/{jobenv.CACHE_MARK}")
    env["REMOTE_JOB_VARS"] = " ".join(env)
    argv = ["bash", "-c", SCRIPT, "jobexec", s.venv.path, s.code.path, "1" if s.code.repo else "0",
            jobenv.CACHE_MARK, *SHOW]
    r = subprocess.run(argv, env={"PATH": os.environ["PATH"], **env}, input=jobenv.stdin_for(jobenv.user_env(s)),
                       capture_output=True, cwd="/", check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize("cache_file", [True, False], ids=["remote-cache-folder", "older-venv-record-only"])
def test_deployed_runs_in_the_checkout_with_the_job_environment(tmp_path, cache_file):
    deploy_layout(tmp_path, cache_file=cache_file)
    s = spec(tmp_path)
    got = run(s)
    want = jobenv.tool_env(s, {"torch": "2.13.0+cpu", "cuda_build": None, "triton": None})
    assert got["cwd"] == str(tmp_path / "co")
    assert {k: got["env"].get(k) for k in want} == want  # exactly what the controller computes from the record
    assert got["env"]["SECRET_TOKEN"] == "s3cret value" and "REMOTE_JOB_VARS" not in got["env"]
    assert os.path.isdir(want["TMPDIR"])


def test_not_deployed_runs_plainly_from_root(tmp_path):
    (tmp_path / "venv").mkdir()
    got = run(spec(tmp_path))
    assert got["cwd"] in ("/root", "/")
    assert not {"VIRTUAL_ENV", "TORCHINDUCTOR_CACHE_DIR", "SECRET_TOKEN", "REMOTE_JOB_VARS"} & set(got["env"])


def test_a_checkout_deploy_did_not_make_is_not_deployed_where_deploy_ships_it(tmp_path):
    deploy_layout(tmp_path)
    (tmp_path / "co" / ".git" / "remote-deploy.json").unlink()
    assert "VIRTUAL_ENV" not in run(spec(tmp_path))["env"]
    assert run(spec(tmp_path, repo=None))["env"]["VIRTUAL_ENV"] == str(tmp_path / "venv")  # the user's own code


def test_a_cache_folder_name_that_leaves_the_cache_is_refused(tmp_path):
    deploy_layout(tmp_path)
    (tmp_path / "venv" / jobenv.CACHE_FOLDER_FILE).write_text("../../etc\n")
    with pytest.raises(subprocess.CalledProcessError) as e:
        run(spec(tmp_path))
    assert e.value.returncode == 125 and b"run `remote deploy`" in e.value.stderr


def test_a_missing_program_before_a_deploy_is_named_as_remote_classifies_it(tmp_path):
    from remote.errors import ContainerCommandNotFound
    from remote.transport.pct import classify

    s = spec(tmp_path)
    argv = ["bash", "-c", SCRIPT, "jobexec", s.venv.path, s.code.path, "1", jobenv.CACHE_MARK, "no-such-program-here"]
    r = subprocess.run(argv, env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "REMOTE_JOB_VARS": ""},
                       capture_output=True, text=True)
    assert r.returncode == 127
    assert isinstance(classify(r.stderr, r.returncode, 200, "lab"), ContainerCommandNotFound), r.stderr
