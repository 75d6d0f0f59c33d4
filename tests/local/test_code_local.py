"""Local tier: code.bundle against real git repositories on this machine (no container)."""

import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from remote.ops import code as codemod


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def heads(tmp_path, data: bytes, name: str) -> dict[str, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return {ref: sha for sha, ref in (line.split() for line in git(tmp_path, "bundle", "list-heads", str(path)).splitlines())}


def test_concurrent_bundles_from_one_repository_each_hold_their_own_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commits = []
    for i in range(2):
        (repo / "f").write_text(f"{i}\n")
        git(repo, "add", "f")
        git(repo, "commit", "-qm", f"c{i}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    rounds = 15
    barrier = threading.Barrier(2)
    got: dict[int, list] = {0: [], 1: []}
    errors = []

    def worker(i):
        for _ in range(rounds):
            barrier.wait()
            try:
                got[i].append(codemod.bundle(str(repo), commits[i]))
            except Exception as exc:  # a bundle of a ref the other thread deleted fails outright
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(2):
        assert len(got[i]) == rounds
        for n, b in enumerate(got[i]):
            assert heads(tmp_path, b.data, f"b{i}-{n}") == {b.ref: commits[i]}
    assert len({b.ref for i in range(2) for b in got[i]}) == 2 * rounds  # never the same ref twice
    assert not git(repo, "for-each-ref", "refs/remote-deploy/")  # none left behind


SYNC = Path(__file__).resolve().parent.parent.parent / "remote" / "sh" / "code-sync.sh"


def commit_file(repo, name, text):
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-qm", f"{name}: {text.strip()}")
    return git(repo, "rev-parse", "HEAD")


def sync(tmp_path, checkout, b: codemod.Bundle, commit: str) -> subprocess.CompletedProcess:
    """code-sync.sh as deploy runs it in the container, here with this machine's bash and git."""
    bundle_file = tmp_path / "incoming.bundle"
    bundle_file.write_bytes(b.data)
    return subprocess.run(["bash", str(SYNC), str(checkout), commit, str(bundle_file), str(tmp_path / "patches"),
                           "20261201-000000", "{}", b.ref, " ".join(b.shallow)], capture_output=True, text=True)


@pytest.mark.fault("Deploy from a shallow clone", "a `git clone --depth 1` repository deploys: the container's "
                   "checkout is shallow at the same commits, then at exactly the commit, later commits shipped thin")
def test_a_shallow_clone_deploys_and_the_checkout_is_shallow_too(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    git(full, "init", "-q")
    for i in range(3):
        commit_file(full, f"f{i}", f"{i}\n")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{full}", str(clone))
    head = git(clone, "rev-parse", "HEAD")
    b = codemod.bundle(str(clone), head)
    assert b.shallow == (head,)
    checkout = tmp_path / "checkout"
    r = sync(tmp_path, checkout, b, head)
    assert r.returncode == 0, r.stderr
    assert git(checkout, "rev-parse", "HEAD") == head and git(checkout, "rev-parse", "--is-shallow-repository") == "true"
    assert sorted(p.name for p in checkout.iterdir() if p.name != ".git") == ["f0", "f1", "f2"]
    assert git(checkout, "status", "--porcelain") == ""

    # The next commit of the clone goes thin against what the checkout has; the boundary is already there.
    new = commit_file(clone, "f3", "3\n")
    b2 = codemod.bundle(str(clone), new, basis=head)
    assert b2.shallow == ()
    r = sync(tmp_path, checkout, b2, new)
    assert r.returncode == 0, r.stderr
    assert git(checkout, "rev-parse", "HEAD") == new and git(checkout, "status", "--porcelain") == ""


def test_a_whole_history_ships_no_shallow_boundary_and_a_full_checkout_stays_full(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    git(full, "init", "-q")
    first = commit_file(full, "a", "1\n")
    second = commit_file(full, "a", "2\n")
    b = codemod.bundle(str(full), second)
    assert b.shallow == ()
    checkout = tmp_path / "checkout"
    assert sync(tmp_path, checkout, b, second).returncode == 0
    assert git(checkout, "rev-parse", "--is-shallow-repository") == "false"
    # A clone at depth 1 of that same commit, deployed onto that full checkout: it has the commit, so it
    # is not made shallow.
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{full}", str(clone))
    b = codemod.bundle(str(clone), second)
    assert b.shallow == (second,)
    assert sync(tmp_path, checkout, b, second).returncode == 0
    assert git(checkout, "rev-parse", "--is-shallow-repository") == "false"
    assert git(checkout, "rev-parse", f"{second}~1") == first


def sync_to(checkout, commit, bundle_path, ref, stamp, patches):
    """remote/sh/code-sync.sh as deploy runs it (bash, strict mode), here against a local checkout."""
    from remote import shell
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + shell.load("code-sync"), "remote", str(checkout),
                           commit, str(bundle_path), str(patches), stamp, "{}", ref, ""],
                          capture_output=True, text=True, cwd="/")


def two_commits(tmp_path):
    """A repository with `base` (deep/er/tracked, a folder) and `new` (data, link, results/summary.md,
    notes and deep as files), each in a bundle of its own."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a").write_text("a\n")
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "tracked").write_text("t\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "rm", "-rq", "deep")
    for name, text in {"data": "file\n", "deep": "now a file\n", "notes": "committed\n"}.items():
        (repo / name).write_text(text)
    (repo / "link").symlink_to("a")
    (repo / "results").mkdir()
    (repo / "results" / "summary.md").write_text("s\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "new")
    new = git(repo, "rev-parse", "HEAD")
    out = {}
    for name, commit in (("base", base), ("new", new)):
        b = codemod.bundle(str(repo), commit)
        (tmp_path / f"{name}.bundle").write_bytes(b.data)
        out[name] = (commit, tmp_path / f"{name}.bundle", b.ref)
    return out


def untracked_in_the_way(co):
    (co / "data" / "sub").mkdir(parents=True)  # a dataset folder where the commit tracks a file
    (co / "data" / "ds.bin").write_bytes(b"\0big")
    (co / "data" / "sub" / "x").write_text("2\n")
    (co / "results").write_text("r\n")  # a file where the commit needs a folder
    (co / "link").mkdir()  # a folder where the commit tracks a symlink
    (co / "link" / "f").write_text("l\n")
    (co / "deep" / "er" / "untracked").write_text("mine\n")  # beside tracked files, in a folder that becomes a file
    (co / "notes").write_text("mine\n")  # the same path
    (co / "other").write_text("keep\n")  # in nobody's way


@pytest.mark.fault("Untracked files where the new commit puts a folder or a file",
                   promise="saved in a tarball and named before the checkout moves, at any depth, either direction")
def test_every_untracked_path_the_checkout_replaces_is_saved_and_named(tmp_path):
    c = two_commits(tmp_path)
    co, patches = tmp_path / "co", tmp_path / "co.patches"
    assert sync_to(co, *c["base"], "s1", patches).returncode == 0
    untracked_in_the_way(co)
    r = sync_to(co, *c["new"], "s2", patches)
    assert r.returncode == 0, r.stderr
    tar = patches / "s2-untracked-overwritten.tar"
    assert f"saved untracked files the commit replaces: {tar}" in r.stdout
    named = [line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("replaced untracked: ")]
    assert named == ["data/ (2 files)", "deep/ (1 file)", "link/ (1 file)", "notes", "results"]
    with tarfile.open(tar) as t:
        saved = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert saved == {"data/ds.bin": b"\0big", "data/sub/x": b"2\n", "deep/er/untracked": b"mine\n", "link/f": b"l\n",
                     "notes": b"mine\n", "results": b"r\n"}
    assert (co / "data").read_text() == "file\n" and (co / "results" / "summary.md").read_text() == "s\n"
    assert (co / "link").is_symlink() and (co / "other").read_text() == "keep\n"


@pytest.mark.fault("Untracked files where the new commit puts a folder or a file",
                   promise="when they cannot be saved the checkout does not move and they are named")
def test_untracked_paths_that_cannot_be_saved_stop_the_checkout_and_are_named(tmp_path):
    c = two_commits(tmp_path)
    co, patches = tmp_path / "co", tmp_path / "co.patches"
    assert sync_to(co, *c["base"], "s1", patches).returncode == 0
    untracked_in_the_way(co)
    (patches / "s2-untracked-overwritten.tar").mkdir(parents=True)  # the tarball cannot be written
    r = sync_to(co, *c["new"], "s2", patches)
    assert r.returncode == 3 and "the checkout did not move" in r.stderr
    assert "  data/ (2 files)\n" in r.stderr and "  results\n" in r.stderr
    assert git(co, "rev-parse", "HEAD") == c["base"][0]
    assert (co / "data" / "ds.bin").read_bytes() == b"\0big" and (co / "results").read_text() == "r\n"
