"""Lab tier: `remote exec` is ONE container command, cold or warm: whether the container is deployed, and
the job's environment (the per-version compile cache folder from the venv deploy built), are read in
the container by remote/sh/jobexec.sh, not by a probe first (docs/kept-connection.md)."""

from __future__ import annotations

import json

import pytest
from support import LAB_CONTAINERS, load_config

import remote
from remote import config
from remote.ops import jobenv
from remote.ops.warmup import deployed as deploy_records
from remote.target import resolve as target_of
from remote.transport.pct import Container

pytestmark = pytest.mark.lab
A = LAB_CONTAINERS[0]
SHOW = ["python3", "-c", "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"]


@pytest.fixture
def commands(monkeypatch):
    """Every container command the library runs (Container.run: pct exec or an agent's)."""
    seen: list[list[str]] = []
    real = Container.run

    def run(self, argv, **kw):
        seen.append(list(argv))
        return real(self, argv, **kw)

    monkeypatch.setattr(Container, "run", run)
    return seen


@pytest.mark.fault("A one-off `remote exec` with no kept connection",
                   "one container command, no probe first: in the checkout with the job's environment once "
                   "deployed, plainly from /root before (bench/oneoff.py: cold vs by hand)")
def test_exec_in_a_deployed_container_is_one_command_with_the_job_environment(deployed, lab_hosts, lab_session,
                                                                                commands):
    spec = lab_session.config.container(A)
    want = jobenv.tool_env(spec, deploy_records(target_of(lab_session, A)).verify.as_record())
    commands.clear()
    with remote.Fleet(config.load(str(lab_hosts)), keep=False) as fleet:
        r = fleet.container(A).exec(SHOW)
    assert r.exit_code == 0, r.stderr
    assert len(commands) == 1, commands  # no probe before the command
    got = json.loads(r.stdout)
    assert got["cwd"] == spec.code.path
    assert {k: got["env"].get(k) for k in want} == want
    assert "REMOTE_JOB_VARS" not in got["env"]


@pytest.mark.fault("A one-off `remote exec` with no kept connection",
                   "one container command, no probe first: in the checkout with the job's environment once "
                   "deployed, plainly from /root before (bench/oneoff.py: cold vs by hand)")
def test_exec_before_a_deploy_is_one_plain_command_from_root(lab_hosts, commands):
    other = load_config(lab_hosts, **{"venv:\n": "venv:\n  path: /root/not-deployed-venv\n"})
    with remote.Fleet(config.load(str(other)), keep=False) as fleet:
        r = fleet.container(A).exec(SHOW)
        assert r.exit_code == 0 and len(commands) == 1, (r.stderr, commands)
        got = json.loads(r.stdout)
        assert got["cwd"] == "/root" and not {"VIRTUAL_ENV", "TORCHINDUCTOR_CACHE_DIR"} & set(got["env"])
        # a program that is not there is remote's error naming it, as a plain `pct exec` gives it
        with pytest.raises(remote.ContainerCommandNotFound, match="no-such-program-here"):
            fleet.container(A).exec(["no-such-program-here"])
