"""`warmup`: run the warmup command one device at a time into the persistent compile cache.

The command can be anything that compiles the training configuration (a repository's own entry point
with a few steps, or one that uses remote_guard): success is exit status 0. Each device's run gets
exactly the training job's environment (remote/ops/jobenv.py), so its compile artifacts land in the same
per-version cache folder that training reads, and reports how long it took and what the cache gained
(new files and bytes, measured before and after; nothing new means it was warm), plus remote_guard's
hits and misses when the command prints its REMOTE_WARMUP line, and what torch did while compiling (the
compile watch's events of the command, remote/ops/compilelog.py): recompiles, graph breaks and eager
fallbacks with the guard and the line, and whether what it compiled will serve the run (a function compiled
once per value of a Python number that changes each step will not: the run compiles it again, then runs it
eagerly past the recompile limit). Each device's result is appended to
<cache_dir>/warmups.jsonl as soon as it finishes, keyed on commit, venv lock, command and environment:
train's preflight asks for a new warmup when any of them changed. No task ever deletes the cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import executor, facts, shell
from ..config import ContainerSpec
from ..config import unset as config_unset
from ..errors import EXPORT_CACHE, CommandError, WarmupError, worded
from ..events import DeviceWarmed, WarmupUnserved
from ..facts import deployed, deployed_in  # read with the facts probe (an exec needs them, not this module)
from ..facts.deployed import Deployed, Verify
from ..naming import json_loads, printable
from ..results import CacheCopy, CompileHealth, ImportedCache, Warmup, WarmupDevice
from ..target import Target
from ..transport.pct import Container
from . import compilelog, dryplan, files, jobenv, oplock
from . import passport as pp
from . import venv as venvmod
from .files import untar
from .logs import LineSplitter

REPORT_PREFIX = "REMOTE_WARMUP "  # remote_guard's report line (optional)
CACHE_PREFIX = "REMOTE_CACHE "  # warmup.sh's before/after lines
STATS_PREFIX = "REMOTE_STATS "  # warmup.sh's lines of torch's counters, one per process (the venv's hook)
COMPILE_PREFIX = "REMOTE_COMPILE "  # warmup.sh's lines of the compile watch's events (the venv's watch)
ALL = "all"  # the one "device" of a command without {device}
BUNDLE_SIDECAR = "remote-cache.json"


def devices_of(spec: ContainerSpec) -> list[str]:
    return list(spec.warmup.devices) if "{device}" in (spec.warmup.command or "") else [ALL]


def command_for(spec: ContainerSpec, device: str) -> str:
    """The warmup command for one device. Only `{device}` is replaced: `${VAR}` and other braces stay
    as they are for bash."""
    command = spec.warmup.command
    assert command is not None, "command_for: callers check spec.warmup.command first"
    return command.replace("{device}", device)


def expected_passport(spec: ContainerSpec, state: Deployed) -> dict:
    """The cache passport (remote/ops/passport.py) a warmup of this container would write now."""
    verify = state.verify.as_record()
    return pp.expected(verify, commit=state.code.commit, venv_lock=state.venv.lock_sha256,
                       command=spec.warmup.command, devices=devices_of(spec),
                       env={**jobenv.tool_env(spec, verify), **jobenv.user_env(spec)})


def gpu_now(state: Deployed, raw: dict) -> Deployed:
    """`state` with its venv's verify record (what deploy saw: GPU name, compute capability, driver major) brought to
    the GPU nvidia-smi reports now: a container migrated to another node since its deploy (another GPU or driver)
    would otherwise write, and be compared on, the old node's in its passport. A GPU of another name leaves the
    capability unknown (None) until the next deploy records it; nvidia-smi unanswered: `state` as it is."""
    got = raw.get("gpus")
    answer: dict = got if isinstance(got, dict) else {}
    try:
        gpus = facts.parse_gpus(answer.get("out") or "") if answer.get("rc") == 0 else []
    except ValueError:
        gpus = []
    if not gpus:
        return state
    verify = state.verify
    name, major = gpus[0]["name"], gpus[0]["driver"].split(".")[0]
    if verify.gpu_name == name and verify.driver_major == major:
        return state
    return dataclasses.replace(state, venv=dataclasses.replace(state.venv, verify=verify.with_gpu(name, major)))


def deployed_now(t: Target) -> Deployed:
    """`deployed` (the deploy records) with the GPU the container has now (gpu_now): what its passport is made of."""
    raw = facts.read_raw(t, (*facts.DEPLOYED, "gpus"))[0]
    return gpu_now(deployed_in(raw, t.spec), raw)


def read_passport(ct: Container, folder: str) -> dict | None:
    """The passport of a per-version cache folder, or None (none yet, or unreadable)."""
    r = ct.run(["cat", f"{folder}/{pp.FILE}"], check=False, mutates=False, timeout=60)
    return pp.parse(r.out) if r.exit_code == 0 else None


def write_passport(ct: Container, folder: str, passport: dict) -> None:
    """Write a folder's passport atomically (a reader sees the old one or the new one, whole)."""
    files.push_bytes(ct, (json.dumps(passport, indent=1, sort_keys=True) + "\n").encode(), f"{folder}/{pp.FILE}")


