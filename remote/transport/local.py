"""A Transport on this machine (the controller is the Proxmox host itself): a subprocess per command,
stdout and stderr drained together, Ctrl-C passed on to the child's process group (a session of its own).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence

from ..errors import CommandTimeout, ConnectError, TransportError
from ..threads import ContextThread
from .base import Capabilities, Result, _check_argv
from .framing import STDERR_TAIL


class LocalTransport(Capabilities):
    """Runs on this machine: the controller is the Proxmox host itself."""

    can_stream = True

    def __init__(self, name: str = "local"):
        self.name = name

    def describe(self, argv: Sequence[str]) -> str:
        return shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None) -> Result:
        argv = _check_argv(argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            return Result(argv, 127, b"", f"{argv[0]}: command not found\n".encode(), 0.0)
        chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        failed: list[BaseException] = []

        def pump(name, stream):
            # Drain to the end whatever happens: a reader that stops leaves the child blocked on a full pipe.
            for chunk in iter(lambda: stream.read1(65536), b""):
                chunks[name].append(chunk)
                if on_output and not failed:
                    try:
                        on_output(name, chunk)
                    except BaseException as exc:
                        failed.append(exc)
                        _killpg(proc.pid, signal.SIGKILL)  # the caller gave up on this command

        readers = [ContextThread(target=pump, args=(n, s), daemon=True)
                   for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
        try:  # from the child's start: a Ctrl-C that comes while the readers start is passed on too
            for t in readers:
                t.start()
            if stdin is not None and proc.stdin is not None:  # a pipe, with stdin given
                try:
                    proc.stdin.write(stdin)
                except BrokenPipeError:
                    pass
                proc.stdin.close()
            try:
                code = proc.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise CommandTimeout(shlex.join(argv), deadline, where=self.name) from None
        except KeyboardInterrupt:
            # The child is in its own session (so a terminal's Ctrl-C does not reach it directly): pass it on.
            _interrupt(proc)
            raise
        for t in readers:
            t.join()
        if failed:
            raise failed[0]
        # A signal death is reported the way a shell would: 128 + N.
        code = 128 - code if code < 0 else code
        return Result(argv, code, b"".join(chunks["stdout"]), b"".join(chunks["stderr"]), time.monotonic() - start)

    def open_stream(self, argv: Sequence[str]) -> LocalStream:
        argv = _check_argv(argv)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0, start_new_session=True)
        except OSError as exc:
            raise TransportError(self.name, f"{self.name}: cannot run {argv[0]}: {exc}") from None
        return LocalStream(proc, argv)

    def close(self) -> None:
        pass


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _interrupt(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGINT to the child's process group, SIGKILL if it is still there after `grace` seconds."""
    _killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: no more grace
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class LocalStream:
    """A local child's stdin/stdout as a stream; stderr collected (a bounded tail) by a thread."""

    def __init__(self, proc: subprocess.Popen[bytes], argv: Sequence[str]):
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # all three PIPE
        self.proc, self.argv = proc, argv
        self._stdin, self._stdout, self._stderr = proc.stdin, proc.stdout, proc.stderr
        self._err = bytearray()
        self._errors = ContextThread(target=self._drain_stderr, daemon=True)
        self._errors.start()

    def _drain_stderr(self) -> None:
        for chunk in iter(lambda: self._stderr.read(65536), b""):
            self._err += chunk
            del self._err[:-STDERR_TAIL]

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[self._stdin.write(view):]
        except (OSError, ValueError) as exc:  # the child closed its stdin or exited
            raise ConnectError("local", f"the local command {self.argv[0]} stopped reading: {exc}") from exc

    def read(self, n: int) -> bytes:
        try:
            return os.read(self._stdout.fileno(), n)
        except (OSError, ValueError):
            return b""

    def close_stdin(self) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass

    def wait(self, timeout: float | None = None) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(shlex.join(self.argv), timeout or 0, self.error_text()) from None
        except KeyboardInterrupt:
            _interrupt(self.proc)
            raise
        self._errors.join(timeout=5)
        return 128 - code if code < 0 else code

    def error_text(self) -> str:
        return bytes(self._err).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close our ends; a child still running after that is killed (nobody is left to talk to it)."""
        for f in (self._stdin, self._stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

