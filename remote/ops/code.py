"""Ship exactly one commit into the container's checkout, saving what was edited there first.

Local side: resolve `ref` to a commit (a dirty tree is refused unless allowed; then the working
tree is shipped as a `git stash create` commit and recorded as dirty) and pack it as a bundle.
Container side: the checkout stays a real git repository. Before it moves, tracked edits are
saved as a patch and untracked files the new commit would overwrite are saved as a tarball;
untracked files are otherwise never touched. Afterwards tracked files equal the commit exactly.
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import shell
from ..errors import ALLOW_DIRTY, DeployError, worded
from ..naming import is_repo_url, redact

SHIP_PREFIX = "refs/remote-deploy/ship-"  # + a random token: one ref per bundle, so deploys never share one


def _ok(repo: str, *args: str) -> bool:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True).returncode == 0


def _git(repo: str, *args: str, check: bool = True) -> str:
    r = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise DeployError(f"git {' '.join(args)} failed in {repo}: {r.stderr.strip()}")
    return r.stdout


@dataclass(frozen=True)
class LocalCommit:
    repo: str
    commit: str
    ref: str
    dirty: bool
    base: str  # the commit a dirty tree was based on (== commit when clean)


def dirty_files(repo: str) -> list[str]:
    """Tracked files with uncommitted changes (untracked files are never shipped, so they don't count)."""
    return [line[3:] for line in _git(repo, "status", "--porcelain", "--untracked-files=no").splitlines()]


def resolve(repo: str, ref: str, allow_dirty: bool = False) -> LocalCommit:
    """The commit to ship for `ref`; refuse a dirty tree unless allowed. A URL: its cache clone, fetched now."""
    if is_repo_url(repo):
        clone = fetch_url(repo, ref)
        commit = _commit_of(clone, ref)
        if not commit:
            raise DeployError(f"code.ref: {ref!r} is not a commit of {redact(repo)} (fetched into {clone})")
        return LocalCommit(clone, commit, ref, False, commit)
    if not Path(repo).is_dir() or not _ok(repo, "rev-parse", "--git-dir"):
        raise DeployError(f"code.repo: {repo} is not a git repository")
    commit = _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).strip()
    if not commit:
        raise DeployError(f"code.ref: {ref!r} is not a commit in {repo}")
    changed = dirty_files(repo) if ref == "HEAD" else []
    if changed and not allow_dirty:
        listing = "\n  ".join(changed[:20]) + ("\n  ..." if len(changed) > 20 else "")
        raise worded(DeployError(f"{repo} has uncommitted changes; commit them, or pass {ALLOW_DIRTY} to ship them "
                                 f"(recorded as dirty):\n  {listing}"), ALLOW_DIRTY)
    if changed:
        stash = _git(repo, "stash", "create", f"remote deploy of a dirty tree based on {commit[:12]}").strip()
        return LocalCommit(repo, stash or commit, ref, bool(stash), commit)
    return LocalCommit(repo, commit, ref, False, commit)


# -- code.repo as a URL: a bare clone per URL on this machine, fetched at each deploy, shipped as a local repo --

FETCH_TIMEOUT = 1800  # seconds a clone or fetch may take (a big repository over a slow link)


def cache_of(url: str) -> Path:
    """The cache clone of `url`: ~/.cache/remote/repos/<sha256 of the URL> ($XDG_CACHE_HOME respected); the
    URL itself (with any token in it) is never a file name."""
    import hashlib
    import os

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "remote" / "repos" / hashlib.sha256(url.encode()).hexdigest()[:24]


def _commit_of(repo: str, ref: str) -> str:
    return _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).strip()


