"""A folder as one tar stream into a staging folder, whose per-file manifest must equal the source's
before it is moved (or merged) into place: pushed (the controller's GNU tar makes the stream), pulled
(extracted here by `untar.extract`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ...errors import ConnectError, TransferError, TransferPathError
from ...naming import printable
from ...results import Transfer
from ...shell import load
from ...transport.pct import Container
from .local import file_sha256
from .staging import move_into_place, remove, stage_for
from .stream import CHUNK, PARTIAL, STALL, Progress, check, read_all, read_line, run_stream
from .untar import DROPPED, TarError, extract


def walk(root: Path):
    """(path, arcname) of everything under root, sorted, folders before their contents; symlinks not followed."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(folder, root)
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(folder, name)
            yield path, os.path.normpath(os.path.join(rel, name))


def parse_manifest(data: bytes) -> dict[str, str]:
    """sha256sum -z output ("<sha>  ./<path>\\0" ...) as {normalized path: sha}."""
    manifest = {}
    for record in data.split(b"\0"):
        if record:
            digest, _, name = record.partition(b"  ")
            manifest[os.path.normpath(os.fsdecode(name))] = digest.decode()
    return manifest


def local_manifest(root: Path) -> dict[str, str]:
    return {arcname: file_sha256(path) for path, arcname in walk(root)
            if os.path.isfile(path) and not os.path.islink(path)}


