"""What one container sees of its GPU: its /dev/nvidia* nodes, the driver libraries its loader finds,
nvidia-smi, cuInit(0) and the venv's torch CUDA build, read by remote/sh/gpu_container.py in one round trip.

The probe's JSON is untrusted (a container may print anything): every value is type-checked as it is parsed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from importlib import resources

from ...errors import RemoteError
from ...target import resolve
from ...transport.pct import DEFAULT_PATH
from .host import Node, _version, module_version, parse_char_devices

CONTAINER_SOURCE = resources.files("remote").joinpath("sh").joinpath("gpu_container.py").read_text()


@dataclass(frozen=True)
class CtGpu:
    """What one container sees (remote/sh/gpu_container.py)."""
    nodes: tuple[Node, ...]
    libs: dict[str, dict | None]  # soname -> {path, file, version} or None
    proc_version: str | None  # the module's version as /proc/driver/nvidia/version shows it in the container
    smi_driver: str | None
    smi_error: str | None  # nvidia-smi's failure text
    smi_missing: bool
    cuda_loaded: bool
    cuda_error: str | None  # why libcuda did not load
    cuda_init: int | None  # cuInit(0)'s return code
    cuda_driver: str | None  # cuDriverGetVersion, as "13.0"
    torch_cuda: str | None  # the venv's torch CUDA build (torch/version.py)
    torch_version: str | None = None
    drivers: dict[int, tuple[str, ...]] = field(default_factory=dict)  # /proc/devices as the container reads it
    # GPU processes (nvidia-smi's compute apps): pid, name, used_mib, run (its REMOTE_RUN_ID, None: no run's),
    # command (its command line, where the container's /proc has the pid)
    processes: tuple[dict, ...] = ()

    def node(self, path: str) -> Node | None:
        return next((n for n in self.nodes if n.path == path), None)

    @property
    def lib_versions(self) -> dict[str, str]:
        return {k: v["version"] for k, v in self.libs.items() if v and v.get("version")}

    @property
    def gpu(self) -> bool:
        return bool(self.nodes or self.lib_versions or (not self.smi_missing and self.smi_driver))


def _typed(value, types, where: str, *, none: bool = True):
    """`value` where it is one of `types` (None too where `none`), else ValueError naming `where` and what it
    was: the probe's answer is untrusted, and a wrong type is one container's error, not a crash."""
    types = types if isinstance(types, tuple) else (types,)
    if (value is None and none) or (isinstance(value, types) and (bool in types or not isinstance(value, bool))):
        return value
    want = " or ".join(t.__name__ for t in types)
    raise ValueError(f"the container's GPU probe gave {where} as {type(value).__name__} "
                     f"{json.dumps(value)[:60]}, not {want}")


def _node(n, i: int) -> Node | None:
    where = f"nodes[{i}]"
    _typed(n, dict, where, none=False)
    path = _typed(n.get("path"), str, where + ".path", none=False)
    if n.get("dir") or "major" not in n:
        return None
    get = lambda key, default: _typed(n.get(key, default), int, f"{where}.{key}", none=False)  # noqa: E731
    return Node(path, get("major", 0), get("minor", 0), get("uid", 0), get("gid", 0), get("mode", 0o666),
                bool(_typed(n.get("char", True), bool, where + ".char", none=False)),
                _typed(n.get("open"), int, where + ".open"), _typed(n.get("mount"), str, where + ".mount"))


def _lib(soname, lib) -> dict | None:
    _typed(lib, dict, f"libs[{json.dumps(soname)}]")
    if lib is not None:
        for key in ("path", "file", "version"):
            _typed(lib.get(key), str, f"libs[{json.dumps(soname)}].{key}")
    return lib


def parse_container(text: str) -> CtGpu:
    """remote/sh/gpu_container.py's output (two JSON lines; the second, cuInit's, may be missing when the
    driver crashed the probe) -> CtGpu. Pure. Raises ValueError when there is no JSON, or a value of the
    wrong type (the probe's answer is untrusted: a container may print anything)."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("the container's GPU probe printed no JSON: " + repr(text[-300:]))
    raw = _typed(json.loads(lines[0]), dict, "its answer", none=False)
    second = _typed(json.loads(lines[1]), dict, "cuInit's answer", none=False) if len(lines) > 1 else {}
    cu = _typed(second.get("cuda"), dict, "cuda") or {
        "loaded": False, "error": "the probe ended in cuInit (the driver crashed it?)"}
    nodes = tuple(n for n in (_node(x, i) for i, x in enumerate(_typed(raw.get("nodes"), list, "nodes") or []))
                  if n is not None)
    libs = {_typed(k, str, "a library name", none=False): _lib(k, v)
            for k, v in (_typed(raw.get("libs"), dict, "libs") or {}).items()}
    smi = _typed(raw.get("smi"), dict, "smi") or {}
    out, err = _typed(smi.get("out"), str, "smi.out") or "", _typed(smi.get("err"), str, "smi.err") or ""
    rc = _typed(smi.get("rc"), int, "smi.rc")
    driver = error = None
    if not smi.get("missing"):
        if rc == 0:
            driver = _version(out.strip().splitlines()[0] if out.strip() else "")
        else:
            error = (out + err).strip()[-300:] or (f"nvidia-smi exited {rc}" if rc is not None else "nvidia-smi failed")
    v = _typed(cu.get("driver_version"), int, "cuda.driver_version") or 0
    torch = _typed(raw.get("torch"), dict, "torch") or {}
    devices = _typed(raw.get("devices"), str, "devices") or ""
    return CtGpu(nodes, libs, module_version(_typed(raw.get("proc_version"), str, "proc_version"))[0], driver, error,
                 bool(smi.get("missing")), bool(cu.get("loaded")), _typed(cu.get("error"), str, "cuda.error"),
                 _typed(cu.get("init"), int, "cuda.init"), f"{v // 1000}.{v % 1000 // 10}" if v else None,
                 _typed(torch.get("cuda"), str, "torch.cuda"), _typed(torch.get("version"), str, "torch.version"),
                 parse_char_devices(devices), _apps(raw.get("apps")))


def _apps(value) -> tuple[dict, ...]:
    """The probe's GPU processes, each field checked (untrusted), the texts bounded and printable."""
    from ...naming import printable

    out = []
    for a in (_typed(value, list, "apps") or [])[:64]:
        a = _typed(a, dict, "an app", none=False)
        pid = _typed(a.get("pid"), int, "app.pid", none=False)
        mib = _typed(a.get("used_mib"), int, "app.used_mib")
        texts = {k: _typed(a.get(k), str, f"app.{k}") for k in ("name", "run", "command")}
        out.append({"pid": pid, "used_mib": mib, **{k: printable(v[:300]) if v else None for k, v in texts.items()}})
    return tuple(out)


def container_argv(venv: str) -> list[str]:
    """The container probe: the system python3 (the venv's may be broken), isolated, stdlib only."""
    return ["python3", "-I", "-S", "-c", CONTAINER_SOURCE, json.dumps({"venv": venv})]


def read_container(session, ctid: int) -> CtGpu:
    """The container probe: one round trip, with the container's system python3."""
    spec = resolve(session, ctid).spec
    ct = dataclasses.replace(session.container_for(spec, venv_on_path=False), path=DEFAULT_PATH)
    r = ct.run(container_argv(spec.venv.path), mutates=False, timeout=60, check=False, label="GPU probe")
    try:
        return parse_container(r.out)
    except ValueError as exc:
        raise RemoteError(f"container {ctid}: {exc} (exit {r.exit_code}; {r.err.strip()[-300:]})") from None
