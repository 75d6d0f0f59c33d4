"""The local transport (the controller is the Proxmox host itself), against real processes."""

import time

import pytest

from remote.errors import CommandTimeout
from remote.transport import LocalTransport


def test_runs_argv_without_a_shell_and_keeps_bytes():
    t = LocalTransport()
    r = t.run(["printf", "%s|", "a b", "$HOME", "`x`", ""])
    assert (r.exit_code, r.stdout) == (0, b"a b|$HOME|`x`||")


def test_stdin_exit_codes_streams_and_missing_programs():
    t = LocalTransport()
    assert t.run(["cat"], stdin=b"\x00\xffdata").stdout == b"\x00\xffdata"
    seen = []
    r = t.run(["sh", "-c", "echo out; echo err >&2; exit 3"], on_output=lambda k, b: seen.append(k))
    assert (r.exit_code, r.out, r.err) == (3, "out\n", "err\n") and sorted(seen) == ["stderr", "stdout"]
    assert t.run(["sh", "-c", "kill -9 $$"]).exit_code == 137
    assert t.run(["no-such-program-xyz"]).exit_code == 127


def test_deadline_kills_the_whole_process_group():
    t = LocalTransport()
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        t.run(["sh", "-c", "sleep 30 & sleep 30"], deadline=0.5)
    assert time.monotonic() - start < 5
    assert t.run(["pgrep", "-f", "^sleep 30$"]).exit_code == 1
