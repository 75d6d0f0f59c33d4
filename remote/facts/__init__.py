"""Facts: typed, read-only observations of one container, fetched in one round trip.

As pyinfra's facts: a command (remote/facts/probe.py, run with the container's python) and pure
parsers (`parse`, `venv_of`, `torch_of`, ...) from its JSON to frozen dataclasses, tested as data. It is
the one way the tools read a container: each reader asks for the parts it needs (DEPLOY, PREFLIGHT,
STATUS, DOCTOR below) and gets them in one round trip. Reading changes nothing in the container but the
probe's own cache of what `import torch` said (see remote/facts/probe.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from .. import naming, shell
from ..config import ContainerSpec
from ..errors import CommandError
from ..naming import printable
from .deployed import Deployed, deployed_in  # noqa: F401 -- also this package's names
from .probe import SMI_S

if TYPE_CHECKING:  # remote.facts.gpu is imported where a GPU part is read: an exec needs none of it
    from ..target import Target
    from . import gpu

PROBE_SOURCE = resources.files(__package__).joinpath("probe.py").read_text()


@dataclass(frozen=True)
class Package:
    name: str  # normalized
    version: str
    installer: str = ""  # what the dist's INSTALLER file says: uv, pip, ...
    url: str | None = None  # direct_url.json: a local file, folder or VCS, not an index

    @property
    def origin(self) -> str | None:
        """Where it came from when not from an index: a local build, a file or a VCS URL."""
        if not self.url:
            return None
        return ("a local build/file " if self.url.startswith("file:") else "a direct URL ") + self.url


@dataclass(frozen=True)
class Venv:
    path: str
    exists: bool
    real: str | None
    ours: bool  # built by remote (it has remote-venv.json)
    spec_hash: str | None
    lock_sha256: str | None
    lock: dict[str, str]  # normalized name -> locked version
    packages: dict[str, Package]  # what is installed now; {} when the interpreter did not run
    runs: bool  # the venv's interpreter ran
    error: str | None = None
    record: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def added(self) -> dict[str, Package]:
        return {n: p for n, p in self.packages.items() if n not in self.lock} if self.ours and self.runs else {}

    @property
    def removed(self) -> dict[str, str]:
        return {n: v for n, v in self.lock.items() if n not in self.packages} if self.ours and self.runs else {}

    @property
    def changed(self) -> dict[str, tuple[str, Package]]:
        """name: (locked version, installed package)."""
        if not (self.ours and self.runs):
            return {}
        return {n: (v, self.packages[n]) for n, v in self.lock.items() if n in self.packages
                and not naming.matches(v, self.packages[n].version)}


@dataclass(frozen=True)
class Torch:
    version: str | None
    cuda_build: str | None
    triton: str | None
    cuda_available: bool
    device_count: int
    device_names: tuple[str, ...]
    error: str | None = None  # import torch failed (or the venv's interpreter did not run)
    cached: bool = False  # the answer an earlier probe got from the same venv, driver and GPUs


@dataclass(frozen=True)
class Gpus:
    smi: bool  # nvidia-smi exists in the container
    gpus: tuple[dict, ...]  # index, name, driver, memory_used_mib, memory_total_mib
    driver: str | None
    cuda_driver: str | None  # the highest CUDA version the driver supports (nvidia-smi's header)
    processes: tuple[dict, ...]  # compute apps: pid, name, used_mib
    error: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g["name"] for g in self.gpus)


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it (parse_gpus' row): what preflight checks and a run's manifest records."""

    index: int
    name: str
    driver: str
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    uuid: str | None = None

    @classmethod
    def of(cls, row: Mapping) -> Gpu:
        return cls(row["index"], row["name"], row["driver"], row.get("memory_used_mib"), row.get("memory_total_mib"),
                   row.get("uuid"))

    def as_record(self) -> dict:
        """As a run's manifest records it (parse_gpus' keys; no uuid where nvidia-smi gave none)."""
        row = asdict(self)
        if self.uuid is None:
            del row["uuid"]
        return row


