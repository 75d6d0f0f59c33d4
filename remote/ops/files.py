"""Files and directory trees in and out of a container: streamed, verified by sha256, resumable.

Content goes through a `pct exec ... -- bash -c <remote/sh/...>` of its own (stdin/stdout are
binary-safe without a pty), read and written in chunks while hashing, so a file of any size is never
held whole: not here, not in the agent. `pct push`/`pull` are not used: they need the file staged on
the host, hold the container's config lock and can exit 0 on failure (pve-container 6.1.10).

Nothing unverified reaches a destination. A file is written to `<dest>.partial` beside it, its
sha256 compared with the source's, then renamed into place; a push that was cut off continues from
what the partial file holds when its prefix hash matches the source, else starts over. A pull does
the same locally. A tree travels as one tar stream into a staging folder (`<dest>.partial`, or inside
`dest` when that is a folder already: on its filesystem, when it is a mount point), whose per-file
manifest must equal the source's before it is moved (or merged) into place.

What a container sends is untrusted (a polluted venv, hand-patched code, a hostile image): a pulled
tree is extracted here member by member (`_extract`), never by tar as root, and nothing lands outside
the destination: no absolute or `..` path, no symlink or hard link that points out of it, nothing
written through a symlink (one the same stream made, or one an earlier pull left), no device node,
fifo or setuid/setgid bit. What was refused is named in the result, and the rest still verifies.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat as statmod
import sys
import tarfile
import tempfile
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..naming import printable
from ..errors import CommandError, ConnectError, TransferError
from ..shell import load
from ..transport.pct import Container

log = logging.getLogger(__name__)

CHUNK = 1 << 20
PARTIAL = ".partial"  # suffix of the file or staging folder beside a destination
STALL = 60.0  # seconds in which a push writes nothing: stalled, taken as a lost link (and retried)
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


@dataclass(frozen=True)
class TransferStats:
    """What a push or pull moved."""

    direction: str  # "push" | "pull"
    kind: str  # "file" | "tree"
    src: str
    dest: str
    total: int  # bytes of file content now at the destination
    sent: int  # bytes of file content that travelled this time (less than total after a resume)
    files: int
    seconds: float
    resumed_from: int = 0
    attempts: int = 1
    sha256: str | None = None  # of a single file
    refused: tuple[str, ...] = ()  # members of a pulled tree not written, each "<path>: <why>"

    @property
    def mb_per_s(self) -> float:
        return self.sent / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def render(self) -> str:
        what = f"{self.files} file(s)" if self.kind == "tree" else "1 file"
        resumed = f", resumed at {_size(self.resumed_from)}" if self.resumed_from else ""
        tries = f", {self.attempts} attempts" if self.attempts > 1 else ""
        text = printable(f"{self.direction}ed {what}, {_size(self.total)}, {self.src} -> {self.dest} in "
                         f"{self.seconds:.1f}s ({self.mb_per_s:.1f} MB/s{resumed}{tries}), verified by sha256")
        if self.refused:  # the container's member names and link targets: one line each, escapes shown
            text += f"\n{len(self.refused)} refused (not written):\n" + "\n".join(f"  {printable(r)}" for r in self.refused)
        return text


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class ProgressPrinter:
    """Progress on stderr: bytes/total, percent and MB/s, at most every `every` seconds (one line when not a tty)."""

    def __init__(self, label: str, stream=None, every: float | None = None, clock=time.monotonic):
        self.label, self.stream, self.clock = label, stream or sys.stderr, clock
        self.tty = self.stream.isatty()
        self.every = every if every is not None else (0.5 if self.tty else 5.0)
        self.start = self.last = clock()
        self.finished = False

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.finished or (now - self.last < self.every and done < total):
            return
        self.last, self.finished = now, done >= total
        rate = done / 1e6 / max(now - self.start, 1e-6)
        pct = f" {100 * done / total:3.0f}%" if total else ""
        line = f"{self.label}: {_size(done)} / {_size(total)}{pct}  {rate:.1f} MB/s"
        self.stream.write(("\r" + line + ("\n" if done >= total else "")) if self.tty else line + "\n")
        self.stream.flush()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cached_binary(name: str, version: str, machine: str, fetch: Callable[[], tuple[bytes, str]]) -> tuple[Path, str]:
    """A program for the container's architecture (uv, py-spy) cached on the controller, and its sha256.

    `fetch` returns its checked bytes and where they came from. The sha256 of what was fetched is recorded
    beside the binary, both written atomically, and rechecked on every use: a torn or changed cache is
    fetched again."""
    if not re.fullmatch(r"[A-Za-z0-9_]{1,32}", machine):  # what the container said (uname -m): never a path
        raise TransferError(f"the container's architecture {machine[:40]!r} is not one (from uname -m)")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "remote" / f"{name}-{version}-{machine}"
    binary, recorded = cache / name, cache / f"{name}.sha256"
    try:
        want = recorded.read_text().split()[0]
        if sha256(binary.read_bytes()) == want:
            return binary, want
    except (OSError, IndexError):
        pass
    cache.mkdir(parents=True, exist_ok=True)
    data, origin = fetch()
    digest = sha256(data)
    write_atomic(binary, data, 0o755)
    write_atomic(recorded, f"{digest}  {origin}\n".encode(), 0o644)  # last: the binary is trusted from here
    return binary, digest


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write beside `path` and rename over it: a reader sees the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def file_sha256(path: str | os.PathLike, limit: int | None = None) -> str:
    """The sha256 of a local file (of its first `limit` bytes), read in chunks."""
    return _hash_prefix(path, limit).hexdigest()


def _hash_prefix(path, limit: int | None):
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h


# -- the public entry points -------------------------------------------------------------------------------

def push(ct: Container, src: str | os.PathLike, dest: str, *, progress: Progress | None = None,
         attempts: int = 3, mode: int | None = None, sleep: Callable[[float], None] = time.sleep,
         stall: float = STALL) -> TransferStats:
    """Copy a local file or folder to `dest` in the container, verified; retried (resumed) on a lost connection.

    A file lands at `dest` (inside it when `dest` is a folder or ends in /); a folder's contents are
    merged into `dest`. No byte moving for `stall` seconds is a lost link, even one that never says so."""
    local = Path(src)
    if local.is_dir():
        return _retrying(lambda: _push_tree(ct, local, dest, progress, stall), attempts, sleep)
    if not local.is_file():
        raise TransferError(f"cannot push {src}: no such file or folder")
    return _retrying(lambda: _push_file(ct, local, dest, progress, mode, stall), attempts, sleep)


def pull(ct: Container, src: str, dest: str | os.PathLike, *, progress: Progress | None = None,
         attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> TransferStats:
    """Copy a file or folder of the container to the local `dest`, verified; retried (resumed) on a lost connection.

    A file lands at `dest` (inside it when `dest` is a folder); a folder's contents are merged into `dest`."""
    if ct.dry:
        ct.echo(f"# pull {src} -> {dest}: a file through {PARTIAL} and a rename, a folder as one tar stream")
        ct.echo(ct.transport.describe(ct.script_argv(load("pull_file"), src, "0")))
        return TransferStats("pull", "file", src, str(dest), 0, 0, 0, 0.0)

    def attempt() -> TransferStats:
        kind = _probe(ct, src, 0)[0]
        if kind == "d":
            return _pull_tree(ct, src, Path(dest), progress)
        if kind != "f":
            raise TransferError(f"{ct.where}: cannot pull {src}: " + ("no such file or folder" if kind == "n" else
                                                                      "not a regular file or folder"))
        target = Path(dest)
        if target.is_dir() or str(dest).endswith("/"):
            target = target / os.path.basename(src.rstrip("/"))
        return _pull_file(ct, src, target, progress)

    return _retrying(attempt, attempts, sleep)


