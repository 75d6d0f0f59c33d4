"""remote.testing.FakeFleet: its methods keep the real ones' signatures (a keyword the real API gains shows here
first), it reads nothing of this machine, and a method it does not fake says so instead of connecting."""

from __future__ import annotations

import inspect

import pytest

import remote
from remote.api.container import Container
from remote.api.fleet import Fleet
from remote.api.run import Run
from remote.testing import (
    CONTAINER_METHODS,
    FLEET_METHODS,
    RUN_METHODS,
    FakeContainer,
    FakeFleet,
    FakeRun,
    NotFaked,
    RunScript,
    busy,
    connection_lost,
)


def parameters(fn: object) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("real, fake, names", [
    (Container, FakeContainer, CONTAINER_METHODS), (Run, FakeRun, RUN_METHODS),
    (Fleet, FakeFleet, FLEET_METHODS + ("container",))])
def test_each_faked_method_takes_exactly_the_real_ones_arguments(real, fake, names):
    """A keyword added to the real method (Container.stop(save=...)) and not to the fake fails here, naming it."""
    for name in names:
        assert getattr(fake, name) is not getattr(real, name), f"{fake.__name__}.{name} is not faked"
        assert parameters(getattr(fake, name)) == parameters(getattr(real, name)), \
            f"{fake.__name__}.{name} differs from {real.__name__}.{name}: give the fake the real signature"


def test_the_fakes_are_the_real_types():
    fleet = FakeFleet(containers=[200, 201])
    ct = fleet.container(201)
    assert isinstance(fleet, remote.Fleet) and isinstance(ct, remote.Container)
    assert isinstance(ct.train(), remote.Run)
    assert fleet.container(201) is ct and [c.id for c in fleet.containers("all")] == [200, 201]


@pytest.mark.fault("a test double that reads the machine", promise="FakeFleet loads a hosts file whose key_file "
                   "and code.repo do not exist on this machine, and deploys with it: nothing of the machine is read")
def test_a_hosts_file_naming_missing_files_loads_and_deploys(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  pve1: {address: pve1, key_file: /nonexistent/key}\n"
                     "containers:\n  300: {host: pve1}\ncode: {repo: ../no-such-repo, path: /root/x}\n"
                     "train: {command: python t.py}\n")
    with pytest.raises(remote.ConfigError, match="key_file"):
        remote.open(hosts)  # the real fleet checks it
    fleet = FakeFleet(hosts)
    assert fleet.container(300).deploy().noop


def test_a_method_not_faked_says_so_instead_of_connecting():
    fleet = FakeFleet()
    with pytest.raises(NotFaked, match="MockTransport"):
        fleet.container(200).exec(["true"])


def test_run_states_exit_status_and_busy():
    fleet = FakeFleet()
    ct = fleet.container(200)
    ct.scripts += [RunScript(exit_code=None, throughput=41.5, unit="tok/s"), RunScript(exit_code=2, polls=1)]
    first = ct.train()
    assert first.state == "running" and first.exit_code is None
    with pytest.raises(remote.JobRunning):
        ct.deploy()
    with pytest.raises(remote.JobTimeout):
        first.wait(timeout=5)
    stopped = ct.stop()
    assert stopped.was_alive and stopped.run == first.id and first.state == "stopped"
    second = ct.train()
    assert second.state == "running" and second.state == "exited" and second.wait() == 2
    assert [(r.id, r.state, r.exit, r.throughput) for r in ct.runs()] == [
        ("run-2", "exited", 2, None), ("run-1", "stopped", 143, 41.5)]
    with pytest.raises(remote.UnknownRun):
        ct.run("run-9")
    status = fleet.status()
    assert status.containers[0].run is not None and status.containers[0].run.id == "run-2"


def test_failures_set_up_raise_once_each_and_are_recorded():
    fleet = FakeFleet()
    ct = fleet.container(200)
    ct.fail("train", busy(200))
    ct.fail("metrics", connection_lost("pve1"))
    with pytest.raises(remote.BusyError) as caught:
        ct.train()
    assert caught.value.exit_code == 3
    run = ct.train()
    with pytest.raises(remote.ConnectError):
        run.metrics()
    assert run.metrics() == []
    assert [c.method for c in fleet.calls] == ["train", "train", "metrics", "metrics"]
    with pytest.raises(ValueError, match="not a faked method"):
        ct.fail("exec", busy(200))
    fleet.fail("status", connection_lost())
    with pytest.raises(remote.TransportError):
        fleet.status()


def test_a_followed_train_sends_its_log_to_progress():
    lines: list[str] = []
    fleet = FakeFleet(progress=lines.append)
    ct = fleet.container(200)
    ct.scripts.append(RunScript(log=["step 1 loss 2.0", "done"]))
    run = ct.train(detach=False)
    assert lines == ["step 1 loss 2.0", "done"] and run.exit_code == 0 and list(run.follow(offset=16)) == ["done"]
