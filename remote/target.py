"""A container resolved once: its spec, its host, its pct Container and where its progress goes.

`spec_of(config, which)` is the one place where a container id (or None: the default container) becomes a
container's settings, and `resolve(session, which)` the one place it becomes a Target; every operation on one
container takes that `Target` and never looks the id up again.
Below the operations, above the transport (like pyinfra's Host object, or SkyPilot's ResourceHandle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import Config, ContainerSpec, Host

if TYPE_CHECKING:
    from .transport.pct import Container
    from .transport.session import Session


@dataclass(frozen=True)
class Target:
    """One container of a session, resolved: what every operation on a container takes."""

    session: Session
    spec: ContainerSpec
    echo: Callable[[str], None]  # where its progress goes (the session's, unless given)

    @property
    def ctid(self) -> int:
        return self.spec.ctid

    @property
    def host(self) -> Host:
        return self.spec.host

    @property
    def ct(self) -> Container:
        """Its pct Container, the venv first on PATH (as jobs and warmups run)."""
        return self.session.container_for(self.spec)

    @property
    def system(self) -> Container:
        """Its pct Container with the system PATH (probes, doctor: nothing of the venv's)."""
        return self.session.container_for(self.spec, venv_on_path=False)

    @property
    def dry(self) -> bool:
        return self.session.dry


def spec_of(config: Config, which: int | str | None = None) -> ContainerSpec:
    """The settings of the container `which` names (None: default_container, $REMOTE_CONTAINER or the only
    one); an id the hosts file does not list raises ConfigError naming the ones it does."""
    return config.container(which)


def resolve(session: Session, which: int | str | None = None, *, echo: Callable[[str], None] | None = None) -> Target:
    """The container `which` names, resolved once (spec_of) on this session."""
    return Target(session, spec_of(session.config, which), echo if echo is not None else session.echo)
