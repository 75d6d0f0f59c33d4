"""Every session the library opens for a fleet is the fleet's: its `keep` (a script's `remote.open()` leaves no
kept-connection daemon behind) and its `transport` (a MockTransport test never reaches a real host)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import remote
from remote.testing import Command, MockTransport, Reply

API = Path(remote.__file__).resolve().parent / "api"


def _session_calls():
    for path in sorted(API.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "open_session":
                yield f"{path.name}:{node.lineno}", {k.arg: ast.unparse(k.value) for k in node.keywords}


@pytest.mark.fault("library sessions", promise="every session remote/api opens passes the fleet's `keep` and its "
                   "`transport`: Fleet.doctor, doctor_gpu and doctor_gpu_move under `with remote.open(...)` (keep "
                   "False) start no kept-connection daemon, a MockTransport fleet's calls stay on the mock")
def test_every_open_session_in_the_api_passes_the_fleets_keep_and_transport():
    calls = dict(_session_calls())
    assert len(calls) >= 6, calls  # the fleet's own, doctor's three, create's dry one, the shell's
    for where, kw in calls.items():
        assert kw.get("transport") in ("self._transport", "self.fleet._transport"), f"{where}: transport={kw.get('transport')}"
        # the fleet's keep, or False (a pty shell is never kept); never a literal True whatever open() said
        assert kw.get("keep") in ("self._keep", "self.fleet._keep", "False"), f"{where}: keep={kw.get('keep')}"


HOSTS = {"hosts": {"pve1": {"address": "127.0.0.1", "port": 1, "connect_timeout": 2}},
         "containers": {200: {"host": "pve1"}}}


@pytest.mark.fault("library sessions", promise="`fleet.create(..., dry=X)` with X unlike the fleet's own setting runs "
                   "on the fleet's transport (a MockTransport test never reaches the real host)")
@pytest.mark.parametrize("fleet_dry", [False, True])
def test_create_with_another_dry_than_the_fleets_stays_on_its_transport(fleet_dry):
    def handler(c: Command) -> Reply:
        return Reply(stderr="not mocked", status=1)

    mock = MockTransport(handler)
    with remote.open(HOSTS, transport=mock, dry=fleet_dry) as fleet:
        with pytest.raises(remote.RemoteError) as caught:
            fleet.create(210, host="pve1", template="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                         dry=not fleet_dry)
    assert not isinstance(caught.value, remote.ConnectError), caught.value  # 127.0.0.1:1 was never tried
    assert mock.calls and all(c.host == "pve1" for c in mock.calls)
