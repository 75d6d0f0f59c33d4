"""`deploy`: the exact-commit checkout and the pinned venv, as one probe, a plan and the steps still needed.

A no-op deploy is one probe round trip. Otherwise: sync the code (edits saved as a patch first),
clean up what an interrupted deploy left, make sure the pinned uv is there, build the venv beside
the current one, verify it, swap it in atomically, and keep the previous one for --rollback.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import code as codemod
from . import files
from . import venv as venvmod
from .config import Container as ContainerSpec
from .errors import CommandError, DeployError
from .logs import LineSplitter
from .pct import Container
from .session import Session

UV_HOME = "/root/.local/share/remote"  # uv binaries live here, one folder per version
BUILD_TIMEOUT = 3 * 3600
# Never download Pythons, ignore stray uv.toml files, and trust the container's CA store (proxies).
UV_ENV = {"UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "UV_SYSTEM_CERTS": "1"}


@dataclass
class Summary:
    ctid: int
    changed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)  # patches and tarballs of container edits
    drift: list[str] = field(default_factory=list)
    torch: dict | None = None
    seconds: float = 0.0

    @property
    def noop(self) -> bool:
        return not self.changed

    def render(self) -> str:
        lines = [f"deploy {self.ctid}: " + ("nothing to do, everything verified" if self.noop else
                                           f"{len(self.changed)} change(s)") + f" ({self.seconds:.2f}s)"]
        lines += [f"  changed: {c}" for c in self.changed]
        lines += [f"  kept:    {k}" for k in self.kept]
        lines += [f"  saved:   {s}" for s in self.saved]
        lines += [f"  drift:   {d}" for d in self.drift]
        if self.torch:
            t = self.torch
            lines.append(f"  torch {t.get('torch')} (CUDA build {t.get('cuda_build') or 'none'}), triton "
                         f"{t.get('triton') or 'none'}, cuda available: {t.get('cuda_available')}, GPUs: "
                         f"{t.get('gpu_count')}" + (f" ({t['gpu_name']})" if t.get("gpu_name") else ""))
        return "\n".join(lines)


def uv_path(version: str) -> str:
    return f"{UV_HOME}/uv-{version}/uv"


def local_uv_binary(version: str, machine: str) -> Path:
    """The uv binary for the container's architecture, cached on the controller (from PyPI's uv wheel)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "remote" / f"uv-{version}-{machine}"
    binary = cache / "uv"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    try:  # the uv installed next to this controller, when it is the same version and architecture
        import uv as uv_pkg

        found = Path(uv_pkg.find_uv_bin())
        out = subprocess.run([str(found), "--version"], capture_output=True, text=True).stdout.split()
        if len(out) > 1 and out[1] == version and machine == platform.machine():
            shutil.copy2(found, binary)
            return binary
    except (ImportError, OSError, FileNotFoundError):
        pass
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--platform", f"manylinux_2_17_{machine}", "--platform", f"manylinux2014_{machine}",
                            "-d", d, f"uv=={version}"], capture_output=True, text=True)
        wheels = list(Path(d).glob("uv-*.whl"))
        if r.returncode != 0 or not wheels:
            raise DeployError(f"venv.uv_version: cannot download uv {version} for {machine} from the package index: "
                              f"{r.stderr.strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
            binary.write_bytes(z.read(name))
    binary.chmod(0o755)
    return binary


def probe(ct: Container, spec: ContainerSpec) -> dict:
    """Everything deploy needs to know about the container, in one round trip."""
    result = ct.run([spec.venv.python, "-c", venvmod.PROBE, spec.venv.path, versions_dir(spec), uv_path(spec.venv.uv_version),
                     spec.code.path], mutates=False, timeout=120)
    return json.loads(result.out)


def versions_dir(spec: ContainerSpec) -> str:
    return spec.venv.path.rstrip("/") + ".versions"


def _streamer(echo: Callable[[str], None]) -> Callable[[str, bytes], None]:
    """Container output to the console, line by line and indented, as it arrives."""
    splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}

    def on_output(kind: str, chunk: bytes) -> None:
        for line in splitters[kind].feed(chunk):
            echo("    " + line)

    return on_output


