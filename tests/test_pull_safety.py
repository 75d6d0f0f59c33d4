"""Local tier: what a container sends into a pull is untrusted. A hostile tar stream, run id or output
path never writes outside the destination, never through a symlink, never a device, fifo or setuid file;
what was refused is named."""

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from remote.errors import TransferError
from remote.ops import files
from remote.ops.files import staging, untar


def member(tar, name, data=b"", **kw):
    info = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(info, k, v)
    if info.isreg():
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def hostile_stream() -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member(tar, "./ok.txt", b"fine\n", mode=0o640)
        member(tar, "./sub", type=tarfile.DIRTYPE, mode=0o755)
        member(tar, "../../escape", b"x")
        member(tar, "sub/../../up", b"x")
        member(tar, "/abs", b"x")
        member(tar, "etc", type=tarfile.SYMTYPE, linkname="/etc")
        member(tar, "etc/owned", b"x")  # through the (refused) symlink: "etc" must not exist then
        member(tar, "out", type=tarfile.SYMTYPE, linkname="../../..")
        member(tar, "inner", type=tarfile.SYMTYPE, linkname="sub")
        member(tar, "inner/through.txt", b"x")  # symlink, then a file through it
        member(tar, "suid", b"#!/bin/sh\n", mode=0o4755)
        member(tar, "sgid", b"x", mode=0o2775)
        member(tar, "dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        member(tar, "blk", type=tarfile.BLKTYPE, devmajor=7, devminor=0)
        member(tar, "fifo", type=tarfile.FIFOTYPE)
        member(tar, "hl", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        member(tar, "hl-ok", type=tarfile.LNKTYPE, linkname="ok.txt")
    buf.seek(0)
    return buf


@pytest.mark.parametrize("order", ["dot-first", "dot-last"])
def test_links_whose_text_stays_inside_but_lead_out_through_other_links_are_removed(tmp_path, order):
    """`s -> .` and `t -> s/..`: t's text stays inside, but on disk it is DEST's parent; made in either order."""
    root = tmp_path / "stage"
    root.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        pair = [("s", "."), ("t", "s/..")]
        for name, link in pair if order == "dot-first" else pair[::-1]:
            member(tar, name, type=tarfile.SYMTYPE, linkname=link)
        member(tar, "ok", type=tarfile.SYMTYPE, linkname="s/ok.txt")
    buf.seek(0)
    refused = []
    untar.extract(buf, root, refused)
    why = dict(refused)
    assert "t" in why and "through other links" in why["t"], refused
    assert not os.path.lexists(root / "t") and os.readlink(root / "s") == "." and os.readlink(root / "ok") == "s/ok.txt"


@pytest.mark.fault("Hostile container: a pulled tree with .., absolute paths, links out, devices, setuid",
                   promise="nothing written outside DEST or through a symlink, no device/fifo/setuid file; each refused member named")
def test_a_hostile_tar_stream_is_extracted_only_inside_the_destination(tmp_path):
    tmp_path = tmp_path / "w"
    root = tmp_path / "a" / "b" / "stage"
    root.mkdir(parents=True)
    refused = []
    untar.extract(hostile_stream(), root, refused)
    why = dict(refused)
    for name in ("../../escape", "sub/../../up", "/abs", "etc", "etc/owned", "out", "inner/through.txt", "dev", "blk", "fifo", "hl"):
        assert name in why, (name, refused)
    assert "symlink inner" in why["inner/through.txt"] and "character device" in why["dev"]
    assert why["suid"] == why["sgid"] == "setuid/setgid bit dropped"
    assert sorted(os.listdir(tmp_path)) == ["a"] and sorted(os.listdir(tmp_path / "a")) == ["b"]
    made = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert made == ["hl-ok", "inner", "ok.txt", "sgid", "sub", "suid"]
    assert why["etc/owned"] == "below the refused etc"
    assert not os.listdir(root / "sub")
    assert (root / "inner").is_symlink() and os.readlink(root / "inner") == "sub"
    for name in ("suid", "sgid", "ok.txt"):
        assert not os.stat(root / name).st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert stat.S_IMODE(os.stat(root / "ok.txt").st_mode) == 0o640 and (root / "hl-ok").read_bytes() == b"fine\n"


def test_a_merge_never_writes_through_a_symlink_an_earlier_pull_left(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "ckpt").symlink_to(elsewhere)  # left by an earlier pull (or an older version of remote)
    (dest / "ckpt.partial").symlink_to(elsewhere / "file")
    stage = tmp_path / "stage"
    (stage / "ckpt").mkdir(parents=True)
    (stage / "ckpt" / "model.pt").write_bytes(b"w")
    (stage / "top.txt").write_bytes(b"t")
    refused = []
    staging.move_into_place(stage, dest, refused)
    assert not os.listdir(elsewhere)
    assert refused and refused[0][0] == "ckpt" and "symlink" in refused[0][1]
    assert (dest / "top.txt").read_bytes() == b"t" and not stage.exists()


@pytest.mark.parametrize("rel", ["../../x", "a/../../x", "..", "", "ckpt/model.pt", "ckpt", "file/x"])
def test_paths_from_the_container_are_refused_when_they_leave_dest_or_pass_a_symlink(tmp_path, rel):
    tmp_path = tmp_path / "w"
    root = tmp_path / "dest"
    root.mkdir(parents=True)
    (root / "ckpt").symlink_to(tmp_path)
    (root / "file").write_text("f")
    with pytest.raises(TransferError, match="refused"):
        files.inside(root, rel, "output")
    assert sorted(os.listdir(tmp_path)) == ["dest"]


def test_a_path_from_the_container_inside_dest_is_joined_and_its_folders_made(tmp_path):
    assert files.inside(tmp_path, "/root/ckpt/model.pt", "output") == tmp_path / "root" / "ckpt" / "model.pt"
    assert (tmp_path / "root" / "ckpt").is_dir() and files.inside(tmp_path, "x", "output") == tmp_path / "x"


@pytest.mark.fault("Push to a mount point in the container; pull to a local mount point",
                   promise="staged on the destination's own filesystem, merged by rename or hard link; nothing left")
def test_a_pull_merges_into_a_local_mount_point_and_a_mount_inside_dest(tmp_path):
    import subprocess

    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(dest / "sub")], check=True)
    try:
        (dest / "sub" / "old").write_text("old\n")
        stage = staging.stage_for(dest)
        assert stage.parent == dest  # inside the existing folder: on its filesystem
        (stage / "sub").mkdir(parents=True)
        (stage / "sub" / "new").write_text("new\n")
        (stage / "top").write_text("top\n")
        staging.move_into_place(stage, dest)
        assert (dest / "sub" / "new").read_text() == "new\n" and (dest / "sub" / "old").read_text() == "old\n"
        assert sorted(os.listdir(dest)) == ["sub", "top"] and sorted(os.listdir(dest / "sub")) == ["new", "old"]
    finally:
        subprocess.run(["umount", "-l", str(dest / "sub")], check=False)
