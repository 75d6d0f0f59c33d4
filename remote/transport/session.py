"""A Session: one transport per host for the lifetime of a task, and containers built on them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from . import Transport, for_host
from .pct import Container, DEFAULT_PATH, parse_list, pct_argv
from .. import config as cfg
from ..errors import PctError, TransportError


AGENT_RETRY_S = 10.0


@dataclass
class Session:
    config: cfg.Config
    dry: bool = False
    echo: Callable[[str], None] = print
    transport_factory: Callable[[cfg.Host], Transport] = for_host
    agent: bool = False  # run container commands through one persistent in-container agent each
    _transports: dict[str, Transport] = field(default_factory=dict)
    _agents: dict = field(default_factory=dict)
    _agent_lock: threading.Lock = field(default_factory=threading.Lock)
    _agent_locks: dict = field(default_factory=dict)  # ctid -> lock: containers start their agents at once

    def transport(self, host: cfg.Host) -> Transport:
        if host.name not in self._transports:
            self._transports[host.name] = self.transport_factory(host)
        return self._transports[host.name]

    def container(self, ctid: int | str | None = None, venv_on_path: bool = True) -> Container:
        """The container `ctid` (or the only one), with its venv first on PATH unless told otherwise."""
        spec = self.config.container(ctid)
        return Container(self.transport(spec.host), spec.ctid, pct=spec.host.pct, dry=self.dry, echo=self.echo,
                         path=f"{spec.venv.path}/bin:{DEFAULT_PATH}" if venv_on_path else DEFAULT_PATH,
                         agent=(lambda: self._agent_for(spec)) if self.agent else None)

    def _agent_for(self, spec: cfg.ContainerSpec):
        """The container's agent, started (or restarted after a lost connection) on demand; None when it
        cannot run there, and then commands go through plain `pct exec`, which reports pct's errors."""
        from .agent import AGENT, AGENT_SILENCE, Agent
        from ..errors import RemoteError

        with self._agent_lock:
            lock = self._agent_locks.setdefault(spec.ctid, threading.Lock())
        with lock:
            current = self._agents.get(spec.ctid)
            if isinstance(current, float):  # it failed to start then: retry only after a while
                if time.monotonic() - current < AGENT_RETRY_S:
                    return None
            elif current is not None:
                if current.alive():
                    return current
                current.close()  # its stream and threads go with it
                if current.silent:  # the link under it went silent: the connection is useless too
                    self.transport(spec.host).close()
            transport = self.transport(spec.host)
            if not hasattr(transport, "open_stream"):  # a test double without streams: plain pct exec
                return None
            try:
                stream = transport.open_stream(
                    pct_argv(spec.host.pct, "exec", str(spec.ctid), "--keep-env", "0", "--", "python3", "-c", AGENT,
                             str(AGENT_SILENCE)))
                self._agents[spec.ctid] = Agent(stream, f"{spec.host.name}/{spec.ctid}")
            except (RemoteError, OSError):
                self._agents[spec.ctid] = time.monotonic()
                return None
            return self._agents[spec.ctid]

    def close(self) -> None:
        for a in self._agents.values():
            if not isinstance(a, float):
                a.close()
        self._agents.clear()
        for t in self._transports.values():
            t.close()
        self._transports.clear()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class HostState:
    host: str
    reachable: bool
    error: str | None
    containers: dict[int, str]  # configured ctid -> running | stopped | missing | unknown


def inventory(session: Session) -> list[HostState]:
    """Each host reachable or not, and the state of each configured container (one `pct list` per host)."""
    states = []
    for host in session.config.hosts.values():
        wanted = [c.ctid for c in session.config.containers.values() if c.host.name == host.name]
        try:
            result = session.transport(host).run(pct_argv(host.pct, "list"), deadline=60)
            if result.exit_code != 0:
                raise PctError(0, f"`pct list` failed on {host.name}: {result.err.strip()}")
            found = parse_list(result.out)
            states.append(HostState(host.name, True, None, {c: found.get(c, "missing") for c in wanted}))
        except (TransportError, PctError) as exc:
            states.append(HostState(host.name, False, str(exc), {c: "unknown" for c in wanted}))
    return states
