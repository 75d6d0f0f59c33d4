"""`remote shell` on a local host (`local: true`), through a real pty: the terminal plumbing without a container.

The host's pct is a stand-in that runs `pct exec`'s argv on this machine, so everything else is real:
the pty, the parser, the local transport, shell.sh and an interactive bash. tests/test_cli_lab.py drives
the same over SSH and into an LXC container.
"""

import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_PCT = """#!/bin/bash
# pct exec CT --keep-env 0 -- ARGV: ARGV on this machine (there is no container here).
[ "$1" = exec ] || { echo "pct: only exec here" >&2; exit 255; }
shift 2
[ "$1" = --keep-env ] && shift 2
[ "$1" = -- ] && shift
exec "$@"
"""


def on_a_terminal(args: list[str], hosts: Path) -> tuple[subprocess.Popen, int]:
    """`remote ARGS` on a new pty as its controlling terminal, as a user's terminal is; (process, master fd)."""
    master, slave = pty.openpty()

    def take_the_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-c", "from remote.cli import main; main()", *args],
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=take_the_terminal,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts),
                                 "TERM": "xterm"})
    os.close(slave)
    return proc, master


def wait_for_the_shell(proc, master, timeout=120.0) -> None:
    """As a user does: wait until the shell answers (what is typed before it starts may be flushed on the way)."""
    seen, end = b"", time.monotonic() + timeout
    while b"READY-42" not in seen and time.monotonic() < end and proc.poll() is None:
        os.write(master, b"echo READY-$((40+2))\n")
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            seen += os.read(master, 65536)
    assert b"READY-42" in seen, seen.decode("utf-8", "replace")


def read_until_exit(proc, fd, timeout=180.0) -> str:
    out, end = b"", time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode("utf-8", "replace")



def test_shell_on_a_local_host_is_an_interactive_bash_on_the_terminal(tmp_path):
    pct = tmp_path / "pct"
    pct.write_text(FAKE_PCT)
    pct.chmod(0o755)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  here: {{local: true, pct: {pct}}}\ncontainers:\n  200: {{host: here}}\n"
                     f"code: {{path: {checkout}}}\n")
    proc, master = on_a_terminal(["shell"], hosts)
    wait_for_the_shell(proc, master, timeout=30)
    os.write(master, b'echo "MARK[$PWD|$(tty)|$HOME]"; exit 7\n')
    out = read_until_exit(proc, master, timeout=30)
    os.close(master)
    if proc.poll() is None:
        proc.kill()
    assert proc.wait(timeout=30) == 7, out
    m = re.search(r"MARK\[(/[^|\]]*)\|([^|\]]*)\|([^\]]*)\]", out)  # expanded: not the typed line's echo
    assert m and m.group(1) == str(checkout) and m.group(3) == "/root", out
    assert m.group(2).startswith("/dev/pts/"), out
    assert "Traceback" not in out
