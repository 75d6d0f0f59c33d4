"""`deploy`: the exact-commit checkout and the pinned venv, as one probe, a plan and the steps still needed.

A no-op deploy is one probe round trip. Otherwise, under the container's operation lease
(remote.ops.oplock) and only while no training job runs there (unless --force): clean up what an
interrupted deploy left, make sure the pinned uv is there, build the venv beside the current one and
verify it; then, as the last steps, sync the code (edits saved as a patch first) and swap the venv
in atomically, keeping the previous one for --rollback. A failed build leaves code and venv as they were.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import facts, shell
from ..config import ContainerSpec, VenvSpec
from ..errors import FORCE, BusyError, CommandError, ConfigError, DeployError, RemoteError, call, worded
from ..facts.deployed import DeployProbe, deploy_probe_of
from ..naming import json_loads, printable
from ..results import DeployPlan
from ..target import Target
from ..transport.pct import Container
from . import code as codemod
from . import dryplan, fetched, files, jobenv, jobs, oplock
from . import venv as venvmod
from .logs import LineSplitter

BUILD_TIMEOUT = 3 * 3600
# Never download Pythons, ignore stray uv.toml files, and trust the container's CA store (proxies).
UV_ENV = {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "UV_SYSTEM_CERTS": "1"}


@dataclass
class _Changes:
    """What a deploy has done so far (or would do), gathered as it goes; deploy returns it as a DeployPlan."""

    ctid: int
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)  # patches and tarballs of container edits
    drift: list[str] = field(default_factory=list)
    torch: dict | None = None
    seconds: float = 0.0
    dry: bool = False  # --dry: nothing was changed; `changed` is what would have been

    def plan(self, applied: bool) -> DeployPlan:
        return DeployPlan(self.ctid, applied and not self.dry, tuple(self.changed), tuple(self.kept), tuple(self.saved),
                          tuple(self.drift), self.torch, self.seconds, self.dry)


class LockOnce:
    """The lock resolved once for a deploy of several containers: the first container that needs a build
    resolves it (`uv pip compile`, nothing installed), and every container with the same venv spec
    installs exactly that lock. Thread-safe; the others wait while the first resolves."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._locks: dict[str, str] = {}

    def get(self, want: str, resolve: Callable[[], str]) -> str:
        with self._mutex:
            if want not in self._locks:
                self._locks[want] = resolve()
            return self._locks[want]


def _resolve_lock(t: Target, found: DeployProbe, uv: str, spec_in: str) -> str:
    """The lock of `spec_in` (a file in the container), resolved there for its interpreter."""
    ct, spec = t.system, t.spec
    r = ct.run(_with_index_env(spec, [uv, "pip", "compile", "--quiet", "--python", found.python.executable,
                                      "--generate-hashes", "--no-header", "--no-annotate",
                                      *venvmod.uv_index_args(spec.venv), spec_in]),
               env=UV_ENV, stdin=jobenv.stdin_for(venvmod.uv_index_env(spec.venv)) or None, timeout=1800, mutates=False,
               label="resolve the lock (uv pip compile)")
    return r.out


def _with_index_env(spec: ContainerSpec, argv: list[str]) -> list[str]:
    """argv run under withenv.sh, which reads uv's credentialed index URLs from stdin (uv_index_env)."""
    return ["bash", "-c", shell.load("withenv"), "withenv", *argv] if venvmod.uv_index_env(spec.venv) else argv


def local_uv_binary(venv: VenvSpec, machine: str) -> tuple[Path, str]:
    """The pinned uv binary for the container's architecture, cached on the controller, and its sha256
    (remote.ops.fetched: a find_links wheel, the controller's own uv of that version, or the index)."""
    return fetched.uv_binary(venv, machine)


def probe(t: Target) -> DeployProbe:
    """Everything deploy needs to know about the container, in one round trip (the facts probe's
    deploy parts: interpreter, venv and its versions, uv, the operation lease, the checkout)."""
    return deploy_probe_of(facts.read_raw(t, facts.DEPLOY)[0], t.spec)


def _streamer(output: Callable[[str], None]) -> Callable[[str, bytes], None]:
    """Container output to the console, line by line and indented, as it arrives."""
    splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}

    def on_output(kind: str, chunk: bytes) -> None:
        for line in splitters[kind].feed(chunk):
            output(printable("    " + line))  # a build's output: not the job's, shown as one rule says

    return on_output


