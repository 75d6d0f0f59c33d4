"""code.repo as a URL (issue 46): read as a URL, not a path; cloned into a cache clone on this machine, fetched
at each deploy, resolved at the pinned ref; a failing clone says so with the URL's secret redacted."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from remote import config as cfg
from remote.errors import DeployError
from remote.ops import code as codemod


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def origin(tmp_path: Path) -> tuple[Path, Path]:
    """A working repository and its bare origin (file://)."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "train.py").write_text("print('v1')\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "v1")
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    git(work, "remote", "add", "origin", str(bare))
    return work, bare


@pytest.mark.parametrize("url", ["https://github.com/org/trainer.git", "git@github.com:org/trainer.git",
                                 "ssh://git@host:2222/org/trainer", "file:///srv/git/trainer.git"])
def test_a_url_in_code_repo_stays_a_url(tmp_path, url):
    config = cfg.parse({"hosts": {"h": {"address": "h"}}, "containers": {200: {"host": "h"}},
                        "code": {"repo": url}}, str(tmp_path / "hosts.yaml"))
    assert config.containers[200].code.repo == url
    local = cfg.parse({"hosts": {"h": {"address": "h"}}, "containers": {200: {"host": "h"}},
                       "code": {"repo": "../trainer"}}, str(tmp_path / "hosts.yaml"))
    assert Path(local.containers[200].code.repo).resolve() == tmp_path.parent / "trainer"


@pytest.mark.fault("code.repo given as a URL", promise="a URL (https://, git@host:, ssh://, file://) in code.repo "
                   "is cloned into a cache clone on the controller, fetched at each deploy at the pinned ref and "
                   "shipped as a local repository; never read as a path")
def test_a_file_url_is_cloned_then_fetched_at_each_resolve(origin):
    work, bare = origin
    url = f"file://{bare}"
    first = codemod.resolve(url, "HEAD")
    assert first.commit == git(work, "rev-parse", "HEAD") and not first.dirty
    assert Path(first.repo) == codemod.cache_of(url) and str(Path.home()) in first.repo
    assert codemod.pin(url, "HEAD").commit == first.commit
    (work / "train.py").write_text("print('v2')\n")
    git(work, "commit", "-qam", "v2")
    git(work, "push", "-q", "origin", "main")
    assert codemod.pin(url, "HEAD").commit == first.commit  # the pin is what the last deploy fetched
    second = codemod.resolve(url, "HEAD")
    assert second.commit == git(work, "rev-parse", "HEAD") != first.commit
    assert codemod.show(second.repo, second.commit, "train.py") == "print('v2')\n"
    assert codemod.resolve(url, first.commit).commit == first.commit  # a pinned older commit
    assert codemod.bundle(second.repo, second.commit).data.startswith(b"# v2 git bundle")


def test_an_unknown_ref_of_a_url_is_named(origin):
    _, bare = origin
    with pytest.raises(DeployError, match="code.ref: 'nope' is not a commit of file://"):
        codemod.resolve(f"file://{bare}", "nope")


def test_a_url_that_cannot_be_cloned_is_named_with_its_secret_redacted(tmp_path):
    start = time.monotonic()
    with pytest.raises(DeployError) as caught:
        codemod.resolve("https://user:s3cret-token@127.0.0.1:9/org/trainer.git", "HEAD")
    message = str(caught.value)
    assert "s3cret" not in message and "https://***@127.0.0.1:9/org/trainer.git" in message
    assert "cannot clone" in message and "git ls-remote" in message
    with pytest.raises(DeployError, match="cannot clone git@nonexistent.invalid:org/trainer.git"):
        codemod.resolve("git@nonexistent.invalid:org/trainer.git", "HEAD")  # ssh-style: no prompt, no hang
    assert time.monotonic() - start < 60
    assert not list(codemod.cache_of("git@nonexistent.invalid:org/trainer.git").parent.glob("*.partial"))
    with pytest.raises(DeployError, match="not fetched here yet"):
        codemod.pin("git@nonexistent.invalid:org/trainer.git", "HEAD")


@pytest.mark.fault("code.repo given as a URL", promise="the cache clone of a URL (its config holds the URL, and any "
                   "token in it) is made under umask 077: its folders 0700, its config 0600, whatever the user's "
                   "umask; one made before with wider modes is tightened at the next deploy")
def test_the_cache_clone_holding_the_urls_token_is_readable_by_its_owner_only(origin):
    import os
    import stat

    _, bare = origin
    url = f"file://{bare}"
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    old = os.umask(0o022)  # the usual umask: what git would otherwise make is readable by everyone
    try:
        clone = Path(codemod.resolve(url, "HEAD").repo)
        assert url in (clone / "config").read_text()  # where a token in the URL would sit
        assert (mode(clone.parent), mode(clone), mode(clone / "config")) == (0o700, 0o700, 0o600)
        assert not [p for p in clone.rglob("*") if mode(p) & 0o077]
        for p, wide in ((clone.parent, 0o755), (clone, 0o755), (clone / "config", 0o644)):  # an older cache's modes
            p.chmod(wide)
        codemod.resolve(url, "HEAD")
        assert (mode(clone.parent), mode(clone), mode(clone / "config")) == (0o700, 0o700, 0o600)
        if os.geteuid() == 0:  # a cache another user owns: refused, never used nor changed
            os.chown(clone, 65534, 65534)
            with pytest.raises(DeployError, match=f"the cache {clone} is owned by uid 65534, not this user's own"):
                codemod.resolve(url, "HEAD")
    finally:
        os.umask(old)
