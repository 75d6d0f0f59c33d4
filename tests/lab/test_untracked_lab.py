"""Lab tier: deploy never deletes an untracked path that the new commit replaces (real git, real container)."""

import subprocess

import pytest
from support import LAB_CONTAINERS

from remote.cli.format import deploy_text
from remote.ops.deploy import deploy
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
CT = LAB_CONTAINERS[0]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.fault("Untracked files where the new commit puts a folder or a file",
                   promise="saved in a tarball and named before the checkout moves, at any depth, either direction")
def test_an_untracked_folder_and_file_in_the_new_commits_way_are_saved_and_named(lab_session, demo_repo):
    ct = lab_session.container(CT)
    deploy(target_of(lab_session, CT))
    # The dataset pushed last week, and a results file; the new commit tracks `data` and results/summary.md.
    ct.script("mkdir -p /root/dflash/data/shard && head -c 65536 /dev/urandom > /root/dflash/data/shard/0.bin && "
              "echo labels > /root/dflash/data/labels.txt && echo 'loss 0.1' > /root/dflash/results")
    digest = ct.run(["sha256sum", "/root/dflash/data/shard/0.bin"]).out.split()[0]
    (demo_repo / "data").write_text("see the README for the dataset\n")
    (demo_repo / "results").mkdir()
    (demo_repo / "results" / "summary.md").write_text("# results\n")
    git(demo_repo, "add", "data", "results")
    git(demo_repo, "commit", "-qm", "data pointer and results summary")
    try:
        summary = deploy(target_of(lab_session, CT))
        tar = [s for s in summary.saved if s.endswith("-untracked-overwritten.tar")]
        assert len(tar) == 1, deploy_text(summary)
        assert "data/ (2 files), results" in deploy_text(summary)
        ct.script(f"mkdir -p /root/restored && tar -xf {tar[0]} -C /root/restored")
        assert ct.run(["sha256sum", "/root/restored/data/shard/0.bin"]).out.split()[0] == digest
        assert ct.run(["cat", "/root/restored/data/labels.txt", "/root/restored/results"]).out == "labels\nloss 0.1\n"
        assert ct.run(["cat", "/root/dflash/data", "/root/dflash/results/summary.md"]).out == \
            "see the README for the dataset\n# results\n"
    finally:
        git(demo_repo, "rm", "-rq", "data", "results")
        git(demo_repo, "commit", "-qm", "drop them")
