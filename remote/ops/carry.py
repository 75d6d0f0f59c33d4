"""A run's checkpoint carried across a rollback. A rollback reverts the environment (venv, code, config), never
the training progress: a checkpoint in the rootfs would go back to what the snapshot held (gone, or an OLDER
run's, and a resume from that would be silently wrong). So the latest complete checkpoint goes out of the
container to the host before `pct rollback` and back to its path after it.

It travels as ONE file between one fixed path in the container (remote.sudo.CARRY_STAGE: a hard link of the
checkpoint, or a tar of a folder made there) and remote's own root-only folder on the host
(/var/lib/remote/carry/<ctid>/<run>.ckpt, mode 0700), by `pct pull` and `pct push`, which make no parent folders
and may exit 0 on a failed copy: each copy is verified by its sha256 (the host's copy before the rollback, the
container's before it is put in place). The host's free space is checked first. A checkpoint on a mount point
needs no carry (the rollback keeps it). Nothing is deleted but remote's own copies once the checkpoint is back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import shell, sudo
from ..errors import SnapshotError
from ..facts import runs as runfacts
from ..naming import printable
from ..results import Checkpoint
from ..target import Target
from . import checkpoints

STAGE = sudo.CARRY_STAGE
MARGIN = 256 << 20  # bytes the host keeps free beyond the checkpoint: a full /var/lib stops Proxmox itself
HEX64 = re.compile(r"[0-9a-f]{64}")


class CarryError(SnapshotError):
    """A checkpoint could not be carried across a rollback: before it, nothing was changed; after it, the
    message names the host's copy and the command that puts it back."""


@dataclass(frozen=True)
class CarryPlan:
    """What a rollback carries: the latest complete checkpoint, where it goes back, where the host keeps it."""

    checkpoint: Checkpoint
    dest: str  # its path after the rollback: its own, or the job's path for the watch's kept copy
    host_dir: str
    host_file: str


@dataclass(frozen=True)
class Carried:
    """A checkpoint on the host, verified: its kind (file, or folder tarred) and sha256."""

    plan: CarryPlan
    kind: str
    size: int
    sha: str


def mount_of(path: str, mounts: list[str]) -> str | None:
    """The mount point `path` lies on (a rollback keeps it), or None (the rootfs)."""
    return next((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), None)


def host_name(run: str | None) -> str:
    """The host file's name for a run's checkpoint: its run id where it is a plain one, else `latest`."""
    return f"{run}.ckpt" if run and re.fullmatch(r"[0-9A-Za-z_-]+", run) else "latest.ckpt"


def plan(t: Target, mounts: list[str], run: str | None) -> tuple[CarryPlan | None, str]:
    """(what to carry, or None; the line that says why or what). Reads the container (ckpt.py list)."""
    path = checkpoints.path_of(t.spec)
    if path is None:
        return None, "no train.checkpoint: no checkpoint to carry"
    on = mount_of(path, mounts)
    if on is not None:
        return None, f"checkpoint {path} is on mount point {on}: the rollback keeps it, nothing to carry"
    c = checkpoints.latest(checkpoints.listing(t))
    if c is None:
        return None, f"no complete checkpoint matches {path}: nothing to carry"
    host_dir = f"{sudo.CARRY_ROOT}/{t.ctid}"
    p = CarryPlan(c, path if c.kept else c.path, host_dir, f"{host_dir}/{host_name(run)}")
    step = f" (step {c.step})" if c.step is not None else ""
    return p, (f"carry checkpoint {c.path}{step} across the rollback: to {t.host.name}:{p.host_file} and back to "
               f"{p.dest}")


def _host(t: Target, name: str, *args: str, mutates: bool, deadline: float = 120) -> tuple[int, str, str]:
    argv = sudo.host_argv(t.spec.host, name, *args)
    r = t.session.host_run(t.spec.host, argv, deadline=deadline, mutates=mutates, container=t.ctid)
    return r.exit_code, r.out, r.err


def free_bytes(df_out: str) -> int | None:
    """`df -Pk DIR`'s available bytes (its second line's fourth column), or None."""
    lines = df_out.strip().splitlines()
    parts = lines[1].split() if len(lines) >= 2 else []
    return int(parts[3]) * 1024 if len(parts) >= 4 and parts[3].isdigit() else None


