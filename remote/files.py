"""Files and directory trees in and out of a container, each transfer verified by sha256.

Content is streamed through `pct exec` (stdin/stdout are binary-safe without a pty) rather than
staged on the host and copied with `pct push`: one round trip instead of three, no temporary
file on the host, no container config lock, and no trust in `pct push`'s exit status (it can
print an error and exit 0). The remote side writes to a temporary name, renames it into place
and reports the sha256 of what landed; a mismatch raises TransferError.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

from .errors import TransferError
from .pct import Container

_PUSH = r'''
dest=$1 mode=$2
mkdir -p -- "$(dirname -- "$dest")"
tmp=$(mktemp -- "$dest.remote-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
chmod "$mode" -- "$tmp"
mv -f -- "$tmp" "$dest"
trap - EXIT
sha256sum < "$dest" | cut -c1-64
'''

_PULL = r'''
sha256sum < "$1" | cut -c1-64 >&2
exec cat -- "$1"
'''

_MANIFEST = r'''
cd -- "$1"
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
'''

_PUSH_TREE = r'''
mkdir -p -- "$1"
tar -x --no-same-owner -C "$1" -f -
''' + _MANIFEST

_PULL_TREE = r'''
cd -- "$1"
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum >&2
exec tar -c -f - .
'''


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def push_bytes(ct: Container, data: bytes, dest: str, mode: int = 0o644) -> None:
    """Write `data` to `dest` in the container (parents created, atomic rename), verified."""
    result = ct.script(_PUSH, dest, f"{mode:o}", stdin=data, timeout=600)
    if ct.dry:
        return
    got = result.out.strip()
    if got != sha256(data):
        raise TransferError(f"{ct.where}: push to {dest} did not verify (sha256 {got or 'missing'} != {sha256(data)})")


def push_file(ct: Container, local: str | os.PathLike, dest: str, mode: int | None = None) -> None:
    path = Path(local)
    push_bytes(ct, path.read_bytes(), dest, mode if mode is not None else path.stat().st_mode & 0o777)


def pull_bytes(ct: Container, path: str) -> bytes:
    """The content of `path` in the container, verified."""
    result = ct.script(_PULL, path, timeout=600, mutates=False)
    want = result.err.strip().splitlines()[-1] if result.err.strip() else ""
    if want != sha256(result.stdout):
        raise TransferError(f"{ct.where}: pull of {path} did not verify (sha256 {sha256(result.stdout)} != {want})")
    return result.stdout


def _parse_manifest(text: str) -> dict[str, str]:
    manifest = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            manifest[os.path.normpath(name)] = digest
    return manifest


def _local_manifest(root: Path) -> dict[str, str]:
    return {os.path.normpath(os.path.join(".", str(p.relative_to(root)))): sha256(p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def push_tree(ct: Container, local: str | os.PathLike, dest: str) -> int:
    """Copy a local directory's contents into `dest` (merged), verified file by file. Returns file count."""
    root = Path(local)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(root.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(root)), recursive=False)
    result = ct.script(_PUSH_TREE, dest, stdin=buf.getvalue(), timeout=1800)
    if ct.dry:
        return 0
    want, got = _local_manifest(root), _parse_manifest(result.out)
    bad = [name for name, digest in want.items() if got.get(name) != digest]
    if bad:
        raise TransferError(f"{ct.where}: push of {root} to {dest} did not verify: {', '.join(bad[:5])}")
    return len(want)


def pull_tree(ct: Container, path: str, local: str | os.PathLike) -> int:
    """Copy the container directory `path` into the local directory `local`, verified."""
    result = ct.script(_PULL_TREE, path, timeout=1800, mutates=False)
    root = Path(local)
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(result.stdout), mode="r:") as tar:
        tar.extractall(root, filter="data")
    want, got = _parse_manifest(result.err), _local_manifest(root)
    bad = [name for name, digest in want.items() if got.get(name) != digest]
    if bad:
        raise TransferError(f"{ct.where}: pull of {path} did not verify: {', '.join(bad[:5])}")
    return len(want)
