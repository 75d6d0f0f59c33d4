"""One dry path (issue 47): a host command that changes something is described by the session as a DryCommand
where the run is dry, as a container's command is by its Container; gpu fix and create say theirs that way."""

import pytest
from test_gpufix import GOOD_NODES, Pvesm, data, fix, mutating

from remote import config
from remote.events import DryCommand, Note
from remote.testing import MockTransport, Reply
from remote.transport.session import Session

HOSTS = {"hosts": {"pve1": {"address": "10.0.0.1"}}, "containers": {200: {"host": "pve1"}}}


@pytest.mark.fault("a dry run's host command", promise="a command on the host that changes something is shown as a "
                   "DryCommand (its argv whole) and never run; one that only reads runs as in a real run")
def test_a_dry_sessions_mutating_host_command_is_a_dry_command_and_a_read_runs():
    mock = MockTransport(lambda command: Reply(stdout="VMID Status Lock Name\n"))
    events: list = []
    session = Session(config.parse(HOSTS, "hosts.yaml"), dry=True, events=events.append, agent=False,
                      transport_factory=mock)
    r = session.host_run(session.config.hosts["pve1"], ["pct", "set", "200", "--cores", "2"], mutates=True, container=200)
    assert r.exit_code == 0 and r.out == "" and mock.calls == []  # described, not run
    assert events == [DryCommand(200, "pct set 200 --cores 2", ("pct", "set", "200", "--cores", "2"))]
    assert session.host_run(session.config.hosts["pve1"], ["pct", "list"]).out.startswith("VMID")  # a read runs
    assert [c.argv for c in mock.calls] == [("pct", "list")]


def test_gpu_fix_dry_shows_each_command_as_every_dry_run_does_and_runs_none():
    cfg = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")
    fake = Pvesm(config_text=cfg, ct_kw={"nodes": [n for n in GOOD_NODES if n[0] != "/dev/nvidia-uvm"], "init": 999})
    done, events = fix(fake, dry=True)
    dry = [e for e in events if isinstance(e, DryCommand)]
    assert [e.argv[:2] for e in dry] == [("pct", "set"), ("pct", "stop"), ("pct", "start")], dry
    assert dry[0].argv == ("pct", "set", "200", "--dev2", "/dev/nvidia-uvm,gid=44,mode=0666")
    assert all(e.container == 200 for e in dry)
    assert not [e for e in events if isinstance(e, Note) and "would run" in e.line]  # not a second wording
    assert mutating(fake.calls) == [] and done.dry and not done.restarted
