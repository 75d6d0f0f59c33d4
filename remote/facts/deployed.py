"""The deployed state as a fact: the checkout's and the venv's deploy records (read by the facts probe, parts
facts.DEPLOYED) parsed once into a frozen `Deployed`.

deploy writes the records (remote/ops/deploy.py, remote/ops/code.py); warmup, train's preflight, the cache copy
and the shell read them here. The records live in the container: each field is checked where it is parsed (a
value of the wrong type reads as None), and the record as written is kept (`record`) only where it is passed on
as is (a passport, the compile cache's name, the job's environment).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import ContainerSpec
from ..errors import DeployError


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Verify:
    """What deploy's check of a new venv said (remote/ops/venv.py VERIFY: `import torch` in it)."""

    torch: str | None = None
    torch_git: str | None = None
    cuda_build: str | None = None
    triton: str | None = None
    python: str | None = None
    cuda_available: bool = False
    gpu_count: int = 0
    gpu_name: str | None = None
    gpu_capability: str | None = None  # sm_XY
    driver_major: str | None = None
    torch_error: str | None = None
    dists: Mapping[str, str] = field(default_factory=dict)  # every installed distribution: name -> version

    def as_record(self) -> dict[str, Any]:
        """Its fields under the record's keys, for what takes the record's form (naming.compile_cache, the
        cache passport, the job's environment)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def with_gpu(self, name: str, driver_major: str) -> Verify:
        """This record brought to the GPU the container has now (a migration since the deploy): another GPU's
        capability is unknown until the next deploy records it."""
        capability = self.gpu_capability if name == self.gpu_name else None
        return dataclasses.replace(self, gpu_name=name, driver_major=driver_major, gpu_capability=capability)


def verify_of(value: object) -> Verify:
    """A venv record's `verify` part (None or not an object: nothing known)."""
    v = _object(value)
    count = v.get("gpu_count")
    dists = {k: d for k, d in _object(v.get("dists")).items() if isinstance(k, str) and isinstance(d, str)}
    return Verify(_text(v.get("torch")), _text(v.get("torch_git")), _text(v.get("cuda_build")), _text(v.get("triton")),
                  _text(v.get("python")), v.get("cuda_available") is True,
                  count if isinstance(count, int) and not isinstance(count, bool) else 0, _text(v.get("gpu_name")),
                  _text(v.get("gpu_capability")), _text(v.get("driver_major")), _text(v.get("torch_error")), dists)


@dataclass(frozen=True)
class CodeRecord:
    """The checkout's deploy record (remote/ops/code.py): the commit deployed and how."""

    commit: str | None = None
    ref: str | None = None
    dirty: bool = False
    base: str | None = None
    unmanaged: bool = False  # no code.repo: the user's checkout, its HEAD taken as the commit
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def code_record_of(value: object) -> CodeRecord:
    c = _object(value)
    return CodeRecord(_text(c.get("commit")), _text(c.get("ref")), c.get("dirty") is True, _text(c.get("base")),
                      c.get("unmanaged") is True, dict(c))


@dataclass(frozen=True)
class VenvRecord:
    """The venv's deploy record (remote/ops/deploy.py): its spec hash, its lock, what its check said."""

    spec_hash: str | None = None
    lock_sha256: str | None = None
    lock: str = ""  # the lock file's text
    real: str | None = None  # the versioned folder it is (a dry deploy's plan names it)
    verify: Verify = field(default_factory=Verify)
    planned: bool = False  # what a dry deploy before would have made (remote/ops/dryplan.py)
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def venv_record_of(value: object) -> VenvRecord:
    v = _object(value)
    return VenvRecord(_text(v.get("spec_hash")), _text(v.get("lock_sha256")), _text(v.get("lock")) or "",
                      _text(v.get("real")), verify_of(v.get("verify")), v.get("planned") is True, dict(v))


