"""Lab tier: push and pull of files and trees through a real sshd and LXC: verified, resumable, streamed."""

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from remote.ops import files
from remote.errors import ConnectError, TransferError

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent


def remote_sha(ct, path):
    return ct.run(["sha256sum", "--", path]).out.split()[0]


def remote_exists(ct, path):
    return ct.run(["test", "-e", path], check=False).exit_code == 0


def random_file(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def tree_of(root: Path) -> dict:
    """Every file's bytes and every folder, by relative path."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = p.read_bytes() if p.is_file() else "dir"
    return out


def test_file_round_trip_is_verified_and_leaves_no_partial(ct, tmp_path):
    src = tmp_path / "data.bin"
    digest = random_file(src, 5 << 20)
    src.chmod(0o640)
    seen = []
    stats = files.push(ct, src, "/root/xfer/one/data.bin", progress=lambda d, t: seen.append((d, t)))
    assert (stats.sha256, stats.bytes, stats.resumed_from) == (digest, 5 << 20, 0)
    assert remote_sha(ct, "/root/xfer/one/data.bin") == digest
    assert ct.run(["stat", "-c", "%a", "/root/xfer/one/data.bin"]).out.strip() == "640"
    assert not remote_exists(ct, "/root/xfer/one/data.bin.partial")
    assert seen[-1] == (5 << 20, 5 << 20) and all(d <= t for d, t in seen)

    back = tmp_path / "back" / "data.bin"
    stats = files.pull(ct, "/root/xfer/one/data.bin", back)
    assert back.read_bytes() == src.read_bytes() and stats.sha256 == digest
    assert not (tmp_path / "back" / "data.bin.partial").exists()
    # A folder as the destination: the file lands inside it, under its own name.
    files.push(ct, src, "/root/xfer/one/")
    assert remote_sha(ct, "/root/xfer/one/data.bin") == digest
    files.pull(ct, "/root/xfer/one/data.bin", tmp_path)
    assert (tmp_path / "data.bin").read_bytes() == src.read_bytes()


NAMES = ["plain.txt", "ünïcødé ✓.txt", "with space", "quote'\"$`\\", "new\nline", "-leading-dash", "日本語/ファイル"]


def make_tree(root: Path, n: int = 300) -> None:
    for i in range(n):
        d = root / f"d{i % 7}" / f"e{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.bin").write_bytes(os.urandom(i * 37 % 5000))
    for name in NAMES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode() * 3)
    (root / "empty-file").write_bytes(b"")
    (root / "empty-dir" / "nested-empty").mkdir(parents=True)
    (root / "exe.sh").write_text("#!/bin/sh\n")
    (root / "exe.sh").chmod(0o755)


def test_tree_round_trip_with_nested_empty_and_non_ascii_names(ct, tmp_path):
    src = tmp_path / "src"
    make_tree(src)
    stats = files.push(ct, src, "/root/xfer/tree")
    assert stats.kind == "tree" and stats.files == 300 + len(NAMES) + 2
    assert ct.run(["test", "-x", "/root/xfer/tree/exe.sh"], check=False).exit_code == 0
    assert not remote_exists(ct, "/root/xfer/tree.partial")
    back = tmp_path / "back"
    stats = files.pull(ct, "/root/xfer/tree", back)
    assert stats.files == 300 + len(NAMES) + 2
    assert tree_of(back) == tree_of(src)
    assert not (tmp_path / "back.partial").exists()


def test_tree_push_merges_into_an_existing_folder(ct, tmp_path):
    ct.script("mkdir -p /root/xfer/merge && echo keep > /root/xfer/merge/kept && echo old > /root/xfer/merge/a")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("new\n")
    files.push(ct, src, "/root/xfer/merge")
    assert ct.run(["cat", "/root/xfer/merge/a", "/root/xfer/merge/kept"]).out == "new\nkeep\n"


def interrupting(ct, after: int):
    """A progress callback that drops the SSH connection once `after` bytes have moved."""
    def progress(done, total):
        if done >= after:
            ct.transport.close()
    return progress


@pytest.mark.fault("SSH dropped mid-push",
                   promise="no file at the destination, the partial kept; the retry resumes and verifies")
def test_interrupted_push_leaves_no_file_and_the_retry_resumes(ct, tmp_path):
    src = tmp_path / "big.bin"
    digest = random_file(src, 64 << 20)
    dest = "/root/xfer/cut/big.bin"
    with pytest.raises(ConnectError):
        files.push(ct, src, dest, progress=interrupting(ct, 40 << 20), attempts=1)
    assert not remote_exists(ct, dest)
    assert remote_exists(ct, dest + ".partial")  # what arrived, kept for the next attempt
    stats = files.push(ct, src, dest)
    assert 0 < stats.resumed_from < 64 << 20 and stats.sent == (64 << 20) - stats.resumed_from
    assert remote_sha(ct, dest) == digest
    assert not remote_exists(ct, dest + ".partial")


@pytest.mark.fault("SSH dropped mid-push",
                   promise="no file at the destination, the partial kept; the retry resumes and verifies")
def test_interrupted_push_is_retried_by_itself(ct, tmp_path):
    src = tmp_path / "big.bin"
    digest = random_file(src, 32 << 20)
    fired = []

    def progress(done, total):
        if done >= 20 << 20 and not fired:
            fired.append(done)
            ct.transport.close()

    stats = files.push(ct, src, "/root/xfer/retry.bin", progress=progress, attempts=3, sleep=lambda s: None)
    assert fired and stats.attempts == 2 and stats.resumed_from > 0
    assert remote_sha(ct, "/root/xfer/retry.bin") == digest


@pytest.mark.fault("SSH dropped mid-pull", promise="no local file, the partial kept; the retry resumes and verifies")
def test_interrupted_pull_leaves_no_file_and_the_retry_resumes(ct, tmp_path):
    src = tmp_path / "big.bin"
    digest = random_file(src, 64 << 20)
    files.push(ct, src, "/root/xfer/pull/big.bin")
    dest = tmp_path / "out" / "big.bin"
    with pytest.raises(ConnectError):
        files.pull(ct, "/root/xfer/pull/big.bin", dest, progress=interrupting(ct, 24 << 20), attempts=1)
    assert not dest.exists() and (tmp_path / "out" / "big.bin.partial").exists()
    stats = files.pull(ct, "/root/xfer/pull/big.bin", dest)
    assert stats.resumed_from > 0 and stats.sha256 == digest
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
    assert not (tmp_path / "out" / "big.bin.partial").exists()


@pytest.mark.fault("SSH dropped mid-pull", promise="no local file, the partial kept; the retry resumes and verifies")
def test_interrupted_tree_pull_leaves_nothing_and_the_retry_completes(ct, tmp_path):
    src = tmp_path / "src"
    make_tree(src, 100)
    random_file(src / "large.bin", 48 << 20)
    files.push(ct, src, "/root/xfer/tree-cut")
    dest = tmp_path / "out"
    with pytest.raises(ConnectError):
        files.pull(ct, "/root/xfer/tree-cut", dest, progress=interrupting(ct, 16 << 20), attempts=1)
    assert not dest.exists() and not (tmp_path / "out.partial").exists()
    files.pull(ct, "/root/xfer/tree-cut", dest)
    assert tree_of(dest) == tree_of(src)


@pytest.mark.fault("Corrupted transfer", promise="TransferError; the destination is left untouched")
def test_tampered_push_raises_and_leaves_the_destination_untouched(ct, tmp_path):
    dest = "/root/xfer/tamper.bin"
    ct.script('mkdir -p "${1%/*}" && printf before > "$1"', dest)
    src = tmp_path / "t.bin"
    random_file(src, 48 << 20)
    tampered = []

    def progress(done, total):
        # Once some of it has landed, change its first byte behind the receiving side's back.
        if done >= 32 << 20 and not tampered:
            probe = ct.run(["stat", "-c", "%s", dest + ".partial"], check=False)
            if probe.ok and int(probe.out) > 0:
                ct.run(["bash", "-c", 'printf X | dd of="$1" bs=1 count=1 conv=notrunc status=none', "-",
                        dest + ".partial"])
                tampered.append(done)

    with pytest.raises(TransferError, match="did not verify"):
        files.push(ct, src, dest, progress=progress)
    assert tampered
    assert ct.run(["cat", dest]).out == "before"
    assert not remote_exists(ct, dest + ".partial")


def test_pull_of_a_missing_path_says_so(ct, tmp_path):
    with pytest.raises(TransferError, match="no such file or folder"):
        files.pull(ct, "/root/xfer/nothing-here", tmp_path / "x")
    assert not (tmp_path / "x").exists()


MEASURE = r"""
import os, resource, sys
sys.path.insert(0, sys.argv[1])
from remote import config
from remote.ops import files
from remote.transport.session import Session

def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with Session(config.load(sys.argv[2]), agent=True) as s:
    ct = s.container(200)
    small = sys.argv[3] + ".small"
    open(small, "wb").write(b"x" * 1000)
    files.push(ct, small, "/root/xfer/mem-small")  # connected, agent started, modules imported
    base = rss_mb()
    files.push(ct, sys.argv[3], "/root/xfer/mem.bin")
    pushed = rss_mb()
    files.pull(ct, "/root/xfer/mem.bin", sys.argv[3] + ".back")
    print(base, pushed, rss_mb())
"""


def test_a_large_transfer_keeps_the_controller_small(lab_hosts, tmp_path):
    src = tmp_path / "mem.bin"
    random_file(src, 300 << 20)
    r = subprocess.run([sys.executable, "-c", MEASURE, str(ROOT), str(lab_hosts), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    base, pushed, pulled = map(float, r.stdout.split())
    assert pushed - base < 100, (base, pushed)  # peak RSS growth during a 300 MB push
    assert pulled - base < 100, (base, pulled)
    assert (tmp_path / "mem.bin.back").read_bytes() == src.read_bytes()


@pytest.mark.fault("Stale partial file", promise="not resumed from; the transfer starts over and verifies")
def test_a_partial_file_that_is_not_a_prefix_is_not_resumed_from(ct, tmp_path):
    src = tmp_path / "s.bin"
    digest = random_file(src, 3 << 20)
    dest = "/root/xfer/stale.bin"
    ct.script('mkdir -p "${1%/*}" && head -c 1000000 /dev/urandom > "$1.partial"', dest)
    stats = files.push(ct, src, dest)
    assert stats.resumed_from == 0 and remote_sha(ct, dest) == digest
    back = tmp_path / "back.bin"
    (tmp_path / "back.bin.partial").write_bytes(b"not the start of it" * 1000)
    stats = files.pull(ct, dest, back)
    assert stats.resumed_from == 0 and back.read_bytes() == src.read_bytes()


def test_dry_run_prints_the_plan_and_connects_nowhere(tmp_path):
    from remote.transport.pct import Container
    from remote.lab.testing import FakeTransport

    (tmp_path / "f.bin").write_bytes(b"x" * 10)
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    lines = []
    ct = Container(FakeTransport(), 200, dry=True, events=lambda e: lines.append(e.line))  # any command would raise
    assert files.push(ct, tmp_path / "f.bin", "/root/f.bin").bytes == 0
    assert files.push(ct, tmp_path / "tree", "/root/tree").bytes == 0
    assert files.pull(ct, "/root/f.bin", tmp_path / "back").bytes == 0
    commands = [line for line in lines if line.startswith("fake: ")]
    assert len(commands) == 5 and all("pct exec 200 --keep-env 0 -- env" in c for c in commands)
    assert any("/root/f.bin.partial /root/f.bin 644" in c for c in commands)
    assert not (tmp_path / "back").exists()


def test_a_command_after_a_dropped_connection_runs_on_a_new_agent(ct, lab_session):
    agent = ct.agent()
    assert agent is not None and ct.run(["echo", "one"]).out == "one\n"
    # The host's SSH connection dropped under the agent (and under the host's mux it starts through),
    # nobody told.
    lab_session.transport(lab_session.config.hosts["lab"])._conn.client.get_transport().close()
    assert ct.run(["echo", "two"]).out == "two\n"
    assert ct.agent() is not agent


def test_progress_is_throttled_and_ends_with_the_total():
    import io

    now = [100.0]
    out = io.StringIO()
    show = files.ProgressPrinter("push x", stream=out, clock=lambda: now[0])
    for i in range(1, 1001):  # 1,000 chunks over 10 s
        now[0] += 0.01
        show(i << 20, 1000 << 20)
    show(1000 << 20, 1000 << 20)  # a repeated final call prints nothing more
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # every 5 s when not a tty (one), and the end
    assert lines[0].startswith("push x: 500.0 MiB / 1000.0 MiB  50%")
    assert lines[-1] == "push x: 1000.0 MiB / 1000.0 MiB 100%  104.9 MB/s"


def remote_cli(hosts, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       capture_output=True, text=True, timeout=300)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.fault("A step's own exit status (tar's, a command's)",
                   promise="never remote's: a failed step exits 1 (its status in the message and .command_status); "
                           "only bad input exits 2 and only busy 3")
def test_push_of_a_folder_onto_a_file_exits_2_and_onto_a_full_disk_1_never_3(ct, lab_hosts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    random_file(src / "big.bin", 2 << 20)
    ct.script("umount /mnt/tiny 2>/dev/null || true; rm -rf /mnt/tiny /root/xfer/a-file.partial; "
              "mkdir -p /mnt/tiny /root/xfer && mount -t tmpfs -o size=256k tmpfs /mnt/tiny && "
              "echo keep > /root/xfer/a-file")
    try:
        r = remote_cli(lab_hosts, "push", "-c", "200", "--quiet", "--src", str(src), "--dest", "/root/xfer/a-file")
        assert r.returncode == 2, (r.returncode, r.stderr)  # commit_tree.sh's exit 3 made it "busy"
        assert "/root/xfer/a-file is a file there, not a folder" in r.stderr
        assert ct.run(["cat", "/root/xfer/a-file"]).out == "keep\n" and not remote_exists(ct, "/root/xfer/a-file.partial")

        r = remote_cli(lab_hosts, "push", "-c", "200", "--quiet", "--src", str(src), "--dest", "/mnt/tiny/out")
        assert r.returncode == 1, (r.returncode, r.stderr)  # tar's exit 2 made it "bad input"
        assert ("No space left on device" in r.stderr or "Wrote only" in r.stderr) and "push_tree.sh exited 2" in r.stderr
        assert ct.run(["ls", "-A", "/mnt/tiny"]).out == ""  # the half-written stage went with the failed tar
    finally:
        ct.script("umount /mnt/tiny 2>/dev/null || true; rm -rf /mnt/tiny /root/xfer/a-file")


@pytest.mark.fault("Pulled files' modes from the container (0777, 0600, setuid)",
                   promise="the user's umask applies; nothing is created group- or world-writable; a 0600 file "
                           "stays 0600; setuid/setgid dropped")
def test_pulled_files_and_trees_get_the_containers_modes_under_the_users_umask(ct, tmp_path):
    ct.script("rm -rf /root/xfer/modes && mkdir -p /root/xfer/modes/open /root/xfer/modes/private && "
              "cd /root/xfer/modes && echo k > key && chmod 600 key && echo a > open/all.sh && "
              "chmod 777 open open/all.sh && echo s > open/suid && chmod 4755 open/suid && "
              "echo p > private/p && chmod 700 private && chmod 640 private/p")

    def mode(path):
        return stat.S_IMODE(os.lstat(path).st_mode)

    old = os.umask(0o077)
    try:
        files.pull(ct, "/root/xfer/modes/key", tmp_path / "077" / "key")
        files.pull(ct, "/root/xfer/modes/open/all.sh", tmp_path / "077" / "all.sh")
        files.pull(ct, "/root/xfer/modes", tmp_path / "077" / "tree")
        os.umask(0o022)
        files.pull(ct, "/root/xfer/modes/key", tmp_path / "022" / "key")
        files.pull(ct, "/root/xfer/modes/open/all.sh", tmp_path / "022" / "all.sh")
        stats = files.pull(ct, "/root/xfer/modes", tmp_path / "022" / "tree")
    finally:
        os.umask(old)
    assert [mode(tmp_path / "077" / n) for n in ("key", "all.sh")] == [0o600, 0o700]  # 0644 before
    assert [mode(tmp_path / "022" / n) for n in ("key", "all.sh")] == [0o600, 0o755]
    t77, t22 = tmp_path / "077" / "tree", tmp_path / "022" / "tree"
    assert {n: mode(t77 / n) for n in ("key", "open", "open/all.sh", "open/suid", "private", "private/p")} == {
        "key": 0o600, "open": 0o700, "open/all.sh": 0o700, "open/suid": 0o700, "private": 0o700, "private/p": 0o600}
    assert {n: mode(t22 / n) for n in ("key", "open", "open/all.sh", "open/suid", "private", "private/p")} == {
        "key": 0o600, "open": 0o755, "open/all.sh": 0o755, "open/suid": 0o755, "private": 0o700, "private/p": 0o640}
    assert stats.refused == ("open/suid: setuid/setgid bit dropped",)
