# The guard of a command run over a direct `ssh host pct exec` (a cold `remote exec`,
# remote/transport/direct.py): it ends the command with the link that started it, as the in-container agent
# does for its commands. A plain `pct exec` keeps running after its SSH channel is gone (lxc-attach forwards
# no signal), until it next writes.
# Runs as `python3 -I -S -c SOURCE ARGV...`: ARGV is the command, started in a session (and process group)
# of its own with the guard's stdout and stderr. stdin: a line with N, then N bytes that are the command's
# stdin (train.env for jobexec.sh); after them the client sends nothing and keeps its end open, so EOF there
# is the link gone (the ssh client ended: Ctrl-C, killed, a dropped connection). On that EOF, and on SIGHUP,
# SIGINT or SIGTERM, the command's process group is killed. Exit: the command's status (128+N for a signal,
# 127/126 with env's words where it cannot be executed), 255 when the header is not there.
# Just before the command starts, the guard writes STARTED on its stderr (the client strips it): a command that
# exits 255 printing ssh's own words ("Host key verification failed.", an ssh of its own that failed) is then
# never taken for ssh failing to reach the host, and run a second time the usual way.
import os
import select
import signal
import sys

STARTED = b"\x1eremote-linkguard: started\n"  # remote.transport.direct.STARTED


def read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))  # never more than asked: what follows is the link's end
        if not chunk:
            return None
        data += chunk
    return data


def main():
    argv = sys.argv[1:]
    header = b""
    while not header.endswith(b"\n") and len(header) < 24:
        c = os.read(0, 1)
        if not c:
            sys.exit(255)  # the client went before it said anything: nothing was started
        header += c
    try:
        n = int(header)
    except ValueError:
        sys.stderr.write("remote linkguard: no stdin header\n")
        sys.exit(255)
    data = read_exactly(n)
    if data is None:
        sys.exit(255)
    os.write(2, STARTED)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    got = []
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, lambda s, _f: got.append(s))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.dup2(r, 0)
        for fd in (r, w, wake_r, wake_w):
            os.close(fd)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            why = "Permission denied" if isinstance(exc, PermissionError) else "No such file or directory"
            os.write(2, f"env: '{argv[0]}': {why}\n".encode())
            os._exit(126 if isinstance(exc, PermissionError) else 127)
    os.close(r)
    os.set_blocking(w, False)
    pending = memoryview(data)
    if not pending:
        os.close(w)
        w = -1
    linked = True
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            sys.exit(128 - code if code < 0 else code)
        # Take the signals seen so far and remove just those: one that lands after this line stays in `got`
        # for the next turn (a clear() after the check would drop it).
        seen = got[:]
        del got[:len(seen)]
        ended_by = next((s for s in seen if s != signal.SIGCHLD), None)
        if ended_by is not None:
            linked = False
        if not linked:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            sys.exit(128 + int(ended_by if ended_by is not None else signal.SIGHUP))
        wanted = [0, wake_r]
        ready, writable, _ = select.select(wanted, [w] if w >= 0 else [], [], 5.0)
        if wake_r in ready:
            os.read(wake_r, 256)
        if w in writable:
            try:
                pending = pending[os.write(w, pending):]
            except OSError:  # the command closed its stdin or ended: the rest is not wanted
                pending = pending[:0]
            if not pending:
                os.close(w)
                w = -1
        if 0 in ready:
            try:
                linked = bool(os.read(0, 4096))  # anything but EOF: ignored
            except OSError:
                linked = False


main()
