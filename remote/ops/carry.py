"""What a rollback carries across: the run's checkpoint and its run folders. A rollback reverts the environment
(venv, code, config), never the training progress nor its history: a checkpoint in the rootfs would go back to
what the snapshot held (gone, or an OLDER run's, and a resume from that would be silently wrong), and so would
the run folders of train.run_dir (the logs and records of every run since the snapshot, so the resumed run would
name the snapshot's latest run as the one it continues). So the latest complete checkpoint and the run folders
go out of the container to the host before `pct rollback` and back after it.

They travel as ONE tar (remote/sh/carry.sh: hard links first, so nothing is copied twice in the container)
between one fixed path in the container (remote.sudo.CARRY_STAGE) and remote's own root-only folder on the host
(/var/lib/remote/carry/<ctid>/<run>.ckpt, mode 0700), by `pct pull` and `pct push`, which make no parent folders
and may exit 0 on a failed copy: each copy is verified by its sha256 (the host's copy before the rollback, the
container's before anything is put in place). The host's free space is checked first. What lies on a mount
point needs no carry (the rollback keeps it). A run folder's file over FILE_CAP (something large the job wrote
there) is left out and named. Back in the container, a run folder the snapshot holds is left as it is (the
carried copy kept beside it where the two differ); nothing is deleted but remote's own copies once all is back.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .. import shell, sudo
from ..errors import SnapshotError
from ..facts import runs as runfacts
from ..naming import path_words, printable
from ..results import Checkpoint
from ..target import Target
from . import checkpoints

STAGE = sudo.CARRY_STAGE
MARGIN = 256 << 20  # bytes the host keeps free beyond the carry: a full /var/lib stops Proxmox itself
FILE_CAP = 256 << 20  # a run folder's file larger than this is not carried (run folders hold text: logs, records)
HEX64 = re.compile(r"[0-9a-f]{64}")


class CarryError(SnapshotError):
    """What a rollback carries could not be carried: before it, nothing was changed; after it (NotPutBack),
    the message names the host's copy and the commands that put it back."""


class NotPutBack(CarryError):
    """After the rollback: the carry is on the host, not back in the container."""


@dataclass(frozen=True)
class CarryPlan:
    """What a rollback carries: the latest complete checkpoint (None: none to carry) and where it goes back, the
    run folders of `run_dir` ("": none, it is on a mount point), and where the host keeps the tar."""

    checkpoint: Checkpoint | None
    dest: str  # the checkpoint's path after the rollback: its own, or the job's path for the watch's kept copy
    host_dir: str
    host_file: str
    run_dir: str = ""


@dataclass(frozen=True)
class Carried:
    """The carry on the host, verified: the checkpoint's kind (file, folder, none), the tar's size and sha256,
    the run folders in it, their bytes, and the large files left out (`SIZE PATH`)."""

    plan: CarryPlan
    kind: str
    size: int
    sha: str
    runs: int = 0
    runs_bytes: int = 0
    skipped: tuple[str, ...] = ()


def mount_of(path: str, mounts: list[str]) -> str | None:
    """The mount point `path` lies on (a rollback keeps it), or None (the rootfs)."""
    return next((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), None)


def host_name(run: str | None, stamp: str | None = None) -> str:
    """The host file's name for a run's carry: its run id where it is a plain one, else `latest`, and the time
    of this carry (UTC), so that a carry never overwrites one an earlier rollback left there (a failed put-back's
    copy may be the only one: the next rollback would carry the snapshot's older checkpoint over it)."""
    stamp = stamp if stamp is not None else time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = run if run and re.fullmatch(r"[0-9A-Za-z_-]+", run) else "latest"
    return f"{base}-{stamp}.ckpt" if re.fullmatch(r"[0-9-]+", stamp) else f"{base}.ckpt"


