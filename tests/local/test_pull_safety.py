"""Local tier: what a container sends into a pull is untrusted. A hostile tar stream, run id or output
path never writes outside the destination, never through a symlink, never a device, fifo or setuid file;
what was refused is named."""

import io
import os
import stat
import sys
import tarfile
import types
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


def modes_stream() -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member(tar, "open", type=tarfile.DIRTYPE, mode=0o777)
        member(tar, "open/all.sh", b"#!/bin/sh\n", mode=0o777)
        member(tar, "open/shared.txt", b"s", mode=0o666)
        member(tar, "private", type=tarfile.DIRTYPE, mode=0o700)
        member(tar, "private/key", b"k", mode=0o600)
        member(tar, "private/sticky", b"t", mode=0o1757)
        member(tar, "noexec", b"x", mode=0o477)  # group/world execute without the owner's: not executable
    buf.seek(0)
    return buf


@pytest.mark.fault("Pulled files' modes from the container (0777, 0600, setuid)",
                   promise="the user's umask applies; nothing is created group- or world-writable; a 0600 file "
                           "stays 0600; setuid/setgid dropped")
@pytest.mark.parametrize("umask, want", [
    (0o022, {"open": 0o755, "open/all.sh": 0o755, "open/shared.txt": 0o644, "private": 0o700,
             "private/key": 0o600, "private/sticky": 0o755, "noexec": 0o644}),
    (0o077, {"open": 0o700, "open/all.sh": 0o700, "open/shared.txt": 0o600, "private": 0o700,
             "private/key": 0o600, "private/sticky": 0o700, "noexec": 0o600}),
])
def test_a_pulled_trees_modes_are_the_containers_masked_never_group_or_world_writable(tmp_path, umask, want):
    refused = []
    untar.extract(modes_stream(), tmp_path, refused, umask=umask)
    got = {name: stat.S_IMODE(os.lstat(tmp_path / name).st_mode) for name in want}
    assert got == want and refused == []


def test_the_extraction_takes_this_processs_umask_by_default(tmp_path):
    old = os.umask(0o027)
    try:
        untar.extract(modes_stream(), tmp_path, [])
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "open" / "all.sh").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / "open" / "shared.txt").st_mode) == 0o640


def pulled_file(tmp_path, mode: str, data: bytes = b"secret\n"):
    import hashlib

    from remote.lab.testing import Expect, FakeTransport
    from remote.transport.pct import Container

    t = FakeTransport([Expect(lambda a: True, 0, b"f %d -\n" % len(data)),  # xfer_probe: a file
                       Expect(lambda a: True, 0, b"%d %s\n" % (len(data), mode.encode()) + data,
                              hashlib.sha256(data).hexdigest() + "\n")])
    stats = files.pull(Container(t, 200), "/root/.ssh/id_ed25519", tmp_path / "key", sleep=lambda s: None)
    t.assert_done()
    assert (tmp_path / "key").read_bytes() == data and stats.sha256 == hashlib.sha256(data).hexdigest()
    return stat.S_IMODE(os.stat(tmp_path / "key").st_mode)


@pytest.mark.fault("Pulled files' modes from the container (0777, 0600, setuid)",
                   promise="the user's umask applies; nothing is created group- or world-writable; a 0600 file "
                           "stays 0600; setuid/setgid dropped")
@pytest.mark.parametrize("umask, mode, want", [
    (0o077, "600", 0o600), (0o022, "600", 0o600), (0o022, "777", 0o755), (0o022, "4777", 0o755),
    (0o022, "666", 0o644), (0o077, "644", 0o600), (0o002, "666", 0o644), (0o022, "0", 0o600)])
def test_a_pulled_file_keeps_the_containers_mode_under_the_umask(tmp_path, umask, mode, want):
    old = os.umask(umask)
    try:
        assert pulled_file(tmp_path, mode) == want
    finally:
        os.umask(old)


VERSIONS = [((3, 10, 11), False), ((3, 10, 12), False), ((3, 10, 13), True), ((3, 11, 2), False),
            ((3, 11, 4), False), ((3, 11, 5), True), ((3, 11, 7), True), ((3, 12, 0), True), ((3, 13, 1), True)]


