"""Health: one finding, doctor's diagnosis, doctor --gpu's report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

# -- health --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One thing doctor, doctor --gpu or the compile watch found. `code` a stable identifier (package-changed,
    cgroup-major-stale, recompiling); `severity` error or warning (not healthy) or info (a note); `what`, `why`;
    `since` against the known-good record, where it tells; `fix` the command that fixes it (or None); where it is
    about one, the `container`, the `host` (a cluster node, for a move) and the device `node` (/dev/nvidiactl)."""

    code: str
    severity: str
    what: str
    since: str | None
    why: str
    fix: str | None
    container: int | None = None
    host: str | None = None
    node: str | None = None

    @property
    def message(self) -> str:
        """what, and why where there is one."""
        return f"{self.what}: {self.why}" if self.why else self.what

    @property
    def healthy(self) -> bool:
        """An info finding is a note: it leaves the container healthy."""
        return self.severity not in ("error", "warning")


class ContainerFacts(Protocol):
    """remote.facts.Facts (this module sits below the facts) as a Diagnosis uses it: the record and the JSON."""
    @property
    def known_good(self) -> Mapping[str, Any] | None: ...
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Diagnosis:
    """doctor on one container (Fleet.doctor; Container.doctor returns its findings): what it found, or the error
    that kept it from being probed (then no facts)."""

    container: int
    host: str
    findings: tuple[Finding, ...]
    error: str | None = None
    facts: ContainerFacts | None = field(default=None, repr=False, compare=False)

    @property
    def known_good(self) -> Mapping[str, Any] | None:  # the record the findings compare with (docs/doctor.md)
        return self.facts.known_good if self.facts is not None else None

    @property
    def healthy(self) -> bool:
        return self.error is None and all(f.healthy for f in self.findings)


class GpuFacts(Protocol):
    """remote.facts.gpu's HostGpu, CtGpu, CtConfig as a report uses them: dataclasses, --json writes them whole."""
    __dataclass_fields__: ClassVar[dict[str, Any]]


class GpuHostFacts(GpuFacts, Protocol):
    @property
    def loaded(self) -> str | None: ...  # the loaded NVIDIA module's version
    @property
    def open_module(self) -> bool: ...
    @property
    def packages(self) -> Mapping[str, str]: ...  # pve-manager, pve-container -> version


class GpuContainerFacts(GpuFacts, Protocol):
    @property
    def gpu(self) -> bool: ...  # a node, a driver library or nvidia-smi's driver: not a CPU container
    @property
    def lib_versions(self) -> Mapping[str, str]: ...  # the driver libraries its loader finds -> version
    @property
    def cuda_init(self) -> int | None: ...  # cuInit(0)'s return code


class GpuConfigFacts(GpuFacts, Protocol):
    @property
    def gpu(self) -> bool: ...  # its config has an NVIDIA line


@dataclass(frozen=True)
class GpuHost:
    """doctor --gpu on one host: its NVIDIA driver's facts and findings, or why it could not be probed."""

    host: str
    facts: GpuHostFacts | None
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    stale: tuple[int, ...] = ()  # its containers whose driver user space is not its module's (`remote gpu fix`)

    @property
    def healthy(self) -> bool:
        return self.error is None and not self.findings


@dataclass(frozen=True)
class GpuContainer:
    """doctor --gpu on one container: what it sees, its config's GPU lines, the findings, or why not probed."""

    container: int
    host: str
    facts: GpuContainerFacts | None
    config: GpuConfigFacts | None
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def gpu(self) -> bool:  # configured for a GPU, or it sees one: not a CPU container
        return bool((self.facts and self.facts.gpu) or (self.config and self.config.gpu))

    @property
    def healthy(self) -> bool:
        return self.error is None and all(f.healthy for f in self.findings)


@dataclass(frozen=True)
class GpuReport:
    """`doctor --gpu`: each host's NVIDIA driver and each container's GPU passthrough, as findings."""

    hosts: tuple[GpuHost, ...]
    containers: tuple[GpuContainer, ...]

    @property
    def healthy(self) -> bool:
        return all(h.healthy for h in self.hosts) and all(c.healthy for c in self.containers)
