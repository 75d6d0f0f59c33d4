"""A tar stream the container sent (untrusted), extracted into a fresh folder member by member: nothing
lands outside it, nothing is written through a symlink, no device node, fifo or setuid/setgid bit; each
member refused is named, and the rest goes on."""

from __future__ import annotations

import os
import stat as statmod
import tarfile
from pathlib import Path

from .staging import outside
from .stream import CHUNK

DROPPED = "setuid/setgid bit dropped"  # the member is extracted, without the bit


def extract(fileobj, root: Path, refused: list[tuple[str, str]]) -> None:
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
                refused.append((name if not outside(name) else m.name, why))
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


def folders(root: Path, name: str, make: bool, real: set[str] | None = None) -> str | None:
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
    if outside(name) or "\0" in name:
        return "its path leads out of the destination"
    why = folders(root, name, make=True, real=real)
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
        if os.path.isabs(m.linkname) or outside(os.path.normpath(os.path.join(os.path.dirname(name), m.linkname))):
            return f"a symlink out of the destination (-> {m.linkname}), not created"
        os.symlink(m.linkname, target)
        return None
    if m.islnk():
        link = os.path.normpath(m.linkname)
        source = root / link
        if outside(link) or folders(root, link, make=False) or not os.path.lexists(source) \
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