@pytest.mark.parametrize("version, stdlib", VERSIONS)
def test_tarfiles_own_data_filter_is_used_only_where_it_is_there_and_right(monkeypatch, version, stdlib):
    """CPython has tarfile.data_filter from 3.10.12 and 3.11.4 (3.12 on); 3.10.12 and 3.11.4 refuse valid
    relative symlinks (CPython issue 107845). Before 3.10.13 and 3.11.5 the backport is used."""
    # The choice, not the package: a stand-in `backports.tarfile`, so this runs on every python (the real one
    # is installed only where the marker asks for it).
    backport = types.ModuleType("backports.tarfile")
    package = types.ModuleType("backports")
    package.tarfile = backport  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "backports", package)
    monkeypatch.setitem(sys.modules, "backports.tarfile", backport)
    monkeypatch.setattr(untar.sys, "version_info", version)
    assert untar._tar_module() is (tarfile if stdlib else backport)


@pytest.mark.parametrize("version, stdlib", VERSIONS)
def test_the_backport_is_declared_for_exactly_the_pythons_that_use_it(version, stdlib):
    import tomllib  # 3.11 on: the tests run on Debian 12's 3.11 and later

    from packaging import requirements  # pytest's own dependency

    deps = tomllib.loads((Path(__file__).parent.parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    backport = [requirements.Requirement(d) for d in deps if d.startswith("backports.tarfile")]
    assert len(backport) == 1
    full = ".".join(map(str, version))
    env = {"python_full_version": full, "python_version": full.rsplit(".", 1)[0]}
    assert backport[0].marker.evaluate(env) is (not stdlib)


def test_a_gzipped_bundle_meets_the_same_refusals_as_a_pulled_stream(tmp_path):
    """warmup --import reads a .tar.gz through the same wrapper: the same members refused, the same kept."""
    import gzip

    plain, zipped = tmp_path / "plain", tmp_path / "zipped"
    plain.mkdir()
    zipped.mkdir()
    a, b = [], []
    untar.extract(hostile_stream(), plain, a)
    untar.extract(io.BytesIO(gzip.compress(hostile_stream().getvalue())), zipped, b, mode="r|*")
    assert a == b and len(a) == 13
    assert sorted(os.listdir(plain)) == sorted(os.listdir(zipped))


@pytest.mark.parametrize("link", ["..", ".", "../x", "/"])
def test_a_link_with_an_empty_name_never_replaces_the_destination(tmp_path, link):
    tmp_path = tmp_path / "w"
    root = tmp_path / "stage"
    root.mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        member(tar, "", type=tarfile.SYMTYPE, linkname=link)
        member(tar, "after.txt", b"x")
    buf.seek(0)
    refused = []
    untar.extract(buf, root, refused)
    assert root.is_dir() and not root.is_symlink() and sorted(os.listdir(root)) == ["after.txt"]
    assert len(refused) == 1 and refused[0][0] == ".", refused
    assert sorted(os.listdir(tmp_path)) == ["stage"]


HOSTILE_NAME = "\x1b]0;owned\x07" + "n" * 300  # a terminal title escape, and a name too long for any filesystem


def hostile_name_stream() -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        member(tar, "./ok.txt", b"fine\n", mode=0o640)
        member(tar, HOSTILE_NAME, b"x")
    buf.seek(0)
    return buf


@pytest.mark.fault("A pulled member this machine cannot write (a name of 300+ characters with escapes)",
                   promise="a TransferError naming the member, escaped and cut short; never an OSError with the "
                           "raw name on the terminal; nothing moved into the destination")
def test_a_member_that_cannot_be_written_is_a_transfer_error_naming_it_escaped(tmp_path):
    with pytest.raises(TransferError) as caught:
        untar.extract(hostile_name_stream(), tmp_path, [])
    message = str(caught.value)
    assert "\x1b" not in message and "\x07" not in message
    assert "\\x1b]0;owned\\x07" in message and "(310 characters)" in message and "too long" in message
    assert len(message) < 250


def test_a_pull_of_a_tree_with_such_a_member_moves_nothing_and_names_it(tmp_path):
    """Through files.pull, as `remote pull` runs it: the container's folder as a tar stream (fake transport)."""
    from remote.lab.testing import Expect, FakeTransport
    from remote.transport.pct import Container

    tar = hostile_name_stream().getvalue()
    t = FakeTransport([Expect(lambda a: True, 0, b"d 0 -\n"),  # xfer_probe: a folder
                       Expect(lambda a: True, 0, b"0 %d\n" % len(tar) + tar)])  # pull_tree: no manifest, the tar
    dest = tmp_path / "out"
    with pytest.raises(TransferError) as caught:
        files.pull(Container(t, 200), "/root/results", dest, sleep=lambda s: None)
    message = str(caught.value)
    assert "\x1b" not in message and "\\x1b]0;owned" in message
    assert "pull of /root/results" in message and f"nothing was moved into {dest}" in message
    assert not dest.exists() and [p for p in os.listdir(tmp_path) if p.startswith("out")] == []  # no staging left
