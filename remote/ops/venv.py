"""The container's virtualenv: probe -> plan -> apply, built beside the current one and swapped atomically.

Layout inside the container, for `venv.path: /root/venv`:
    /root/venv                          a symlink to the version in use (always a complete, verified venv)
    /root/venv.versions/<id>/           one venv per build, built at this very path so that console
                                        scripts' shebangs and bin/activate name it; finished only once
                                        its `remote-venv.json` (spec, lock, torch) exists
    /root/venv.versions/<id>.building/  the inputs of a build in progress (spec, guard, builder pid)
A build resolves the spec with `uv pip compile --generate-hashes` (the lock), installs exactly that
with `uv pip sync`, verifies the pins, the CUDA build and `import torch`, writes the record, and only
then is swapped in with a symlink rename (renameat2(RENAME_EXCHANGE) for a hand-made venv). A folder
without a record is never pointed to, reused or rolled back to: the next deploy stops its builder
and removes it. Interrupting any step leaves the current venv untouched.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import shell
from ..config import VenvSpec
from ..errors import DeployError
from ..naming import has_userinfo, matches, normalize, parse_lock, parse_pins, redact, with_encoded_userinfo  # noqa: F401 -- also this module's names

GUARD_SOURCE = Path(__file__).resolve().parent.parent / "guard.py"
# The compile watch (issue 33): installed beside the guard as remote_compilewatch, with its .pth line.
WATCH_SOURCE = Path(__file__).resolve().parent.parent / "sh" / "compilewatch.py"
# The optional checkpoint helper (issue 44 item 6): remote_checkpoint, with ckpt.py beside it as remote_ckpt.
CHECKPOINT_SOURCES = {"checkpoint.py": Path(__file__).resolve().parent.parent / "sh" / "checkpoint.py",
                      "ckpt.py": Path(__file__).resolve().parent.parent / "sh" / "ckpt.py"}

# Runs with the new venv's interpreter: what was installed and what torch sees.
VERIFY = r'''
import importlib.metadata as m, json, sys
info = {"dists": {d.metadata["Name"]: d.version for d in m.distributions()}, "python": sys.version.split()[0]}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda_build"] = torch.version.cuda
    info["torch_git"] = getattr(torch.version, "git_version", None)
    info["cuda_available"] = torch.cuda.is_available()
    info["gpu_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
    info["gpu_name"] = torch.cuda.get_device_name(0) if info["gpu_count"] else None
    # The compute capability (sm_XY) and the NVIDIA driver's major version: Triton's kernels are built for
    # one capability, and a warm cache copied across capabilities can run garbled (vLLM #41871).
    info["gpu_capability"] = "sm_%d%d" % torch.cuda.get_device_capability(0) if info["gpu_count"] else None
except ImportError as exc:
    info["torch"] = None
    info["torch_error"] = str(exc)
try:
    with open("/proc/driver/nvidia/version") as f:
        import re
        found = re.search(r"Kernel Module(?: for \w+)?\s+(\d+)\.", f.read())
    info["driver_major"] = found.group(1) if found else None
except OSError:
    info["driver_major"] = None
for name in ("triton", "pytorch-triton"):
    try:
        info["triton"] = m.version(name)
        break
    except m.PackageNotFoundError:
        info["triton"] = None
print(json.dumps(info))
'''



def verify_argv(python: str) -> list[str]:
    """VERIFY with a venv's interpreter, isolated (-I): neither the working folder (/root: a `torch/` folder
    there would be imported instead of the venv's torch) nor PYTHON* variables change what it finds."""
    return [python, "-I", "-c", VERIFY]


# Swap `link` to point at `target` atomically; a real directory at `link` (a venv made by hand) is
# exchanged with the new symlink in one renameat2 call and kept under the versions folder.
SWAP = r'''
import ctypes, os, sys, time
link, target, versions = sys.argv[1:4]
tmp = f"{link}.remote-swap"
if os.path.lexists(tmp):
    os.unlink(tmp)
os.symlink(target, tmp)
if os.path.isdir(link) and not os.path.islink(link):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, tmp.encode(), -100, link.encode(), 2) != 0:  # RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2(RENAME_EXCHANGE) failed", link)
    kept = os.path.join(versions, time.strftime("handmade-%Y%m%d-%H%M%S"))
    os.rename(tmp, kept)
    print("kept", kept)
else:
    os.replace(tmp, link)
'''