@dataclass(frozen=True)
class Cache:
    dir: str
    folder: str  # the per-version folder for the venv's torch/CUDA/triton (naming.compile_cache)
    present: bool
    files: int
    bytes: int
    others: dict[str, dict]  # other version folders: name -> {files, bytes}
    warmups: tuple[dict, ...]
    tmp_artifacts: dict[str, dict]  # /tmp/torchinductor_* and ~/.triton/cache -> {files, bytes}
    passport: dict | None = field(default=None, compare=False)  # what its entries were made for (ops/passport.py)

    @property
    def fingerprint(self) -> str:
        """The per-version folder's name: what a cache built for these versions is called."""
        return self.folder.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Checkout:
    path: str
    exists: bool
    git: bool
    head: str | None
    deployed: str | None  # the commit deploy recorded
    edited: tuple[str, ...]  # tracked files that differ from HEAD
    untracked: tuple[str, ...]
    record: dict = field(default_factory=dict, repr=False, compare=False)
    git_error: str | None = None  # git failed in the checkout (dubious ownership, a broken .git): its words


@dataclass(frozen=True)
class Jobs:
    current: str | None  # the latest run id
    alive: bool
    exit: int | None
    lost: bool  # the latest run ended without an exit record
    orphans: dict[str, tuple[int, ...]]  # run id -> live processes of a run that is not alive
    marked: tuple[int, ...]  # every live process of any run
    manifest: dict | None = field(default=None, repr=False, compare=False)
    live: tuple[str, ...] = ()  # every live run (no exit record, a process of it alive), the latest or not
    cache_stats: dict | None = field(default=None, compare=False)  # the latest run's compile-cache counters
    compile: dict | None = field(default=None, compare=False)  # the latest run's compile watch (probe's part)


@dataclass(frozen=True)
class Disk:
    path: str
    free: int | None
    total: int | None


@dataclass(frozen=True)
class Facts:
    ctid: int
    venv: Venv
    torch: Torch
    gpus: Gpus
    cache: Cache
    checkout: Checkout
    jobs: Jobs
    disk: tuple[Disk, ...]
    clock_skew_s: float  # container clock outside the controller's send..receive window (0: in step)
    known_good: dict | None
    probe_seconds: float = 0.0
    gpu: gpu.CtGpu | None = None  # the GPU passthrough probe's answer (remote.facts.gpu), where it was asked

    def to_dict(self) -> dict:
        d = asdict(self)
        d["venv"].pop("record", None)
        d["checkout"].pop("record", None)
        d["jobs"].pop("manifest", None)
        d["venv"]["packages"] = {n: p["version"] for n, p in d["venv"]["packages"].items()}
        d["venv"].pop("lock", None)
        d["cache"]["warmups"] = len(self.cache.warmups)
        return d


def _versions(raw_venv: dict | None) -> dict[str, Package]:
    if not raw_venv:
        return {}
    return {naming.normalize(n): Package(naming.normalize(n), d.get("version", ""), d.get("installer") or "",
                                          d.get("url")) for n, d in (raw_venv.get("dists") or {}).items()}


def _json_of(child: dict | None) -> dict | None:
    if not child or child.get("rc") != 0:
        return None
    try:
        return naming.json_loads(child["out"])
    except ValueError:
        return None


def parse_gpu_processes(text: str) -> tuple[dict, ...]:
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            out.append({"pid": int(parts[0]), "name": parts[1],
                        "used_mib": int(float(parts[2])) if parts[2].replace(".", "").isdigit() else None})
    return tuple(out)


def parse_cuda_driver(text: str) -> str | None:
    """The `CUDA Version: 12.8` of nvidia-smi's header."""
    import re

    m = re.search(r"CUDA Version:\s*([\d.]+)", text or "")
    return m.group(1) if m else None


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # `[N/A]` (MIG, some virtual GPUs)
        return None


