"""A single file, pushed or pulled through `<dest>.partial` beside its destination, resumed from what a
cut-off attempt left when its prefix hash matches, sha256 compared, then renamed into place."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from ...errors import TransferError
from ...naming import size
from ...results import Transfer
from ...shell import load
from ...transport.pct import Container
from .local import file_sha256, hash_prefix
from .stream import CHUNK, PARTIAL, STALL, Progress, check, probe, read_all, read_line, run_stream
from .untar import file_mode

NOT_A_FILE = 3  # pull_file.sh's exit status when there is no regular file at its path
HEADER = re.compile(r"(\d{1,20}) ([0-7]{1,6})\n")  # pull_file.sh's first line: "<size> <octal mode>"


def push(ct: Container, local: Path, dest: str, progress: Progress | None, mode: int | None,
               stall: float = STALL) -> Transfer:
    start = time.monotonic()
    total = local.stat().st_size
    mode = mode if mode is not None else local.stat().st_mode & 0o777
    if dest.endswith("/"):
        dest = dest + local.name
    if ct.dry:
        part = dest + PARTIAL
        ct.dry_comment(f"push {local} ({size(total)}) -> {dest}: streamed into {part}, sha256 compared, then renamed")
        ct.show_dry(ct.script_argv(load("push_file"), part, "0"))
        ct.show_dry(ct.script_argv(load("commit_file"), part, dest, f"{mode:o}"))
        return Transfer("push", str(local), dest, 0, 0, 0.0)
    found = probe(ct, dest, 0, dest + PARTIAL, "all")
    if found[0] == "d":
        dest = dest.rstrip("/") + "/" + local.name
        found = probe(ct, dest, 0, dest + PARTIAL, "all")
    part = dest + PARTIAL
    kind, have, their_sum = found[3], int(found[4]), found[5]
    offset, h = 0, hashlib.sha256()
    if kind == "f" and 0 < have <= total:
        prefix = hash_prefix(local, have)
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
    code, err = run_stream(ct, "push_file", part, str(offset), str(max(1, int(stall / 2))), send=send,
                            receive=lambda stream: got.extend(read_all(stream, limit=4096)), stall=stall,
                            wait=stall + total / 10e6)
    check(ct, "push_file", code, err, f"push of {local} to {dest} (it was left as it was)")
    want, landed = h.hexdigest(), got.decode().strip()
    if offset + sent != total or landed != want:
        ct.run(["rm", "-f", "--", part])
        raise TransferError(f"{ct.where}: push of {local} to {dest} did not verify (sha256 {landed or 'missing'} "
                            f"!= {want}): the partial file was removed and {dest} left as it was")
    ct.script(load("commit_file"), part, dest, f"{mode:o}", timeout=600)
    if progress and total == 0:
        progress(0, 0)
    return Transfer("push", str(local), dest, 1, total, time.monotonic() - start, sha256=want, sent=sent,
                    resumed_from=offset)


def pull(ct: Container, src: str, target: Path, progress: Progress | None, stall: float = STALL) -> Transfer:
    start = time.monotonic()
    target = Path(os.path.abspath(target))
    part = target.with_name(target.name + PARTIAL)
    target.parent.mkdir(parents=True, exist_ok=True)
    if part.is_symlink():
        part.unlink()  # never written through (a pulled tree may have left one of that name)
    have = part.stat().st_size if part.is_file() else 0
    offset = 0
    if have:
        kind, _size_, their_prefix = probe(ct, src, have)
        if kind == "f" and their_prefix == file_sha256(part, have):
            offset = have
    h = hashlib.sha256()
    state = {"total": 0, "sent": 0, "mode": 0o600}

    def receive(stream):
        header = HEADER.fullmatch(read_line(stream).decode("ascii", "replace"))
        if not header:
            return  # the script failed before sending: its exit status and stderr say why
        total = state["total"] = int(header[1])
        state["mode"] = int(header[2], 8)
        # Owner-only while it arrives (a key pulled half-way is no more readable than the whole one).
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (0 if offset else os.O_TRUNC), 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "r+b") as f:
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

    code, err = run_stream(ct, "pull_file", src, str(offset), receive=receive, wait=stall)
    check(ct, "pull_file", code, err, f"pull of {src} to {target} (it was left as it was)")
    want = err.splitlines()[-1].strip() if err else ""
    got = h.hexdigest()
    if offset + state["sent"] != state["total"] or got != want:
        part.unlink(missing_ok=True)
        raise TransferError(f"{ct.where}: pull of {src} to {target} did not verify (sha256 {got} != {want or 'missing'}): "
                            f"the partial file was removed and {target} left as it was")
    # The container's mode by tarfile's data filter (no setuid/setgid, no group or world write), under the umask.
    os.chmod(part, file_mode(state["mode"]))
    os.replace(part, target)
    return Transfer("pull", src, str(target), 1, state["total"], time.monotonic() - start, sha256=got,
                    sent=state["sent"], resumed_from=offset)