def fetch_url(url: str, ref: str) -> str:
    """The cache clone of `url` with its branches and tags fetched now (and `ref` itself, where it is a commit
    no branch holds): a bare repository that deploy ships from as from a local one. Git's own credentials
    apply (its credential helpers, ssh-agent, ~/.ssh/config); it is never asked to prompt. What git says is
    shown with the URL's user and password redacted."""
    import os

    if ref.startswith("-") or url.startswith("-"):  # git would read it as an option (--upload-pack=CMD runs CMD)
        raise DeployError(f"code.ref {ref!r} / code.repo {redact(url)!r}: it starts with '-', which git reads as an option, not a ref or URL")
    clone = cache_of(url)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # a missing credential fails, never waits on a prompt
    if "GIT_SSH_COMMAND" not in env and "GIT_SSH" not in env and not _ok(str(Path.home()), "config", "--get",
                                                                      "core.sshCommand"):
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # a passphrase or host-key prompt: fail instead of hang

    def git(*args: str, where: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            # umask 077: the clone's config holds the URL, and any token in it, so what git writes is ours alone
            return subprocess.run(["git", *(["-C", where] if where else []), *args], capture_output=True, text=True,
                                  env=env, stdin=subprocess.DEVNULL, timeout=FETCH_TIMEOUT, umask=0o077)
        except subprocess.TimeoutExpired:
            raise DeployError(f"code.repo: git {args[0]} of {redact(url)} took over {FETCH_TIMEOUT} s: check the "
                              "network, or clone it yourself and set code.repo to the clone's path") from None

    def failed(what: str, r: subprocess.CompletedProcess[str]) -> DeployError:
        said = _redact_text(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}")
        return DeployError(f"code.repo: cannot {what} {redact(url)}: {said}. Check that `git ls-remote URL` works on "
                           "this machine (its credentials: a credential helper, ssh-agent, ~/.ssh/config), or set "
                           "code.repo to a local clone's path")

    clone.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _keep_private(clone.parent)
    if (clone / "HEAD").exists():
        _keep_private(clone)
    if not (clone / "HEAD").exists():
        partial = clone.with_name(clone.name + ".partial")
        if partial.exists():
            import shutil

            shutil.rmtree(partial)
        r = git("clone", "--bare", "--quiet", "--", url, str(partial))
        if r.returncode:
            raise failed("clone", r)
        partial.rename(clone)  # whole or not at all: an interrupted clone is never taken for a cache
    else:
        r = git("fetch", "--quiet", "--prune", "--force", "origin", "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*", where=str(clone))
        if r.returncode:
            raise failed("fetch", r)
        head = git("ls-remote", "--symref", "origin", "HEAD", where=str(clone))
        branch = next((line.split()[1] for line in head.stdout.splitlines() if line.startswith("ref: ")), None)
        if branch:  # the remote's default branch changed: HEAD follows it
            git("symbolic-ref", "HEAD", branch, where=str(clone))
    if ref != "HEAD" and not _commit_of(str(clone), ref):
        r = git("fetch", "--quiet", "origin", ref, where=str(clone))  # a commit of no branch, a PR ref
        if r.returncode == 0:
            _git(str(clone), "update-ref", f"refs/remote-fetched/{secrets.token_hex(4)}", "FETCH_HEAD")
    return str(clone)


def _keep_private(path: Path) -> None:
    """A cache folder (and a clone's config, which holds the URL with any token in it) readable by its owner
    only: one made before under a wider umask is tightened; one another user owns is refused, never used."""
    import os
    import stat

    for p, mode in ((path, 0o700), (path / "config", 0o600)):
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"owned by uid {st.st_uid}"
            raise DeployError(f"code.repo: the cache {p} is {what}, not this user's own: it holds the URL's "
                              "credentials and what deploy ships; remove it (the next deploy clones again)")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(p, mode)


def _redact_text(text: str) -> str:
    """Every URL in git's words with its user and password replaced."""
    import re

    return re.sub(r"\S+://\S+", lambda m: redact(m.group()), text)


@dataclass(frozen=True)
class Pin:
    """What the hosts file pins: code.ref of code.repo, resolved on this machine as deploy resolves it (no
    stash is made: a dirty tree is named in `edited`, for a note)."""

    repo: str
    ref: str
    commit: str
    edited: tuple[str, ...] = ()  # tracked files with uncommitted changes (code.ref HEAD only)


def pin(repo: str, ref: str) -> Pin:
    """code.ref of code.repo now; DeployError when the repository or the ref is not there. A URL: as its cache
    clone holds it since the last deploy's fetch (no network: what that deploy shipped is what is pinned)."""
    if is_repo_url(repo):
        clone = cache_of(repo)
        commit = _commit_of(str(clone), ref) if (clone / "HEAD").exists() else ""
        if not commit:
            raise DeployError(f"code.repo: {redact(repo)} is not fetched here yet (or has no {ref!r}): "
                              "`remote deploy` clones it")
        return Pin(redact(repo), ref, commit)
    if not Path(repo).is_dir() or not _ok(repo, "rev-parse", "--git-dir"):
        raise DeployError(f"code.repo: {repo} is not a git repository")
    commit = _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).strip()
    if not commit:
        raise DeployError(f"code.ref: {ref!r} is not a commit in {repo}")
    return Pin(repo, ref, commit, tuple(dirty_files(repo)) if ref == "HEAD" else ())


