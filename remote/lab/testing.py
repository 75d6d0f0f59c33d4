"""FakeTransport: a scripted transport for unit tests. It raises on any command it was not told to expect."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..transport import Capabilities, Result


@dataclass
class Expect:
    """One expected command: `match` is an exact argv, or a predicate over it."""

    match: Sequence[str] | Callable[[tuple[str, ...]], bool]
    exit_code: int = 0
    stdout: bytes | str = b""
    stderr: bytes | str = b""
    raises: BaseException | None = None

    def matches(self, argv: tuple[str, ...]) -> bool:
        return self.match(argv) if callable(self.match) else tuple(self.match) == argv


@dataclass
class FakeTransport(Capabilities):
    can_stream = True  # open_stream: the next expected command as a stream
    expected: list[Expect] = field(default_factory=list)
    name: str = "fake"
    calls: list[tuple[tuple[str, ...], bytes | None]] = field(default_factory=list)

    def describe(self, argv) -> str:
        return "fake: " + shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = tuple(argv)
        self.calls.append((argv, stdin))
        if not self.expected:
            raise AssertionError(f"unexpected command: {shlex.join(argv)}")
        exp = self.expected.pop(0)
        if not exp.matches(argv):
            raise AssertionError(f"expected {exp.match!r}, got: {shlex.join(argv)}")
        if exp.raises:
            raise exp.raises
        out = exp.stdout.encode() if isinstance(exp.stdout, str) else exp.stdout
        err = exp.stderr.encode() if isinstance(exp.stderr, str) else exp.stderr
        if on_output:
            if out:
                on_output("stdout", out)
            if err:
                on_output("stderr", err)
        return Result(argv, exp.exit_code, out, err, 0.0)

    def open_stream(self, argv) -> FakeStream:
        """The next expected command as a stream: its stdout to read, what is written kept in `.written`."""
        result = self.run(argv)
        return FakeStream(result.stdout, result.stderr, result.exit_code)

    def close(self) -> None:
        pass

    def assert_done(self) -> None:
        assert not self.expected, f"commands expected but never run: {[e.match for e in self.expected]}"


def inner_argv(argv: Sequence[str], timed: bool | None = None) -> tuple[str, ...]:
    """The container-side argv of a `pct exec ... -- env ... <argv>` command (wrappers removed).

    `timed` says whether a `timeout -k G T` wrapper is there; None guesses from the text, which a
    command that is itself `timeout -k ...` would fool."""
    argv = list(argv)
    rest = argv[argv.index("--") + 1:]
    assert rest[:2] == ["env", "-C"], rest
    i = 3
    while "=" in rest[i]:
        i += 1
    if timed if timed is not None else rest[i:i + 2] == ["timeout", "-k"]:
        i += 4
    return tuple(rest[i:])


class FakeStream:
    """A finished command's output served as a Stream."""

    def __init__(self, stdout: bytes, stderr: bytes = b"", exit_code: int = 0):
        self._out, self._err, self._code = bytearray(stdout), stderr, exit_code
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def read(self, n: int) -> bytes:
        chunk = bytes(self._out[:n])
        del self._out[:n]
        return chunk

    def close_stdin(self) -> None:
        pass

    def wait(self, timeout=None) -> int:
        return self._code

    def error_text(self) -> str:
        return self._err.decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


@dataclass
class CountingTransport(Capabilities):
    """A transport that answers from `answer(argv) -> (exit_code, stdout, stderr)` and counts what a real one
    would cost: `connections` (made on the first command, again after close) and `calls` (round trips)."""

    name: str
    answer: Callable[[tuple[str, ...]], tuple[int, bytes | str, bytes | str]]
    calls: list[tuple[str, ...]] = field(default_factory=list)
    connections: int = 0
    _open: bool = False

    def describe(self, argv) -> str:
        return f"{self.name}: " + shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = tuple(argv)
        if not self._open:
            self.connections += 1
            self._open = True
        self.calls.append(argv)
        code, out, err = self.answer(argv)
        out = out.encode() if isinstance(out, str) else out
        err = err.encode() if isinstance(err, str) else err
        if on_output:
            if out:
                on_output("stdout", out)
            if err:
                on_output("stderr", err)
        return Result(argv, code, out, err, 0.0)

    def close(self) -> None:
        self._open = False


