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
    with pytest.raises(CommandTimeout):  # long before the sleeps end
        t.run(["sh", "-c", "sleep 30.417 & sleep 30.417"], deadline=0.5)
    # A duration no other test uses: the pattern finds only this test's processes on a shared machine.
    assert t.run(["pgrep", "-f", "^sleep 30.417$"]).exit_code == 1


def _finishes(fn, limit=60.0):
    """Run fn in a thread; (finished, its exception). The limit only guards against a hang."""
    import threading

    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    return not t.is_alive(), box.get("error")


def test_an_exception_in_on_output_is_raised_instead_of_hanging():
    t = LocalTransport()

    def boom(kind, chunk):
        raise RuntimeError("callback failed")

    # Far more output than a pipe holds: a reader that stopped would leave the child blocked forever.
    finished, error = _finishes(lambda: t.run(["sh", "-c", "head -c 5000000 /dev/zero; echo done >&2"],
                                              on_output=boom))
    assert finished, "run() hung after on_output raised"
    assert isinstance(error, RuntimeError) and str(error) == "callback failed"


CTRL_C = r"""
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, also under a runner started with &
sys.path.insert(0, sys.argv[1])
from remote.transport import LocalTransport
LocalTransport().run(["sh", "-c", "trap 'echo interrupted > \"$1\"; exit 130' INT; echo $$ > \"$2\"; "
                      "while :; do sleep 0.05; done", "sh", sys.argv[2], sys.argv[3]])
"""


@pytest.mark.fault("Ctrl-C", promise="passed on to the child's process group; nothing is left running")
def test_ctrl_c_reaches_the_child(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    marker, pidfile = tmp_path / "marker", tmp_path / "pid"
    root = str(Path(__file__).resolve().parent.parent.parent)
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C, root, str(marker), str(pidfile)],
                            stderr=subprocess.PIPE)
    for _ in range(6000):  # a loaded machine can take long to start python: wait for the child, not for a time
        if pidfile.exists() and pidfile.read_text().strip() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the controller
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.killpg(child, signal.SIGKILL)  # only reached when the interrupt did not end it
        except ProcessLookupError:
            pass
    assert b"KeyboardInterrupt" in proc.stderr.read()
    assert marker.read_text() == "interrupted\n"  # the child saw the interrupt and ran its handler


def test_local_stream_moves_bytes_both_ways_with_exit_status_and_stderr():
    import hashlib
    import os

    t = LocalTransport()
    s = t.open_stream(["sh", "-c", "sha256sum; echo note >&2; exit 5"])
    data = os.urandom(3 << 20)
    for i in range(0, len(data), 1 << 20):
        s.write(data[i:i + (1 << 20)])
    s.close_stdin()
    out = b"".join(iter(lambda: s.read(65536), b""))
    assert s.wait() == 5 and out.split()[0].decode() == hashlib.sha256(data).hexdigest()
    assert s.error_text() == "note"
    s.close()
