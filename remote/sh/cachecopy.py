# The container's side of a compile-cache copy (remote/ops/cachecopy.py), standard library only:
#   list FOLDER   one JSON object: the passport's text and {relative path: size} of every cache file
#   send FOLDER   reads a JSON list of relative paths (one line) on stdin, writes each file as a frame:
#                 a JSON header line {"path", "size", "mode"}, the bytes, a line with their sha256;
#                 then {"end": true}. A path that is not a plain file inside FOLDER is skipped: every
#                 component is opened without following a symlink (a job may have made a folder of
#                 the cache a link to /root/.ssh), and nothing whose real path leaves FOLDER is read.
#   recv FOLDER [BYTES]  reads those frames; each file is written under FOLDER/.remote-incoming/, fsynced,
#                 checked against its sha256, then linked into place: torch sees the whole file or
#                 none, and an existing file (or link) is never replaced. Its folders are opened (made
#                 where missing) one by one with O_NOFOLLOW, as send does: a path with a folder that is
#                 a symlink is refused (one line on stderr) and the copy goes on; nothing is created
#                 outside FOLDER. Prints {"written", "bytes", "present", "failed_checksum", "refused"}.
#                 The sizes the sender announces are bounded before a byte is written: all together by
#                 BYTES (what the listing said of the files asked for), each by the disk's free space less
#                 RESERVE; past either the copy stops (exit 4, one line), whole files already in place.
#                 A folder of the cache on another file system than the staging folder (EXDEV: a mount
#                 point inside it) gets the file staged beside it instead, then linked into place.
# Of tmp/ (the jobs' TMPDIR) only inductor's precompiled C++ headers are sent. The staging folder is not
# a path torch reads; what an interrupted copy left there is removed by the
# next recv (those files were never in place). Nothing in place is ever deleted.
import errno
import glob
import hashlib
import json
import os
import shutil
import stat
import sys

STAGING = ".remote-incoming"
SKIP = {STAGING, "tmp", "passport.json"}  # top level: staging, the jobs' TMPDIR, the passport
CHUNK = 1 << 20


def precompiled_header(parts):
    """tmp/torchinductor_<user>/precompiled_headers/<name>: inductor's C++ precompiled headers, which it keeps
    under the jobs' TMPDIR (tmp/) whatever its cache folder is; the one part of tmp/ that is a cache."""
    return (len(parts) == 4 and parts[0] == "tmp" and parts[1].startswith("torchinductor_")
            and parts[2] == "precompiled_headers")