@dataclass
class Plan:
    """What deploy still has to do, from one probe."""

    want: str  # the spec hash of the wanted venv
    req_text: str | None
    guard: bytes
    venv: venvmod.VenvPlan
    code: str | None  # why the checkout must be synced, or None
    unfinished: list[str]  # what interrupted builds left in the versions folder

    @property
    def empty(self) -> bool:
        return self.venv.action == "none" and not self.code and not self.unfinished


def _check_interpreter(spec: ContainerSpec, found: DeployProbe) -> None:
    interpreter = found.python.executable
    if any(interpreter.startswith(p.rstrip("/") + "/") for p in (spec.venv.path, facts.versions_dir(spec))):
        raise DeployError(f"venv.python {spec.venv.python!r} resolves to {interpreter}, inside the venv that deploy "
                          "manages: name the system interpreter, e.g. /usr/bin/python3")


def make_plan(spec: ContainerSpec, found: DeployProbe, local: codemod.LocalCommit | None) -> Plan:
    """What is still to do, from the probe's answer and the local commit."""
    _check_interpreter(spec, found)
    req_text = None
    if spec.venv.requirements:
        if not local:
            raise DeployError("venv.requirements is relative to the checkout: set code.repo too")
        req_text = codemod.show(local.repo, local.commit, spec.venv.requirements)
        if req_text is None:
            raise DeployError(f"venv.requirements: {spec.venv.requirements} is not in commit {local.commit[:12]}")
    guard = venvmod.GUARD_SOURCE.read_bytes()
    py = f"{found.python.version} {found.python.executable}"
    # The watch is part of what a venv holds: a new watch builds a new venv (the guard's bytes stay first,
    # so the hash of a venv made before the watch existed is not the hash of one with it).
    # The checkpoint helper and the rules it imports likewise (after the watch's bytes, for the same reason).
    want = venvmod.spec_hash(spec.venv, py, req_text, guard + venvmod.WATCH_SOURCE.read_bytes()
                             + b"".join(p.read_bytes() for p in venvmod.CHECKPOINT_SOURCES.values()))
    return Plan(want, req_text, guard, venvmod.plan(spec.venv, want, found.parts),
                codemod.needs_sync(local, found.parts["code"]) if local else None, list(found.unfinished))


def deploy(t: Target, *, allow_dirty: bool = False, check: bool = False, rollback: bool = False,
           force: bool = False, lease_ttl: float = oplock.TTL,
           lock: LockOnce | None = None) -> DeployPlan:
    """Bring the container to the configured commit and venv; a no-op when both already match.
    `lock`, shared by the deploys of several containers, makes them all install the one lock it resolves.

    Changes are made under the container's operation lease (remote.ops.oplock) and refused while a
    training job runs there, unless `force`; a venv that a live process uses is never deleted."""
    start = time.monotonic()
    spec = t.spec
    # Never with the venv on PATH: `python3` could then be the very venv that is being replaced.
    ct = t.system
    summary = _Changes(spec.ctid, dry=ct.dry)
    local = codemod.resolve(spec.code.repo, spec.code.ref, allow_dirty) if spec.code.repo else None
    found = probe(t)
    lease = oplock.parse(found.lease) if found.lease else None
    if not check and lease is not None and oplock.live_foreign(lease):  # another deploy, warmup or launch is changing it now
        raise oplock.busy_error(spec.ctid, lease)
    if rollback:
        _check_interpreter(spec, found)
        with _held(ct, "deploy --rollback", lease_ttl, summary):
            _refuse_running_job(t, force, summary)
            _rollback(t, probe(t), summary)  # probed again, under the lease
        summary.seconds = time.monotonic() - start
        return summary.plan(applied=True)

    plan = make_plan(spec, found, local)
    summary.drift = plan.venv.drift.lines()
    if not check and not force and plan.venv.action != "none":
        _refuse_emptying(t, found, plan)
    if check:
        if plan.code:
            summary.changed.append(f"code would be synced: {plan.code}")
        if plan.venv.action != "none":
            summary.changed.append(f"venv would be rebuilt: {plan.venv.reason}")
        summary.seconds = time.monotonic() - start
        return summary.plan(applied=False)
    if plan.empty:  # the no-op deploy: one round trip, nothing locked
        if local:
            summary.kept.append(f"code at {local.commit[:12]}{' (dirty)' if local.dirty else ''}")
        summary.kept.append(f"venv {found.venv_real} (spec {plan.want})")
        summary.torch = _recorded_verify(found)
        summary.seconds = time.monotonic() - start
        return summary.plan(applied=True)

    with _held(ct, "deploy", lease_ttl, summary) as held:
        _refuse_running_job(t, force, summary)
        # Probed again under the lease: nothing else changes the container while this plan is carried out.
        found = probe(t)
        plan = make_plan(spec, found, local)
        what = local.commit if local else f"venv spec {plan.want}"
        # The Proxmox snapshot (deploy.snapshot) is taken once the venv is built and verified, just before the
        # first change to what runs (the checkout, the venv's link): a deploy that fails before (a build that
        # fails, a bad lock) changed nothing and takes none, so it never counts against keep_snapshots.
        _apply(t, found, plan, local, held, summary, lock, before_change=lambda: _snapshot(t, what, summary))
    summary.seconds = time.monotonic() - start
    return summary.plan(applied=True)