def stamp(passport: dict, ctid: int, **extra) -> dict:
    return {**passport, "made_by": ctid, "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}


def warmup_key(spec: ContainerSpec, state: Deployed, device: str) -> dict:
    """What a warmup depends on. Its `key` changes when the commit, the venv lock, the command or the
    environment (values included, recorded only as a hash) changes."""
    verify = state.verify.as_record()
    parts = {"commit": state.code.commit, "venv_lock": state.venv.lock_sha256,
             "command": command_for(spec, device), "env": jobenv.env_hash(spec, verify)}
    return {**parts, "key": hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]}


@dataclass(frozen=True)
class DeviceResult:
    device: str
    start: float
    end: float
    report: dict  # remote_guard's REMOTE_WARMUP report, or {}
    before: tuple[int, int] = (0, 0)  # cache (files, bytes) before and after
    after: tuple[int, int] = (0, 0)
    key: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)  # torch's counters summed over the command's processes (any code)
    compile: CompileHealth = field(default_factory=CompileHealth)  # the compile watch's events of the command

    @property
    def counters(self) -> dict:
        return self.report or self.stats

    @property
    def hits(self) -> int:
        return self.counters.get("fxgraph_hit", 0) + self.counters.get("autograd_hit", 0)

    @property
    def misses(self) -> int:
        return self.counters.get("fxgraph_miss", 0) + self.counters.get("autograd_miss", 0)

    @property
    def new_files(self) -> int:
        return self.after[0] - self.before[0]

    @property
    def new_bytes(self) -> int:
        return self.after[1] - self.before[1]

    @property
    def warm(self) -> bool:
        return self.new_files == 0 and self.new_bytes == 0

    def public(self) -> WarmupDevice:
        """This device's figures as the API returns them (Warmup.per_device) and its event reports them."""
        return WarmupDevice(self.device, self.end - self.start, self.new_files, self.new_bytes, self.after[0],
                            self.after[1], self.hits, self.misses,
                            "guard" if self.report else "torch" if self.stats else "")

    def compile_lines(self) -> list[str]:
        """What torch did while this device warmed up, where the watch recorded more than first compiles:
        the counts, each recompile, graph break and eager fallback (with its guard or reason and line). Whether
        what it compiled serves the run is an event of its own (WarmupUnserved, from `unserved`)."""
        return compile_report(self.compile)

    def record(self) -> dict:
        c = self.compile
        return {"device": self.device, **self.key, "start": self.start, "end": self.end,
                "seconds": round(self.end - self.start, 3), "new_files": self.new_files, "cache_files": self.after[0],
                "new_bytes": self.new_bytes, "hits": self.hits, "misses": self.misses,
                **({"compile": c.counts(), "serves_run": not unserved(c)} if c else {})}


def unserved(h: CompileHealth) -> list[str]:
    """Why what a warmup compiled will not serve the run, one text per function: a function that ran eagerly,
    or one compiled again for each value a guard checks (the run's values differ: it compiles again)."""
    out: dict[tuple, str] = {}
    for e in h.events:
        key = (e.fn, e.file, e.line)
        if e.kind == "eager-fallback":
            out[key] = (f"{e.function} runs eagerly ({e.why or 'unknown'}): the run will too"
                        + (f"; {compilelog.guard_advice(_guard(e.reason))}" if e.why == "recompile-limit" else ""))
        elif e.kind == "recompile" and key not in out:
            out[key] = (f"{e.function} was compiled again for each value of `{_guard(e.reason)}`"
                        + (f" ({e.where})" if e.where else "") + ": a run whose values differ compiles it again: "
                        + compilelog.guard_advice(_guard(e.reason)))
    return [printable(t) for t in out.values()]