def deploy(session: Session, ctid=None, *, allow_dirty: bool = False, check: bool = False, rollback: bool = False,
           echo: Callable[[str], None] = print) -> Summary:
    """Bring container `ctid` to the configured commit and venv; a no-op when both already match."""
    start = time.monotonic()
    spec = session.config.container(ctid)
    # Never with the venv on PATH: `python3` could then be the very venv that is being replaced.
    ct = session.container(spec.ctid, venv_on_path=False)
    summary = Summary(spec.ctid)
    local = codemod.resolve(spec.code.repo, spec.code.ref, allow_dirty) if spec.code.repo else None
    state = probe(ct, spec)
    interpreter = state["python"]["executable"]
    if any(interpreter.startswith(p.rstrip("/") + "/") for p in (spec.venv.path, versions_dir(spec))):
        raise DeployError(f"venv.python {spec.venv.python!r} resolves to {interpreter}, inside the venv that deploy "
                          "manages: name the system interpreter, e.g. /usr/bin/python3")
    if rollback:
        _rollback(ct, spec, state, summary, echo)
        summary.seconds = time.monotonic() - start
        return summary

    req_text = None
    if spec.venv.requirements:
        if not local:
            raise DeployError("venv.requirements is relative to the checkout: set code.repo too")
        req_text = codemod.show(local.repo, local.commit, spec.venv.requirements)
        if req_text is None:
            raise DeployError(f"venv.requirements: {spec.venv.requirements} is not in commit {local.commit[:12]}")
    guard = venvmod.GUARD_SOURCE.read_bytes()
    py = f"{state['python']['version']} {state['python']['executable']}"
    want = venvmod.spec_hash(spec.venv, py, req_text, guard)
    vplan = venvmod.plan(spec.venv, want, state)
    code_reason = codemod.needs_sync(local, state["code"]) if local else None
    summary.drift = vplan.drift.lines()
    partials = [v for v in state["venv"]["versions"] if ".partial" in v]

    if check:
        if code_reason:
            summary.changed.append(f"code would be synced: {code_reason}")
        if vplan.action != "none":
            summary.changed.append(f"venv would be rebuilt: {vplan.reason}")
        summary.seconds = time.monotonic() - start
        return summary

    if code_reason:
        echo(f"==> code: {code_reason}")
        _sync_code(ct, spec, local, state["code"].get("head"), summary)
    elif local:
        summary.kept.append(f"code at {local.commit[:12]}{' (dirty)' if local.dirty else ''}")

    if partials:
        echo(f"==> cleaning up an interrupted deploy: {', '.join(partials)}")
        _cleanup(ct, versions_dir(spec), partials)
        summary.changed.append(f"removed half-built venv(s) left by an interrupted deploy: {', '.join(partials)}")

    if vplan.action == "none":
        summary.kept.append(f"venv {state['venv']['real']} (spec {want})")
        summary.torch = state["venv"]["record"].get("verify")
    else:
        echo(f"==> venv: {vplan.reason}")
        for line in vplan.drift.lines():
            echo(f"    {line}")
        if vplan.action == "swap":
            target = f"{versions_dir(spec)}/{vplan.reuse}"
            summary.torch = _read_record(ct, target).get("verify")
        else:
            target, summary.torch = _build(ct, spec, state, want, req_text, guard, echo)
        _swap(ct, spec, target, summary, echo)
        _prune(ct, spec, keep={target, state["venv"]["real"]})
        summary.changed.append(f"venv {spec.venv.path} -> {target}")
        if state["venv"]["real"]:
            summary.kept.append(f"previous venv {state['venv']['real']} (deploy --rollback returns to it)")
    summary.seconds = time.monotonic() - start
    return summary


