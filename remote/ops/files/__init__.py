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
tree is extracted here member by member (`untar.extract`), never by tar as root, and nothing lands outside
the destination: no absolute or `..` path, no symlink or hard link that points out of it, nothing
written through a symlink (one the same stream made, or one an earlier pull left), no device node,
fifo or setuid/setgid bit. What was refused is named in the result, and the rest still verifies.

The jobs, one module each: `onefile` (a file's push and pull, resumed), `tree` (a folder as one tar
stream, manifests compared), `untar` (what of an untrusted tar stream is written, and how), `staging`
(staging folders here, the merge into place, paths the container names), `stream` (the transfer
scripts' streams: stall watch, retries, exit status), `stats` (what moved, progress), `local` (local
hashes, atomic writes, cached programs). This module is the face: push, pull and the small-file API.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ...errors import TransferError, TransferPathError
from ...results import Transfer
from ...shell import load
from ...transport.pct import Container
from . import onefile, tree
from .local import cached_binary, file_sha256, sha256, write_atomic  # noqa: F401 -- the package's API
from .staging import inside  # noqa: F401
from .stats import ProgressPrinter  # noqa: F401
from .stream import CHUNK, PARTIAL, STALL, Progress, probe, retrying  # noqa: F401

# -- the public entry points -------------------------------------------------------------------------------

def push(ct: Container, src: str | os.PathLike, dest: str, *, progress: Progress | None = None,
         attempts: int = 3, mode: int | None = None, sleep: Callable[[float], None] = time.sleep,
         stall: float = STALL) -> Transfer:
    """Copy a local file or folder to `dest` in the container, verified; retried (resumed) on a lost connection.

    A file lands at `dest` (inside it when `dest` is a folder or ends in /); a folder's contents are
    merged into `dest`. No byte moving for `stall` seconds is a lost link, even one that never says so."""
    local = Path(src)
    if local.is_dir():
        return retrying(lambda: tree.push(ct, local, dest, progress, stall), attempts, sleep)
    if not local.is_file():
        raise TransferPathError(f"cannot push {src}: no such file or folder here")
    return retrying(lambda: onefile.push(ct, local, dest, progress, mode, stall), attempts, sleep)


def pull(ct: Container, src: str, dest: str | os.PathLike, *, progress: Progress | None = None,
         attempts: int = 3, sleep: Callable[[float], None] = time.sleep, stall: float = STALL) -> Transfer:
    """Copy a file or folder of the container to the local `dest`, verified; retried (resumed) on a lost connection.

    A file lands at `dest` (inside it when `dest` is a folder); a folder's contents are merged into `dest`.
    No byte arriving for `stall` seconds is a lost link (a stopped sender, a link that never says so)."""
    if ct.dry:
        ct.dry_comment(f"pull {src} -> {dest}: a file through {PARTIAL} and a rename, a folder as one tar stream")
        ct.show_dry(ct.script_argv(load("pull_file"), src, "0"))
        return Transfer("pull", src, str(dest), 0, 0, 0.0)

    def attempt() -> Transfer:
        kind = probe(ct, src, 0)[0]
        if kind == "d":
            return tree.pull(ct, src, Path(dest), progress, stall)
        if kind != "f":
            raise TransferPathError(f"{ct.where}: cannot pull {src}: " + (
                "no such file or folder" if kind == "n" else "not a regular file or folder"))
        target = Path(dest)
        if target.is_dir() or str(dest).endswith("/"):
            target = target / os.path.basename(src.rstrip("/"))
        return onefile.pull(ct, src, target, progress, stall)

    return retrying(attempt, attempts, sleep)


def pull_if_there(ct: Container, src: str, dest: str | os.PathLike, *, progress: Progress | None = None,
                  attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> Transfer | None:
    """Pull the file `src` to exactly `dest` as `pull` does, in one streamed command; None (and nothing
    written) when the container has no regular file there."""
    try:
        return retrying(lambda: onefile.pull(ct, src, Path(dest), progress), attempts, sleep)
    except TransferError as exc:
        if exc.command_status == onefile.NOT_A_FILE:
            return None
        raise


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
    retrying(lambda: onefile.push(ct, Path(local), dest, None, mode), 3, time.sleep)


def pull_bytes(ct: Container, path: str) -> bytes:
    """The content of a small file `path` in the container, verified."""
    result = ct.script(load("pull_bytes"), path, timeout=600, mutates=False)
    want = result.err.strip().splitlines()[-1] if result.err.strip() else ""
    if want != sha256(result.stdout):
        raise TransferError(f"{ct.where}: pull of {path} did not verify (sha256 {sha256(result.stdout)} != {want})")
    return result.stdout


def push_tree(ct: Container, local: str | os.PathLike, dest: str) -> int:
    """Copy a local directory's contents into `dest` (merged), verified file by file. Returns the file count."""
    return retrying(lambda: tree.push(ct, Path(local), dest, None), 3, time.sleep).files


def pull_tree(ct: Container, path: str, local: str | os.PathLike) -> int:
    """Copy the container directory `path` into the local directory `local` (merged), verified. Returns the count."""
    return retrying(lambda: tree.pull(ct, path, Path(local), None), 3, time.sleep).files