def _guard(reason: str | None) -> str:
    text = reason or ""
    for prefix in ("recompile limit reached; last guard failed: ", "guard failed: "):
        text = text.removeprefix(prefix)
    return text


def compile_report(h: CompileHealth, limit: int = 6) -> list[str]:
    """A warmup's compile health in a few lines (none for a warmup that only compiled each function once)."""
    if not (h.recompiles or h.graph_breaks or h.eager_fallbacks):
        return []
    lines = [compilelog.health_line(h).split(";")[0] + f" ({h.seconds:.1f} s compiling)"]
    seen: set[tuple] = set()
    for e in h.events:
        key = (e.kind, e.fn, e.file, e.line, e.where, e.reason if e.kind != "recompile" else None)
        if e.kind == "compile" or key in seen:
            continue
        seen.add(key)
        lines.append("  " + compilelog.describe(e))
        if len(lines) > limit:
            lines.append("  … (`remote status` and `remote doctor` read the run's; TORCH_LOGS=recompiles,graph_breaks "
                         "shows every one)")
            break
    return lines  # whether it serves the run: a WarmupUnserved event of its own (run_device)


def parse_report(output: str) -> dict | None:
    """The last REMOTE_WARMUP line a warmup printed."""
    for line in reversed(output.splitlines()):
        if line.startswith(REPORT_PREFIX):
            return json_loads(line[len(REPORT_PREFIX):])
    return None


def parse_stats(lines: list[str]) -> dict:
    """warmup.sh's REMOTE_STATS lines (one JSON object per process), summed; untrusted: non-numbers skipped."""
    total: dict = {}
    for line in lines:
        if not line.startswith(STATS_PREFIX):
            continue
        try:
            got = json_loads(line[len(STATS_PREFIX):])
        except ValueError:
            continue
        for k, v in (got.items() if isinstance(got, dict) else ()):
            if isinstance(v, int) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total