def parse_gpus(text: str) -> list[dict]:
    """nvidia-smi's CSV (index, name, driver, memory used, memory total[, uuid]), the one parser of its
    GPU list."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (5, 6) or not parts[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi output: {line!r}")
        gpus.append({"index": int(parts[0]), "name": parts[1], "driver": parts[2],
                     "memory_used_mib": _mib(parts[3]), "memory_total_mib": _mib(parts[4]),
                     **({"uuid": parts[5]} if len(parts) == 6 else {})})
    return gpus


def visible_count(gpus: list[dict], env: Mapping[str, str]) -> int:
    """How many GPUs a job sees: all of nvidia-smi's, or as many of CUDA_VISIBLE_DEVICES's ids as name one
    of them (CUDA stops at the first id that does not; a UUID, or its unique leading part, is checked where
    nvidia-smi gave them)."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return len(gpus)
    indexes, uuids = {g["index"] for g in gpus}, {g["uuid"] for g in gpus if g.get("uuid")}
    valid = 0
    for d in (d.strip() for d in cvd.split(",") if d.strip()):
        # CUDA takes a UUID's leading characters too, as long as they name exactly one GPU.
        if d.isdigit() and int(d) in indexes or d.startswith("GPU-") and (
                not uuids or sum(u.startswith(d) for u in uuids) == 1) or d.startswith("MIG-"):
            valid += 1
        else:
            break
    return valid


def gpu_problem(torch: Torch, gpus: Gpus, env: Mapping[str, str]) -> tuple[str, str] | None:
    """What keeps a job from its GPUs and what to check, or None: torch (asked without train.env) must see
    every GPU nvidia-smi lists, and CUDA_VISIBLE_DEVICES in train.env must name only GPUs nvidia-smi
    lists. Shared by train's preflight and doctor."""
    if not gpus.smi or gpus.error or not gpus.gpus or torch.error:
        return None
    n = len(gpus.gpus)
    if torch.device_count != n:
        built, supported = _cuda_tuple(torch.cuda_build), _cuda_tuple(gpus.cuda_driver)
        if built and supported and built > supported:
            hint = (f"the venv's CUDA build ({torch.cuda_build}) is newer than the driver ({gpus.driver}) supports "
                    f"(up to CUDA {gpus.cuda_driver}): pin a torch build for this driver (venv.packages), then remote "
                    "deploy")
        else:
            hint = ((f"the venv's CUDA build ({torch.cuda_build}) suits the driver ({gpus.driver}, up to CUDA "
                     f"{gpus.cuda_driver}): " if built and supported else "")
                    + "check the container's GPU nodes against the host's (`remote doctor --gpu` compares each)")
        return (f"nvidia-smi lists {n} GPU(s) but torch sees {torch.device_count}"
                + (" (torch.cuda.is_available() is False)" if not torch.cuda_available else ""), hint)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and visible_count(list(gpus.gpus), env) != len([d for d in cvd.split(",") if d.strip()]):
        listed = ", ".join(f"{g['index']}" + (f" ({g['uuid']})" if g.get("uuid") else "") for g in gpus.gpus)
        return (f"CUDA_VISIBLE_DEVICES={cvd} in train.env names a device nvidia-smi does not list (it lists "
                f"{listed})", "fix CUDA_VISIBLE_DEVICES in train.env")
    return None


def _cuda_tuple(v: str | None) -> tuple[int, ...] | None:
    """`13.0` -> (13, 0); None for anything else."""
    import re

    if not v or not re.fullmatch(r"\d+(\.\d+)*", v):
        return None
    return tuple(int(x) for x in v.split(".")[:2])


def gpus_of(raw: dict) -> Gpus:
    q = raw.get("gpus") or {}
    if not q or "missing" in q:
        return Gpus(False, (), None, None, ())
    if q.get("rc") is None:  # it hung: a driver in trouble, not a machine without GPUs
        return Gpus(True, (), None, None, (), f"nvidia-smi did not answer within {SMI_S} s (a hung GPU driver?)")
    if q.get("rc") != 0:
        # nvidia-smi prints its errors on stdout (`Failed to initialize NVML: Unknown Error`).
        said = (str(q.get("err") or "").strip() + "\n" + str(q.get("out") or "").strip()).strip()
        return Gpus(True, (), None, None, (), f"nvidia-smi failed (exit {q.get('rc')}): {said[-300:]}" if said else
                    f"nvidia-smi failed (exit {q.get('rc')}) and printed nothing")
    try:
        gpus = parse_gpus(q["out"])
    except ValueError as exc:  # an odd nvidia-smi is a finding, not a crash
        return Gpus(True, (), None, None, (), str(exc))
    apps = raw.get("apps") or {}
    processes = parse_gpu_processes(apps.get("out", "")) if apps.get("rc") == 0 else ()
    got = raw.get("apps_cmdline")
    commands: dict = got if isinstance(got, dict) else {}

    def with_command(p: dict) -> dict:
        cmd = commands.get(str(p["pid"]))
        return {**p, "command": printable(cmd[:300])} if isinstance(cmd, str) and cmd else p

    processes = tuple(with_command(p) for p in processes)
    return Gpus(True, tuple(gpus), gpus[0]["driver"] if gpus else None,
                parse_cuda_driver((raw.get("smi") or {}).get("out", "")), processes)