def _retrying(attempt: Callable[[], TransferStats], attempts: int, sleep) -> TransferStats:
    """Run a transfer again after a lost connection (each attempt resumes what the last one left)."""
    import dataclasses

    import tenacity

    retry = tenacity.Retrying(retry=tenacity.retry_if_exception_type(ConnectError),
                              stop=tenacity.stop_after_attempt(max(1, attempts)),
                              wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=10),
                              before_sleep=tenacity.before_sleep_log(log, logging.WARNING), sleep=sleep, reraise=True)
    for n, state in enumerate(retry, 1):
        with state:
            stats = attempt()
        if not state.retry_state.outcome.failed:
            return dataclasses.replace(stats, attempts=n)
    raise AssertionError("unreachable")


def _probe(ct: Container, *pairs: str | int) -> list[str]:
    """xfer_probe.sh for (path, prefix) pairs: [kind, size, sha, kind, size, sha, ...]."""
    out = ct.script(load("xfer_probe"), *map(str, pairs), timeout=600, mutates=False).out
    return out.split()


class _Watched:
    """A stream under a watch: when no byte is written for `limit` seconds (the far side stopped reading,
    over a link that still answers heartbeats or one that never says it is gone), or the deadline set by
    `allow` passes, the stream is closed, so that the blocked write or read ends and the retry starts."""

    def __init__(self, stream, limit: float | None):
        import threading

        self.stream, self.limit, self.stalled = stream, limit, False
        self.last = time.monotonic()
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="transfer-stall-watch").start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            if self.limit is not None and time.monotonic() - self.last > self.limit:
                self.stalled = True
                log.warning("nothing moved for %gs: the transfer is stalled; closing its stream", self.limit)
                self.stream.close()
                return

    def allow(self, seconds: float | None) -> None:
        """From now on, `seconds` in all (None: no bound) before the stream is taken as stalled."""
        self.last, self.limit = time.monotonic(), seconds

    def done(self) -> None:
        self._done.set()

    def write(self, data: bytes) -> None:
        self.stream.write(data)
        self.last = time.monotonic()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _run_stream(ct: Container, script: str, *args: str, send=None, receive=None, stall: float | None = None,
                wait: float | None = None) -> tuple[int, str]:
    """Run a transfer script: `send(stream)` writes stdin, `receive(stream)` reads stdout; (exit status, stderr).

    Nothing written for `stall` seconds while sending, or no exit status within `wait` seconds after
    the data, is a lost link (ConnectError: the caller's retry resumes), even where the link never says so."""
    raw = ct.open_stream(load(script), *args)
    stream = _Watched(raw, stall)

    def lost(what: str) -> ConnectError:
        why = (f"nothing moved for {stream.limit:g}s" if stream.stalled else "connection lost")
        return ConnectError(ct.transport.name, f"{ct.where}: {why} during {script} ({what}); taken as a lost link")

    try:
        if send is not None:
            try:
                send(stream)
            except ConnectError:
                if stream.stalled:
                    raise lost("sending") from None
                # The script may have ended early (a full disk, a bad path): then its status says why.
                code = _exit_status(raw)
                if code in (None, -1, 0):
                    raise
                return code, raw.error_text()
        stream.allow(wait)
        raw.close_stdin()
        if receive is not None:
            receive(raw)
        if stream.stalled:
            raise lost("waiting for its result")
        code = raw.wait()
        if code == -1:
            raise lost("waiting for its exit status")
        return code, raw.error_text()
    finally:
        stream.done()
        raw.close()