def tar_size(root: Path) -> tuple[int, int]:
    """(bytes of file content, about the bytes of its tar stream) of a local folder, for progress."""
    content = stream = 1024
    for path, _ in walk(root):
        st = os.lstat(path)
        size = st.st_size if os.path.isfile(path) and not os.path.islink(path) else 0
        content += size
        stream += 512 + -(-size // 512) * 512
    return content - 1024, stream


class Counter:
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
# extracted here in Python (`extract`), member by member: as root, tar would keep setuid bits and make
# device nodes, and the container is not trusted.
NOT_A_FOLDER = 4  # push_tree.sh's exit status when the destination is there and is not a folder
_TAR_CREATE = ["tar", "-c", "-f", "-", "--sort=name", "--numeric-owner", "--owner=0", "--group=0"]


def push(ct: Container, root: Path, dest: str, progress: Progress | None,
               stall: float = STALL) -> Transfer:
    start = time.monotonic()
    dest = dest.rstrip("/") or "/"
    if ct.dry:
        stage = f"{dest}{PARTIAL} (or {dest}/.remote-push{PARTIAL} when {dest} is a folder)"
        ct.dry_comment(f"push {root}/ -> {dest}/: one tar stream into {stage}, manifests compared, then moved or merged")
        ct.show_dry(ct.script_argv(load("push_tree"), dest))
        ct.show_dry(ct.script_argv(load("commit_tree"), dest + PARTIAL, dest))
        return Transfer("push", str(root), dest, 0, 0, 0.0, kind="tree")
    total, estimate = tar_size(root)
    counter = Counter(progress, estimate)
    # Hashed before the stream, not beside it: a thread hashing small files holds the GIL in turns
    # with paramiko's and more than doubled the transfer. A file that changes between the two shows
    # up as a mismatch, never as a silent difference.
    want = local_manifest(root)
    tar = subprocess.Popen([*_TAR_CREATE, "-C", str(root), "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tar_out, tar_err = tar.stdout, tar.stderr
    assert tar_out is not None and tar_err is not None  # both PIPE

    def send(stream):
        for chunk in iter(lambda: tar_out.read(CHUNK), b""):
            stream.write(chunk)
            counter(len(chunk))

    got = bytearray()
    try:
        code, err = run_stream(ct, "push_tree", dest, send=send,
                                receive=lambda stream: got.extend(read_all(stream, limit=1 << 30)), stall=stall)
    finally:
        _end(tar)
    # The container's script ending early (a full disk, a destination that is a file) ends the local tar
    # by a broken pipe: then the script's status says why. Else a local tar that failed is the cause.
    if tar.returncode not in (0, -signal.SIGPIPE, -signal.SIGKILL) or (tar.returncode and not code):
        raise TransferError(f"tar of {root} failed: {tar_err.read().decode('utf-8', 'replace').strip()}",
                            command_status=tar.returncode)
    if code == NOT_A_FOLDER:
        raise TransferPathError(f"{ct.where}: cannot push the folder {root} to {dest}: {dest} is a file there, not "
                                "a folder (give a folder as the destination, or remove that file); nothing was "
                                "written", command_status=code)
    check(ct, "push_tree", code, err, f"push of {root} to {dest} (nothing was moved into place)")
    # The stage is where the container put it: inside dest when dest is a folder (a mount point's own
    # filesystem), else beside it.
    stage_bytes, _, manifest = bytes(got).partition(b"\0")
    stage = os.fsdecode(stage_bytes)
    if stage not in (dest + PARTIAL, f"{dest}/.remote-push{PARTIAL}"):
        raise TransferError(f"{ct.where}: push of {root} to {dest}: unexpected staging folder {stage!r}")
    verify(ct, want, parse_manifest(manifest), f"push of {root} to {dest}",
            lambda: ct.run(["rm", "-rf", "--", stage]), dest)
    ct.script(load("commit_tree"), stage, dest, timeout=1800)
    counter.finish()
    return Transfer("push", str(root), dest, len(want), total, time.monotonic() - start, kind="tree", sent=total)


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


def verify(ct: Container, want: dict[str, str], got: dict[str, str], what: str, discard, dest) -> None:
    if want == got:
        return
    bad = sorted(set(want) ^ set(got)) + sorted(n for n in set(want) & set(got) if want[n] != got[n])
    discard()
    raise TransferError(f"{ct.where}: {what} did not verify ({len(bad)} file(s) differ: {', '.join(map(printable, bad[:5]))}): "
                        f"the staging folder was removed and {dest} left as it was")


def pull(ct: Container, src: str, dest: Path, progress: Progress | None, stall: float = STALL) -> Transfer:
    start = time.monotonic()
    dest = Path(os.path.abspath(dest))
    if os.path.lexists(dest) and not dest.is_dir():
        raise TransferPathError(f"cannot pull the folder {src} to {dest}: {dest} is a file here, not a folder (give "
                                "a folder as the destination, or remove that file); nothing was written")
    stage = stage_for(dest)
    remove(stage)
    stage.mkdir(parents=True)
    state = {"manifest": b""}
    counter = Counter(progress, 1)
    refused: list[tuple[str, str]] = []

    def receive(stream):
        header = read_line(stream).split()
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
        reader = Reader(stream, counter)
        try:
            extract(reader, stage, refused)
        except (TarError, EOFError) as exc:  # a stream cut short or not a tar stream
            if not stream.alive():
                raise ConnectError(ct.transport.name, f"{ct.where}: connection lost during pull_tree") from None
            raise TransferError(f"{ct.where}: pull of {src}: its tar stream is broken ({exc}); nothing was moved "
                                f"into {dest}") from None
        except TransferError as exc:  # a member this machine cannot write (untar.extract names it, escaped)
            raise TransferError(f"{ct.where}: pull of {src}: {exc}; nothing was moved into {dest}") from None
        for _ in iter(lambda: reader.read(CHUNK), b""):
            pass  # tar's end-of-archive padding

    try:
        code, err = run_stream(ct, "pull_tree", src, receive=receive, wait=stall)
        check(ct, "pull_tree", code, err, f"pull of {src} to {dest} (nothing was moved into place)")
        skipped = {name for name, why in refused if why != DROPPED}
        want = {k: v for k, v in parse_manifest(state["manifest"]).items() if k not in skipped}
        verify(ct, want, local_manifest(stage), f"pull of {src} to {dest}", lambda: None, dest)
    except BaseException:
        remove(stage)
        raise
    total = sum(os.path.getsize(p) for p, a in walk(stage) if a in want)
    move_into_place(stage, dest, refused)
    counter.finish()
    return Transfer("pull", src, str(dest), len(want), total, time.monotonic() - start,
                    refused=tuple(f"{name}: {why}" for name, why in refused), kind="tree", sent=total)



class Reader:
    """A transfer stream as a file object for tarfile, counting what passes for progress."""

    def __init__(self, stream, counter: Counter):
        self.stream, self.counter = stream, counter

    def read(self, n: int = CHUNK) -> bytes:
        chunk = self.stream.read(n)
        self.counter(len(chunk))
        return chunk