def spec_hash(spec: VenvSpec, python: str, requirements_text: str | None, extras: bytes = b"") -> str:
    """Identifies a venv build: same hash, same venv. Includes the interpreter version and uv version.
    URLs go in redacted: a private index's token is no part of what the venv is (rotating it, as CodeArtifact's
    12-hour tokens do, must not rebuild torch in every container)."""
    payload = json.dumps({
        "packages": list(spec.packages), "index_url": spec.index_url and redact(spec.index_url),
        "extra": [redact(u) for u in spec.extra_index_urls], "find_links": [redact(u) for u in spec.find_links],
        "requirements": requirements_text and _redact_urls(requirements_text), "python": python,
        "uv": spec.uv_version, "extras": hashlib.sha256(extras).hexdigest(),
        # Only when set: the hash of every venv made before these keys existed stays the same.
        **({"offline": True} if spec.offline else {}), **({"cuda": spec.cuda} if spec.cuda else {}),
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _redact_urls(text: str) -> str:
    """Every URL of a requirements text with its user and password replaced (`--index-url https://TOKEN@...`)."""
    return re.sub(r"\S+://\S+", lambda m: redact(m.group()), text)


@dataclass(frozen=True)
class Drift:
    """How the current venv differs from what its lock says (pollution)."""

    extra: dict[str, str] = field(default_factory=dict)  # installed, not produced by the spec
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # name: (locked, installed)
    missing: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.extra or self.changed or self.missing)

    def lines(self) -> list[str]:
        out = [f"extra package not in the spec: {n}=={v}" for n, v in sorted(self.extra.items())]
        out += [f"version differs: {n} locked {a}, installed {b}" for n, (a, b) in sorted(self.changed.items())]
        out += [f"missing: {n}=={v}" for n, v in sorted(self.missing.items())]
        return out


def drift(locked: dict[str, str], installed: dict[str, str]) -> Drift:
    inst = {normalize(k): v for k, v in installed.items()}
    return Drift(
        extra={n: v for n, v in inst.items() if n not in locked},
        changed={n: (v, inst[n]) for n, v in locked.items() if n in inst and not matches(v, inst[n])},
        missing={n: v for n, v in locked.items() if n not in inst},
    )


def check_pins(spec: VenvSpec, installed: dict[str, str]) -> list[str]:
    """Every `==` pin of the spec must come back exactly (a +cu128 pin never as a cu130 build)."""
    inst = {normalize(k): v for k, v in installed.items()}
    problems = []
    for name, want in parse_pins(spec.packages).items():
        got = inst.get(name)
        if got != want:
            problems.append(f"{name}: pinned {want}, installed {got or 'nothing'}")
    return problems


@dataclass(frozen=True)
class VenvPlan:
    action: str  # "none" | "build" | "swap"
    reason: str
    drift: Drift = field(default_factory=Drift)
    reuse: str | None = None  # an existing version folder to swap to


def plan(spec: VenvSpec, want_hash: str, probe: Mapping) -> VenvPlan:
    """What the venv needs, from the probe's view of it. Pure: tested as data."""
    v = probe["venv"]
    record = v.get("record")
    if not v["exists"]:
        return VenvPlan("build", f"no venv at {spec.path}")
    if record is None:
        return VenvPlan("build", f"{spec.path} was not built by remote (no remote-venv.json): rebuilding beside it",
                        drift(parse_lock(spec.packages), v.get("dists") or {}))
    found = drift(parse_lock(record.get("lock", "").splitlines()), v.get("dists") or {})
    if v.get("dists") is None:
        return VenvPlan("build", "the venv's interpreter does not run", found)
    if record.get("spec_hash") != want_hash:
        # Only a finished build (its record written after it verified) is ever reused.
        ours = re.compile(re.escape(want_hash) + r"-\d{8}-\d{6}")
        reuse = next((name for name in reversed(v.get("finished", [])) if ours.fullmatch(name)), None)
        return VenvPlan("swap" if reuse else "build", "the venv spec changed", found, reuse)
    if found:
        return VenvPlan("build", "the venv was changed by hand", found)
    return VenvPlan("none", "venv up to date", found)


def requirements_in(spec: VenvSpec, requirements_text: str | None) -> str:
    lines = list(spec.packages)
    if requirements_text:
        lines += ["", "# from the checkout's requirements file", requirements_text]
    return "\n".join(lines) + "\n"


def _has_credentials(url: str) -> bool:
    return has_userinfo(url)  # a password with an unencoded `/` or `@` included


def uv_index_env(spec: VenvSpec) -> dict[str, str]:
    """Index and find-links URLs that carry credentials, as uv's environment variables: they travel on stdin
    (remote/sh/withenv.sh), never in an argv (ps, `deploy -n`) or a message. UV_FIND_LINKS is uv's
    comma-separated list: all of find_links go there when any one of them has credentials."""
    env = {}
    if spec.index_url and _has_credentials(spec.index_url):
        env["UV_INDEX_URL"] = with_encoded_userinfo(spec.index_url)
    if any(_has_credentials(u) for u in spec.extra_index_urls):
        env["UV_EXTRA_INDEX_URL"] = " ".join(with_encoded_userinfo(u) for u in spec.extra_index_urls)
    if any(_has_credentials(u) for u in spec.find_links):
        env["UV_FIND_LINKS"] = ",".join(with_encoded_userinfo(u) for u in spec.find_links)
    return env


def uv_index_args(spec: VenvSpec) -> list[str]:
    """uv's index arguments; URLs with credentials are left to uv_index_env. An offline spec gets
    --no-index --offline: the find_links folders and nothing else, no network access at all."""
    args = ["--no-index", "--offline"] if spec.offline else []
    secret = uv_index_env(spec)
    if spec.index_url and "UV_INDEX_URL" not in secret:
        args += ["--index-url", spec.index_url]
    for url in spec.extra_index_urls if "UV_EXTRA_INDEX_URL" not in secret else ():
        args += ["--extra-index-url", url]
    for link in spec.find_links if "UV_FIND_LINKS" not in secret else ():
        args += ["--find-links", link]
    return args


def build_script() -> str:
    """Bash, in the container (remote/sh/venv-build.sh): $1 uv, $2 python, $3 venv dir, $4 staging dir."""
    return shell.load("venv-build")


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _cuda_tag(tag: str) -> str | None:
    """A wheel tag's CUDA version: cu128 -> 12.8, cu130 -> 13.0, cpu -> "cpu"; None for anything else."""
    if tag == "cpu":
        return "cpu"
    m = re.fullmatch(r"cu(\d+)(\d)", tag)
    return f"{int(m.group(1))}.{m.group(2)}" if m else None


def expected_cuda(spec: VenvSpec) -> tuple[str, str] | None:
    """The CUDA build torch must report, and where that expectation comes from: `venv.cuda`, else the torch
    pin's local version (`+cu128`), else a PyTorch index URL ending in /cu128 or /cpu. None when the spec
    says nothing."""
    if spec.cuda:
        return spec.cuda, f"venv.cuda {spec.cuda}"
    pin = parse_pins(spec.packages).get("torch")
    if pin and "+" in pin:
        want = _cuda_tag(pin.split("+", 1)[1])
        if want:
            return want, f"torch=={pin}"
    if spec.index_url:
        m = re.search(r"/(cu\d+|cpu)/*$", spec.index_url)
        want = _cuda_tag(m.group(1)) if m else None
        if want:
            return want, f"index_url {redact(spec.index_url)}"
    return None


def check_verify(spec: VenvSpec, info: dict) -> None:
    """The new venv's verify report against the spec: exact pins, `import torch`, and the CUDA build
    torch was compiled for (a cu128 pin that comes back as a CUDA 13.0 build fails)."""
    problems = check_pins(spec, info["dists"])
    wants_torch = any(normalize(p.split("==")[0]) == "torch" for p in spec.packages)
    if wants_torch and not info.get("torch"):
        problems.append(f"import torch failed: {info.get('torch_error')}")
    expected = expected_cuda(spec) if wants_torch and info.get("torch") else None
    if expected:
        want, why = expected
        got = info.get("cuda_build")
        local = str(info["torch"]).partition("+")[2]
        got_tag = _cuda_tag(local) if local else None
        if want == "cpu" and (got or (got_tag and got_tag != "cpu")):
            problems.append(f"torch CUDA build: {why} wants a CPU build, torch {info['torch']} reports CUDA {got}")
        elif want != "cpu":
            same = got is not None and str(got).split(".")[:2] == want.split(".")
            if not same or (got_tag and got_tag != want):
                problems.append(f"torch CUDA build: {why} wants CUDA {want}, torch {info['torch']} reports CUDA "
                                f"{got or 'none (a CPU build)'}")
    if problems:
        raise DeployError("the new venv did not verify; the current venv was left in place:\n  "
                          + "\n  ".join(problems))
