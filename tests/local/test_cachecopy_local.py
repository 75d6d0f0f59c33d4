"""Local tier: the container's side of a compile-cache copy (remote/sh/cachecopy.py) on local folders, with
Debian's python3 as in a container: what it lists, what it refuses, and a torn stream."""

import json
import os
import subprocess
import sys

import pytest

from remote import shell

CODE = shell.load_python("cachecopy")


def run(mode, folder, data=b""):
    return subprocess.run([sys.executable, "-I", "-S", "-c", CODE, mode, str(folder)], input=data, capture_output=True)


def tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names)


def make(folder):
    (folder / "inductor" / "ab").mkdir(parents=True)
    (folder / "inductor" / "ab" / "key").write_bytes(b"x" * 5000)
    pch = folder / "tmp" / "torchinductor_root" / "precompiled_headers"
    (pch / "locks").mkdir(parents=True)
    (pch / "h.gch").write_bytes(b"y" * 3000)
    (pch / "locks" / "h.lock").write_bytes(b"")
    (folder / "tmp" / "scratch").write_bytes(b"t")
    (folder / "passport.json").write_text('{"format": 1}')


def test_list_holds_cache_files_and_precompiled_headers_only(tmp_path):
    make(tmp_path)
    got = json.loads(run("list", tmp_path).stdout)
    assert got["files"] == {"inductor/ab/key": 5000, "tmp/torchinductor_root/precompiled_headers/h.gch": 3000}
    assert json.loads(got["passport"]) == {"format": 1}