def _exit_status(stream) -> int | None:
    from ..errors import CommandTimeout

    try:
        return stream.wait(timeout=5)
    except CommandTimeout:
        return None


def _check(ct: Container, script: str, code: int, err: str) -> None:
    if code != 0:
        raise CommandError(f"bash {script}.sh", code, err, ct.where)


# -- files ---------------------------------------------------------------------------------------------------

def _push_file(ct: Container, local: Path, dest: str, progress: Progress | None, mode: int | None,
               stall: float = STALL) -> TransferStats:
    start = time.monotonic()
    total = local.stat().st_size
    mode = mode if mode is not None else local.stat().st_mode & 0o777
    if dest.endswith("/"):
        dest = dest + local.name
    if ct.dry:
        part = dest + PARTIAL
        ct.echo(f"# push {local} ({_size(total)}) -> {dest}: streamed into {part}, sha256 compared, then renamed")
        ct.echo(ct.transport.describe(ct.script_argv(load("push_file"), part, "0")))
        ct.echo(ct.transport.describe(ct.script_argv(load("commit_file"), part, dest, f"{mode:o}")))
        return TransferStats("push", "file", str(local), dest, 0, 0, 0, 0.0)
    probe = _probe(ct, dest, 0, dest + PARTIAL, "all")
    if probe[0] == "d":
        dest = dest.rstrip("/") + "/" + local.name
        probe = _probe(ct, dest, 0, dest + PARTIAL, "all")
    part = dest + PARTIAL
    kind, have, their_sum = probe[3], int(probe[4]), probe[5]
    offset, h = 0, hashlib.sha256()
    if kind == "f" and 0 < have <= total:
        prefix = _hash_prefix(local, have)
        if prefix.hexdigest() == their_sum:
            offset, h = have, prefix  # what a cut-off attempt left is a prefix of this file: continue from there
    sent = 0

    def send(stream):
        nonlocal sent
        with open(local, "rb") as f:
            f.seek(offset)
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
                stream.write(chunk)
                sent += len(chunk)
                if progress:
                    progress(offset + sent, total)

    got = bytearray()
    # The container ends an earlier attempt's stalled writer after half of `stall`, before this side
    # would take the wait for it as a lost link; hashing what landed is bounded by its size.
    code, err = _run_stream(ct, "push_file", part, str(offset), str(max(1, int(stall / 2))), send=send,
                            receive=lambda stream: got.extend(_read_all(stream, limit=4096)), stall=stall,
                            wait=stall + total / 10e6)
    _check(ct, "push_file", code, err)
    want, landed = h.hexdigest(), got.decode().strip()
    if offset + sent != total or landed != want:
        ct.run(["rm", "-f", "--", part])
        raise TransferError(f"{ct.where}: push of {local} to {dest} did not verify (sha256 {landed or 'missing'} "
                            f"!= {want}): the partial file was removed and {dest} left as it was")
    ct.script(load("commit_file"), part, dest, f"{mode:o}", timeout=600)
    if progress and total == 0:
        progress(0, 0)
    return TransferStats("push", "file", str(local), dest, total, sent, 1, time.monotonic() - start, offset,
                         sha256=want)