@dataclass
class FakeCluster:
    """A Proxmox cluster as seen from its nodes' `pvesh` and `pct` (for unit tests and the bench): `placement`
    says which node holds each container; `transport(host)` is a CountingTransport of that node (a
    Session's transport_factory). pct on a node sees only its own containers, as Proxmox's does."""

    placement: dict[int, str]
    name: str = "c1"
    running: set[int] | None = None  # None: all running
    transports: dict[str, CountingTransport] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)  # host entry -> the node it really is (else node: or its name)
    down: set[str] = field(default_factory=set)  # nodes whose cluster service (pmxcfs) is down: pvesh fails there

    def transport(self, host) -> CountingTransport:
        node = self.nodes.get(host.name) or host.node or host.name
        t = CountingTransport(host.name, lambda argv: self.answer(node, argv))
        self.transports[host.name] = t
        return t

    def state(self, ctid: int) -> str:
        return "running" if self.running is None or ctid in self.running else "stopped"

    def answer(self, node: str, argv: tuple[str, ...]) -> tuple[int, str, str]:
        import json

        words = list(argv[2:]) if argv[:2] == ("sudo", "-n") else list(argv)
        prog = words[0].rsplit("/", 1)[-1]
        if prog == "uname" and words[1:] == ["-n"]:
            return 0, f"{node}.lan\n", ""  # the host name; Proxmox's node name is its first label
        if prog == "pvesh" and node in self.down:  # pvesh as root on a node without pmxcfs (exit 255)
            return 255, "", ("ipcc_send_rec[1] failed: Connection refused\nipcc_send_rec[2] failed: Connection refused\n"
                             "ipcc_send_rec[3] failed: Connection refused\n"
                             "Unable to load access control list: Connection refused\n")
        if prog == "pvesh" and words[1:3] == ["get", "/cluster/status"]:
            known = sorted({*self.placement.values(), *self.nodes.values(), node})
            return 0, json.dumps([{"type": "cluster", "id": "cluster", "name": self.name, "nodes": len(known),
                                   "quorate": 1}] + [{"type": "node", "id": f"node/{n}", "name": n, "online": 1,
                                                      "local": int(n == node), "nodeid": i + 1}
                                                     for i, n in enumerate(known)]), ""
        if prog == "pvesh" and words[1:3] == ["get", "/cluster/resources"]:
            return 0, json.dumps([{"id": f"lxc/{c}", "type": "lxc", "vmid": c, "node": n, "status": self.state(c)}
                                  for c, n in sorted(self.placement.items())]), ""
        if prog == "pct" and words[1] == "list":
            mine = sorted(c for c, n in self.placement.items() if n == node)
            table = "".join(f"{c:<10} {self.state(c):<10} {'':<12} {'ct' + str(c):<20}\n" for c in mine)
            return 0, (f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}\n" + table) if mine else "", ""
        if prog == "pct" and len(words) > 2 and words[2].isdigit():
            ctid = int(words[2])
            if self.placement.get(ctid) != node:
                return 255, "", f"Configuration file 'nodes/{node}/lxc/{ctid}.conf' does not exist\n"
            if words[1] == "status":
                return 0, f"status: {self.state(ctid)}\n", ""
            return 0, "", ""
        return 127, "", f"{prog}: not answered by FakeCluster\n"

    def calls(self) -> dict[str, int]:
        return {name: len(t.calls) for name, t in self.transports.items()}

    def connections(self) -> dict[str, int]:
        return {name: t.connections for name, t in self.transports.items()}


class Recording(Capabilities):
    """Wraps a real transport and records every command it runs: how many round trips a step takes, on the
    lab (the tests' and bench's counting transport)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name, self.host = inner.name, inner.host  # its streams are not recorded: none declared

    def run(self, argv, **kw):
        self.calls.append(list(argv))
        return self.inner.run(argv, **kw)

    def describe(self, argv):
        return self.inner.describe(argv)

    def close(self):
        self.inner.close()
