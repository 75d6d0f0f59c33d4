"""A persistent command runner inside the container: one `pct exec`, many commands.

Each plain command costs an SSH session (with the login shell's rc files), pct's start-up and
lxc-attach, about 160 ms on the lab, before it runs at all. The agent is started once per container
through `pct exec ... -- python3 -c AGENT` (stdlib only) and runs each command as its own child
(own process group, explicit environment and working directory, timeout enforced there), sending
its output back as framed messages over the one channel. Commands from several threads run at the
same time. When the agent cannot start (no python3 in the container), callers fall back to plain
`pct exec`.

Frames, both ways: a 4-byte big-endian length, then JSON. Requests:
{"i": id, "argv": [...], "env": {...}, "cwd": "...", "timeout": s|null, "stdin": base64|null}.
Replies: {"i": id, "k": "o"|"e", "d": base64} for output, {"i": id, "x": exit status} at the end.
"""

from __future__ import annotations

import base64
import json
import queue
import struct
import threading
import time

from .errors import CommandTimeout, ConnectError
from .transport import NotStarted, OutputCallback, Result

AGENT = r'''
import base64, json, os, selectors, signal, struct, subprocess, sys, threading, time
GRACE = 5
sel = selectors.DefaultSelector()
lock = threading.Lock()
procs = {}

def send(obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    with lock:
        while data:
            data = data[os.write(1, data):]

def finish(i):
    p = procs.pop(i)
    code = p["p"].wait()
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

os.set_blocking(0, False)
sel.register(0, selectors.EVENT_READ, None)
buf = b""
send({"i": 0, "ready": os.getpid()})
while True:
    timed = [p for p in procs.values() if p["deadline"] is not None]
    for key, _ in sel.select(0.1 if timed else None):
        if key.data is None:
            try:
                chunk = os.read(0, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                kill_all(); sys.exit(0)
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                n = struct.unpack(">I", buf[:4])[0]
                start(json.loads(buf[4:4 + n])); buf = buf[4 + n:]
            continue
        i, k = key.data
        chunk = os.read(key.fileobj.fileno(), 1 << 16)
        if chunk:
            send({"i": i, "k": k, "d": base64.b64encode(chunk).decode()})
        else:
            sel.unregister(key.fileobj); key.fileobj.close()
            procs[i]["open"] -= 1
            if procs[i]["open"] == 0:
                finish(i)
    now = time.monotonic()
    for p in timed:
        if p["term"] is None and now > p["deadline"]:
            p["term"] = now
            try: os.killpg(p["p"].pid, signal.SIGTERM)
            except OSError: pass
        elif p["term"] is not None and not p["killed"] and now > p["term"] + GRACE:
            p["killed"] = True
            try: os.killpg(p["p"].pid, signal.SIGKILL)
            except OSError: pass
'''


class Agent:
    """The controller's side: one stream to one container's agent, shared by all threads."""

    def __init__(self, stream, where: str):
        self.stream, self.where = stream, where
        self._send_lock = threading.Lock()
        self._pending: dict[int, queue.Queue] = {}
        self._next = 1
        self._ids = threading.Lock()
        self.dead: str | None = None
        self._ready = queue.Queue()
        threading.Thread(target=self._reader, daemon=True, name=f"agent-{where}").start()
        first = self._ready.get(timeout=60)
        if first is not None:
            raise ConnectError(where, f"{where}: the agent did not start: {first}")

    def _read_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.stream.read(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _reader(self) -> None:
        try:
            hello = json.loads(self._read_exact(struct.unpack(">I", self._read_exact(4))[0]))
            self._ready.put(None if "ready" in hello else str(hello))
            while True:
                msg = json.loads(self._read_exact(struct.unpack(">I", self._read_exact(4))[0]))
                q = self._pending.get(msg["i"])
                if q is not None:
                    q.put(msg)
        except (EOFError, OSError, ValueError) as exc:
            self.dead = self.stream.error_text() or f"agent stream ended ({type(exc).__name__})"
            self._ready.put(self.dead)
            for q in list(self._pending.values()):
                q.put(None)

    def run(self, argv, *, env: dict, cwd: str, timeout: float | None, stdin: bytes | None,
            on_output: OutputCallback | None, deadline: float | None) -> Result:
        if self.dead:
            raise NotStarted(self.where, f"{self.where}: agent gone: {self.dead}")
        with self._ids:
            i, self._next = self._next, self._next + 1
        q: queue.Queue = queue.Queue()
        self._pending[i] = q
        req = {"i": i, "argv": list(argv), "env": env, "cwd": cwd, "timeout": timeout,
               "stdin": base64.b64encode(stdin).decode() if stdin is not None else None}
        data = json.dumps(req).encode()
        start = time.monotonic()
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            try:
                with self._send_lock:
                    self.stream.write(struct.pack(">I", len(data)) + data)
            except (OSError, EOFError, ConnectError) as exc:
                # Nothing was started: the caller may run it again on a new agent.
                self.dead = self.dead or f"cannot write to the agent: {exc}"
                raise NotStarted(self.where, f"{self.where}: agent gone before running {argv[0]}: {exc}") from exc
            while True:
                left = None if deadline is None else max(0.0, deadline - (time.monotonic() - start))
                try:
                    msg = q.get(timeout=left)
                except queue.Empty:
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

    def alive(self) -> bool:
        return not self.dead and self.stream.alive()

    def close(self) -> None:
        self.stream.close()
