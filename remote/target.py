"""A container resolved once: its spec, its host, its pct Container and where its events go.

`spec_of(config, which)` is the one place where a container id (or None: the default container) becomes a
container's settings, and `resolve(session, which)` the one place it becomes a Target; every operation on one
container takes that `Target` and never looks the id up again. An operation reports through its Target,
typed at the source (`t.step("venv: build")`, `t.note(...)`, `t.warn(...)`, `t.output(line)`): nothing
below the command line writes a prefix that somebody parses back.
`resolve_host(session, name)` makes a HostTarget: an operation on a Proxmox host itself (`remote create`,
`remote host setup`), reporting the same way, marked with the container it makes where there is one.
`reporter(session)` reports what is no one container's (a multi-node run as a whole) the same way, unmarked.
Below the operations, above the transport (like pyinfra's Host object, or SkyPilot's ResourceHandle).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from .config import Config, ContainerSpec, Host
from .events import Note, Output, Resumed, SnapshotTaken, StepStarted

if TYPE_CHECKING:
    from .transport.pct import Container
    from .transport.session import Session


class _Reports:
    """What an operation reports through, typed at the source: each call one event to the session's sink,
    marked with the container whose work it is."""

    session: Session

    @property
    def _mark(self) -> int | None:
        raise NotImplementedError

    def step(self, what: str) -> None:
        """A step begins (`==> what` where text is wanted)."""
        self.session.sink(StepStarted(self._mark, f"==> {what}", what))

    def note(self, text: str) -> None:
        """Something to know (`-- text`)."""
        self.session.sink(Note.of(self._mark, text))

    def warn(self, text: str) -> None:
        """Something that needs the user's attention (`!! text`)."""
        self.session.sink(Note.of(self._mark, text, "warning"))

    def output(self, line: str) -> None:
        """A line of a command's or a log's output, as it came."""
        self.session.sink(Output(self._mark, line))

    def resumed(self, offset: int, reason: str) -> None:
        """A followed log picked up again at byte `offset` after a lost connection (`reason`: what was lost)."""
        self.session.sink(Resumed(self._mark, f"-- connection lost ({reason}); resuming at byte {offset}", offset,
                                  reason))

    def snapshot_taken(self, name: str, reason: str) -> None:
        """A Proxmox snapshot taken before a change."""
        self.session.sink(SnapshotTaken(self._mark, f"==> snapshot {name} ({reason})", name, reason))

    @property
    def dry(self) -> bool:
        return self.session.dry


@dataclass(frozen=True, eq=False)
class Target(_Reports):
    """One container of a session, resolved: what every operation on a container takes."""

    session: Session
    spec: ContainerSpec  # the one spec: a cluster's container already placed on the node that holds it

    @property
    def _mark(self) -> int | None:
        return self.spec.ctid

    @property
    def ctid(self) -> int:
        return self.spec.ctid

    @property
    def host(self) -> Host:
        return self.spec.host

    @cached_property
    def ct(self) -> Container:
        """Its pct Container (made once), the venv first on PATH (as jobs and warmups run)."""
        return self.session.container_for(self.spec)

    @cached_property
    def system(self) -> Container:
        """Its pct Container with the system PATH (probes, doctor: nothing of the venv's), made once."""
        return self.session.container_for(self.spec, venv_on_path=False)


@dataclass(frozen=True, eq=False)
class HostTarget(_Reports):
    """A Proxmox host of a session: what an operation on the host itself takes (`create`, `host setup`);
    `ctid` marks its events with the container it makes or mends, where there is one."""

    session: Session
    host: Host
    ctid: int | None = None

    @property
    def _mark(self) -> int | None:
        return self.ctid


@dataclass(frozen=True, eq=False)
class Reporter(_Reports):
    """A session's own reports: what is no one container's (a multi-node run as a whole), marked with none."""

    session: Session

    @property
    def _mark(self) -> int | None:
        return None


def reporter(session: Session) -> Reporter:
    """What an operation on several containers reports its whole through (each node's part: its Target)."""
    return Reporter(session)


def spec_of(config: Config, which: int | str | None = None) -> ContainerSpec:
    """The settings of the container `which` names (None: default_container, $REMOTE_CONTAINER or the only
    one); an id the hosts file does not list raises ConfigError naming the ones it does."""
    return config.container(which)


def resolve(session: Session, which: int | str | None = None) -> Target:
    """The container `which` names, resolved once (spec_of, on the session's cluster-resolved config)."""
    return Target(session, spec_of(session.config, which))


def resolve_host(session: Session, name: str, ctid: int | None = None) -> HostTarget:
    """The host `name` of the session's hosts file (ConfigError naming the known ones otherwise)."""
    from .errors import ConfigError

    hosts = session.config.hosts
    if name not in hosts:
        raise ConfigError(session.config.file, "hosts", f"unknown host {name!r} (the file has: {', '.join(hosts) or 'none'})")
    return HostTarget(session, hosts[name], ctid)

