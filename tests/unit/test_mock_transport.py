"""remote.testing.MockTransport: what its handler sees of each command, and a wrong handler named."""

from __future__ import annotations

import pytest

import remote
from remote.testing import Command, MockTransport, Reply

HOSTS = {"hosts": {"pve1": {"address": "pve1.example", "user": "trainer", "sudo": True}},
         "containers": {200: {"host": "pve1"}, 201: {"host": "pve1"}}}


def test_each_command_is_seen_with_its_host_container_and_inner_command():
    def handler(c: Command) -> Reply:
        if c.container is None:  # `pct list` on the host
            return Reply(stdout="VMID       Status     Lock         Name\n200        running                 a\n"
                                "201        stopped                 b\n")
        return Reply(stdout=f"{c.container}:{' '.join(c.inner)}\n", status=3 if c.container == 201 else 0)

    mock = MockTransport(handler)
    with remote.open(HOSTS, transport=mock) as fleet:
        assert fleet.container(200).exec(["echo", "a b"]).out == "200:echo a b\n"
        assert fleet.container(201).exec(["true"], job_env=False).exit_code == 3
        status = fleet.status()
    assert status.hosts[0].reachable and status.hosts[0].containers == {200: "running", 201: "stopped"}
    assert [(c.host, c.container, c.inner) for c in mock.calls][:2] == [("pve1", 200, ("echo", "a b")),
                                                                       ("pve1", 201, ("true",))]
    assert mock.calls[0].argv[:4] == ("sudo", "-n", "/usr/sbin/pct", "exec")  # exactly what the host would run
    assert mock.calls[2].inner == mock.calls[2].argv and mock.calls[2].argv[-1] == "list"


def test_a_handler_that_returns_no_reply_and_a_transport_that_is_none_are_named():
    with remote.open(HOSTS, transport=MockTransport(lambda c: "ok")) as fleet:  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError, match="handler returned str .* return a remote.testing.Reply"):
            fleet.container(200).exec(["true"])
    with pytest.raises(TypeError, match="transport: expected a transport factory"):
        remote.open(HOSTS, transport=5)  # type: ignore[arg-type]


def test_what_the_handler_raises_reaches_the_caller_and_streams_are_refused():
    def down(c: Command) -> Reply:
        raise remote.ConnectError("pve1", "pve1: connection refused")

    with remote.open(HOSTS, transport=MockTransport(down)) as fleet, pytest.raises(remote.ConnectError, match="refused"):
        fleet.container(200).exec(["true"])
    from remote.config import parse

    host = parse(HOSTS, "<dict>").hosts["pve1"]
    with pytest.raises(remote.TransportError, match="not streams"):
        MockTransport(lambda c: Reply())(host).open_stream(["cat"])


@pytest.mark.fault("Transfer probe answers nothing", promise="a push whose probe gets an empty or short answer from the "
                   "container is a TransferError naming the path, not an IndexError (internal error)")
def test_a_push_whose_probe_answers_nothing_is_a_transfer_error(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 10)
    with remote.open(HOSTS, transport=MockTransport(lambda c: Reply())) as fleet:
        with pytest.raises(remote.TransferError, match="probe of /root/data.bin answered ''"):
            fleet.container(200).push(data, "/root/data.bin")


def test_the_container_and_inner_command_come_from_the_pct_container_not_from_the_argvs_shape():
    """The pct Container hands its container and the command inside its wrappers to the transport
    (remote.transport.InContainer); a host argv that merely looks like `pct exec` is a host command."""
    from remote.transport import InContainer
    from remote.transport.pct import Container

    mock = MockTransport(lambda c: Reply())
    host = mock(remote.config.parse(HOSTS, "h.yaml").hosts["pve1"])
    Container(host, 200, pct="sudo -n /usr/sbin/pct").run(["env", "A=1", "timeout", "-k", "1", "2", "x"], check=False)
    host.run(["pct", "exec", "201", "--", "true"])  # built by hand: nobody said it is a container's
    assert [(c.container, c.inner) for c in mock.calls] == [
        (200, ("env", "A=1", "timeout", "-k", "1", "2", "x")),  # the caller's own env/timeout kept, never stripped
        (None, ("pct", "exec", "201", "--", "true"))]
    said = InContainer(["pct", "exec", "5", "--", "ls"], 5, ["ls"])
    assert said == ("pct", "exec", "5", "--", "ls") and (said.ctid, said.inner) == (5, ("ls",))
