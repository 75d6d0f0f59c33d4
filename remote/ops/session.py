"""The session operations run in, as the API opens it: the API reaches operations only, never the transport.

A Session holds one transport per host for the lifetime of a fleet (remote.transport.session); `open_session`
makes one, `disconnect` ends a hosts file's kept connections (remote.transport.keeper).
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import Config, Host
from ..events import Sink
from ..transport import Transport, for_host
from ..transport.pct import Container as PctContainer
from ..transport.session import Session

__all__ = ["PctContainer", "Session", "TransportFactory", "disconnect", "open_session"]

TransportFactory = Callable[[Host], Transport]
"""What makes each host's transport (remote.testing.MockTransport is one; default: SSH, or local)."""


def open_session(config: Config, *, dry: bool = False, agent: bool = False, keep: bool = False,
                 events: Sink | None = None, transport: TransportFactory | None = None,
                 one_off: bool = False) -> Session:
    """A session on config's hosts (connecting nothing until a command needs a host); `events`: where the
    operations' typed events go (None: nowhere); `transport`: each host's transport (a test's double;
    None: SSH, or local); `one_off` (with keep): one container command, run directly where no keeper is alive."""
    return Session(config, dry=dry, agent=agent, keep=keep, events=events, one_off=one_off,
                   transport_factory=transport if transport is not None else for_host)


def disconnect(config_file: str | None, host: str | None = None) -> list[int]:
    """End the kept connections of a hosts file (one host's, or every one; None: every hosts file's): the pids
    ended."""
    from ..transport import keeper

    return keeper.disconnect(config_file, host)