def gpu_use(g: Gpus, marked: Iterable[int] = ()) -> dict | None:
    """The container's GPU memory in use now, by every process (nvidia-smi's memory.used of each GPU, summed),
    and the GPU processes that are no run's (`foreign`: their pid is no marked process of a run); None
    without GPUs."""
    if not g.gpus:
        return None
    used = [x["memory_used_mib"] for x in g.gpus if isinstance(x.get("memory_used_mib"), int)]
    total = [x["memory_total_mib"] for x in g.gpus if isinstance(x.get("memory_total_mib"), int)]
    runs = set(marked)
    return {"used_mib": sum(used) if used else None, "total_mib": sum(total) if total else None,
            "processes": [dict(p) for p in g.processes],
            "foreign": [dict(p) for p in g.processes if p["pid"] not in runs]}


def process_text(p: Mapping) -> str:
    """`pid 4242 (133120 MiB): python hog.py`: one GPU process as preflight, status and doctor name it."""
    mib = f"{p['used_mib']} MiB" if p.get("used_mib") is not None else "memory unknown"
    return printable(f"pid {p['pid']} ({mib}): {p.get('command') or p.get('name') or '?'}")


def marked_of(raw: dict) -> tuple[int, ...]:
    """Every live process of any run, from the probe's `jobs` part (empty without it)."""
    runs = ((raw.get("jobs") or {}).get("runs") or {}) if isinstance(raw.get("jobs"), dict) else {}
    return tuple(sorted(p for r in runs.values() if isinstance(r, dict) for p in (r.get("marked") or [])
                        if isinstance(p, int)))


def _lines(text: str | None) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()]


def clock_skew(container_time: float, sent: float, received: float) -> float:
    """How far the container's clock is outside the window in which it was read (0 inside it).

    The round trip is lopsided (SSH, pct and python start before the probe reads its clock), so a
    midpoint would report that start-up as skew; the window gives a bound that is never too large."""
    if container_time < sent:
        return container_time - sent
    if container_time > received:
        return container_time - received
    return 0.0


def deployed_records(raw: dict) -> tuple[dict | None, dict | None]:
    """The checkout's and the venv's deploy records, as deploy wrote them (None: not deployed)."""
    return (raw.get("code") or {}).get("record"), (raw.get("venv") or {}).get("record")


def venv_of(raw: dict, spec: ContainerSpec) -> Venv:
    rv = raw.get("venv") or {}
    record = rv.get("record") or {}
    child = raw.get("venv_run")
    info = _json_of(child)
    error = None
    if not rv.get("exists"):
        error = f"no venv at {rv.get('path', spec.venv.path)}"
    elif info is None:
        error = "the venv's interpreter does not run" + (f": {child.get('err', '').strip()[-300:]}" if child else "")
    return Venv(rv.get("path", spec.venv.path), bool(rv.get("exists")), rv.get("real"), bool(record),
                record.get("spec_hash"), record.get("lock_sha256"),
                naming.parse_lock((record.get("lock") or "").splitlines()), _versions(info), info is not None,
                error, record)


def torch_of(raw: dict) -> Torch:
    """What `import torch` in the venv said (possibly kept from an earlier probe of the same venv and driver)."""
    child = raw.get("torch")
    info = _json_of(child)
    triton = _triton(_json_of(raw.get("venv_run")))
    cached = bool((child or {}).get("cached"))
    if info is not None and info.get("torch"):
        return Torch(info["torch"], info.get("cuda_build"), triton, bool(info.get("cuda_available")),
                     int(info.get("device_count") or 0), tuple(info.get("device_names") or ()), cached=cached)
    if info is not None:
        error = info.get("torch_error") or "torch is not installed"
    elif child is None:
        error = f"no venv interpreter at {(raw.get('venv') or {}).get('path')}/bin/python"
    else:
        error = "the venv's interpreter does not run" + (f": {child.get('err', '').strip()[-300:]}"
                                                         if child.get("err") else "")
    return Torch(None, None, triton, False, 0, (), error, cached)


