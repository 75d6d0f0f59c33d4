"""`doctor --gpu`: the host's NVIDIA driver and each container's GPU passthrough, every failure with its fix.

One host probe per host (remote/sh/gpu-host.sh, which also reads each selected container's `pct config`)
and one container probe per container (remote/sh/gpu_container.py), all at once; the findings are
remote.facts.gpu's, pure. A CPU container (no NVIDIA line in its config, no node, no driver library) is
reported as such, with no finding. The library returns reports; the command line prints them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import RemoteError
from .facts import gpu
from .naming import printable
from .results import Finding
from .target import resolve
from .transport.session import Session

SCHEMA_VERSION = 1


@dataclass
class HostReport:
    host: str
    facts: gpu.HostGpu | None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        return self.error is None and not self.findings


@dataclass
class ContainerReport:
    ctid: int
    host: str
    facts: gpu.CtGpu | None
    config: gpu.CtConfig | None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def gpu(self) -> bool:
        return bool((self.facts and self.facts.gpu) or (self.config and self.config.gpu))

    @property
    def healthy(self) -> bool:
        return self.error is None and not any(f.severity == "error" or f.severity == "warning" for f in self.findings)


def diagnose(session: Session, ctids: list[int]) -> tuple[list[HostReport], list[ContainerReport]]:
    """Every host of the selected containers once, every container once, all at once (remote.executor)."""
    import time

    from . import executor

    by_host: dict[str, list[int]] = {}
    for ctid in ctids:
        spec = resolve(session, ctid).spec
        by_host.setdefault(spec.host.name, []).append(spec.ctid)
        session.container_for(spec, venv_on_path=False)  # each host's transport made here, in one thread

    def timed(fn, *args):
        t0 = time.monotonic()
        try:
            return fn(*args), None, time.monotonic() - t0
        except RemoteError as exc:
            return None, str(exc), time.monotonic() - t0

    names = list(by_host)
    probed = executor.together({
        "hosts": lambda: executor.per_host(names, lambda name: timed(gpu.read_host, session,
                                                                     session.config.hosts[name], by_host[name])),
        "containers": lambda: executor.values(session.config, ctids,
                                              lambda ctid: timed(gpu.read_container, session, ctid))})
    host_reports = []
    for name, (facts, error, secs) in zip(names, probed["hosts"], strict=True):
        host_reports.append(HostReport(name, facts, gpu.host_findings(facts, name) if facts else [], error,
                                       round(secs, 3)))
    got = {h.host: h.facts for h in host_reports}
    ct_reports = []
    for ctid, (facts, error, secs) in zip(ctids, probed["containers"], strict=True):
        name = resolve(session, ctid).spec.host.name
        h = got.get(name)
        try:
            found = gpu.findings(h, ctid, facts, name) if (facts or h) else []
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # one container's answer, not a crash
            found, error = [], f"container {ctid}: its GPU facts could not be read: {exc}"
        ct_reports.append(ContainerReport(ctid, name, facts, h.configs.get(ctid) if h else None, found, error,
                                          round(secs, 3)))
    return host_reports, ct_reports


def _render_finding(f: Finding) -> str:
    return (f"  [{f.severity}] {printable(f.what)} ({f.code}) — {printable(f.fix or '')}\n"
            f"      why: {f.why}")


STALE_KINDS = ("driver-lib-mismatch", "no-driver-libs")


def stale(host: str, cts: list[ContainerReport]) -> list[ContainerReport]:
    """The containers of `host` whose driver user space is not the loaded module's (after a driver upgrade:
    every one that does not mount the host's folder), each repaired by `remote gpu fix -c ID`."""
    return [c for c in cts if c.host == host and any(f.code in STALE_KINDS for f in c.findings)]


def _stale_lines(h: HostReport, cts: list[ContainerReport]) -> list[str]:
    module = h.facts.loaded if h.facts else None
    out = []
    for c in stale(h.host, cts):
        libs = ", ".join(sorted(set((c.facts.lib_versions if c.facts else {}).values()))) or "none found"
        out.append(f"  container {c.ctid}: driver user space {printable(libs)}, not the loaded module "
                   f"{printable(module or '?')}: `remote gpu fix -c {c.ctid}`")
    return out


