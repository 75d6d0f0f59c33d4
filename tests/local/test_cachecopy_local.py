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