def inside(folder, rel):
    """The absolute path of `rel` in folder, or None when it is not a plain relative path in it."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or (parts[0] in SKIP and not precompiled_header(parts)):
        return None
    return os.path.join(folder, *parts)


def real_inside(folder, rel):
    """Is FOLDER/rel's real path FOLDER's own real path + rel (no component a symlink, nothing outside)?"""
    real = os.path.realpath(folder)
    return os.path.realpath(os.path.join(real, rel)) == os.path.join(real, rel)


def open_inside(folder, rel):
    """A read fd of the plain file FOLDER/rel, each component opened with O_NOFOLLOW relative to the one
    before (no symlink can be swapped in between a check and the open); OSError otherwise. O_NONBLOCK: a
    FIFO put there does not hang the send."""
    parts = rel.split("/")
    fd = os.open(os.path.realpath(folder), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def list_(folder):
    files = {}
    for root, dirs, names in os.walk(folder):
        rel_root = os.path.relpath(root, folder)
        if rel_root == ".":
            dirs[:] = [d for d in dirs if d not in SKIP]
        for n in names:
            rel = n if rel_root == "." else f"{rel_root}/{n}"
            if rel_root == "." and n in SKIP:
                continue
            try:
                st = os.lstat(os.path.join(root, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files[rel] = st.st_size
    for pch in sorted(glob.glob(os.path.join(glob.escape(folder), "tmp", "torchinductor_*", "precompiled_headers", "*"))):
        if not real_inside(folder, os.path.relpath(pch, folder)):
            continue  # glob follows links: a precompiled_headers (or tmp) that is a link leads out
        try:
            st = os.lstat(pch)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            files[os.path.relpath(pch, folder)] = st.st_size
    json.dump({"passport": read_passport(folder), "files": files}, sys.stdout)


def read_passport(folder):
    """passport.json's text (its first MiB), or None: not followed where it is a symlink, not waited on where
    it is a FIFO or a device (O_NONBLOCK), not read unless it is a plain file."""
    try:
        fd = open_inside(folder, "passport.json")
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) < 1 << 20:
            chunk = os.read(fd, (1 << 20) - len(data))
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def send(folder):
    wanted = json.loads(sys.stdin.readline() or "[]")
    out = sys.stdout.buffer
    for rel in wanted:
        path = inside(folder, rel)
        if path is None:
            continue
        try:
            fd = open_inside(folder, rel)
        except OSError:
            continue  # gone since the listing (torch never deletes, but a user may), or a link
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                continue
            out.write((json.dumps({"path": rel, "size": st.st_size, "mode": st.st_mode & 0o755}) + "\n").encode())
            h, left = hashlib.sha256(), st.st_size
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:  # shrank while read: pad, and the receiver's sha256 check refuses it
                    chunk = b"\0" * min(CHUNK, left)
                    h.update(b"torn")
                h.update(chunk)
                out.write(chunk)
                left -= len(chunk)
            out.write((h.hexdigest() + "\n").encode())
    out.write(b'{"end": true}\n')
    out.flush()


def read_exact(inp, n):
    data = inp.read(n)
    if len(data) != n:
        raise EOFError
    return data


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def open_dir(fd, part, create):
    """An fd of the folder `part` in the folder fd, never through a symlink (ELOOP or ENOTDIR then);
    `create`: made first where it is missing."""
    try:
        return os.open(part, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(part, 0o777, dir_fd=fd)  # mkdir never follows a symlink: one there is EEXIST
    except FileExistsError:
        pass
    return os.open(part, DIR_FLAGS, dir_fd=fd)


def parent_inside(root, parts):
    """An fd of the folder that holds root/parts: each folder opened relative to the one before with
    O_NOFOLLOW and made where missing, so nothing is created or written outside root (a folder swapped
    for a link between a check and the write is refused too); OSError when one is a link or a file."""
    fd = os.dup(root)
    try:
        for part in parts[:-1]:
            nxt = open_dir(fd, part, create=True)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_staging(root, folder):
    """An fd of a fresh, empty FOLDER/.remote-incoming; ValueError (one line) where the name is taken by a
    symlink or anything but a folder: a link there would put the staged files, and their removal, outside."""
    try:
        st = os.stat(STAGING, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a folder"
        raise ValueError(f"refusing to copy into {folder}: its staging folder {STAGING} is {kind}; "
                         "remove it and run the copy again")
    if st is not None:
        shutil.rmtree(os.path.join(folder, STAGING), ignore_errors=True)  # an interrupted copy's leftovers
    try:
        os.mkdir(STAGING, 0o700, dir_fd=root)
        return os.open(STAGING, DIR_FLAGS, dir_fd=root)
    except OSError as exc:  # not emptied, or swapped for a link since the check
        raise ValueError(f"refusing to copy into {folder}: its staging folder {STAGING} could not be made "
                         f"afresh ({exc.strerror}); remove it and run the copy again") from None


RESERVE = 1 << 30  # bytes a copy leaves free on the target's disk (or 5% of it, the smaller)


class TooBig(Exception):
    pass


def room(fd):
    """Bytes that may still be written on fd's file system: its free space less the reserve."""
    st = os.fstatvfs(fd)
    return st.f_bavail * st.f_frsize - min(RESERVE, st.f_blocks * st.f_frsize // 20)


def place(part, name, staging, dest, n):
    """Link the staged `part` to `name` in the folder dest (FileExistsError: one is there). A folder on another
    file system (EXDEV) gets the bytes staged beside it first (a hidden name, made O_EXCL), then linked."""
    try:
        os.link(part, name, src_dir_fd=staging, dst_dir_fd=dest)  # atomic, never over a file (or link)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    near = f".remote-incoming-{os.getpid()}-{n}.part"
    src = os.open(part, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=staging)
    try:
        out = os.open(near, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dest)
        try:
            while chunk := os.read(src, CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            os.fchmod(out, os.fstat(src).st_mode & 0o7777)
            os.fsync(out)
        finally:
            os.close(out)
        try:
            os.link(near, name, src_dir_fd=dest, dst_dir_fd=dest)
        finally:
            os.unlink(near, dir_fd=dest)
    finally:
        os.close(src)


def recv(folder, budget=None):
    inp = sys.stdin.buffer
    root = os.open(os.path.realpath(folder), os.O_RDONLY | os.O_DIRECTORY)
    staging = open_staging(root, folder)
    written = size = present = bad = refused = size_in = 0
    n = 0
    try:
        while True:
            line = inp.readline()
            if not line:
                raise EOFError
            head = json.loads(line)
            if head.get("end"):
                break
            rel = head["path"]
            if inside(folder, rel) is None:
                raise ValueError(f"refusing the path {rel!r}")
            n += 1
            part = f"{n}.part"
            announced = head.get("size")
            if not isinstance(announced, int) or isinstance(announced, bool) or announced < 0:
                raise ValueError(f"refusing the size {str(announced)[:40]!r} of {rel!r}")
            if budget is not None and size_in + announced > budget:
                raise TooBig(f"the source announced more than the {budget} bytes its listing held for the files "
                             f"asked for ({rel!r}: {announced} bytes)")
            if announced > room(staging):
                raise TooBig(f"{rel!r} ({announced} bytes) would leave less than the reserve free on the target's "
                             "disk")
            size_in += announced
            h, left = hashlib.sha256(), announced
            pfd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=staging)
            with os.fdopen(pfd, "wb") as f:
                while left > 0:
                    chunk = inp.read(min(CHUNK, left))
                    if not chunk:
                        raise EOFError
                    h.update(chunk)
                    f.write(chunk)
                    left -= len(chunk)
                f.flush()
                os.fsync(f.fileno())
                os.fchmod(f.fileno(), (int(head.get("mode", 0o644)) & 0o755) | 0o600)
            want = inp.readline().strip().decode()
            if want != h.hexdigest():
                os.unlink(part, dir_fd=staging)
                bad += 1
                continue
            parts = rel.split("/")
            try:
                dest = parent_inside(root, parts)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                # a folder of ours that is a link (perhaps leading out) or a file: this path only
                print(f"cachecopy: refusing the path {rel!r}: a folder of it is a symlink or a file", file=sys.stderr)
                os.unlink(part, dir_fd=staging)
                refused += 1
                continue
            try:
                place(part, parts[-1], staging, dest, n)
                written += 1
                size += int(head["size"])
            except FileExistsError:
                present += 1
            finally:
                os.close(dest)
            os.unlink(part, dir_fd=staging)
    except EOFError:
        print(json.dumps({"error": "the stream ended in the middle of a file (the link was cut?)", "written": written}),
              file=sys.stderr)
        sys.exit(3)
    except TooBig as exc:
        print(f"cachecopy: stopped after {written} file(s): {exc}", file=sys.stderr)
        sys.exit(4)
    os.close(staging)
    os.rmdir(STAGING, dir_fd=root)
    os.close(root)
    print(json.dumps({"written": written, "bytes": size, "present": present, "failed_checksum": bad,
                      "refused": refused}))


def main():
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "list":
        list_(folder)
    elif mode == "send":
        send(folder)
    elif mode == "recv":
        os.makedirs(folder, exist_ok=True)
        budget = sys.argv[3] if len(sys.argv) > 3 else ""
        try:
            recv(folder, int(budget) if budget.isdigit() else None)
        except ValueError as exc:  # a refused path: said, not a traceback
            sys.exit(f"cachecopy: {exc}")
    else:
        sys.exit(f"cachecopy: unknown mode {mode!r}")


main()