def _read_all(stream, limit: int) -> bytes:
    data = bytearray()
    for chunk in iter(lambda: stream.read(65536), b""):
        data += chunk
        if len(data) > limit:
            raise TransferError(f"unexpected output from a transfer script: {bytes(data[:200])!r}")
    return bytes(data)


def _read_line(stream, limit: int = 4096) -> bytes:
    """One line from a stream, read a byte at a time so nothing after it is consumed."""
    line = bytearray()
    while not line.endswith(b"\n"):
        c = stream.read(1)
        if not c or len(line) > limit:
            break
        line += c
    return bytes(line)


def _pull_file(ct: Container, src: str, target: Path, progress: Progress | None) -> TransferStats:
    start = time.monotonic()
    target = Path(os.path.abspath(target))
    part = target.with_name(target.name + PARTIAL)
    target.parent.mkdir(parents=True, exist_ok=True)
    if part.is_symlink():
        part.unlink()  # never written through (a pulled tree may have left one of that name)
    have = part.stat().st_size if part.is_file() else 0
    offset = 0
    if have:
        kind, _size_, their_prefix = _probe(ct, src, have)
        if kind == "f" and their_prefix == file_sha256(part, have):
            offset = have
    h = hashlib.sha256()
    state = {"total": 0, "sent": 0}

    def receive(stream):
        header = _read_line(stream)
        if not header.strip().isdigit():
            return  # the script failed before sending: its exit status and stderr say why
        total = state["total"] = int(header)
        with open(part, "r+b" if offset else "wb") as f:
            if offset:
                for chunk in iter(lambda: f.read(min(CHUNK, offset - f.tell())), b""):
                    h.update(chunk)
                f.truncate(offset)
            for chunk in iter(lambda: stream.read(CHUNK), b""):
                h.update(chunk)
                f.write(chunk)
                state["sent"] += len(chunk)
                if progress:
                    progress(offset + state["sent"], total)

    code, err = _run_stream(ct, "pull_file", src, str(offset), receive=receive)
    _check(ct, "pull_file", code, err)
    want = err.splitlines()[-1].strip() if err else ""
    got = h.hexdigest()
    if offset + state["sent"] != state["total"] or got != want:
        part.unlink(missing_ok=True)
        raise TransferError(f"{ct.where}: pull of {src} to {target} did not verify (sha256 {got} != {want or 'missing'}): "
                            f"the partial file was removed and {target} left as it was")
    os.chmod(part, 0o644)
    os.replace(part, target)
    return TransferStats("pull", "file", src, str(target), state["total"], state["sent"], 1,
                         time.monotonic() - start, offset, sha256=got)


# -- trees ---------------------------------------------------------------------------------------------------