def pin_of(repo: str | None, ref: str) -> Pin | str | None:
    """The hosts file's pin (code.repo, code.ref), why it cannot be read here (a str), or None without code.repo."""
    if not repo:
        return None
    try:
        return pin(repo, ref)
    except DeployError as exc:
        return str(exc)


def stale(p: Pin, record: dict | None) -> str | None:
    """How the deployed checkout (its deploy record) differs from what the hosts file pins now, or None when
    it is that commit (a dirty deploy: based on it). No record: nothing to compare (other checks say so). Pure."""
    if not record:
        return None
    deployed = str((record.get("base") or record.get("commit")) if record.get("dirty") else record.get("commit"))
    if deployed == p.commit:
        return None
    return (f"the checkout is at {deployed[:12]}, but the hosts file pins {p.commit[:12]} (code.ref {p.ref} of "
            f"{p.repo})")


def show(repo: str, commit: str, path: str) -> str | None:
    """A file's content at `commit`, or None when it has no such file."""
    r = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


@dataclass(frozen=True)
class Bundle:
    data: bytes
    ref: str  # the one ref it holds, pointing at the commit
    # A shallow clone's boundary commits the bundle reaches: their parents are not in it, so the checkout
    # that fetches it is made shallow at them too (code-sync.sh), or git refuses the fetch.
    shallow: tuple[str, ...] = ()


def bundle(repo: str, commit: str, basis: str | None = None) -> Bundle:
    """A git bundle holding `commit` (thin against `basis` when the local repo knows it), under a ref of
    its own: two deploys from one repository at once never move each other's ref."""
    ref = SHIP_PREFIX + secrets.token_hex(8)
    _git(repo, "update-ref", ref, commit)
    try:
        with tempfile.TemporaryDirectory() as d:
            out = str(Path(d) / "ship.bundle")
            thin = bool(basis and basis != commit and _ok(repo, "merge-base", "--is-ancestor", basis, commit))
            _git(repo, "bundle", "create", "-q", out, ref, *([f"^{basis}"] if thin else []))
            return Bundle(Path(out).read_bytes(), ref, shallow_boundary(repo, commit, basis if thin else None))
    finally:
        _git(repo, "update-ref", "-d", ref, check=False)


def shallow_boundary(repo: str, commit: str, basis: str | None = None) -> tuple[str, ...]:
    """The shallow commits of `repo` (a `git clone --depth N`) that a bundle of `commit` holds: the commits
    whose parents it lacks. Empty for a repository with its whole history."""
    if _git(repo, "rev-parse", "--is-shallow-repository", check=False).strip() != "true":
        return ()
    shallow_file = Path(repo) / _git(repo, "rev-parse", "--git-path", "shallow").strip()
    marked = set(shallow_file.read_text().split()) if shallow_file.exists() else set()
    # rev-list stops at a shallow commit: the commits the bundle holds are exactly these.
    held = _git(repo, "rev-list", commit, *([f"^{basis}"] if basis else [])).split()
    return tuple(c for c in held if c in marked)


def needs_sync(local: LocalCommit, probe_code: dict) -> str | None:
    """Why the checkout must be synced, or None when it already is exactly `local`. Pure."""
    if not probe_code["exists"]:
        return "no checkout yet"
    if not probe_code["git"]:
        return "the checkout is not a git repository"
    if not probe_code.get("has_git"):
        raise DeployError("git is not installed in the container: install it (apt-get install git) and retry")
    if probe_code["head"] != local.commit:
        return f"checkout at {(probe_code['head'] or 'nothing')[:12]}, want {local.commit[:12]}"
    if probe_code["status"]:
        return "the checkout has local edits"
    return None


def sync_script() -> str:
    """Bash, in the container (remote/sh/code-sync.sh): move the checkout to one commit from a bundle."""
    return shell.load("code-sync")