def checkout_of(raw: dict, spec: ContainerSpec) -> Checkout:
    rco = raw.get("code") or {}
    crec = rco.get("record") or {}
    return Checkout(rco.get("path", spec.code.path), bool(rco.get("exists")), bool(rco.get("git")), rco.get("head"),
                    crec.get("commit"), tuple(s[3:] for s in _lines(rco.get("status"))),
                    # Untracked folders come as one entry; python's bytecode folders are nobody's edit.
                    tuple(u for u in rco.get("untracked") or () if not _bytecode(u)), crec, rco.get("git_error"))


def parse_warmups(text: str | None) -> tuple[dict, ...]:
    """warmups.jsonl's records, one JSON object a line; a torn or foreign line is skipped."""
    out = []
    for line in _lines(text):
        try:
            out.append(naming.json_loads(line))
        except ValueError:
            continue
    return tuple(out)


def warmups_of(raw: dict) -> tuple[dict, ...]:
    return parse_warmups((raw.get("cache") or {}).get("warmups"))


def parse(raw: dict, spec: ContainerSpec, window: tuple[float, float], probe_seconds: float = 0.0) -> Facts:
    """The probe's JSON (every part) -> Facts. Pure: no I/O; `window` is the controller's clock when the
    probe was sent and when its answer came back."""
    venv, torch = venv_of(raw, spec), torch_of(raw)
    verify = venv.record.get("verify") or {}
    # The cache folder named after what runs now (the live torch), as the tools would compute it.
    running = {"torch": torch.version or verify.get("torch"), "cuda_build": torch.cuda_build if torch.version
            else verify.get("cuda_build"), "triton": torch.triton if torch.version else verify.get("triton")}
    folder = naming.compile_cache(spec, running)
    rc = raw.get("cache") or {}
    name = folder.rsplit("/", 1)[-1]
    folders = rc.get("folders") or {}
    mine = folders.get(name, {})
    compiled = (mine.get("files", 0) - (mine.get("tmp") or {}).get("files", 0),
                mine.get("bytes", 0) - (mine.get("tmp") or {}).get("bytes", 0))
    # Present: something compiled in it (the jobs' TMPDIR inside is made before anything compiles).
    cache = Cache(rc.get("dir", spec.warmup.cache_dir), folder, compiled[0] > 0, compiled[0], compiled[1],
                  {k: v for k, v in folders.items() if k != name},
                  warmups_of(raw), dict(raw.get("tmp_artifacts") or {}), _json_object(mine.get("passport")))
    rj = raw.get("jobs") or {}
    runs = rj.get("runs") or {}
    cur = runs.get(rj.get("current") or "", {})
    # Live: no exit record, and its leader or any process of it alive (a wrapper may not have written its
    # pid file yet, or died while its processes run on); every run counts, not only the latest.
    live = tuple(rid for rid, r in sorted(runs.items()) if r.get("exists", True) and not r.get("exit")
                 and (r.get("leader_alive") or r.get("marked")))
    alive = rj.get("current") in live
    exit_text = cur.get("exit") or ""
    orphans = {rid: tuple(r["marked"]) for rid, r in runs.items() if r.get("marked") and rid not in live}
    jobs = Jobs(rj.get("current"), alive, int(exit_text) if exit_text.lstrip("-").isdigit() else None,
                bool(rj.get("current")) and cur.get("exists", False) and not alive and not exit_text, orphans,
                tuple(sorted(p for r in runs.values() for p in r.get("marked", []))), rj.get("manifest"), live,
                rj.get("cache_stats") if isinstance(rj.get("cache_stats"), dict) else None,
                raw.get("compile") if isinstance(raw.get("compile"), dict) else None)
    disk = tuple(Disk(d["path"], d.get("free"), d.get("total")) for d in raw.get("disk") or [])
    skew = clock_skew(raw.get("time_end", window[0]), *window)
    return Facts(spec.ctid, venv, torch, gpus_of(raw), cache, checkout_of(raw, spec), jobs, disk, round(skew, 3),
                 raw.get("known_good"), probe_seconds, gpu_of(raw))