def _walk(root: Path):
    """(path, arcname) of everything under root, sorted, folders before their contents; symlinks not followed."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(folder, root)
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(folder, name)
            yield path, os.path.normpath(os.path.join(rel, name))


def _parse_manifest(data: bytes) -> dict[str, str]:
    """sha256sum -z output ("<sha>  ./<path>\\0" ...) as {normalized path: sha}."""
    manifest = {}
    for record in data.split(b"\0"):
        if record:
            digest, _, name = record.partition(b"  ")
            manifest[os.path.normpath(os.fsdecode(name))] = digest.decode()
    return manifest


def _local_manifest(root: Path) -> dict[str, str]:
    return {arcname: file_sha256(path) for path, arcname in _walk(root)
            if os.path.isfile(path) and not os.path.islink(path)}


def _tar_size(root: Path) -> tuple[int, int]:
    """(bytes of file content, about the bytes of its tar stream) of a local folder, for progress."""
    content = stream = 1024
    for path, _ in _walk(root):
        st = os.lstat(path)
        size = st.st_size if os.path.isfile(path) and not os.path.islink(path) else 0
        content += size
        stream += 512 + -(-size // 512) * 512
    return content - 1024, stream


class _Counter:
    """Progress over a tar stream whose length is only estimated."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress and n:
            self.progress(min(self.done, self.total - 1), self.total)

    def finish(self) -> None:
        if self.progress:
            self.progress(self.total, self.total)


# The controller's own GNU tar makes the streams it pushes (as fast as the container's). What it pulls is
# extracted here in Python (`_extract`), member by member: as root, tar would keep setuid bits and make
# device nodes, and the container is not trusted.
_TAR_CREATE = ["tar", "-c", "-f", "-", "--sort=name", "--numeric-owner", "--owner=0", "--group=0"]


