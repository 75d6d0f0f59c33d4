"""A persistent command runner inside the container: one `pct exec`, many commands.

Each plain command costs an SSH session (with the login shell's rc files), pct's start-up and
lxc-attach, about 160 ms on the lab, before it runs at all. The agent is started once per container
through `pct exec ... -- python3 -I -S -c BOOT` (agent_argv: a loader that reads the program, AGENT, from
its stdin; stdlib only; on an SSH host through the host's stream mux, remote.transport.hostmux, so the
agents of a host share one session) and runs each command as its own child
(own process group, explicit environment and working directory, timeout enforced there), sending
its output back as framed messages over the one channel. Commands from several threads run at the
same time. When the agent cannot start (no python3 in the container), callers fall back to plain
`pct exec`.

Frames, both ways: a 4-byte big-endian length, then JSON. Requests:
{"i": id, "argv": [...], "env": {...}, "cwd": "...", "timeout": s|null, "stdin": base64|null}.
{"i": 0, "kill": id} kills that command's process group (its caller went away: remote.transport.keeper).
Replies: {"i": id, "k": "o"|"e", "d": base64} for output, {"i": id, "x": exit status} at the end.
Heartbeat: the controller sends {"i": 0, "ping": n} every PING_EVERY s, the agent answers
{"i": 0, "pong": n}. Each side treats a silence as the other being gone: the controller after SILENCE s
in which nothing came from the agent and none of its own writes moved on (a large request, such as
deploy's code bundle on stdin, is written in slices, and a slice the link took is a sign of life while
the pings wait behind it; on a silent link the writes stop moving once the buffers are full), giving
ConnectError to every waiting command, the agent after AGENT_SILENCE s, or a write that cannot go out
for as long; and the agent kills every child it started whenever it ends (EOF, EPIPE, silence, SIGHUP,
SIGTERM), so a lost controller leaves nothing of its commands behind.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from collections.abc import Callable

from ..errors import CommandTimeout, ConnectError
from . import NotStarted, OutputCallback, Result
from .framing import SERVE, Frames, Link

HANDSHAKE_TIMEOUT = 60.0  # seconds for the agent's first frame (pct exec and python3 start-up)
PING_EVERY = 5.0  # the controller pings the agent this often
SILENCE = 15.0  # nothing heard from the agent this long: the link is gone (before the SSH heartbeat notices)
WRITE_SLICE = 256 << 10  # a large frame goes out in slices this big, each one proof that the link moves
AGENT_SILENCE = 60  # the agent's side: nothing from the controller this long, it kills its children and exits
FRAMES = Frames(">I")  # the length, then JSON (the AGENT program's own framing)

AGENT = SERVE + r'''
import base64, json, select, struct, subprocess, threading  # and SERVE's: os, selectors, signal, sys, time
GRACE = 5
# SILENCE (SERVE's): nothing from the controller (its pings included) for this long, or a write that cannot
# go out for this long: the controller is gone (a killed process, a silent link). Then every child is
# killed, as on EOF.
lock = threading.Lock()
procs = {}

def send(obj):
    data = json.dumps(obj).encode()
    data = memoryview(struct.pack(">I", len(data)) + data)
    with lock:
        end = time.monotonic() + SILENCE
        while data:
            try:
                data = data[os.write(1, data):]
            except BlockingIOError:
                left = end - time.monotonic()
                if left <= 0:
                    raise Gone("the controller stopped reading")
                select.select([], [1], [], min(left, 1.0))

def finish(i):
    p = procs.pop(i)
    code = p["p"].returncode
    if p["term"] is not None:
        code = 137 if p["killed"] else 124
    elif code < 0:
        code = 128 - code
    send({"i": i, "x": code})

def start(req):
    i, argv, cwd = req["i"], req["argv"], req["cwd"]
    if not os.path.isdir(cwd):
        send({"i": i, "k": "e", "d": base64.b64encode(f"env: cannot change directory to '{cwd}': No such file or directory\n".encode()).decode()})
        send({"i": i, "x": 125}); return
    data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    try:
        p = subprocess.Popen(argv, cwd=cwd, env=req["env"], start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL)
    except OSError as exc:
        why = "Permission denied" if isinstance(exc, PermissionError) else "No such file or directory"
        send({"i": i, "k": "e", "d": base64.b64encode(f"env: '{argv[0]}': {why}\n".encode()).decode()})
        send({"i": i, "x": 126 if isinstance(exc, PermissionError) else 127}); return
    if data is not None:
        def feed():
            try:
                p.stdin.write(data)
            except OSError:
                pass
            finally:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        threading.Thread(target=feed, daemon=True).start()
    t = req.get("timeout")
    procs[i] = {"p": p, "open": 2, "deadline": time.monotonic() + t if t else None, "term": None, "killed": False}
    sel.register(p.stdout, selectors.EVENT_READ, (i, "o"))
    sel.register(p.stderr, selectors.EVENT_READ, (i, "e"))

def kill_all():
    for p in procs.values():
        try:
            os.killpg(p["p"].pid, signal.SIGKILL)
        except OSError:
            pass

def wait():
    # Poll often while a command has a deadline or has closed its pipes and is still to be reaped.
    busy = any(p["deadline"] is not None or p["open"] == 0 for p in procs.values())
    return 0.1 if busy else 1.0

def on_input(buf):
    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
        n = struct.unpack(">I", buf[:4])[0]
        req = json.loads(buf[4:4 + n]); buf = buf[4 + n:]
        if "ping" in req:
            send({"i": 0, "pong": req["ping"]})
        elif "kill" in req:  # its caller went away: the command goes too
            p = procs.get(req["kill"])
            if p is not None:
                try: os.killpg(p["p"].pid, signal.SIGKILL)
                except OSError: pass
        else:
            start(req)
    return buf

def on_pipe(key):
    i, k = key.data
    chunk = os.read(key.fileobj.fileno(), 1 << 16)
    if chunk:
        send({"i": i, "k": k, "d": base64.b64encode(chunk).decode()})
    else:
        sel.unregister(key.fileobj); key.fileobj.close()
        procs[i]["open"] -= 1

def after(last_in):
    now = time.monotonic()
    for i, p in list(procs.items()):
        # A child that closed both pipes may run on: its result waits for its exit (or its timeout),
        # never blocking the other commands.
        if p["open"] == 0 and p["p"].poll() is not None:
            finish(i)
        elif p["deadline"] is None:
            continue
        elif p["term"] is None and now > p["deadline"]:
            p["term"] = now
            try: os.killpg(p["p"].pid, signal.SIGTERM)
            except OSError: pass
        elif p["term"] is not None and not p["killed"] and now > p["term"] + GRACE:
            p["killed"] = True
            try: os.killpg(p["p"].pid, signal.SIGKILL)
            except OSError: pass
    return now - last_in > SILENCE

run(lambda: serve(lambda: send({"i": 0, "ready": os.getpid()}), on_input, on_pipe, after, wait, 1 << 16), kill_all)
'''


AGENT_SOURCE = AGENT.encode()
# What the container's command line holds: a loader that reads the agent's source (its length, the last argument)
# from stdin, before the frames, and runs it. The source itself is never an argument: `ps` in the container shows
# this line, not 6 kB of program, and nothing of the agent's text is in /proc/PID/cmdline.
BOOT = ("import os,sys\nn=int(sys.argv[-1]);s=b''\nwhile len(s)<n:\n c=os.read(0,n-len(s))\n if not c:sys.exit(0)\n"
        " s+=c\ndel n,c\nexec(compile(s,'remote-agent','exec'))")


def agent_argv(python: str = "python3", silence: float | str = AGENT_SILENCE) -> list[str]:
    """The command that starts the agent (`python3 -I -S -c BOOT SILENCE LENGTH`): Agent(..., source=AGENT_SOURCE)
    then writes the program on its stdin, where the loader reads it. -I -S: the agent needs only the standard
    library; no site-packages, .pth files or PYTHON* variables."""
    return [python, "-I", "-S", "-c", BOOT, str(silence), str(len(AGENT_SOURCE))]


class Agent(Link):
    """The controller's side: one stream to one container's agent, shared by all threads.

    A heartbeat thread pings the agent every `ping_every` seconds; nothing heard from it (pongs,
    output, results) for `silence` seconds means a silent link (a NAT or Wi-Fi drop leaves the TCP
    connection open with nobody behind it): the agent is declared dead, its stream closed, and every
    waiting command gets ConnectError, which the callers' reconnect and resume paths handle."""

    noun = "agent"

    def __init__(self, stream, where: str, *, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 ping_every: float = PING_EVERY, silence: float = SILENCE, source: bytes | None = None):
        """`source`: the program to write first, for a stream started with agent_argv() (None: the program is on
        the stream's command line already)."""
        super().__init__(stream, where)
        self.ping_every, self.silence = ping_every, silence
        self._send_lock = threading.Lock()
        self._pending: dict[int, queue.Queue] = {}
        self._next = 1
        self._ids = threading.Lock()
        self._state = threading.Lock()
        self.silent = False  # it died of silence: the connection under it is useless too
        self._closed = threading.Event()
        self._last_rx = time.monotonic()
        self._last_tx = 0.0  # when a slice of a write last went out (a large request passing)
        if source is not None:
            try:
                self.stream.write(source)
            except Exception as exc:
                self.dead = f"cannot write the agent's program: {exc or type(exc).__name__}"
                self.close()
                raise ConnectError(self.where, f"{self.where}: the agent did not start: {self.dead}") from exc
        self._start("the agent", handshake_timeout)
        threading.Thread(target=self._heartbeat, daemon=True, name=f"agent-heartbeat-{where}").start()

    def _read_frames(self) -> None:
        hello = json.loads(FRAMES.read(self.stream)[0])
        self._last_rx = time.monotonic()
        self._ready.put(None if "ready" in hello else str(hello))
        while True:
            msg = json.loads(FRAMES.read(self.stream)[0])
            self._last_rx = time.monotonic()
            q = self._pending.get(msg["i"])
            if q is not None:
                q.put(msg)

    def _lost(self, reason: str, silent: bool = False) -> None:
        """Declare the agent dead (once): wake every waiting command, close the stream."""
        with self._state:
            if self.dead is not None:
                return
            self.dead, self.silent = reason, silent
        self._ready.put(reason)
        for q in list(self._pending.values()):
            q.put(None)
        self.close()

    def _write(self, frame: dict) -> None:
        """Send one frame; any failure of the stream is a lost agent (ConnectError), whatever raised it."""
        view = memoryview(FRAMES.pack(data=json.dumps(frame).encode()))
        try:
            with self._send_lock:  # one frame at a time; its slices in order
                if len(view) <= WRITE_SLICE:  # pings and small requests: a buffer takes them, link or not
                    self.stream.write(view)
                for start in range(0, len(view), WRITE_SLICE) if len(view) > WRITE_SLICE else ():
                    self.stream.write(view[start:start + WRITE_SLICE])
                    self._last_tx = time.monotonic()
        except Exception as exc:
            self._lost(f"cannot write to the agent: {exc or type(exc).__name__}")
            raise ConnectError(self.where, f"{self.where}: agent gone: {self.dead}") from exc

    def _heartbeat(self) -> None:
        n, last_ping, pinging = 0, 0.0, [False]

        def ping(k: int) -> None:
            try:
                self._write({"i": 0, "ping": k})
            except ConnectError:
                pass
            finally:
                pinging[0] = False

        # Pings are written from their own thread: on a dead link a write can block, the check must not.
        while not self._closed.wait(min(1.0, self.ping_every)):
            now = time.monotonic()
            # Heard nothing, and nothing written moved on: a write the link takes is as good as a pong.
            if now - max(self._last_rx, self._last_tx) > self.silence:
                self._lost(f"no answer from the agent in {self.silence:g}s: the connection went silent "
                           "(a NAT or Wi-Fi drop?)", silent=True)
                return
            if now - last_ping >= self.ping_every and not pinging[0]:
                n, last_ping, pinging[0] = n + 1, now, True
                threading.Thread(target=ping, args=(n,), daemon=True).start()

    def kill(self, i: int) -> None:
        """SIGKILL the process group of command `i` (its caller went away); it ends as killed (137)."""
        try:
            self._write({"i": 0, "kill": i})
        except ConnectError:
            pass

    def run(self, argv, *, env: dict, cwd: str, timeout: float | None, stdin: bytes | None,
            on_output: OutputCallback | None, deadline: float | None,
            on_start: Callable[[int], None] | None = None) -> Result:
        if self.dead:
            raise NotStarted(self.where, f"{self.where}: agent gone: {self.dead}")
        with self._ids:
            i, self._next = self._next, self._next + 1
        q: queue.Queue = queue.Queue()
        self._pending[i] = q
        start = time.monotonic()
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            if self.dead:  # it died after the check above: nobody would wake this queue
                raise NotStarted(self.where, f"{self.where}: agent gone before running {argv[0]}: {self.dead}")
            try:
                self._write({"i": i, "argv": list(argv), "env": env, "cwd": cwd, "timeout": timeout,
                             "stdin": base64.b64encode(stdin).decode() if stdin is not None else None})
            except ConnectError as exc:
                # Nothing was started: the caller may run it again on a new agent.
                raise NotStarted(self.where, f"{self.where}: agent gone before running {argv[0]}: {self.dead}") from exc
            if on_start:
                on_start(i)  # from here, `kill(i)` stops it
            while True:
                left = None if deadline is None else max(0.0, deadline - (time.monotonic() - start))
                try:
                    msg = q.get(timeout=left)
                except queue.Empty:
                    assert deadline is not None  # q.get without a timeout never raises Empty
                    raise CommandTimeout(" ".join(argv), deadline, b"".join(err).decode("utf-8", "replace"),
                                         self.where) from None
                if msg is None:
                    raise ConnectError(self.where, f"{self.where}: agent gone while running {argv[0]}: {self.dead}")
                if "x" in msg:
                    return Result(tuple(argv), msg["x"], b"".join(out), b"".join(err), time.monotonic() - start)
                chunk = base64.b64decode(msg["d"])
                (out if msg["k"] == "o" else err).append(chunk)
                if on_output:
                    on_output("stdout" if msg["k"] == "o" else "stderr", chunk)
        finally:
            self._pending.pop(i, None)

    def close(self) -> None:
        self._closed.set()
        try:
            self.stream.close()
        except Exception:  # closing what is already broken: nothing more to do
            pass