def _package_name(requirement: str) -> str:
    """`torch==2.11.0+cu128`, `Torch[extra] >= 2`, `torch @ https://...`: the distribution's normalised name."""
    import re

    return re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _recorded_verify(found: DeployProbe) -> dict | None:
    """The kept venv's check as its record holds it (what DeployPlan.torch shows)."""
    got = found.venv_record.record.get("verify") if found.venv_record else None
    return dict(got) if isinstance(got, dict) else None


def _refuse_emptying(t: Target, found: DeployProbe, plan: Plan) -> None:
    """A venv section not filled in yet (`remote init` writes `packages: []`) would swap a working venv for an
    empty one: refuse a venv with no packages at all, or without torch where the current one has it, naming
    the section to fill (force=True deploys it anyway)."""
    spec = t.spec
    lines = [line for line in (plan.req_text or "").splitlines() if line.strip() and not line.lstrip().startswith(("#", "-"))]
    names = {_package_name(p) for p in (*spec.venv.packages, *lines)}
    had_torch = found.venv_record.verify.torch if found.venv_record else None
    if not names:
        why = "one with no packages at all (venv.packages is empty" + \
              (f", {spec.venv.requirements} lists none)" if spec.venv.requirements else " and there is no venv.requirements)")
    elif had_torch and "torch" not in names:
        why = (f"one without torch (neither venv.packages nor venv.requirements names torch; the venv there has "
               f"torch {printable(str(had_torch))})")
    else:
        return
    also = "" if spec.code.repo else "; code.repo is not set either (your git repository: nothing of your code is deployed)"
    now = f" (torch {printable(str(had_torch))})" if had_torch else ""
    raise worded(ConfigError(t.session.config.file, "venv.packages",
                             f"this deploy would replace container {spec.ctid}'s venv{now} with {why}{also}. Fill in "
                             "the section(s) `remote init` marked `TO FILL` (venv: the packages to install, e.g. "
                             f"[torch==2.11.0+cu128]), or deploy it anyway with {FORCE}"), FORCE)


def _snapshot(t: Target, what: str, summary: _Changes) -> None:
    from . import snapshots

    spec = t.spec
    taken = snapshots.before_deploy(t, what)
    if taken.name:
        summary.changed.append(f"snapshot {taken.name} before the deploy (`remote rollback -c {spec.ctid}` returns "
                               "the whole container to it)")
        summary.changed += [f"deleted remote's older snapshot {name} (deploy.keep_snapshots: "
                            f"{spec.deploy.keep_snapshots})" for name in taken.deleted]
    elif spec.deploy.snapshot != "never":
        t.note(f"{taken.note}; deploying without one")


@contextmanager
def _held(ct: Container, command: str, ttl: float, summary: _Changes) -> Iterator[oplock.Lease]:
    """The container's operation lease, noting in the summary an expired one that was taken over."""
    with oplock.hold(ct, command, ttl=ttl) as held:
        if held.took_over:
            summary.changed.append(f"took over the expired operation lease of {held.took_over.get('holder')} "
                                   f"({held.took_over.get('command')} since {held.took_over.get('started')})")
        yield held


