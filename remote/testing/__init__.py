"""Test your own code that uses remote, without a host. Two seams (docs/guide/testing.md says which serves what):

`FakeFleet`: a remote.Fleet whose containers answer deploy, warmup, train, runs, log, stop, doctor, a Run's
wait/state/log/metrics/compile and the fleet's status/doctor with the typed results the test sets up, recording
each call; failure paths by `fail(method, error)` (busy(), connection_lost(), a RunScript's exit status).

    import remote
    from remote.testing import FakeFleet, RunScript

    fleet = FakeFleet(containers=[200])
    fleet.container(200).scripts.append(RunScript(exit_code=0, metrics=[...]))
    assert my_script(fleet) == ...            # my_script(fleet: remote.Fleet): deploy, train, wait, metrics
    assert [c.method for c in fleet.calls] == ["deploy", "train", "wait", "metrics"]

`MockTransport(handler)`: every command a fleet would run on a Proxmox host answered by `handler`, as httpx's
MockTransport answers requests (for exec and the host's own commands; remote's code above the connection runs
as in production):

    import remote
    from remote.testing import Command, MockTransport, Reply

    def handler(command: Command) -> Reply:
        if command.container == 200 and command.inner[:1] == ("nvidia-smi",):
            return Reply(stdout="GPU 0: NVIDIA H200\\n")
        return Reply(stderr=f"not mocked: {command.inner}", status=127)

    mock = MockTransport(handler)
    with remote.open("hosts.yaml", transport=mock) as fleet:
        assert fleet.container(200).exec(["nvidia-smi", "-L"]).out == "GPU 0: NVIDIA H200\\n"
    assert [c.inner for c in mock.calls] == [("nvidia-smi", "-L")]

The handler is called with each command (its host, the argv exactly as the host would run it, its stdin,
and, for a command in a container, the container and the command inside remote's wrappers) and returns a
Reply (stdout, stderr, exit status). What it raises reaches the caller as it is (raise remote's own
errors, e.g. remote.ConnectError, to act an unreachable host). Streams (file transfers, the in-container
agent) are not mocked: a transfer raises TransportError; commands go through plain `pct exec`, one each.
"""

from __future__ import annotations

from .fake import (
    CONTAINER_METHODS,
    FLEET_METHODS,
    RUN_METHODS,
    Call,
    FakeContainer,
    FakeFleet,
    FakeRun,
    NotFaked,
    RunScript,
    busy,
    connection_lost,
)
from .mock import Command, Handler, MockTransport, Reply

__all__ = ["Command", "Handler", "MockTransport", "Reply", "Call", "FakeContainer", "FakeFleet", "FakeRun",
           "NotFaked", "RunScript", "busy", "connection_lost", "CONTAINER_METHODS", "RUN_METHODS", "FLEET_METHODS"]