def _push_tree(ct: Container, root: Path, dest: str, progress: Progress | None,
               stall: float = STALL) -> TransferStats:
    start = time.monotonic()
    dest = dest.rstrip("/") or "/"
    if ct.dry:
        stage = f"{dest}{PARTIAL} (or {dest}/.remote-push{PARTIAL} when {dest} is a folder)"
        ct.echo(f"# push {root}/ -> {dest}/: one tar stream into {stage}, manifests compared, then moved or merged")
        ct.echo(ct.transport.describe(ct.script_argv(load("push_tree"), dest)))
        ct.echo(ct.transport.describe(ct.script_argv(load("commit_tree"), dest + PARTIAL, dest)))
        return TransferStats("push", "tree", str(root), dest, 0, 0, 0, 0.0)
    total, estimate = _tar_size(root)
    counter = _Counter(progress, estimate)
    # Hashed before the stream, not beside it: a thread hashing small files holds the GIL in turns
    # with paramiko's and more than doubled the transfer. A file that changes between the two shows
    # up as a mismatch, never as a silent difference.
    want = _local_manifest(root)
    tar = subprocess.Popen([*_TAR_CREATE, "-C", str(root), "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(stream):
        for chunk in iter(lambda: tar.stdout.read(CHUNK), b""):
            stream.write(chunk)
            counter(len(chunk))

    got = bytearray()
    try:
        code, err = _run_stream(ct, "push_tree", dest, send=send,
                                receive=lambda stream: got.extend(_read_all(stream, limit=1 << 30)), stall=stall)
    finally:
        _end(tar)
    if tar.returncode != 0:
        raise TransferError(f"tar of {root} failed: {tar.stderr.read().decode('utf-8', 'replace').strip()}")
    _check(ct, "push_tree", code, err)
    # The stage is where the container put it: inside dest when dest is a folder (a mount point's own
    # filesystem), else beside it.
    stage, _, manifest = bytes(got).partition(b"\0")
    stage = os.fsdecode(stage)
    if stage not in (dest + PARTIAL, f"{dest}/.remote-push{PARTIAL}"):
        raise TransferError(f"{ct.where}: push of {root} to {dest}: unexpected staging folder {stage!r}")
    _verify(ct, want, _parse_manifest(manifest), f"push of {root} to {dest}",
            lambda: ct.run(["rm", "-rf", "--", stage]), dest)
    ct.script(load("commit_tree"), stage, dest, timeout=1800)
    counter.finish()
    return TransferStats("push", "tree", str(root), dest, total, total, len(want), time.monotonic() - start)


def _end(proc: subprocess.Popen) -> None:
    """Wait for a local tar; kill it when the transfer stopped half-way."""
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _verify(ct: Container, want: dict[str, str], got: dict[str, str], what: str, discard, dest) -> None:
    if want == got:
        return
    bad = sorted(set(want) ^ set(got)) + sorted(n for n in set(want) & set(got) if want[n] != got[n])
    discard()
    raise TransferError(f"{ct.where}: {what} did not verify ({len(bad)} file(s) differ: {', '.join(map(printable, bad[:5]))}): "
                        f"the staging folder was removed and {dest} left as it was")


def _pull_tree(ct: Container, src: str, dest: Path, progress: Progress | None) -> TransferStats:
    start = time.monotonic()
    dest = Path(os.path.abspath(dest))
    stage = _stage_for(dest)
    _remove(stage)
    stage.mkdir(parents=True)
    state = {"manifest": b""}
    counter = _Counter(progress, 1)
    refused: list[tuple[str, str]] = []

    def receive(stream):
        header = _read_line(stream).split()
        if len(header) != 2:
            return  # the script failed before sending: its exit status and stderr say why
        size, counter.total = int(header[0]), int(header[1])
        manifest = bytearray()
        while len(manifest) < size:
            chunk = stream.read(min(CHUNK, size - len(manifest)))
            if not chunk:
                break
            manifest += chunk
        state["manifest"] = bytes(manifest)
        reader = _Reader(stream, counter)
        try:
            _extract(reader, stage, refused)
        except (tarfile.TarError, EOFError) as exc:  # a stream cut short or not a tar stream
            if not stream.alive():
                raise ConnectError(ct.transport.name, f"{ct.where}: connection lost during pull_tree") from None
            raise TransferError(f"{ct.where}: pull of {src}: its tar stream is broken ({exc}); nothing was moved "
                                f"into {dest}") from None
        for _ in iter(lambda: reader.read(CHUNK), b""):
            pass  # tar's end-of-archive padding

    try:
        code, err = _run_stream(ct, "pull_tree", src, receive=receive)
        _check(ct, "pull_tree", code, err)
        skipped = {name for name, why in refused if why != DROPPED}
        want = {k: v for k, v in _parse_manifest(state["manifest"]).items() if k not in skipped}
        _verify(ct, want, _local_manifest(stage), f"pull of {src} to {dest}", lambda: None, dest)
    except BaseException:
        _remove(stage)
        raise
    total = sum(os.path.getsize(p) for p, a in _walk(stage) if a in want)
    _move_into_place(stage, dest, refused)
    counter.finish()
    return TransferStats("pull", "tree", src, str(dest), total, total, len(want), time.monotonic() - start,
                         refused=tuple(f"{name}: {why}" for name, why in refused))


def _stage_for(dest: Path) -> Path:
    """Where a pulled tree is staged: inside an existing destination folder (so that it is on the same
    filesystem when the folder is a mount point), else beside the destination."""
    if dest.is_dir():
        return dest / (".remote-pull" + PARTIAL)
    return dest.with_name(dest.name + PARTIAL)


def _remove(path: Path) -> None:
    """Delete a file, symlink (never what it points at) or folder, if there."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


class _Reader:
    """A transfer stream as a file object for tarfile, counting what passes for progress."""

    def __init__(self, stream, counter: "_Counter"):
        self.stream, self.counter = stream, counter

    def read(self, n: int = CHUNK) -> bytes:
        chunk = self.stream.read(n)
        self.counter(len(chunk))
        return chunk


DROPPED = "setuid/setgid bit dropped"  # the member is extracted, without the bit


def _outside(name: str) -> bool:
    return os.path.isabs(name) or name == ".." or name.startswith("../")


def _extract(fileobj, root: Path, refused: list[tuple[str, str]]) -> None:
    """Extract a tar stream into the fresh folder `root`, member by member, refusing (into `refused`, as
    (path, why)) what could land outside it or is not a plain file, folder or link."""
    gone: set[str] = set()  # refused links and folders: nothing is extracted below them
    real: set[str] = set()  # folders found to be real folders made here (one never becomes a link later)
    links: list[str] = []  # symlinks made here, resolved at the end
    with tarfile.open(fileobj=fileobj, mode="r|", errorlevel=2) as tar:
        for m in tar:
            name = os.path.normpath(m.name)
            if name == "." and m.isdir():
                continue
            above = next((p for p in _parents(name) if p in gone), None)
            why = f"below the refused {above}" if above else _extract_member(tar, m, root, name, real)
            if why and why != DROPPED:
                gone.add(name)
            if why:
                refused.append((name if not _outside(name) else m.name, why))
            elif m.issym():
                links.append(name)
    # A link's text can stay inside while the links it passes through lead out (`s -> .`, `t -> s/..`),
    # also through links made after it: each is resolved once everything is there, and removed if it leads out.
    top = os.path.realpath(root)
    for name in links:
        target = root / name
        if os.path.islink(target) and os.path.commonpath([top, os.path.realpath(target)]) != top:
            refused.append((name, f"a symlink out of the destination (-> {os.readlink(target)}, through other "
                                  "links), removed"))
            target.unlink()


def _parents(name: str):
    while "/" in name:
        name = name.rsplit("/", 1)[0]
        yield name


def _folders(root: Path, name: str, make: bool, real: set[str] | None = None) -> str | None:
    """Why `name`'s folders below root are not all real folders (a symlink or a file on the way), or None;
    missing ones are made when `make`. `real`: folders already found real (skipped, and added to)."""
    parent = name.rpartition("/")[0]
    if not parent or (real is not None and parent in real):
        return None
    folder = root
    for part in parent.split("/"):
        folder = folder / part
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            if not make:
                return f"{os.path.relpath(folder, root)} does not exist"
            os.mkdir(folder, 0o755)
            continue
        if statmod.S_ISLNK(st.st_mode):
            return f"it would be written through the symlink {os.path.relpath(folder, root)}"
        if not statmod.S_ISDIR(st.st_mode):
            return f"{os.path.relpath(folder, root)} is not a folder"
    if real is not None:
        real.add(parent)
    return None


def _extract_member(tar: tarfile.TarFile, m: tarfile.TarInfo, root: Path, name: str, real: set[str]) -> str | None:
    if _outside(name) or "\0" in name:
        return "its path leads out of the destination"
    why = _folders(root, name, make=True, real=real)
    if why:
        return why
    target = root / name
    if m.isdir():
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        target.mkdir(mode=0o700, exist_ok=True)
        os.chmod(target, (m.mode & 0o777) | 0o700)
        return DROPPED if m.mode & (statmod.S_ISUID | statmod.S_ISGID) else None
    if not (m.isreg() or m.issym() or m.islnk()):
        kind = ("a character device" if m.ischr() else "a block device" if m.isblk() else
                "a fifo" if m.isfifo() else "a special file")
        return f"{kind}, not created"
    if os.path.lexists(target):
        if target.is_dir() and not target.is_symlink():
            return "a folder of that name was already extracted"
        target.unlink()  # a later member of the same name replaces it; nothing is written through a link
    if m.issym():
        if os.path.isabs(m.linkname) or _outside(os.path.normpath(os.path.join(os.path.dirname(name), m.linkname))):
            return f"a symlink out of the destination (-> {m.linkname}), not created"
        os.symlink(m.linkname, target)
        return None
    if m.islnk():
        link = os.path.normpath(m.linkname)
        source = root / link
        if _outside(link) or _folders(root, link, make=False) or not os.path.lexists(source) \
                or not statmod.S_ISREG(os.lstat(source).st_mode):
            return f"a hard link to {m.linkname}, which is not a file extracted here"
        os.link(source, target)
        return None
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        data = tar.extractfile(m)
        for chunk in iter(lambda: data.read(CHUNK), b""):
            out.write(chunk)
        os.fchmod(out.fileno(), m.mode & 0o777)
    os.utime(target, (m.mtime, m.mtime), follow_symlinks=False)
    return DROPPED if m.mode & (statmod.S_ISUID | statmod.S_ISGID) else None


def _move_into_place(stage: Path, dest: Path, refused: list[tuple[str, str]] | None = None) -> None:
    """Rename the staging folder to dest, or merge it into an existing dest (same-named files replaced).
    Nothing is written through a symlink that is already in dest (an earlier pull's): that part is
    refused and named."""
    refused = refused if refused is not None else []
    if not dest.exists() and not dest.is_symlink():
        os.replace(stage, dest)
        return
    if not dest.is_dir():
        _remove(stage)
        raise TransferError(f"{dest} exists and is not a folder")
    for folder, dirs, files_ in os.walk(stage):
        rel = os.path.relpath(folder, stage)
        target = dest / rel
        for name in list(dirs):
            here, there = os.path.join(folder, name), target / name
            if os.path.islink(here):
                dirs.remove(name)
                files_.append(name)
            elif there.is_symlink() or (os.path.lexists(there) and not there.is_dir()):
                dirs.remove(name)
                what = "a symlink" if there.is_symlink() else "a file"
                refused.append((os.path.normpath(os.path.join(rel, name)),
                                f"{there} is {what}: not written through or replaced by a folder (remove it and pull "
                                "again)"))
            elif not there.exists():
                there.mkdir()
        for name in files_:
            there = target / name
            if there.is_dir() and not there.is_symlink():
                refused.append((os.path.normpath(os.path.join(rel, name)), f"{there} is a folder: not replaced"))
                continue
            _replace(os.path.join(folder, name), there)
    _remove(stage)


def _replace(src: str, dst: Path) -> None:
    """os.replace, also across filesystems (a mount point under the destination): copied beside, then renamed."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        import errno

        if exc.errno != errno.EXDEV:
            raise
        tmp = dst.with_name(dst.name + PARTIAL)
        _remove(tmp)
        if os.path.islink(src):
            os.symlink(os.readlink(src), tmp)
        else:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)


def inside(root: Path, rel: str, what: str) -> Path:
    """root/rel for a path the container named (a run id, an output): refused with a TransferError naming
    it when it is absolute, leads out with `..`, is or passes through a symlink (or a file) below root; the
    folders on the way are made."""
    name = os.path.normpath(rel.lstrip("/")) if rel else ""
    if not name or name == "." or _outside(name) or "\0" in name:
        raise TransferError(f"{what} {rel!r} refused: it leads out of {root}")
    folder = root
    for i, part in enumerate(name.split("/")):
        folder = folder / part
        if folder.is_symlink():
            raise TransferError(f"{what} {rel!r} refused: {folder} is a symlink, never written through (remove it "
                                "and pull again)")
        if i < name.count("/"):
            if folder.exists() and not folder.is_dir():
                raise TransferError(f"{what} {rel!r} refused: {folder} is a file (remove it and pull again)")
            folder.mkdir(exist_ok=True)
    return folder


# -- the earlier API, kept for its callers (deploy, warmup) ----------------------------------------------------

def push_bytes(ct: Container, data: bytes, dest: str, mode: int = 0o644) -> None:
    """Write small `data` to `dest` in the container in one message (parents created, atomic rename), verified."""
    result = ct.script(load("push_bytes"), dest, f"{mode:o}", stdin=data, timeout=600)
    if ct.dry:
        return
    got = result.out.strip()
    if got != sha256(data):
        raise TransferError(f"{ct.where}: push to {dest} did not verify (sha256 {got or 'missing'} != {sha256(data)})")


def push_file(ct: Container, local: str | os.PathLike, dest: str, mode: int | None = None) -> None:
    """Stream a local file to `dest` (exactly that path), verified."""
    _retrying(lambda: _push_file(ct, Path(local), dest, None, mode), 3, time.sleep)


def pull_bytes(ct: Container, path: str) -> bytes:
    """The content of a small file `path` in the container, verified."""
    result = ct.script(load("pull_bytes"), path, timeout=600, mutates=False)
    want = result.err.strip().splitlines()[-1] if result.err.strip() else ""
    if want != sha256(result.stdout):
        raise TransferError(f"{ct.where}: pull of {path} did not verify (sha256 {sha256(result.stdout)} != {want})")
    return result.stdout


def push_tree(ct: Container, local: str | os.PathLike, dest: str) -> int:
    """Copy a local directory's contents into `dest` (merged), verified file by file. Returns the file count."""
    return _retrying(lambda: _push_tree(ct, Path(local), dest, None), 3, time.sleep).files


def pull_tree(ct: Container, path: str, local: str | os.PathLike) -> int:
    """Copy the container directory `path` into the local directory `local` (merged), verified. Returns the count."""
    return _retrying(lambda: _pull_tree(ct, path, Path(local), None), 3, time.sleep).files
