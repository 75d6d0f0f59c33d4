"""`warmup`: compile the training configuration one device at a time into the persistent compile cache.

Each device's warmup is a separate process started with exactly the environment the training job
gets (`job_env`), one after another unless asked to run in parallel (separate processes do not
share torch's FX-tracing flag, so that is safe too). Results are appended to
<cache_dir>/warmups.jsonl, which `train`'s preflight reads. No task ever deletes the cache.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import files
from .config import Container as ContainerSpec
from .errors import CommandError, ConfigError, DeployError, WarmupError
from .logs import LineSplitter
from .pct import Container
from .session import Session

REPORT_PREFIX = "REMOTE_WARMUP "


def job_env(spec: ContainerSpec) -> dict[str, str]:
    """The environment of every job in the container: warmups and training alike."""
    return {"VIRTUAL_ENV": spec.venv.path, "REMOTE_COMPILE_CACHE": spec.warmup.cache_dir,
            "PYTHONUNBUFFERED": "1", **dict(spec.train.env)}


@dataclass(frozen=True)
class DeviceResult:
    device: str
    start: float
    end: float
    report: dict

    @property
    def hits(self) -> int:
        return self.report.get("fxgraph_hit", 0) + self.report.get("autograd_hit", 0)

    @property
    def misses(self) -> int:
        return self.report.get("fxgraph_miss", 0) + self.report.get("autograd_miss", 0)

    def line(self) -> str:
        return (f"device {self.device}: {self.end - self.start:6.1f}s  cache hits {self.hits}, misses {self.misses}"
                + ("  (warm)" if self.hits and not self.misses else ""))


def parse_report(output: str) -> dict | None:
    """The last REMOTE_WARMUP line a warmup printed."""
    for line in reversed(output.splitlines()):
        if line.startswith(REPORT_PREFIX):
            return json.loads(line[len(REPORT_PREFIX):])
    return None


def deployed(ct: Container, spec: ContainerSpec) -> dict:
    """The deployed commit and venv record, or a DeployError saying to deploy first."""
    r = ct.script('cat "$1/.git/remote-deploy.json" 2>/dev/null || echo null; '
                  'cat "$2/remote-venv.json" 2>/dev/null || echo null', spec.code.path, spec.venv.path,
                  mutates=False, timeout=60)
    code, _, venv = r.out.strip().partition("\n")
    state = {"code": json.loads(code), "venv": json.loads(venv)}
    if state["venv"] is None:
        raise DeployError(f"container {spec.ctid} has no deployed venv at {spec.venv.path}: run `invoke deploy` first")
    if state["code"] is None:
        raise DeployError(f"container {spec.ctid} has no deployed checkout at {spec.code.path}: "
                          "run `invoke deploy` first")
    return state


def _prefixed(echo: Callable[[str], None], prefix: str, sink: list[str]):
    """Each device's output shown with its device as prefix, and kept for the report line."""
    splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}

    def on_output(kind: str, chunk: bytes) -> None:
        for line in splitters[kind].feed(chunk):
            sink.append(line)
            if not line.startswith(REPORT_PREFIX):
                echo(f"  [{prefix}] {line}")

    return on_output


def run_device(ct: Container, spec: ContainerSpec, device: str, echo, extra_env: dict | None = None) -> DeviceResult:
    command = spec.warmup.command.format(device=device)
    lines: list[str] = []
    start = time.time()
    try:
        ct.run(["bash", "-c", command], cwd=spec.code.path, env={**job_env(spec), **(extra_env or {})},
               timeout=spec.warmup.timeout, on_output=_prefixed(echo, device, lines), label=command)
    except CommandError as exc:
        raise WarmupError(f"warmup of device {device} failed (exit {exc.exit_code}, output above): {command}") from None
    if ct.dry:
        return DeviceResult(device, start, start, {})
    report = parse_report("\n".join(lines))
    if report is None:
        raise WarmupError(f"warmup of device {device} printed no {REPORT_PREFIX.strip()} line: does `{command}` "
                          "call remote_guard and print its report? (see examples/drafter/warmup.py)")
    result = DeviceResult(device, start, time.time(), report)
    echo("  " + result.line())
    return result


