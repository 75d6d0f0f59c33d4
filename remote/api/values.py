"""The values only the API returns (doctor's Diagnosis and GpuReport). What the operations return is
remote.results'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..results import Finding


@dataclass(frozen=True)
class Diagnosis:
    """doctor's answer for one container (Container.doctor returns its findings; Fleet.doctor these)."""

    container: int
    host: str
    findings: tuple[Finding, ...]
    error: str | None
    healthy: bool
    _report: Any = field(default=None, repr=False, compare=False)

    def render(self) -> str:
        return self._report.render()

    def to_dict(self) -> dict:
        return self._report.to_dict()


@dataclass(frozen=True)
class GpuReport:
    """`doctor --gpu`: each host's NVIDIA driver and each container's GPU passthrough, as findings."""

    hosts: tuple[Any, ...]
    containers: tuple[Any, ...]

    @property
    def healthy(self) -> bool:
        return bool(self.to_json()["healthy"])

    def render(self) -> str:
        from .. import gpudoctor

        return gpudoctor.render(list(self.hosts), list(self.containers))

    def to_json(self) -> dict:
        from .. import gpudoctor

        return gpudoctor.to_json(list(self.hosts), list(self.containers))


# -- the fleet: a hosts file, one connection per host --------------------------------------------------


def _diagnosis(report: Any) -> Diagnosis:
    return Diagnosis(report.ctid, report.host, tuple(report.findings), report.error, report.healthy, report)
