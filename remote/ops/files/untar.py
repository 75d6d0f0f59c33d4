"""A tar stream the container sent (untrusted), extracted into a fresh folder member by member: nothing
lands outside it, nothing is written through a symlink, no device node, fifo or setuid/setgid bit, no
group- or world-writable mode; each member refused is named, and the rest goes on. A member this machine
cannot write (a name too long for its filesystem, a full disk) stops the extraction with a TransferError
naming it, escaped: no OSError carries a container's file name to the terminal.

The policy is tarfile's `data` filter (PEP 706), applied to each member and wrapped so that a refusal is
recorded and the extraction goes on. Around it, what the filter leaves open: an absolute path is refused
(the filter would strip its `/` and write it), nothing is written through a symlink (a link this stream
made, even one pointing inside), hard links only to files extracted here, every link resolved again at
the end (`s -> .` then `t -> s/..` leads out only once both are there), and the user's umask applied.
Files are written here (O_EXCL, O_NOFOLLOW, in chunks), never by tarfile's own extraction.

tarfile has the filter from CPython 3.10.12, 3.11.4 and 3.12; 3.10.12 and 3.11.4 refuse some valid
relative symlinks (CPython issue 107845, fixed in 3.10.13 and 3.11.5). Before those (Debian 12's python3
is 3.11.2) the maintained `backports.tarfile` is used, declared for those versions in pyproject.toml.
"""

from __future__ import annotations

import os
import stat as statmod
import sys
import tarfile
from pathlib import Path

from ...errors import TransferError
from ...naming import printable
from .local import umask as current_umask
from .staging import outside
from .stream import CHUNK


def _tar_module():
    if sys.version_info >= (3, 11, 5) or (3, 10, 13) <= sys.version_info < (3, 11):
        return tarfile
    try:
        from backports import tarfile as backport  # type: ignore[import-untyped]  # backports.tarfile ships no py.typed
    except ImportError:
        if hasattr(tarfile, "data_filter"):  # a distribution's python that has the filter backported
            return tarfile
        raise
    return backport


tarlib = _tar_module()
TarError = tarlib.TarError  # what a broken or cut-off stream raises (besides EOFError)

DROPPED = "setuid/setgid bit dropped"  # the member is extracted, without the bit
LEADS_OUT = "its path leads out of the destination"
Refused = list[tuple[str, str]]  # (member path, why), in stream order


def extract(fileobj, root: Path, refused: Refused, *, mode: str = "r|", umask: int | None = None) -> None:
    """Extract a tar stream into the fresh folder `root`, member by member, refusing (into `refused`, as
    (path, why)) what could land outside it or is not a plain file, folder or link. Modes are the data
    filter's (no setuid/setgid, no group or world write), then masked with `umask` (default: this process's)."""
    mask = current_umask() if umask is None else umask
    gone: set[str] = set()  # refused links and folders: nothing is extracted below them
    real: set[str] = set()  # folders found to be real folders made here (one never becomes a link later)
    links: list[str] = []  # symlinks made here, resolved at the end
    with tarlib.open(fileobj=fileobj, mode=mode, errorlevel=2) as tar:
        for m in tar:
            name = os.path.normpath(m.name)
            if name == "." and m.isdir():
                continue
            above = next((p for p in _parents(name) if p in gone), None)
            try:
                why = f"below the refused {above}" if above else _extract_member(tar, m, root, name, real, mask)
            except OSError as exc:  # a name this filesystem cannot hold, a full disk: the member named, escaped
                raise TransferError(f"the member {shown(m.name)} cannot be written here: "
                                    f"{exc.strerror or type(exc).__name__}") from None
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


def shown(name: str, limit: int = 120) -> str:
    """A member's name as a message shows it: escaped (the container chose it), and cut short when long."""
    cut = name if len(name) <= limit else f"{name[:limit]}... ({len(name)} characters)"
    return printable(cut)


def file_mode(mode: int, umask: int | None = None) -> int:
    """The mode a regular file gets here that the container says has `mode`: the data filter's rule (no
    setuid, setgid or sticky bit, no group or world write; executable only when its owner may run it;
    its owner may read and write it), then masked with `umask` (default: this process's)."""
    info = tarlib.TarInfo("file")
    info.type, info.mode = tarlib.REGTYPE, mode & 0o7777
    safe = tarlib.data_filter(info, os.sep).mode
    return safe & ~(current_umask() if umask is None else umask)


def _refusal(m, name: str, exc: Exception) -> str:
    """Why the data filter refused member `m` (extracted as `name`), in the words the result names it with."""
    if isinstance(exc, tarlib.SpecialFileError):
        kind = ("a character device" if m.ischr() else "a block device" if m.isblk() else
                "a fifo" if m.isfifo() else "a special file")
        return f"{kind}, not created"
    if m.issym():
        plain = os.path.isabs(m.linkname) or outside(os.path.normpath(os.path.join(os.path.dirname(name),
                                                                                   m.linkname)))
        return f"a symlink out of the destination (-> {m.linkname}{'' if plain else ', through other links'}), " \
               "not created"
    if m.islnk():
        return f"a hard link to {m.linkname}, which is not a file extracted here"
    return LEADS_OUT


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


def _extract_member(tar, m, root: Path, name: str, real: set[str], mask: int) -> str | None:
    if outside(name) or "\0" in name:  # also an absolute one, which the data filter would write below root
        return LEADS_OUT
    why = folders(root, name, make=True, real=real)
    if why:
        return why
    try:
        safe = tarlib.data_filter(m, str(root))
    except tarlib.FilterError as exc:
        return _refusal(m, name, exc)
    target = root / name
    dropped = DROPPED if m.mode & (statmod.S_ISUID | statmod.S_ISGID) else None
    if m.isdir():  # the filter leaves a folder's mode to the system: the container's, without group/world write
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        target.mkdir(mode=0o700, exist_ok=True)
        os.chmod(target, ((m.mode & 0o755) & ~mask) | 0o700)
        return dropped
    if not (m.isreg() or m.issym() or m.islnk()):  # the filter refuses these already
        return _refusal(m, name, tarlib.SpecialFileError(m))
    if os.path.lexists(target):
        if target.is_dir() and not target.is_symlink():
            return "a folder of that name was already extracted"
        target.unlink()  # a later member of the same name replaces it; nothing is written through a link
    if m.issym():
        os.symlink(m.linkname, target)
        return None
    if m.islnk():
        link = os.path.normpath(m.linkname)
        source = root / link
        if outside(link) or folders(root, link, make=False) or not os.path.lexists(source) \
                or not statmod.S_ISREG(os.lstat(source).st_mode):
            return f"a hard link to {m.linkname}, which is not a file extracted here"
        os.link(source, target, follow_symlinks=False)
        return None
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        data = tar.extractfile(m)
        for chunk in iter(lambda: data.read(CHUNK), b""):
            out.write(chunk)
        os.fchmod(out.fileno(), safe.mode & ~mask)
    os.utime(target, (m.mtime, m.mtime), follow_symlinks=False)
    return dropped
