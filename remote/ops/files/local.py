"""Local files: sha256 in chunks, atomic writes, and the programs cached on the controller for containers."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...errors import TransferError
from .stream import CHUNK


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
    return hash_prefix(path, limit).hexdigest()


def hash_prefix(path, limit: int | None):
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


def umask() -> int:
    """This process's umask, read without changing it (os.umask sets it: a moment's race with other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old