def _sync_code(ct: Container, spec: ContainerSpec, local: codemod.LocalCommit, remote_head: str | None,
               summary: Summary) -> None:
    shipped = codemod.bundle(local.repo, local.commit, basis=remote_head)
    stamp = venvmod.stamp()
    bundle_path = f"{spec.code.path}.remote-incoming.bundle"
    files.push_bytes(ct, shipped.data, bundle_path, 0o600)
    record = json.dumps({"commit": local.commit, "ref": local.ref, "dirty": local.dirty, "base": local.base,
                         "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    result = ct.script(codemod.sync_script(), spec.code.path, local.commit, bundle_path, f"{spec.code.path}.patches",
                       stamp, record, shipped.ref, timeout=600, label="code sync")
    for line in result.out.splitlines():
        if line.startswith("saved "):
            summary.saved.append(line.split(": ", 1)[1])
    summary.changed.append(f"code {spec.code.path} at {local.commit[:12]}{' (dirty tree)' if local.dirty else ''}")


def _cleanup(ct: Container, versions: str, partials: list[str]) -> None:
    """Stop builders an interrupted deploy left running, then delete their half-built venvs."""
    ct.script(r'''
cd "$1"; shift
for p in "$@"; do
  case $p in *.pid) pid=$(cat "$p" 2>/dev/null || true); [ -n "$pid" ] && kill -KILL -- "-$pid" "$pid" 2>/dev/null || true;; esac
done
sleep 0.2
rm -rf -- "$@"
''', versions, *partials, timeout=600)


def _ensure_uv(ct: Container, spec: ContainerSpec, machine: str, echo) -> str:
    path = uv_path(spec.venv.uv_version)
    binary = local_uv_binary(spec.venv.uv_version, machine)
    echo(f"==> installing uv {spec.venv.uv_version} in the container ({binary.stat().st_size >> 20} MiB, verified)")
    files.push_file(ct, binary, path, 0o755)
    return path


def _build(ct: Container, spec: ContainerSpec, state: dict, want: str, req_text, guard: bytes, echo):
    versions = versions_dir(spec)
    uv = uv_path(spec.venv.uv_version) if state["uv"] else _ensure_uv(ct, spec, state["python"]["machine"], echo)
    name = f"{want}-{venvmod.stamp()}"
    partial = f"{versions}/{name}.partial"
    files.push_bytes(ct, venvmod.requirements_in(spec.venv, req_text).encode(), f"{partial}.in")
    files.push_bytes(ct, guard, f"{partial}.guard")
    echo(f"==> building venv {name} beside the current one")
    t0 = time.monotonic()
    # setsid: the builder is its own process group, so the next deploy can stop it if this one is interrupted.
    try:
        ct.run(["setsid", "--wait", "bash", "-c", "set -euo pipefail\n" + venvmod.build_script(), "build", uv,
                state["python"]["executable"], partial, *venvmod.uv_index_args(spec.venv)],
               env=UV_ENV, timeout=BUILD_TIMEOUT, on_output=_streamer(echo), label="venv build")
    except CommandError as exc:
        raise DeployError(f"the venv build failed (exit {exc.exit_code}, output above); the current venv was left "
                          f"in place and the next deploy removes the half-built one") from None
    target = f"{versions}/{name}"
    if ct.dry:  # nothing was built: the verify and finalize steps would only read what is not there
        return target, None
    echo(f"    built in {time.monotonic() - t0:.1f}s; verifying")
    info = json.loads(ct.run([f"{partial}/bin/python", "-c", venvmod.VERIFY], timeout=600).out)
    venvmod.check_verify(spec.venv, info)
    lock = files.pull_bytes(ct, f"{partial}/remote-lock.txt").decode()
    record = {"spec_hash": want, "lock": lock, "lock_sha256": files.sha256(lock.encode()), "verify": info,
              "uv": spec.venv.uv_version, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "packages": list(spec.venv.packages)}
    files.push_bytes(ct, json.dumps(record, indent=1).encode(), f"{partial}/remote-venv.json")
    ct.run(["bash", "-c", 'mv -T -- "$1" "$2" && rm -f -- "$1.in" "$1.guard" "$1.pid"', "finalize", partial, target])
    return target, info


def _read_record(ct: Container, target: str) -> dict:
    return json.loads(files.pull_bytes(ct, f"{target}/remote-venv.json"))


def _swap(ct: Container, spec: ContainerSpec, target: str, summary: Summary, echo) -> None:
    result = ct.run([spec.venv.python, "-c", venvmod.SWAP, spec.venv.path, target, versions_dir(spec)])
    for line in result.out.splitlines():
        if line.startswith("kept "):
            summary.kept.append(f"the hand-made venv, moved aside to {line[5:]} (nothing deleted)")
    ct.run(["bash", "-c", 'printf "%s\\n" "$2" >> "$1/history"', "history", versions_dir(spec), target])
    echo(f"==> {spec.venv.path} now points to {target}")


def _prune(ct: Container, spec: ContainerSpec, keep: set) -> None:
    """Delete builds other than the current and previous ones (and hand-made venvs, which are kept)."""
    ct.script(r'''
versions=$1; shift
cd "$versions"
for d in */; do
  d=${d%/}; full="$versions/$d"
  case $d in handmade-*|*.partial) continue;; esac
  keep=0; for k in "$@"; do [ "$k" = "$full" ] && keep=1; done
  [ $keep = 1 ] || rm -rf -- "$full"
done
''', versions_dir(spec), *[k for k in keep if k], timeout=600)


def _rollback(ct: Container, spec: ContainerSpec, state: dict, summary: Summary, echo) -> None:
    history = ct.run(["cat", f"{versions_dir(spec)}/history"], check=False, mutates=False).out.split()
    current = state["venv"]["real"]
    previous = [h for h in history if h != current and h in
                {f"{versions_dir(spec)}/{v}" for v in state["venv"]["versions"]}]
    if not previous:
        raise DeployError(f"no previous venv to roll back to in {versions_dir(spec)}")
    target = previous[-1]
    _swap(ct, spec, target, summary, echo)
    summary.changed.append(f"venv {spec.venv.path} rolled back to {target}")
    summary.kept.append(f"{current} (deploy returns to it when the spec matches)")
