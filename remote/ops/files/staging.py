"""Here, on the controller: where a pulled tree is staged, how it is moved or merged into place (never
through a symlink already there), and paths the container names, joined below a root or refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import TransferError
from .stream import PARTIAL


def stage_for(dest: Path) -> Path:
    """Where a pulled tree is staged: inside an existing destination folder (so that it is on the same
    filesystem when the folder is a mount point), else beside the destination."""
    if dest.is_dir():
        return dest / (".remote-pull" + PARTIAL)
    return dest.with_name(dest.name + PARTIAL)


def remove(path: Path) -> None:
    """Delete a file, symlink (never what it points at) or folder, if there."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)



def outside(name: str) -> bool:
    return os.path.isabs(name) or name == ".." or name.startswith("../")



def move_into_place(stage: Path, dest: Path, refused: list[tuple[str, str]] | None = None) -> None:
    """Rename the staging folder to dest, or merge it into an existing dest (same-named files replaced).
    Nothing is written through a symlink that is already in dest (an earlier pull's): that part is
    refused and named."""
    refused = refused if refused is not None else []
    if not dest.exists() and not dest.is_symlink():
        os.replace(stage, dest)
        return
    if not dest.is_dir():
        remove(stage)
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
    remove(stage)


def _replace(src: str, dst: Path) -> None:
    """os.replace, also across filesystems (a mount point under the destination): copied beside, then renamed."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        import errno

        if exc.errno != errno.EXDEV:
            raise
        tmp = dst.with_name(dst.name + PARTIAL)
        remove(tmp)
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
    if not name or name == "." or outside(name) or "\0" in name:
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
