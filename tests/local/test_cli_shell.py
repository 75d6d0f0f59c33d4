"""`remote shell` on a local host (`local: true`), through a real pty: the terminal plumbing without a container.

The host's pct is a stand-in that runs `pct exec`'s argv on this machine, so everything else is real:
the pty, the parser, the local transport, shell.sh and an interactive bash. tests/lab/test_cli_lab.py drives
the same over SSH and into an LXC container.
"""

import os
import re

from support import FAKE_PCT, on_a_terminal, read_until_exit, wait_for_the_shell


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