@dataclass(frozen=True)
class Deployed:
    """What deploy left in a container: the checkout's record and the venv's."""

    code: CodeRecord
    venv: VenvRecord

    @classmethod
    def of(cls, code: object, venv: object) -> Deployed:
        """From the two records as deploy wrote them (the probe's `code.record` and `venv.record`)."""
        return cls(code_record_of(code), venv_record_of(venv))

    @property
    def commit(self) -> str:
        """The deployed commit ("" where the record names none)."""
        return self.code.commit or ""

    @property
    def verify(self) -> Verify:
        return self.venv.verify


def deployed_in(raw: Mapping[str, Any], spec: ContainerSpec) -> Deployed:
    """The deployed state in a facts probe's answer (any parts that include facts.DEPLOYED); a DeployError
    naming what to run where nothing (or not all) was deployed. Pure."""
    code, venv = _object(raw.get("code")).get("record"), _object(raw.get("venv")).get("record")
    if not isinstance(venv, dict):
        raise DeployError(f"container {spec.ctid} has no deployed venv at {spec.venv.path}: run `remote deploy` first")
    if code is None and not spec.code.repo:  # the code is the user's to put there: its HEAD is the commit
        checkout = _object(raw.get("code"))
        if not checkout.get("exists"):
            raise DeployError(f"container {spec.ctid} has no checkout at {spec.code.path} and code.repo is not set: "
                              "set code.repo in the hosts file for `remote deploy` to ship it, or put the code "
                              "there yourself")
        code = {"commit": checkout.get("head"), "unmanaged": True}
    if not isinstance(code, dict):
        raise DeployError(f"container {spec.ctid} has no deployed checkout at {spec.code.path}: "
                          "run `remote deploy` first")
    return Deployed(code_record_of(code), venv_record_of(venv))


@dataclass(frozen=True)
class Interpreter:
    """The container's system interpreter that builds venvs (venv.python), as the probe ran it."""

    executable: str
    version: str
    machine: str  # platform.machine(): which uv to install


@dataclass(frozen=True)
class DeployProbe:
    """The facts probe's deploy parts (facts.DEPLOY) as deploy plans from them: the interpreter, the venv there
    (its folder, its record, its finished and unfinished builds), the checkout's HEAD, the operation lease."""

    python: Interpreter
    venv_real: str | None = None  # the versioned folder the venv's path points at
    venv_record: VenvRecord | None = None  # None: not built by remote (no remote-venv.json)
    finished: tuple[str, ...] = ()  # builds that verified, oldest first (a rollback goes back to one)
    unfinished: tuple[str, ...] = ()  # builds that stopped half-way (cleaned up by the next deploy)
    code_head: str | None = None
    lease: str | None = None  # the operation lease file's text, where there is one
    # The answer as read: venv.plan and code.needs_sync plan from its venv and code parts, tested as data.
    parts: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def _names(value: object) -> tuple[str, ...]:
    return tuple(n for n in value if isinstance(n, str)) if isinstance(value, list) else ()


def deploy_probe_of(raw: Mapping[str, Any], spec: ContainerSpec) -> DeployProbe:
    """The probe's answer (parts facts.DEPLOY) for deploy; a DeployError where the interpreter did not answer."""
    py, venv, code = _object(raw.get("python")), _object(raw.get("venv")), _object(raw.get("code"))
    if not all(isinstance(py.get(k), str) for k in ("executable", "version", "machine")):
        raise DeployError(f"container {spec.ctid}: the probe's interpreter part is missing or not as expected "
                          f"({str(py)[:120]}): is venv.python {spec.venv.python!r} a python3?")
    record = venv.get("record")
    return DeployProbe(Interpreter(py["executable"], py["version"], py["machine"]), _text(venv.get("real")),
                       venv_record_of(record) if isinstance(record, dict) else None, _names(venv.get("finished")),
                       _names(venv.get("unfinished")), _text(code.get("head")), _text(raw.get("lease")) or None,
                       raw)
