"""Local tier: code.bundle against real git repositories on this machine (no container)."""

import subprocess
import threading

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