def host_dirs(host_dir: str) -> list[str]:
    """Every folder from / down to `host_dir`: each must be root's and writable by root alone."""
    parts = [part for part in host_dir.split("/") if part]
    return ["/"] + ["/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)]


def host_dir_problem(stat_out: str, dirs: list[str]) -> str | None:
    """Why the carry's host folder is not safe to write as root, from `stat -c '%u:%a:%F:%n'` of `dirs` (each
    folder from / down), or None. A folder another user owns or may write (or a link, part-way) would let that
    user put a link where `pct pull` writes as root, or a file where `pct push` reads: the login user of a
    `sudo: true` host is not root, and may have made /var/lib/remote/... before remote did."""
    seen = {}
    for line in stat_out.splitlines():
        fields = line.split(":", 3)
        if len(fields) == 4:
            seen[fields[3]] = (fields[0], fields[1], fields[2])
    for d in dirs:
        if d not in seen:
            return f"{d} could not be checked"
        uid, mode, kind = seen[d]
        if kind != "directory":
            return f"{d} is a {kind}, not a folder"
        if uid != "0":
            return f"{d} is owned by uid {uid}, not root"
        if not re.fullmatch(r"[0-7]{3,4}", mode) or int(mode, 8) & 0o022:
            return f"{d} is writable by others than root (mode {mode})"
    return None


def plan(t: Target, mounts: list[str], run: str | None) -> tuple[CarryPlan | None, str]:
    """(what to carry, or None; the line that says why or what). Reads the container (ckpt.py list)."""
    path = checkpoints.path_of(t.spec)
    if path is None:
        return None, "no train.checkpoint: nothing to carry"
    run_dir = t.spec.train.run_dir.rstrip("/") or "/"
    on_runs = mount_of(run_dir, mounts)
    on = mount_of(path, mounts)
    c = None
    if on is not None:
        why = f"checkpoint {path} is on mount point {on}: the rollback keeps it"
    else:
        c = checkpoints.latest(checkpoints.listing(t))
        why = "" if c is not None else f"no complete checkpoint matches {path}"
    runs_why = f"the run folders ({run_dir}) are on mount point {on_runs}: the rollback keeps them" if on_runs else ""
    if c is None and on_runs:
        return None, f"{why}; {runs_why}: nothing to carry"
    host_dir = f"{sudo.CARRY_ROOT}/{t.ctid}"
    p = CarryPlan(c, (path if c.kept else c.path) if c else "", host_dir, f"{host_dir}/{host_name(run)}",
                  "" if on_runs else run_dir)
    what = []
    if c is not None:
        what.append(f"checkpoint {path_words(c.path)}" + (f" (step {c.step})" if c.step is not None else ""))
    if not on_runs:
        what.append(f"the run folders of {run_dir}")
    back = f"checkpoint back to {path_words(p.dest)}" if c else "back"
    return p, (f"carry {' and '.join(what)} across the rollback: to {t.host.name}:{p.host_file} and {back}"
               + "".join(f" ({w})" for w in (why, runs_why) if w))


def _host(t: Target, name: str, *args: str, mutates: bool, deadline: float = 120) -> tuple[int, str, str]:
    argv = sudo.host_argv(t.spec.host, name, *args)
    r = t.session.host_run(t.spec.host, argv, deadline=deadline, mutates=mutates, container=t.ctid)
    return r.exit_code, r.out, r.err


def free_bytes(df_out: str) -> int | None:
    """`df -Pk DIR`'s available bytes (its second line's fourth column), or None."""
    lines = df_out.strip().splitlines()
    parts = lines[1].split() if len(lines) >= 2 else []
    return int(parts[3]) * 1024 if len(parts) >= 4 and parts[3].isdigit() else None


def words(p: CarryPlan) -> str:
    """The words for what is carried: `checkpoint PATH`, `the run folders of DIR`, or both."""
    parts = ([f"checkpoint {path_words(p.checkpoint.path)}"] if p.checkpoint else []) + \
            ([f"the run folders of {p.run_dir}"] if p.run_dir else [])
    return " and ".join(parts)


def packed(text: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """carry.sh pack's lines: its fields (kind, runs, runs_bytes, size, sha) and the files it left out."""
    lines = text.splitlines()
    return runfacts.fields_of(text), tuple(printable(line[8:]) for line in lines if line.startswith("skipped="))


def out(t: Target, p: CarryPlan) -> Carried:
    """Before the rollback: the checkpoint and the run folders to the host as one tar, verified. CarryError
    (nothing changed) where it cannot."""
    ct, host = t.system, t.host.name
    c = p.checkpoint
    if ct.dry:
        for argv in (["install", "-d", "-m", "0700", p.host_dir], ["pct", "pull", str(t.ctid), STAGE, p.host_file]):
            t.output("(dry run) " + " ".join(argv))
        kind = "none" if c is None else "folder" if c.kind in ("dcp", "hf", "folder") else "file"
        return Carried(p, kind, c.size if c else 0, "")
    r = ct.script(shell.load("carry"), "pack", c.path if c else "", STAGE, p.run_dir, str(FILE_CAP), timeout=3600,
                  label="carry pack")
    fields, skipped = packed(r.out)
    size_text, sha, kind = fields.get("size", ""), fields.get("sha", ""), fields.get("kind", "")
    runs, runs_bytes = fields.get("runs", ""), fields.get("runs_bytes", "")
    if (r.exit_code != 0 or not size_text.isdigit() or not HEX64.fullmatch(sha) or kind not in ("file", "folder", "none")
            or not runs.isdigit() or not runs_bytes.isdigit()):
        ct.script(shell.load("carry"), "drop", STAGE, label="carry drop")  # a half-made tar and its work folder
        raise CarryError(printable(f"container {t.ctid}: {words(p)} could not be staged at {STAGE} "
                                   f"(exit {r.exit_code}: {r.err.strip()[-300:]}): nothing was changed"))
    size = int(size_text)
    for line in skipped:
        size_of, _, name = line.partition(" ")
        t.warn(f"not carried (over {FILE_CAP >> 20} MiB: the rollback returns it to the snapshot's): {name} "
               f"({int(size_of) >> 20 if size_of.isdigit() else '?'} MiB)")

    def fail(why: str) -> CarryError:
        ct.script(shell.load("carry"), "drop", STAGE, label="carry drop")
        return CarryError(printable(f"container {t.ctid}: {words(p)} could not be carried to {host}: {why}: "
                                    "nothing was changed (the rollback did not run)"))

    rc, _, err = _host(t, "install", "-d", "-m", "0700", p.host_dir, mutates=True)
    if rc != 0:
        raise fail(f"`install -d -m 0700 {p.host_dir}` failed: {err.strip()[-200:]}")
    dirs = host_dirs(p.host_dir)
    # stat as the login user, in a clean environment (its own shell's functions or PATH cannot answer for it)
    r1 = t.session.host_run(t.spec.host, [*sudo.CLEAN_BASH, "-c", 'exec /usr/bin/stat -c "%u:%a:%F:%n" -- "$@"',
                                          "stat", *dirs], deadline=60, mutates=False, container=t.ctid)
    problem = host_dir_problem(r1.out, dirs) if r1.exit_code == 0 else f"`stat` failed: {r1.err.strip()[-200:]}"
    if problem:
        raise fail(f"the carry's folder {p.host_dir} is not root's alone ({problem}): a root-run `pct pull` "
                   "could be made to write elsewhere; make each folder root-owned and not writable by others "
                   f"(`chown root:root DIR; chmod go-w DIR` as root on {host})")
    rc, df, err = _host(t, "df", "-Pk", p.host_dir, mutates=False)
    free = free_bytes(df) if rc == 0 else None
    if free is None:
        raise fail(f"`df -Pk {p.host_dir}` did not say its free space: {err.strip()[-200:]}")
    if free < size + MARGIN:
        raise fail(f"{p.host_dir} on {host} has {free >> 20} MiB free, the carry needs {size >> 20} MiB "
                   f"(and {MARGIN >> 20} MiB are kept free): free space there first")
    r2 = ct.run_pct("pull", str(t.ctid), STAGE, p.host_file, mutates=True, deadline=3600)
    rc, said, err = _host(t, "sha256sum", "--", p.host_file, mutates=False)
    got = said.split()[0] if rc == 0 and said.split() else ""
    if got != sha:
        raise fail(f"`pct pull` (exit {r2.exit_code}: {(r2.err.strip() or r2.out.strip())[-200:]}) left no verified "
                   f"copy at {p.host_file} (sha256 {got or 'unreadable'}, want {sha})")
    ct.script(shell.load("carry"), "drop", STAGE, label="carry drop")
    done = Carried(p, kind, size, sha, int(runs), int(runs_bytes), skipped)
    t.note(f"{words(p)} ({size} bytes, sha256 {sha[:12]}"
           + (f"; {done.runs} run folders, {done.runs_bytes} bytes" if p.run_dir else "")
           + f") carried to {host}:{p.host_file}")
    return done


def put_back_command(t: Target, got: Carried) -> str:
    """How to put a carry back by hand (as root on the host, then in the container)."""
    p = got.plan
    parts = ([f"ckpt/payload is the checkpoint (its place: {path_words(p.dest)})"] if p.checkpoint else []) + \
            ([f"runs/ the run folders (their place: {p.run_dir})"] if p.run_dir else [])
    return (f"to put it back by hand: `pct push {t.ctid} {p.host_file} {STAGE}` on {t.host.name}, then `remote exec "
            f"-c {t.ctid} 'mkdir -p {STAGE}.d && tar -C {STAGE}.d -xf {STAGE}'`; there {', '.join(parts)}")


def back(t: Target, got: Carried) -> tuple[str, ...]:
    """After the rollback: the checkpoint back at its path (verified, an older one there renamed aside), the run
    folders the rollback took back in run_dir (the snapshot's own left as they are), `current` at the latest
    carried run, the host's copy removed. Returns the run folders put back. NotPutBack naming the host's copy
    and how to put it back where it cannot."""
    ct, p = t.system, got.plan
    if ct.dry:
        t.output(f"(dry run) pct push {t.ctid} {p.host_file} {STAGE}; then in the container: {STAGE} unpacked"
                 + (f", the checkpoint to {p.dest}" if p.checkpoint else "")
                 + (f", the run folders to {p.run_dir}" if p.run_dir else ""))
        return ()

    def fail(why: str) -> NotPutBack:
        return NotPutBack(printable(f"container {t.ctid}: rolled back, but {words(p)} could not be put back: "
                                    f"{why}. Nothing is lost: the carry is on {t.host.name} at {p.host_file}, "
                                    f"{put_back_command(t, got)}"))

    r = ct.run_pct("push", str(t.ctid), p.host_file, STAGE, mutates=True, deadline=3600)
    u = ct.script(shell.load("carry"), "unpack", STAGE, p.dest, got.kind, got.sha, p.run_dir, timeout=3600,
                  label="carry unpack")
    fields = runfacts.fields_of(u.out)
    if u.exit_code != 0 or (p.checkpoint is not None and fields.get("placed") != p.dest):
        why = (f"the copy in the container differs (sha256 {fields.get('sha', '?')[:64]}, want {got.sha})"
               if u.exit_code == 4 else f"exit {u.exit_code}: {u.err.strip()[-200:]}")
        raise fail(f"`pct push` (exit {r.exit_code}: {(r.err.strip() or r.out.strip())[-200:]}), then: {why}")
    if fields.get("aside"):
        t.note(printable(f"the snapshot's {path_words(p.dest)} renamed aside to {fields['aside']} (never deleted)"))
    lines = u.out.splitlines()
    put = tuple(printable(x[5:]) for x in lines if x.startswith("back="))
    differs = [printable(x[8:]) for x in lines if x.startswith("differs=")]
    if differs:
        t.note(printable(f"run folders the snapshot holds differ from the carried ones: {', '.join(differs)}; the "
                         f"snapshot's left as they are, the carried ones kept in {fields.get('kept', '?')}"))
    rc, _, err = _host(t, "rm", "-f", "--", p.host_file, mutates=True)
    if rc != 0:
        t.warn(printable(f"{words(p)} back, but the host's copy {p.host_file} could not be removed: "
                         f"{err.strip()[-200:]}"))
    if p.checkpoint is not None:
        t.step(f"checkpoint {path_words(p.checkpoint.path)} back at {path_words(p.dest)} (sha256 verified)")
    if p.run_dir:
        t.step(printable(f"run folders back in {p.run_dir}: " + (", ".join(put) if put else "none the rollback took")
                         + (f"; the latest is {fields['current']}" if fields.get("current") else "")))
    return put