def gpu_of(raw: dict) -> gpu.CtGpu | None:
    """The GPU passthrough probe's answer in a facts probe (part "gpu"), or None where it was not asked or
    did not answer."""
    child = raw.get("gpu")
    if not child or child.get("rc") is None:
        return None
    from . import gpu

    try:
        return gpu.parse_container(child.get("out") or "")
    except ValueError:
        return None


def _json_object(text: str | None) -> dict | None:
    """A small JSON file's object (a passport), or None: missing, torn or not an object (untrusted)."""
    if not isinstance(text, (str, bytes)):  # the probe's answer held another JSON type
        return None
    try:
        value = naming.json_loads(text or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _bytecode(path: str) -> bool:
    return path.rstrip("/").endswith("__pycache__") or path.endswith((".pyc", ".pyo"))


def _triton(info: dict | None) -> str | None:
    dists = {naming.normalize(k): v.get("version") for k, v in ((info or {}).get("dists") or {}).items()}
    return dists.get("triton") or dists.get("pytorch-triton")


UV_HOME = "/root/.local/share/remote"  # uv binaries live here, one folder per version

# What each reader asks the probe for (remote/facts/probe.py's parts).
DEPLOY = ("python", "venv", "dists", "uv", "lease", "code")
DEPLOYED = ("venv", "code")  # the deploy records, nothing slow
PREFLIGHT = ("venv", "dists", "code", "warmups", "gpus", "torch", "gpu", "jobs", "known_good")
STATUS = ("venv", "run", "compile", "gpus", "jobs")
DOCTOR = ("venv", "dists", "torch", "code", "untracked", "cache", "tmp", "jobs", "gpus", "disk", "known_good", "gpu",
          "compile")


def versions_dir(spec: ContainerSpec) -> str:
    """Where deploy keeps the venv's versions (the venv path is a symlink to one of them)."""
    return spec.venv.path.rstrip("/") + ".versions"


def uv_path(version: str) -> str:
    return f"{UV_HOME}/uv-{version}/uv"


def probe_argv(spec: ContainerSpec, parts=DOCTOR, run_id: str | None = None, *, fresh: bool = False) -> list[str]:
    """The one command that reads the asked-for facts (with the system python, not the venv's: it may be
    broken)."""
    arg = {"parts": list(parts), "fresh": fresh, "venv": spec.venv.path, "versions": versions_dir(spec),
           "uv": uv_path(spec.venv.uv_version), "checkout": spec.code.path, "cache_dir": spec.warmup.cache_dir,
           "run_dir": spec.train.run_dir, "lease": naming.LEASE}
    if "gpu" in parts:  # remote/sh/gpu_container.py, run by the probe as a child of its own
        from . import gpu

        arg["gpu_source"] = gpu.CONTAINER_SOURCE
    if "run" in parts:
        arg["state_script"], arg["run_id"] = "set -euo pipefail\n" + shell.with_lib("state"), run_id or ""
    if "compile" in parts:
        arg["run_id"] = run_id or ""
    return [spec.venv.python, "-c", PROBE_SOURCE, json.dumps(arg)]


def read_raw(t: Target, parts=DOCTOR, run_id: str | None = None, *, fresh: bool = False
             ) -> tuple[dict, tuple[float, float]]:
    """Run the probe in the container (with the system PATH: `python3` must be the system's, not the venv's,
    which may be broken): its raw JSON, and the controller's clock when it was sent and answered. `fresh`:
    ask torch again even if an earlier probe's answer still holds."""
    spec = t.spec
    sent = time.time()
    r = t.system.run(probe_argv(spec, parts, run_id, fresh=fresh), mutates=False, timeout=300, label="facts probe")
    try:
        return naming.json_loads(r.out), (sent, time.time())
    except ValueError:
        raise CommandError("facts probe", r.exit_code, f"it printed no JSON: {(r.out + r.err)[-300:]!r}",
                           f"container {spec.ctid}") from None


def gather(t: Target, *, fresh: bool = False) -> Facts:
    """Every fact of the container, in one round trip."""
    raw, window = read_raw(t, fresh=fresh)
    return parse(raw, t.spec, window, round(window[1] - window[0], 3))


def deployed(t: Target) -> Deployed:
    """The deployed commit and venv record, read with the facts probe, or a DeployError saying to deploy
    first."""
    return deployed_in(read_raw(t, DEPLOYED)[0], t.spec)