def out(t: Target, p: CarryPlan) -> Carried:
    """Before the rollback: the checkpoint to the host, verified. CarryError (nothing changed) where it cannot."""
    ct, host = t.system, t.host.name
    c = p.checkpoint
    if ct.dry:
        for argv in (["install", "-d", "-m", "0700", p.host_dir], ["pct", "pull", str(t.ctid), STAGE, p.host_file]):
            t.output("(dry run) " + " ".join(argv))
        return Carried(p, "folder" if c.kind in ("dcp", "hf", "folder") else "file", c.size, "")
    r = ct.script(shell.load("carry"), "pack", c.path, STAGE, timeout=3600, label="carry pack")
    fields = runfacts.fields_of(r.out)
    size_text, sha, kind = fields.get("size", ""), fields.get("sha", ""), fields.get("kind", "")
    if r.exit_code != 0 or not size_text.isdigit() or not HEX64.fullmatch(sha) or kind not in ("file", "folder"):
        raise CarryError(printable(f"container {t.ctid}: checkpoint {c.path} could not be staged at {STAGE} "
                                   f"(exit {r.exit_code}: {r.err.strip()[-300:]}): nothing was changed"))
    size = int(size_text)

    def fail(why: str) -> CarryError:
        ct.script(shell.load("carry"), "drop", STAGE, label="carry drop")
        return CarryError(printable(f"container {t.ctid}: checkpoint {c.path} could not be carried to {host}: {why}: "
                                    "nothing was changed (the rollback did not run)"))

    rc, _, err = _host(t, "install", "-d", "-m", "0700", p.host_dir, mutates=True)
    if rc != 0:
        raise fail(f"`install -d -m 0700 {p.host_dir}` failed: {err.strip()[-200:]}")
    rc, df, err = _host(t, "df", "-Pk", p.host_dir, mutates=False)
    free = free_bytes(df) if rc == 0 else None
    if free is None:
        raise fail(f"`df -Pk {p.host_dir}` did not say its free space: {err.strip()[-200:]}")
    if free < size + MARGIN:
        raise fail(f"{p.host_dir} on {host} has {free >> 20} MiB free, the checkpoint needs {size >> 20} MiB "
                   f"(and {MARGIN >> 20} MiB are kept free): free space there first")
    r2 = ct.run_pct("pull", str(t.ctid), STAGE, p.host_file, mutates=True, deadline=3600)
    rc, said, err = _host(t, "sha256sum", "--", p.host_file, mutates=False)
    got = said.split()[0] if rc == 0 and said.split() else ""
    if got != sha:
        raise fail(f"`pct pull` (exit {r2.exit_code}: {(r2.err.strip() or r2.out.strip())[-200:]}) left no verified "
                   f"copy at {p.host_file} (sha256 {got or 'unreadable'}, want {sha})")
    ct.script(shell.load("carry"), "drop", STAGE, label="carry drop")
    t.note(f"checkpoint {c.path} ({size} bytes, sha256 {sha[:12]}) carried to {host}:{p.host_file}")
    return Carried(p, kind, size, sha)


def put_back_command(t: Target, got: Carried) -> str:
    """The commands that put a carried checkpoint back by hand (as root on the host, then in the container)."""
    p = got.plan
    if got.kind == "folder":
        parent = p.dest.rsplit("/", 1)[0] or "/"
        return (f"`pct push {t.ctid} {p.host_file} {STAGE}` on {t.host.name}, then `remote exec -c {t.ctid} -- "
                f"tar -C {parent} -xf {STAGE}`")
    return f"`pct push {t.ctid} {p.host_file} {p.dest}` on {t.host.name}"


def back(t: Target, got: Carried) -> None:
    """After the rollback: the checkpoint back at its path (verified, an older one there renamed aside), the
    host's copy removed. CarryError naming the host's copy and how to put it back where it cannot."""
    ct, p = t.system, got.plan
    if ct.dry:
        t.output(f"(dry run) pct push {t.ctid} {p.host_file} {STAGE}; then in the container: {STAGE} to {p.dest}")
        return

    def fail(why: str) -> CarryError:
        return CarryError(printable(f"container {t.ctid}: rolled back, but its checkpoint could not be put back: "
                                    f"{why}. Nothing is lost: the checkpoint is on {t.host.name} at {p.host_file}; "
                                    f"{put_back_command(t, got)} puts it back"))

    r = ct.run_pct("push", str(t.ctid), p.host_file, STAGE, mutates=True, deadline=3600)
    u = ct.script(shell.load("carry"), "unpack", STAGE, p.dest, got.kind, got.sha, timeout=3600, label="carry unpack")
    fields = runfacts.fields_of(u.out)
    if u.exit_code != 0 or fields.get("placed") != p.dest:
        why = (f"the copy in the container differs (sha256 {fields.get('sha', '?')[:64]}, want {got.sha})"
               if u.exit_code == 4 else f"exit {u.exit_code}: {u.err.strip()[-200:]}")
        raise fail(f"`pct push` (exit {r.exit_code}: {(r.err.strip() or r.out.strip())[-200:]}), then: {why}")
    if fields.get("aside"):
        t.note(printable(f"the snapshot's {p.dest} renamed aside to {fields['aside']} (never deleted)"))
    rc, _, err = _host(t, "rm", "-f", "--", p.host_file, mutates=True)
    if rc != 0:
        t.warn(printable(f"checkpoint back at {p.dest}, but the host's copy {p.host_file} could not be removed: "
                         f"{err.strip()[-200:]}"))
    t.step(f"checkpoint {p.checkpoint.path} back at {p.dest} (sha256 verified)")