def render(hosts: list[HostReport], cts: list[ContainerReport]) -> str:
    lines = []
    for h in hosts:
        f = h.facts
        if h.error or f is None:  # timed() gives the facts or the error
            lines.append(f"host {h.host}: ERROR {printable(h.error or '')}")
            continue
        module = f"NVIDIA module {f.loaded}" + (" (open)" if f.open_module else "") if f.loaded else "no NVIDIA module"
        pve = ", ".join(f"{k} {v}" for k, v in sorted(f.packages.items()))
        lines.append(f"host {h.host}: " + ("healthy" if h.healthy else f"{len(h.findings)} finding(s)")
                     + f" ({printable(module)}{', ' + printable(pve) if pve else ''})")
        lines += [_render_finding(x) for x in h.findings]
        lines += _stale_lines(h, cts)
    for c in cts:
        head = f"container {c.ctid} on {c.host}: "
        if c.error and not c.findings:
            lines.append(head + f"ERROR {printable(c.error)}")
            continue
        if not c.gpu and not c.findings:
            lines.append(head + "no GPU configured (a CPU container)")
            continue
        libs = c.facts.lib_versions if c.facts else {}
        what = ", ".join(f"{k} {v}" for k, v in sorted(libs.items()))
        if c.facts and c.facts.cuda_init is not None:
            what += f"{', ' if what else ''}cuInit {c.facts.cuda_init}"
        lines.append(head + ("healthy" if c.healthy else f"{len(c.findings)} finding(s)")
                     + (f" ({printable(what)})" if what else ""))
        lines += [_render_finding(x) for x in c.findings]
    return "\n".join(lines)


def finding_json(f: Finding) -> dict:
    """A GPU finding as doctor --gpu --json has always written it (docs/guide/gpu-passthrough.md#json)."""
    return {"kind": f.code, "severity": f.severity, "message": f.what, "fix": f.fix, "ctid": f.container,
            "host": f.host, "node": f.node, "why": f.why or None}


def to_json(hosts: list[HostReport], cts: list[ContainerReport]) -> dict:
    """docs/guide/gpu-passthrough.md#json documents this."""
    return {"schema": SCHEMA_VERSION, "healthy": all(h.healthy for h in hosts) and all(c.healthy for c in cts),
            "hosts": [{"host": h.host, "healthy": h.healthy, "error": h.error, "seconds": h.seconds,
                       "facts": dataclasses.asdict(h.facts) if h.facts else None,
                       "findings": [finding_json(f) for f in h.findings],
                       "stale_containers": [c.ctid for c in stale(h.host, cts)]} for h in hosts],
            "containers": [{"container": c.ctid, "host": c.host, "healthy": c.healthy, "gpu": c.gpu, "error": c.error,
                            "seconds": c.seconds, "facts": dataclasses.asdict(c.facts) if c.facts else None,
                            "config": dataclasses.asdict(c.config) if c.config else None,
                            "findings": [finding_json(f) for f in c.findings]} for c in cts]}


@dataclass
class MoveReport:
    """`doctor --gpu -c ID --node N`: whether node N has what the container's GPU lines need."""
    ctid: int
    node: str
    source: str
    findings: list[Finding] = field(default_factory=list)
    gpu: bool = True

    @property
    def healthy(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def render(self) -> str:
        head = f"container {self.ctid} ({self.source}) to node {self.node}: "
        if not self.gpu:
            return head + "no GPU configured: nothing to check"
        if not self.findings:
            return head + "every device node its devN lines name is there"
        return "\n".join([head + f"{len(self.findings)} finding(s)"] + [_render_finding(f) for f in self.findings])

    def to_json(self) -> dict:
        return {"schema": SCHEMA_VERSION, "container": self.ctid, "node": self.node, "source": self.source,
                "healthy": self.healthy, "gpu": self.gpu,
                "findings": [finding_json(f) for f in self.findings]}


def before_move(session: Session, ctid: int, node: str) -> MoveReport:
    """The container's GPU lines (its node's host probe) against node `node`'s nodes (that host's probe),
    both at once. `node` is a host of the hosts file (ConfigError naming the known ones otherwise)."""
    from . import executor
    from .ops.gpuconfig import USERSPACE_HOST
    from .target import resolve_host

    spec = resolve(session, ctid).spec
    target = resolve_host(session, node).host
    session.transport(spec.host)
    session.transport(target)
    probed = executor.together({"here": lambda: gpu.read_host(session, spec.host, [ctid]),
                                "there": lambda: gpu.read_host(session, target, [])})
    source, dest = probed["here"], probed["there"]
    cfg = source.configs.get(ctid) or gpu.CtConfig(ctid)
    if cfg.error:
        raise RemoteError(f"container {ctid}: `pct config` on {spec.host.name} failed: {cfg.error}")
    config = session.container_for(spec, venv_on_path=False)._pct("config", str(ctid), mutates=False)
    mounts = f"{USERSPACE_HOST}," in config.out
    return MoveReport(ctid, node, spec.host.name, gpu.move_findings(cfg, source, dest, node, mounts), cfg.gpu)