def _refuse_running_job(t: Target, force: bool, summary: _Changes) -> None:
    """A running job would find its checkout rewritten and its venv swapped under it: refuse unless forced.
    Every live run counts, not only the latest (`train --force` starts one beside another)."""
    spec = t.spec
    live = jobs.state(t).live
    if not live:
        return
    what = jobs.live_text(live)
    if not force:
        stop = call(spec.ctid, "stop()")
        raise worded(BusyError(spec.ctid, f"container {spec.ctid}: {what} {'is' if len(live) == 1 else 'are'} still "
                                          f"running; a deploy would change its checkout and venv under it. Stop it "
                                          f"first ({stop} stops every live run), or pass {FORCE} (a venv is kept "
                                          "while any process uses it)", jobs.busy_details(live)), stop, FORCE)
    t.step(f"forced: deploying while {what} {'is' if len(live) == 1 else 'are'} running")
    summary.kept.append(f"{what} left running (forced)")


def _apply(t: Target, found: DeployProbe, plan: Plan, local: codemod.LocalCommit | None,
           held: oplock.Lease, summary: _Changes, lock: LockOnce | None = None,
           before_change: Callable[[], None] | None = None) -> None:
    """Clean up, build and verify the venv, then move the code and swap the venv as the very last steps,
    so a failed build leaves both the old checkout and the old venv."""
    ct, spec = t.system, t.spec
    summary.drift = plan.venv.drift.lines()
    if plan.unfinished:
        t.step(printable(f"cleaning up an interrupted deploy: {', '.join(plan.unfinished)}"))
        _cleanup(ct, facts.versions_dir(spec), plan.unfinished)
        summary.changed.append("removed half-built venv(s) left by an interrupted deploy: "
                               + ", ".join(plan.unfinished))

    target = None
    if plan.venv.action == "none":
        summary.kept.append(f"venv {found.venv_real} (spec {plan.want})")
        summary.torch = _recorded_verify(found)
    else:
        t.step(printable(f"venv: {plan.venv.reason}"))
        for line in plan.venv.drift.lines():
            t.output(printable(f"    {line}"))  # the container's package names and versions
        if plan.venv.action == "swap":
            target = f"{facts.versions_dir(spec)}/{plan.venv.reuse}"
            record = _read_record(ct, target)
            changed = None if ct.dry else _changed_since_built(t, target, record)
            if changed:  # a kept build is swapped back in only as it was verified
                t.output(printable(f"    {plan.venv.reuse} is not as it was built ({changed}): building a new one instead"))
                target, summary.torch = _build(t, found, plan.want, plan.req_text, plan.guard, lock)
            else:
                summary.torch = record.get("verify")
        else:
            target, summary.torch = _build(t, found, plan.want, plan.req_text, plan.guard, lock)

    held.check()
    if before_change is not None and (target or plan.code and local is not None):
        before_change()
        held.check()
    if plan.code and local is not None:  # make_plan asks for a sync only with a local commit
        t.step(printable(f"code: {plan.code}"))
        _sync_code(t, local, found.code_head, summary)
    elif local:
        summary.kept.append(f"code at {local.commit[:12]}{' (dirty)' if local.dirty else ''}")
    if target:
        _swap(t, target, summary)
        for path in _prune(t, keep={target, found.venv_real}):
            summary.kept.append(f"venv {path}: a live process still uses it (removed by a later deploy)")
        summary.changed.append(f"venv {spec.venv.path} -> {target}")
        if found.venv_real:
            summary.kept.append(f"previous venv {found.venv_real} (deploy --rollback returns to it)")
    if ct.dry:  # what a dry warmup or train after this one plans from (remote.ops.dryplan)
        planned: dict = {}
        if plan.code and local is not None:
            planned["code"] = {"commit": local.commit, "ref": local.ref, "dirty": local.dirty, "base": local.base}
        if target:
            planned["venv"] = {"spec_hash": plan.want, "real": target, "verify": summary.torch, "planned": True}
        dryplan.record(spec, **planned)