def parse_cache_lines(lines: list[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for line in lines:
        if line.startswith(CACHE_PREFIX):
            when, files_, size = line[len(CACHE_PREFIX):].split()
            out[when] = (int(files_), int(size))
    return out


WARMUP_PARTS = ("venv", "dists", "code", "gpus")  # the deploy records, what is installed, the checkout, the GPU now


def unlike_deployed(raw: dict, spec: ContainerSpec, state: Deployed, *, hints: bool = False) -> list[str]:
    """How the checkout and venv differ from what deploy made (edits, another HEAD, a package the lock does
    not say): a warmup there would be recorded as the deployed commit's and lock's, and it is not; train's
    preflight refuses the same (with `hints`: each problem with the command that fixes it). Pure."""
    def hint(text: str) -> str:
        return text if hints else ""

    problems = []
    checkout = facts.checkout_of(raw, spec)
    commit = state.commit
    if checkout.git_error:
        problems.append(f"git fails in the checkout {spec.code.path}: {checkout.git_error}")
    elif checkout.head != commit:
        problems.append(f"checkout {spec.code.path} is at {(checkout.head or 'nothing')[:12]}, not the deployed "
                        f"{commit[:12]}" + hint(": run `remote deploy`"))
    elif checkout.edited:
        problems.append(f"checkout {spec.code.path} has edits ({', '.join(checkout.edited[:5])})"
                        + hint(": `remote deploy` saves them as a patch and restores the commit"))
    # The rule deploy rebuilds by: the venv exactly its lock.
    installed = (raw.get("venv") or {}).get("dists")
    if installed is None:
        problems.append(f"the venv's interpreter does not run ({spec.venv.path}/bin/python)"
                        + hint(": `remote deploy` rebuilds it"))
    else:
        drift = venvmod.drift(venvmod.parse_lock(state.venv.lock.splitlines()), installed)
        if drift:
            lines = drift.lines()
            problems.append(f"the venv differs from its lock ({'; '.join(lines[:5])}{'; …' if len(lines) > 5 else ''})"
                            + hint(": `remote deploy` rebuilds it (`remote doctor` says what changed since the "
                                   "last good run)"))
    return problems


def _prefixed(output: Callable[[str], None], prefix: str, sink: list[str]):
    """Each device's output shown with its device as prefix, and kept for the report lines."""
    splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}

    def on_output(kind: str, chunk: bytes) -> None:
        for line in splitters[kind].feed(chunk):
            at = min((i for i in (line.find(CACHE_PREFIX), line.find(COMPILE_PREFIX)) if i >= 0), default=-1)
            head, sep, tail = (line[:at], line[at:at + 1], line[at + 1:]) if at >= 0 else (line, "", "")
            if sep and head:  # the command's last line had no newline: warmup.sh's line was glued to it
                sink.append(head)
                output(f"  [{prefix}] {head}")
                line = sep + tail
            sink.append(line)
            if not line.startswith((REPORT_PREFIX, CACHE_PREFIX, STATS_PREFIX, COMPILE_PREFIX)):
                output(f"  [{prefix}] {line}")

    return on_output


def run_device(t: Target, state: Deployed, device: str) -> DeviceResult:
    """One device's warmup; its result is recorded in warmups.jsonl before this returns."""
    ct, spec = t.ct, t.spec
    verify = state.verify.as_record()
    command = command_for(spec, device)
    lines: list[str] = []
    start = time.time()
    try:
        tmp = f"{jobenv.compile_cache(spec, verify)}/tmp"
        jobenv.run(t, verify, ["bash", "-c", shell.load("warmup"), "warmup", jobenv.compile_cache(spec, verify),
                               command],
                   extra={"REMOTE_WARMUP_DEVICE": device,
                          "REMOTE_CACHE_STATS": f"{tmp}/warmup-stats-{device}-{os.getpid()}-{int(start)}",
                          "REMOTE_COMPILE_WATCH": f"{tmp}/warmup-compile-{device}-{os.getpid()}-{int(start)}.jsonl"},
                   cwd=spec.code.path, timeout=spec.warmup.timeout,
                   on_output=_prefixed(t.output, device, lines), label=command)
    except CommandError as exc:
        raise WarmupError(f"warmup of device {device} failed (exit {exc.command_status}, output above): {command}") from None
    if ct.dry:
        return DeviceResult(device, start, start, {})
    stats = parse_cache_lines(lines)
    result = DeviceResult(device, start, time.time(), parse_report("\n".join(lines)) or {},
                          stats.get("before", (0, 0)), stats.get("after", (0, 0)), warmup_key(spec, state, device),
                          parse_stats(lines), parse_compile(lines))
    _record(t, [result.record()])
    done = result.public()
    t.session.sink(DeviceWarmed(t.ctid, f"device {device} warmed up in {done.seconds:.1f}s", done.device,
                                done.seconds, done.new_files, done.new_bytes, done.cache_files, done.cache_bytes,
                                done.hits, done.misses, done.counted_by))  # worded by remote/cli/warmup.py
    for line in result.compile_lines():
        t.output(f"  [{device}] {line}")
    why = tuple(unserved(result.compile)) if result.compile else ()
    if why:  # a warning, typed: the command line words it (remote/cli/warmup.py)
        t.session.sink(WarmupUnserved(t.ctid, f"device {device}: what this warmup compiled will not serve the run: "
                                      + "; ".join(why[:3]), device, why))
    return result


def parse_compile(lines: list[str]) -> CompileHealth:
    """warmup.sh's REMOTE_COMPILE lines (the compile watch's compile.jsonl of the command), read as a run's."""
    return compilelog.summarize(line[len(COMPILE_PREFIX):] for line in lines if line.startswith(COMPILE_PREFIX))


def result_of(ctid: int, got: list[DeviceResult] | CacheCopy) -> Warmup:
    """A container's warmup as the API returns it: its devices summed, or the cache copied instead."""
    if isinstance(got, CacheCopy):
        return Warmup(ctid, (), got.seconds, got.files, got.bytes, 0, 0, False, got)
    return Warmup(ctid, tuple(r.device for r in got), sum(r.end - r.start for r in got),
                  sum(r.new_files for r in got), sum(r.new_bytes for r in got), sum(r.hits for r in got),
                  sum(r.misses for r in got), any(r.report for r in got), None, tuple(r.public() for r in got))


def _record(t: Target, records: list[dict]) -> None:
    ct, spec = t.ct, t.spec
    text = "".join(json.dumps(r) + "\n" for r in records)
    ct.script(shell.load("append"), spec.warmup.cache_dir, "warmups.jsonl", stdin=text.encode(), timeout=60,
              label="record the warmup")


def warmup(t: Target, *, parallel: bool = False, devices: list[str] | None = None) -> list[DeviceResult]:
    """Warm the compile cache for each configured device; returns per-device results (also recorded)."""
    spec = t.spec
    if not spec.warmup.command:
        raise config_unset(t.session.config.file, "warmup.command",
                           "set the command that compiles the training configuration (e.g. a few training steps)")
    ct = t.ct
    raw = facts.read_raw(t, facts.DEPLOYED if ct.dry else WARMUP_PARTS)[0]
    state = gpu_now(dryplan.state_in(raw, spec) if ct.dry else deployed_in(raw, spec), raw)  # the GPU it compiles for now
    problems = [] if ct.dry else unlike_deployed(raw, spec, state)
    if problems:  # its records would say this commit and lock were warmed up: refuse rather than lie
        raise WarmupError(f"container {spec.ctid} is not as deployed, so its warmup would not be the deployed "
                          f"commit's: {'; '.join(problems)}. `remote deploy` restores it (edits saved as a patch, "
                          "the venv rebuilt to its lock), then warm up")
    devices = list(devices or devices_of(spec))
    verify = state.verify.as_record()
    t.step(f"warmup of {len(devices)} device(s) {'in parallel' if parallel and len(devices) > 1 else 'one at a time'}"
           f" at {state.commit[:12]}, torch {state.verify.torch}, cache {jobenv.compile_cache(spec, verify)}")
    with oplock.hold(ct, "warmup"):  # one deploy, warmup or launch at a time per container
        results = _warm_devices(t, state, devices, parallel)
        if not ct.dry:  # what the folder's entries were made for, the devices warmed so far included
            folder = jobenv.compile_cache(spec, verify)
            new = {**expected_passport(spec, state), "devices": sorted({r.device for r in results})}
            write_passport(ct, folder, stamp(pp.merged(read_passport(ct, folder), new), spec.ctid))
        return results


def _warm_devices(t: Target, state: Deployed, devices: list[str], parallel: bool) -> list[DeviceResult]:
    results: list[DeviceResult] = []
    if parallel:  # each device in a thread of its own; the first device's error raised once all have ended
        results = list(executor.together({dev: functools.partial(run_device, t, state, dev) for dev in devices}).values())
        t.output("  (parallel: each device's cache gain includes what the others wrote meanwhile)")
    else:
        for dev in devices:
            results.append(run_device(t, state, dev))
    results.sort(key=lambda r: r.start)
    return results


def records(t: Target) -> list[dict]:
    ct, spec = t.ct, t.spec
    r = ct.run(["cat", f"{spec.warmup.cache_dir}/warmups.jsonl"], check=False, mutates=False, timeout=60)
    return list(facts.parse_warmups(r.out))


def missing_warmups(t: Target, state: Deployed) -> list[str]:
    """For each device without a warmup for this commit, venv, command and environment: why."""
    return missing_in(records(t), t.spec, state)


def missing_in(recs: list[dict], spec: ContainerSpec, state: Deployed) -> list[str]:
    """missing_warmups over records already read (the facts probe reads them). Pure."""
    problems = []
    for device in devices_of(spec):
        want = warmup_key(spec, state, device)
        mine = [r for r in recs if str(r.get("device")) == device]
        if any(r.get("key") == want["key"] for r in mine):
            continue
        if not mine:
            problems.append(f"device {device}: never warmed up")
            continue
        last = mine[-1]
        changed = [name for name in ("commit", "venv_lock", "command", "env") if last.get(name) != want[name]]
        problems.append(f"device {device}: {', '.join(changed) or 'record format'} changed since its last warmup")
    return problems


def compiled(recs: list[dict], spec: ContainerSpec, state: Deployed) -> bool:
    """Whether a warmup of this commit, venv, command and environment put anything in the compile cache
    (a warmup command that compiles nothing leaves it empty, and that is no problem). Pure."""
    keys = {warmup_key(spec, state, d)["key"] for d in devices_of(spec)}
    return any(r.get("key") in keys and (r.get("new_files") or r.get("cache_files")) for r in recs)


def export_cache(t: Target, path: str) -> int:
    """Write the container's per-version compile cache folder (and its warmup records) to a local tar.gz."""
    spec, ct = t.spec, t.ct
    state = deployed(t)
    verify = state.verify.as_record()
    folder = jobenv.compile_cache(spec, verify)
    with tempfile.TemporaryDirectory() as d:
        count = files.pull_tree(ct, folder, d)
        sidecar = {"versions": _versions(state.verify), "cache": folder, "passport": read_passport(ct, folder),
                   "warmups": [r for r in records(t) if r.get("venv_lock") == state.venv.lock_sha256]}
        Path(d, BUNDLE_SIDECAR).write_text(json.dumps(sidecar, indent=1))
        with tarfile.open(path, "w:gz") as tar:
            for p in sorted(Path(d).iterdir()):
                tar.add(p, arcname=p.name)
    t.output(f"exported {count} cache file(s) of {folder}")
    return count


def _versions(verify: Verify) -> dict:
    return {"torch": verify.torch, "cuda_build": verify.cuda_build, "triton": verify.triton, "gpu_name": verify.gpu_name}


def import_cache(t: Target, path: str) -> ImportedCache:
    """Load a bundle made by export_cache into the container's cache folder; refuse one made for other
    versions. Its warmup records are kept where they match this commit, venv, command and environment."""
    spec, ct = t.spec, t.ct
    state = deployed(t)
    verify = state.verify.as_record()
    refused: list[tuple[str, str]] = []
    try:
        with open(path, "rb") as bundle, tempfile.TemporaryDirectory() as d:
            # A bundle may come from anywhere: the pull's rule (tarfile's data filter, each refusal named).
            untar.extract(bundle, Path(d), refused, mode="r|*")
            try:
                sidecar = json.loads(Path(d, BUNDLE_SIDECAR).read_text())
            except (OSError, ValueError):
                raise worded(WarmupError(f"{path}: not a compile-cache bundle (no {BUNDLE_SIDECAR}): make one with "
                                         f"{EXPORT_CACHE}"), EXPORT_CACHE) from None
            ours = _versions(state.verify)
            diff = {k: (sidecar["versions"].get(k), v) for k, v in ours.items() if sidecar["versions"].get(k) != v}
            if diff:
                raise WarmupError(f"{path}: refusing to import a compile cache made for another setup: " + ", ".join(
                    f"{k} {a} (bundle) != {b} (here)" for k, (a, b) in sorted(diff.items())))
            theirs = pp.parse(json.dumps(sidecar.get("passport"))) if sidecar.get("passport") else None
            if theirs is not None:  # a bundle made since passports: every field compared, each difference named
                fields = pp.differences(theirs, expected_passport(spec, state))
                if fields:
                    raise WarmupError(f"{path}: refusing to import a compile cache made for another setup: "
                                      + pp.describe(theirs, expected_passport(spec, state), fields, theirs="bundle"))
            os.unlink(Path(d, BUNDLE_SIDECAR))
            if Path(d, pp.FILE).exists():  # written last, below, once every file is in place
                os.unlink(Path(d, pp.FILE))
            folder = jobenv.compile_cache(spec, verify)
            with oplock.hold(ct, f"warmup --import {os.path.basename(path)}"):
                count = files.push_tree(ct, d, folder)
                if theirs is not None:  # the bundle's passport.json, in place last
                    write_passport(ct, folder, {**theirs, "imported_from": os.path.basename(path)})
                    count += 1
    except (OSError, EOFError, untar.TarError) as exc:
        raise WarmupError(f"{path}: cannot read the bundle: {exc}") from None
    wanted = {warmup_key(spec, state, dev)["key"] for dev in devices_of(spec)}
    latest = {r["key"]: r for r in sidecar.get("warmups", []) if r.get("key") in wanted}  # one per device
    kept = [{**r, "imported_from": os.path.basename(path)} for r in latest.values()]
    if kept:
        _record(t, kept)
    return ImportedCache(count, folder, tuple(r["device"] for r in kept),
                         tuple(f"{name}: {why}" for name, why in refused))
