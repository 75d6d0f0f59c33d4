"""`doctor --gpu`: the host's NVIDIA driver and each container's GPU passthrough, every failure with its fix.

One host probe per host (remote/sh/gpu-host.sh, which also reads each selected container's `pct config`)
and one container probe per container (remote/sh/gpu_container.py), all at once; the findings are
remote.facts.gpu's, pure. A CPU container (no NVIDIA line in its config, no node, no driver library) is
reported as such, with no finding. The library returns remote.results' GpuReport; remote.cli.format words it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import RemoteError
from .facts import gpu
from .results import Finding, GpuContainer, GpuHost, GpuReport
from .target import resolve
from .transport.session import Session

STALE_KINDS = ("driver-lib-mismatch", "no-driver-libs")


def stale(host: str, cts: Iterable[GpuContainer]) -> tuple[int, ...]:
    """The containers of `host` whose driver user space is not the loaded module's (after a driver upgrade:
    every one that does not mount the host's folder), each repaired by `remote gpu fix -c ID`."""
    return tuple(c.container for c in cts if c.host == host and any(f.code in STALE_KINDS for f in c.findings))


def diagnose(session: Session, ctids: list[int]) -> GpuReport:
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
    got: dict[str, gpu.HostGpu | None] = {name: p[0] for name, p in zip(names, probed["hosts"], strict=True)}
    ct_reports = []
    for ctid, (facts, error, secs) in zip(ctids, probed["containers"], strict=True):
        name = resolve(session, ctid).spec.host.name
        h = got.get(name)
        try:
            found = gpu.findings(h, ctid, facts, name) if (facts or h) else []
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # one container's answer, not a crash
            found, error = [], f"container {ctid}: its GPU facts could not be read: {exc}"
        ct_reports.append(GpuContainer(ctid, name, facts, h.configs.get(ctid) if h else None, tuple(found), error,
                                       round(secs, 3)))
    host_reports = [GpuHost(name, facts, tuple(gpu.host_findings(facts, name)) if facts else (), error, round(secs, 3),
                            stale(name, ct_reports))
                    for name, (facts, error, secs) in zip(names, probed["hosts"], strict=True)]
    return GpuReport(tuple(host_reports), tuple(ct_reports))


@dataclass(frozen=True)
class MoveReport:
    """`doctor --gpu -c ID --node N`: whether node N has what the container's GPU lines need (`source`: the node
    it is on; remote.cli.format words it)."""
    ctid: int
    node: str
    source: str
    findings: tuple[Finding, ...] = ()
    gpu: bool = True  # False: no GPU configured, nothing to check

    @property
    def healthy(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


def before_move(session: Session, ctid: int, node: str) -> MoveReport:
    """The container's GPU lines (its node's host probe) against node `node`'s nodes (that host's probe),
    both at once. `node` is a host of the hosts file (ConfigError naming the known ones otherwise)."""
    from . import executor
    from .ops.gpuconfig import USERSPACE_HOST
    from .target import resolve_host

    t = resolve(session, ctid)
    spec = t.spec
    target = resolve_host(session, node).host
    session.transport(spec.host)
    session.transport(target)
    probed = executor.together({"here": lambda: gpu.read_host(session, spec.host, [ctid]),
                                "there": lambda: gpu.read_host(session, target, [])})
    source, dest = probed["here"], probed["there"]
    cfg = source.configs.get(ctid) or gpu.CtConfig(ctid)
    if cfg.error:
        raise RemoteError(f"container {ctid}: `pct config` on {spec.host.name} failed: {cfg.error}")
    config = t.system.run_pct("config", str(ctid), mutates=False)
    mounts = f"{USERSPACE_HOST}," in config.out
    return MoveReport(ctid, node, spec.host.name, tuple(gpu.move_findings(cfg, source, dest, node, mounts)), cfg.gpu)
