"""The known-good record: what a container was when a run met its baseline.

Kept in the container, `<run_dir>/known-good.json` (the latest) and `<run_dir>/known-good.jsonl` (every
one, appended): it describes that container and sits beside the run it names, every controller (every
teammate) reads the same one, and the facts probe reads it in the same round trip. doctor compares the
facts of now with it. Written when `train` sees a run end with exit 0 and its rolling metric at or above
the baseline (at or below for a lower-is-better metric), or by `remote known-good --run ID`.
"""

from __future__ import annotations

import json
import time

from ..config import ContainerSpec
from ..errors import JobError, RemoteError
from ..facts import Facts, gather
from ..facts.runs import RunState
from ..naming import printable
from ..ops import files, jobenv, jobs, logs
from ..results import KnownGood
from ..target import Target
from ..transport.pct import Container

LOG_TAIL = 1 << 20  # bytes of a run's log read for its rolling metric (the last few values are all it needs)


def log_tail(ct: Container, path: str, limit: int = LOG_TAIL) -> str:
    """The end of a log (at most `limit` bytes, from its first whole line): never the whole log, which
    can be gigabytes, in memory."""
    data = ct.run(["tail", "-c", str(limit), "--", path], mutates=False, timeout=120, label="read the log's end").stdout
    if len(data) >= limit:  # it started inside a line: drop that part
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", "replace")


def path_of(spec: ContainerSpec) -> str:
    return f"{spec.train.run_dir.rstrip('/')}/known-good.json"


def watch_log(spec: ContainerSpec, text: str) -> logs.Watch:
    """The run's metric over its log text (the whole log or its tail)."""
    watch = jobs.watch_for(spec)
    for line in logs.LineSplitter().feed(text.encode()):
        watch.line(line)
    return watch


def meets_baseline(watch: logs.Watch) -> bool:
    """The rolling metric at or above the baseline (at or below it when lower is better)."""
    r, base = watch.rolling, watch.baseline
    if r is None or base is None:
        return False
    return r >= base if watch.higher_is_better else r <= base


def make_record(facts: Facts, spec: ContainerSpec, run: RunState, watch: logs.Watch, how: str) -> dict:
    """The record, from the run's manifest (what it ran with) and the container's facts now. Pure."""
    m = run.manifest
    same_lock = facts.venv.lock_sha256 and facts.venv.lock_sha256 == m.venv_lock_sha256
    versions = {"torch": m.torch, "cuda_build": m.cuda_build, "triton": m.triton}
    folder = m.compile_cache or jobenv.compile_cache(spec, versions)
    gpus = m.gpus
    return {
        "run": run.run, "container": facts.ctid, "how": how,
        "node": spec.host.node_name,  # a cluster's container may move: doctor names a change of node
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": m.commit, "lock_sha256": m.venv_lock_sha256, "spec_hash": facts.venv.spec_hash
        if same_lock else None, **versions,
        # Every installed package, when the venv is still the one the run used.
        "packages": {n: p.version for n, p in facts.venv.packages.items()} if same_lock else None,
        "driver": m.driver or facts.gpus.driver, "cuda_driver": facts.gpus.cuda_driver,
        # The host's loaded NVIDIA module and the container's driver libraries (remote.facts.gpu).
        "host_module": facts.gpu.proc_version if facts.gpu else None,
        "driver_libs": facts.gpu.lib_versions if facts.gpu else None,
        "gpu_names": [g.get("name") for g in gpus] if gpus is not None else list(facts.gpus.names),
        "cache": {"fingerprint": folder.rsplit("/", 1)[-1],
                  "files": facts.cache.files if facts.cache.folder == folder else None,
                  "bytes": facts.cache.bytes if facts.cache.folder == folder else None},
        "throughput": {"value": watch.rolling, "unit": watch.unit, "higher_is_better": watch.higher_is_better,
                       "baseline": watch.baseline},
        "command": m.command,
        # The most GPU memory in use at once while it ran (its watch's reading of nvidia-smi, every GPU summed):
        # train's preflight refuses a launch where less than this is free (remote.ops.jobs.gpu_memory_check).
        "gpu_mem_peak_mib": (run.gpu or {}).get("mem_peak_mib"),
    }


def save(t: Target, record: dict) -> None:
    ct, spec = t.ct, t.spec
    text = json.dumps(record, indent=1)
    files.push_bytes(ct, text.encode() + b"\n", path_of(spec))
    ct.script('cat >> "$1"', path_of(spec) + "l", stdin=json.dumps(record).encode() + b"\n", timeout=60,
              label="known-good history")


def record_run(t: Target, run_id: str | None, *, how: str = "by hand (remote known-good)") -> KnownGood:
    """Record run `run_id` (default: the latest) of a container as its known-good; it must have ended with
    exit status 0."""
    spec, ct = t.spec, t.ct
    st = jobs.state(t, run_id)
    if not st.run:
        raise JobError(f"container {spec.ctid} has no run {run_id or ''} in {spec.train.run_dir}".replace("  ", " "))
    if st.alive or st.lost or st.exit != 0:
        raise JobError(f"run {st.run} {jobs.describe_end(st)}: only a run that ended with exit status 0 can be "
                       "known-good")
    watch = watch_log(spec, log_tail(ct, f"{st.path}/log"))
    record = make_record(gather(t), spec, st, watch, how)
    save(t, record)
    return KnownGood(record["run"], record["container"], record.get("commit"), record.get("torch"), path_of(spec),
                     record)


def after_run(t: Target, final: jobs.Followed) -> dict | None:
    """Called by `train` when the run it followed ends: record it as known-good when it met the baseline."""
    spec = t.spec
    watch = final.log_watch
    if final.alive or final.lost or final.exit != 0 or watch is None \
            or not meets_baseline(watch):
        return None
    try:
        facts = gather(t)
        record = make_record(facts, spec, final, watch, "auto: the run met the baseline")
        save(t, record)
    except RemoteError as exc:
        t.warn(printable(f"could not record run {final.run} as known-good: {exc}"))
        return None
    t.note(f"run {final.run} recorded as known-good ({logs.fmt(watch.rolling, watch.unit)}, baseline "
           f"{watch.baseline:g}) in {path_of(spec)}")
    return record
