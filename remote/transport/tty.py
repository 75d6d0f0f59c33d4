"""An interactive command on a real terminal (`remote shell`): the user's terminal, raw, relayed to a
pty on the far side.

On an SSH host the command runs on a channel with a pty (the window size follows the terminal's); on a
local host it runs in the foreground on the user's own terminal. Either way `pct exec` then sees a
terminal and gives the command one inside the container. The argv is quoted exactly once (shlex.join).
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence

from ..errors import ConnectError
from . import LocalTransport, _check_argv


def interactive(transport, argv: Sequence[str]) -> int:
    """Run argv with the terminal on stdin/stdout; its exit status."""
    argv = _check_argv(argv)
    if isinstance(transport, LocalTransport):
        return _local(argv)
    return _ssh(transport, argv)


def _local(argv: tuple[str, ...]) -> int:
    # In the foreground process group, on our terminal: Ctrl-C and Ctrl-Z are the shell's, not ours.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.call(argv)
    except FileNotFoundError:
        return 127
    finally:
        signal.signal(signal.SIGINT, old)
    return 128 - code if code < 0 else code


def _size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return size.columns, size.lines
    except OSError:
        return 80, 24


def _ssh(transport, argv: tuple[str, ...]) -> int:
    import termios
    import tty

    client = transport.connect()
    try:
        chan = client.get_transport().open_session(timeout=transport.host.connect_timeout)
        cols, rows = _size()
        chan.get_pty(term=os.environ.get("TERM") or "xterm", width=cols, height=rows)
        chan.exec_command(shlex.join(argv))
    except Exception as exc:
        transport.close()
        raise ConnectError(transport.name, f"{transport.name}: could not start a terminal session: {exc}") from exc
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(fd_in)

    def resized(*_):
        try:
            chan.resize_pty(*_size())
        except Exception:  # noqa: BLE001 -- the session may be ending
            pass

    old_winch = signal.signal(signal.SIGWINCH, resized)
    try:
        tty.setraw(fd_in)
        stdin_open = True
        while True:
            ready, _, _ = select.select([chan] + ([fd_in] if stdin_open else []), [], [], 1.0)
            if chan in ready:
                data = chan.recv(65536)
                if not data:
                    break
                os.write(fd_out, data)
            if fd_in in ready:
                data = os.read(fd_in, 4096)
                if data:
                    chan.sendall(data)
                else:
                    stdin_open = False
                    chan.shutdown_write()
            if chan.closed or (chan.exit_status_ready() and not chan.recv_ready()):
                break
    except (OSError, EOFError) as exc:
        raise ConnectError(transport.name, f"{transport.name}: the terminal session was lost: {exc}") from exc
    finally:
        termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, old_winch)
    if not chan.exit_status_ready():  # the output's end can come before the exit status
        chan.status_event.wait(10)
    code = chan.recv_exit_status() if chan.exit_status_ready() else -1
    chan.close()
    if code == -1:
        raise ConnectError(transport.name, f"{transport.name}: the terminal session ended without an exit status")
    return code