def test_send_then_recv_copies_whole_files_and_refuses_paths_outside(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make(src)
    wanted = ["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch", "tmp/scratch", "../escape",
              "/etc/passwd", "passport.json"]
    stream = run("send", src, (json.dumps(wanted) + "\n").encode()).stdout
    r = run("recv", dst, stream)
    assert r.returncode == 0 and json.loads(r.stdout)["written"] == 2, r.stderr
    assert tree(dst) == ["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"]
    assert (dst / "inductor" / "ab" / "key").read_bytes() == b"x" * 5000


def test_a_torn_stream_puts_no_partial_file_in_place_and_never_replaces_one(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make(src)
    stream = run("send", src, (json.dumps(["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"])
                               + "\n").encode()).stdout
    cut = stream[:stream.index(b"y" * 100)]  # in the middle of the second file
    r = run("recv", dst, cut)
    assert r.returncode == 3 and b"ended in the middle of a file" in r.stderr
    assert tree(dst) == [".remote-incoming/2.part", "inductor/ab/key"]  # the torn one staged, never in place
    (dst / "inductor" / "ab" / "key").write_bytes(b"mine")
    r = run("recv", dst, stream)
    assert r.returncode == 0 and json.loads(r.stdout) == {"written": 1, "bytes": 3000, "present": 1,
                                                          "failed_checksum": 0, "refused": 0}
    assert tree(dst) == ["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"]
    assert (dst / "inductor" / "ab" / "key").read_bytes() == b"mine"  # an existing file is never replaced


def test_a_file_whose_sha256_does_not_match_is_not_put_in_place(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make(src)
    stream = run("send", src, (json.dumps(["inductor/ab/key"]) + "\n").encode()).stdout
    bad = stream.replace(b"x" * 10, b"z" * 10, 1)
    r = run("recv", dst, bad)
    assert r.returncode == 0 and json.loads(r.stdout)["failed_checksum"] == 1
    assert tree(dst) == []


SYMLINKS = ("A compile-cache copy from a container whose job made symlinks",
            "nothing whose real path leaves the cache folder is listed, sent or written: a cache folder linked "
            "to /root/.ssh sends no key")


@pytest.mark.fault(*SYMLINKS)
def test_a_symlinked_folder_in_the_source_cache_sends_nothing_from_outside(tmp_path):
    src, dst, ssh = tmp_path / "src", tmp_path / "dst", tmp_path / "ssh"
    make(src)
    ssh.mkdir()
    (ssh / "id_ed25519").write_bytes(b"PRIVATE KEY")
    # a job in the source made inductor's precompiled-headers folder, and a folder of the cache, links out
    evil = src / "tmp" / "torchinductor_job"
    evil.mkdir()
    (evil / "precompiled_headers").symlink_to(ssh)
    (src / "inductor" / "out").symlink_to(ssh)
    listed = json.loads(run("list", src).stdout)["files"]
    assert not any("id_ed25519" in p for p in listed), listed
    # a sender asked for them anyway (the listing is the controller's; a swap after it): nothing sent
    wanted = ["tmp/torchinductor_job/precompiled_headers/id_ed25519", "inductor/out/id_ed25519", "inductor/ab/key"]
    stream = run("send", src, (json.dumps(wanted) + "\n").encode()).stdout
    assert b"PRIVATE KEY" not in stream
    r = run("recv", dst, stream)
    assert r.returncode == 0 and tree(dst) == ["inductor/ab/key"], r.stderr


@pytest.mark.fault(*SYMLINKS)
def test_recv_writes_nothing_through_a_symlinked_folder_of_the_target(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    make(src)
    (src / "inductor" / "ab" / "cd").mkdir()
    (src / "inductor" / "ab" / "cd" / "deep").write_bytes(b"d" * 10)
    outside.mkdir()
    (dst / "inductor").mkdir(parents=True)
    (dst / "inductor" / "ab").symlink_to(outside)
    wanted = ["inductor/ab/cd/deep", "inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"]
    stream = run("send", src, (json.dumps(wanted) + "\n").encode()).stdout
    r = run("recv", dst, stream)
    # both paths under the link are refused, one line each; no folder made out there (not even cd/); the rest copied
    assert r.returncode == 0 and json.loads(r.stdout)["refused"] == 2 and json.loads(r.stdout)["written"] == 1, r.stderr
    assert r.stderr.decode().splitlines() == [
        "cachecopy: refusing the path 'inductor/ab/cd/deep': a folder of it is a symlink or a file",
        "cachecopy: refusing the path 'inductor/ab/key': a folder of it is a symlink or a file"]
    assert list(outside.iterdir()) == []
    assert (dst / "tmp" / "torchinductor_root" / "precompiled_headers" / "h.gch").read_bytes() == b"y" * 3000


@pytest.mark.fault(*SYMLINKS)
def test_recv_counts_a_file_that_is_already_a_symlink_as_present_and_never_writes_through_it(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    make(src)
    outside.write_bytes(b"theirs")
    (dst / "inductor" / "ab").mkdir(parents=True)
    (dst / "inductor" / "ab" / "key").symlink_to(outside)
    stream = run("send", src, (json.dumps(["inductor/ab/key"]) + "\n").encode()).stdout
    r = run("recv", dst, stream)
    assert r.returncode == 0 and json.loads(r.stdout)["present"] == 1, r.stderr
    assert outside.read_bytes() == b"theirs" and (dst / "inductor" / "ab" / "key").is_symlink()


@pytest.mark.fault(*SYMLINKS)
@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_staging_folder_that_is_a_symlink_or_a_file_is_refused_in_one_line(tmp_path, kind):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    make(src)
    outside.mkdir()
    (outside / "keep").write_bytes(b"k")
    dst.mkdir()
    if kind == "symlink":
        (dst / ".remote-incoming").symlink_to(outside)
    else:
        (dst / ".remote-incoming").write_bytes(b"")
    stream = run("send", src, (json.dumps(["inductor/ab/key"]) + "\n").encode()).stdout
    r = run("recv", dst, stream)
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert ".remote-incoming is " + ("a symlink" if kind == "symlink" else "not a folder") in err
    assert sorted(p.name for p in outside.iterdir()) == ["keep"] and os.listdir(dst) == [".remote-incoming"]


@pytest.mark.fault("A compile cache's passport.json that is a FIFO or a symlink",
                   promise="the listing neither waits on it nor follows it: no passport (that cache serves no one), the "
                   "files listed at once")
@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_passport_that_is_a_fifo_or_a_symlink_is_not_read(tmp_path, kind):
    folder = tmp_path / "cache"
    make(folder)
    (folder / "passport.json").unlink()
    if kind == "fifo":
        os.mkfifo(folder / "passport.json")
    else:
        (tmp_path / "elsewhere.json").write_text('{"format": 1, "forged": true}')
        (folder / "passport.json").symlink_to(tmp_path / "elsewhere.json")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", CODE, "list", str(folder)], capture_output=True,
                       timeout=60)  # a FIFO opened without O_NONBLOCK would wait here for a writer
    got = json.loads(r.stdout)
    assert r.returncode == 0 and got["passport"] is None and "inductor/ab/key" in got["files"], r.stderr


def frame(rel: str, size, body: bytes = b"") -> bytes:
    return (json.dumps({"path": rel, "size": size, "mode": 0o644}) + "\n").encode() + body


@pytest.mark.fault("A compile-cache source that announces more than it listed",
                   promise="the receiver stops before writing a byte past what the listing held for the files asked "
                   "for, or past the target disk's free space less a reserve (exit 4, one line); files already in "
                   "place stay whole")
def test_announced_sizes_are_bounded_by_the_listing_and_the_free_space(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make(src)
    stream = run("send", src, (json.dumps(["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"])
                               + "\n").encode()).stdout
    # The listing held 5000 + 3000 bytes for these two; a budget of 6000 takes the first whole, stops at the second.
    r = subprocess.run([sys.executable, "-I", "-S", "-c", CODE, "recv", str(dst), "6000"], input=stream,
                       capture_output=True)
    assert r.returncode == 4 and b"announced more than the 6000 bytes" in r.stderr, r.stderr
    assert tree(dst) == ["inductor/ab/key"]  # the first whole, in place; nothing of the second written
    # A size past the disk's free space: refused before its first byte is written.
    r = run("recv", tmp_path / "dst2", frame("inductor/ab/huge", 1 << 60, b"z" * 1000))
    assert r.returncode == 4 and b"would leave less than the reserve free" in r.stderr, r.stderr
    assert tree(tmp_path / "dst2") == []
    for size in (-1, "12", 1.5, True):
        r = run("recv", tmp_path / "dst3", frame("inductor/ab/odd", size))
        assert r.returncode == 1 and b"refusing the size" in r.stderr and b"Traceback" not in r.stderr, r.stderr


@pytest.mark.fault("A compile-cache folder on another file system than the copy's staging (EXDEV)",
                   promise="the file is staged beside it and linked into place whole; the copy goes on")
def test_a_cache_folder_that_is_a_mount_point_gets_its_files(tmp_path):
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("this test needs root and unshare (a mount namespace of its own): run the suite as root, as .ci/run does (scripts/setup installs util-linux's unshare with Debian)")
    src, dst = tmp_path / "src", tmp_path / "dst"
    make(src)
    (dst / "inductor").mkdir(parents=True)
    stream = run("send", src, (json.dumps(["inductor/ab/key", "tmp/torchinductor_root/precompiled_headers/h.gch"])
                               + "\n").encode()).stdout
    # In a mount namespace of its own: dst/inductor a tmpfs (gone with the namespace), the staging folder not.
    script = ('mount -t tmpfs none "$1/inductor" || exit 77; "$2" -I -S -c "$3" recv "$1"; echo "rc=$?"; '
              'wc -c < "$1/inductor/ab/key"; ls -A "$1/inductor/ab"')
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(dst), sys.executable, CODE], input=stream,
                       capture_output=True, text=False)
    if r.returncode == 77:
        pytest.fail(f"no tmpfs mount in a mount namespace of the test's own: {r.stderr[-200:]!r}")
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("{") and json.loads(lines[0])["written"] == 2, r.stdout + r.stderr
    assert lines[1:] == ["rc=0", "5000", "key"], r.stdout + r.stderr  # whole, and no staged leftover beside it