def warmup(session: Session, ctid=None, *, parallel: bool = False, devices: list[str] | None = None,
           extra_env: dict | None = None, echo: Callable[[str], None] = print) -> list[DeviceResult]:
    """Warm the compile cache for each configured device; returns per-device results (also recorded)."""
    spec = session.config.container(ctid)
    if not spec.warmup.command or not (devices or spec.warmup.devices):
        raise ConfigError(session.config.file, "warmup", "set warmup.command and warmup.devices to warm up")
    ct = session.container(spec.ctid)
    state = deployed(ct, spec)
    devices = list(devices or spec.warmup.devices)
    echo(f"==> warmup of {len(devices)} device(s) {'in parallel' if parallel else 'one at a time'} "
         f"at {state['code']['commit'][:12]}, torch {state['venv']['verify'].get('torch')}, cache {spec.warmup.cache_dir}")
    results: list[DeviceResult] = []
    if parallel:
        errors: list[BaseException] = []

        def one(dev):
            try:
                results.append(run_device(ct, spec, dev, echo, extra_env))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(d,)) for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    else:
        for dev in devices:
            results.append(run_device(ct, spec, dev, echo, extra_env))
    results.sort(key=lambda r: r.start)
    record = "".join(json.dumps({"device": r.device, "start": r.start, "end": r.end, "hits": r.hits,
                                 "misses": r.misses, "commit": state["code"]["commit"],
                                 "torch": state["venv"]["verify"].get("torch"),
                                 "venv_lock": state["venv"].get("lock_sha256"),
                                 "cache": r.report.get("settings", {}).get("cache_dir")}) + "\n" for r in results)
    ct.script('mkdir -p "$1" && cat >> "$1/warmups.jsonl"', spec.warmup.cache_dir, stdin=record.encode(), timeout=60)
    return results


def warm_devices(ct: Container, spec: ContainerSpec, commit: str, lock: str | None) -> set[str]:
    """Devices with a recorded warmup for this commit and venv."""
    r = ct.run(["cat", f"{spec.warmup.cache_dir}/warmups.jsonl"], check=False, mutates=False, timeout=60)
    done = set()
    for line in r.out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("commit") == commit and rec.get("venv_lock") == lock:
            done.add(str(rec["device"]))
    return done


def export_cache(session: Session, ctid, path: str, echo=print) -> int:
    """Warm up every device with artifact export on and bundle the artifacts into a local tar file."""
    spec = session.config.container(ctid)
    ct = session.container(spec.ctid)
    folder = f"/root/.cache/remote-export-{time.strftime('%Y%m%d-%H%M%S')}"
    for dev in spec.warmup.devices:
        run_device(ct, spec, dev, echo, {"REMOTE_EXPORT_CACHE": f"{folder}/{dev}.bin"})
    with tempfile.TemporaryDirectory() as d:
        count = files.pull_tree(ct, folder, d)
        with tarfile.open(path, "w:gz") as tar:
            for p in sorted(Path(d).iterdir()):
                tar.add(p, arcname=p.name)
    ct.run(["rm", "-rf", "--", folder], timeout=60)  # the export copy, never the cache itself
    return count


def import_cache(session: Session, ctid, path: str, echo=print) -> list[dict]:
    """Load a bundle made by export_cache into the container's cache; refuse one made for another setup."""
    spec = session.config.container(ctid)
    ct = session.container(spec.ctid)
    deployed(ct, spec)
    try:
        with tarfile.open(path, "r:*") as tar, tempfile.TemporaryDirectory() as d:
            tar.extractall(d, filter="data")
            bins = sorted(p.name for p in Path(d).glob("*.bin"))
            if not bins or any(not (Path(d) / f"{b}.json").exists() for b in bins):
                raise WarmupError(f"{path}: not a compile-cache bundle (no *.bin with a *.bin.json sidecar)")
            folder = f"/root/.cache/remote-import-{time.strftime('%Y%m%d-%H%M%S')}"
            files.push_tree(ct, d, folder)
    except (OSError, tarfile.TarError) as exc:
        raise WarmupError(f"{path}: cannot read the bundle: {exc}") from None
    code = ("import json, sys, remote_guard\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        print(json.dumps(remote_guard.import_artifacts(p)))\n"
            "    except RuntimeError as e:\n"
            "        print(e, file=sys.stderr); sys.exit(3)\n")
    try:
        r = ct.run(["python", "-c", code, *(f"{folder}/{b}" for b in bins)], env=job_env(spec), timeout=1800)
    except CommandError as exc:
        raise WarmupError(f"{path}: {exc.stderr_tail or exc}") from None
    finally:
        ct.run(["rm", "-rf", "--", folder], timeout=60, check=False)
    return [json.loads(line) for line in r.out.splitlines() if line.startswith("{")]