def _changed_since_built(t: Target, target: str, record: dict) -> str | None:
    """How a kept build differs from its lock and its verify now (a package installed into it, a torch
    that no longer imports), or None when it is still exactly what was verified."""
    ct, spec = t.system, t.spec
    r = ct.run(venvmod.verify_argv(f"{target}/bin/python"), timeout=600, check=False, mutates=False,
               label=f"verify {target}")
    try:
        info = json_loads(r.out)
    except ValueError:
        return f"its interpreter does not run: {(r.err or r.out).strip()[-200:]}"
    drift = venvmod.drift(venvmod.parse_lock((record.get("lock") or "").splitlines()), info.get("dists") or {})
    if drift:
        return "; ".join(drift.lines()[:3])
    try:
        venvmod.check_verify(spec.venv, info)
    except DeployError as exc:
        return str(exc)
    return None


def _sync_code(t: Target, local: codemod.LocalCommit, remote_head: str | None,
               summary: _Changes) -> None:
    ct, spec = t.system, t.spec
    shipped = codemod.bundle(local.repo, local.commit, basis=remote_head)
    stamp = venvmod.stamp()
    bundle_path = f"{spec.code.path}.remote-incoming.bundle"
    files.push_bytes(ct, shipped.data, bundle_path, 0o600)
    record = json.dumps({"commit": local.commit, "ref": local.ref, "dirty": local.dirty, "base": local.base,
                         "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    result = ct.script(codemod.sync_script(), spec.code.path, local.commit, bundle_path, f"{spec.code.path}.patches",
                       stamp, record, shipped.ref, " ".join(shipped.shallow), timeout=600, label="code sync")
    replaced = []
    for line in result.out.splitlines():
        if line.startswith("saved "):
            summary.saved.append(line.split(": ", 1)[1])
        elif line.startswith("replaced untracked: "):
            replaced.append(line.split(": ", 1)[1])
        elif line.startswith("removed stale lock: "):  # an interrupted deploy's git left it (code-sync.sh)
            summary.changed.append(line)
    if replaced:
        summary.changed.append(f"untracked paths in {spec.code.path} replaced by the commit (saved first, see below): "
                               + ", ".join(replaced))
    summary.changed.append(f"code {spec.code.path} at {local.commit[:12]}{' (dirty tree)' if local.dirty else ''}")


def _cleanup(ct: Container, versions: str, names: list[str]) -> None:
    """Stop the builders an interrupted deploy left running (recognised by their environment, never by a
    pid file alone), then delete their half-built venvs."""
    ct.script(shell.load("venv-cleanup"), versions, *names, timeout=600, label="venv cleanup")


def _ensure_uv(t: Target, machine: str) -> str:
    """The pinned uv in the container, byte for byte: pushed again when its sha256 differs from ours."""
    ct, spec = t.system, t.spec
    path = facts.uv_path(spec.venv.uv_version)
    binary, digest = local_uv_binary(spec.venv, machine)
    there = ct.run(["sha256sum", "--", path], check=False, mutates=False, timeout=120).out.split()
    if there[:1] == [digest]:
        return path
    why = "its sha256 differs" if there else "not there yet"
    t.step(f"installing uv {spec.venv.uv_version} in the container ({why}; {binary.stat().st_size >> 20} MiB, "
           "verified)")
    files.push_file(ct, binary, path, 0o755)
    return path


def _build(t: Target, found: DeployProbe, want: str, req_text, guard: bytes,
           lock: LockOnce | None = None):
    """Build, verify and record a new venv at its final path; returns (path, verify report)."""
    ct, spec = t.system, t.spec
    versions = facts.versions_dir(spec)
    uv = _ensure_uv(t, found.python.machine)
    name = f"{want}-{venvmod.stamp()}"
    target = f"{versions}/{name}"
    staging = f"{target}.building"
    files.push_bytes(ct, venvmod.requirements_in(spec.venv, req_text).encode(), f"{staging}/spec.in")
    files.push_bytes(ct, guard, f"{staging}/guard.py")
    files.push_bytes(ct, venvmod.WATCH_SOURCE.read_bytes(), f"{staging}/compilewatch.py")
    for file, source in venvmod.CHECKPOINT_SOURCES.items():  # not `name`: that is the build's, removed on failure
        files.push_bytes(ct, source.read_bytes(), f"{staging}/{file}")
    if lock is not None and not ct.dry:
        text = lock.get(want, lambda: _resolve_lock(t, found, uv, f"{staging}/spec.in"))
        files.push_bytes(ct, text.encode(), f"{staging}/lock.txt")
    t.step(f"building venv {name} beside the current one")
    t0 = time.monotonic()
    # setsid: the builder outlives a lost controller, and REMOTE_VENV_BUILD marks each of its processes,
    # so the next deploy can tell them from anything else before it stops them.
    try:
        ct.run(_with_index_env(spec, ["setsid", "--wait", "bash", "-c", "set -euo pipefail\n" + venvmod.build_script(),
                                      "build", uv, found.python.executable, target, staging,
                                      *venvmod.uv_index_args(spec.venv)]),
               env={**UV_ENV, "REMOTE_VENV_BUILD": target}, stdin=jobenv.stdin_for(venvmod.uv_index_env(spec.venv)) or None,
               timeout=BUILD_TIMEOUT, on_output=_streamer(t.output), label="venv build")
    except CommandError as exc:
        _discard(ct, versions, name)
        raise DeployError(f"the venv build failed (exit {exc.command_status}, output above); the current venv and "
                          "checkout were left in place") from None
    if ct.dry:  # nothing was built: the verify and finalize steps would only read what is not there
        return target, None
    t.output(f"    built in {time.monotonic() - t0:.1f}s; verifying")
    info = json_loads(ct.run(venvmod.verify_argv(f"{target}/bin/python"), timeout=600).out)
    try:
        venvmod.check_verify(spec.venv, info)
    except DeployError:
        _discard(ct, versions, name)
        raise
    lock_text = files.pull_bytes(ct, f"{target}/remote-lock.txt").decode()
    record = {"spec_hash": want, "lock": lock_text, "lock_sha256": files.sha256(lock_text.encode()), "verify": info,
              "uv": spec.venv.uv_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "packages": list(spec.venv.packages)}
    # The per-version compile cache folder's name, where `remote exec` reads it in the container (jobenv).
    files.push_bytes(ct, jobenv.compile_cache(spec, info).rsplit("/", 1)[-1].encode() + b"\n",
                     f"{target}/{jobenv.CACHE_FOLDER_FILE}")
    # Written atomically (temp file + rename): from this moment the build is finished and may be used.
    files.push_bytes(ct, json.dumps(record, indent=1).encode(), f"{target}/remote-venv.json")
    ct.run(["rm", "-rf", "--", staging])
    return target, info


def _discard(ct: Container, versions: str, name: str) -> None:
    """Remove a failed build now (best effort: otherwise the next deploy does)."""
    try:
        _cleanup(ct, versions, [name, f"{name}.building"])
    except RemoteError:
        pass


def _read_record(ct: Container, target: str) -> dict:
    return json_loads(files.pull_bytes(ct, f"{target}/remote-venv.json"))


def _swap(t: Target, target: str, summary: _Changes) -> None:
    ct, spec = t.system, t.spec
    result = ct.run([spec.venv.python, "-c", venvmod.SWAP, spec.venv.path, target, facts.versions_dir(spec)])
    for line in result.out.splitlines():
        if line.startswith("kept "):
            summary.kept.append(f"the hand-made venv, moved aside to {line[5:]} (nothing deleted)")
    ct.script(shell.load("venv-history"), facts.versions_dir(spec), target, label="venv history")
    t.step(f"{spec.venv.path} now points to {target}")


def _prune(t: Target, keep: set) -> list[str]:
    """Delete finished builds other than the current and previous ones, except hand-made venvs and any
    build a live process uses; returns the builds spared because they are in use."""
    ct, spec = t.system, t.spec
    result = ct.script(shell.load("venv-prune"), facts.versions_dir(spec), *[k for k in keep if k], timeout=600,
                       label="venv prune")
    return [line[len("in use: "):] for line in result.out.splitlines() if line.startswith("in use: ")]


def _rollback(t: Target, found: DeployProbe, summary: _Changes) -> None:
    ct, spec = t.system, t.spec
    history = ct.run(["cat", f"{facts.versions_dir(spec)}/history"], check=False, mutates=False).out.split()
    current = found.venv_real
    finished = {f"{facts.versions_dir(spec)}/{v}" for v in found.finished}
    previous = [h for h in history if h != current and h in finished]
    if not previous:
        raise DeployError(f"no previous venv to roll back to in {facts.versions_dir(spec)}")
    target = previous[-1]
    _swap(t, target, summary)
    summary.changed.append(f"venv {spec.venv.path} rolled back to {target}")
    summary.kept.append(f"{current} (deploy returns to it when the spec matches)")
