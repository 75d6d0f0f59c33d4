"""A Session: one transport per host for the lifetime of a task, and containers built on them; their
in-container agents, started on demand, and on an SSH host the stream mux those agents share."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from .. import config as cfg
from ..errors import ConnectError, PctError, TransportError
from ..events import Event, Sink
from ..sudo import program
from . import NotStarted, Result, Transport, dryline, for_host
from .pct import DEFAULT_PATH, Container, classify, parse_list, pct_argv

if TYPE_CHECKING:
    from .keeper import KeptTransport

log = logging.getLogger(__name__)

AGENT_RETRY_S = 10.0
MUX_PYTHON = program("python3").path  # remote.sudo.PROGRAMS: the one list of host programs


_NO_KEEPING_SAID: list[bool] = []


def _can_keep() -> bool:
    """Whether kept connections work on this platform (it tells who is at the other end of a Unix socket);
    where not, every command connects itself, said once per process."""
    from .keepwire import peer_credentials_supported

    if peer_credentials_supported():
        return True
    if not _NO_KEEPING_SAID:
        _NO_KEEPING_SAID.append(True)
        log.warning("note: no kept connection on this platform (it has neither SO_PEERCRED nor getpeereid to check "
                    "who is at the other end of its socket): each command connects directly")
    return False


@dataclass
class Session:
    config: cfg.Config
    dry: bool = False
    events: Sink | None = None  # where typed events go (Target.step/note/...); None: nowhere (the library is quiet)
    transport_factory: Callable[[cfg.Host], Transport] = for_host
    agent: bool = False  # run container commands through one persistent in-container agent each
    keep: bool = False  # SSH hosts through their kept connection (remote.transport.keeper), as the CLI does
    # With keep: the task is one container command (`remote exec`): where a host has no live keeper, it runs over
    # OpenSSH's ssh and the keeper starts behind it (remote.transport.direct).
    one_off: bool = False
    _transports: dict[str, Transport] = field(default_factory=dict)
    _agents: dict = field(default_factory=dict)
    _agent_lock: threading.Lock = field(default_factory=threading.Lock)
    _muxes: dict = field(default_factory=dict)  # host name -> its stream mux, or the time it failed to start
    _start_locks: dict = field(default_factory=dict)  # per agent and mux: containers start their agents at once
    _transport_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        from .. import cluster

        # Containers of a Proxmox cluster: each on the host of the node that holds it (its guest list read once).
        self.config = cluster.resolving(self.config, lambda host, argv: self.host_run(host, argv, deadline=60),
                                        self.sink, ask=lambda host, argv: self.host_fact(host, argv, deadline=60))

    def sink(self, event: Event) -> None:
        """An operation's event (remote.target): to the session's event sink, where it has one."""
        if self.events is not None:
            self.events(event)

    def transport(self, host: cfg.Host) -> Transport:
        """The host's one transport, made on first use; threads asking at once get the same one (made once:
        a second, never closed, would be a leaked SSH connection)."""
        got = self._transports.get(host.name)
        if got is not None:
            return got
        with self._transport_lock:
            if host.name not in self._transports:
                if self.keep and not host.local and host.control_persist > 0 and self.transport_factory is for_host \
                        and _can_keep():
                    from .keeper import KeptTransport

                    self._transports[host.name] = KeptTransport(host, self.config.file, one_off=self.one_off)
                else:
                    self._transports[host.name] = self.transport_factory(host)
            return self._transports[host.name]

    def container(self, ctid: int | str | None = None, venv_on_path: bool = True) -> Container:
        """The container `ctid` (or the only one), with its venv first on PATH unless told otherwise. Code
        that holds a resolved container (remote.target.Target) uses container_for."""
        return self.container_for(self.config.container(ctid), venv_on_path)

    def container_for(self, spec: cfg.ContainerSpec, venv_on_path: bool = True) -> Container:
        """The pct Container of a container already resolved: no lookup by id."""
        # What the container says of itself (a dry run's commands): typed events marked with it, to the sink.
        return Container(self.transport(spec.host), spec.ctid, pct=spec.host.pct, dry=self.dry, events=self.sink,
                         path=f"{spec.venv.path}/bin:{DEFAULT_PATH}" if venv_on_path else DEFAULT_PATH,
                         agent=(lambda: self._agent_for(self.config.containers[spec.ctid])) if self.agent else None,
                         relocate=(lambda: self._relocate(spec.ctid, spec.host.name)) if spec.cluster else None)

    def _relocate(self, ctid: int, failed_on: str) -> tuple[Transport, str] | None:
        """Proxmox said "does not exist" on host `failed_on`, the node the cluster's list named: where the
        list (read again once per cluster) has it now, the new node's transport and pct."""
        from ..cluster import lookup_of

        lookup = lookup_of(self.config)
        moved = lookup.reread(self.config.containers.raw(ctid), failed_on) if lookup else None  # type: ignore[attr-defined]
        if moved is None:
            return None
        return self.transport(moved.spec.host), moved.spec.host.pct

    def _kept(self, cache: dict, key, start: Callable[[], object], on_dead: Callable[[object], None] | None = None):
        """cache[key] (an agent, a mux), started on demand and again once it is dead; None, without trying
        again for AGENT_RETRY_S, where start() failed (returned None). One start at a time per key."""
        with self._agent_lock:
            lock = self._start_locks.setdefault((id(cache), key), threading.Lock())
        with lock:
            current = cache.get(key)
            if isinstance(current, float):  # it failed to start then: retry only after a while
                if time.monotonic() - current < AGENT_RETRY_S:
                    return None
            elif current is not None:
                if current.alive():
                    return current
                current.close()  # its stream and threads go with it
                if on_dead:
                    on_dead(current)
            made = start()
            cache[key] = time.monotonic() if made is None else made
            return made

    def _agent_for(self, spec: cfg.ContainerSpec):
        """The container's agent, started (or restarted after a lost connection) on demand; None when it
        cannot run there, and then commands go through plain `pct exec`, which reports pct's errors."""
        from ..errors import RemoteError
        from .agent import AGENT_SOURCE, Agent, agent_argv

        transport = self.transport(spec.host)
        if transport.kept:  # the keeper holds the agent, started there on first use
            return cast("KeptTransport", transport).agent(spec.ctid)

        def start():
            if not transport.can_stream:  # a test double without streams: plain pct exec
                return None
            # The agent's program goes on its stdin (agent_argv's loader), never on the command line.
            argv = pct_argv(spec.host.pct, "exec", str(spec.ctid), "--keep-env", "0", "--", *agent_argv())
            mux = self._mux_for(spec.host, transport)
            for through in ([mux, transport] if mux else [transport]):
                try:
                    return Agent(through.open_stream(argv), f"{spec.host.name}/{spec.ctid}", source=AGENT_SOURCE)
                except (RemoteError, OSError):
                    # The mux ended under this start (its idle exit, a lost session): once more on a session
                    # of its own. Anything else: no agent, plain pct exec says what is wrong.
                    if through is transport or mux.alive():
                        return None
            return None

        def on_dead(agent):
            if agent.silent:  # the link under it went silent: the connection is useless too
                self.transport(spec.host).close()

        return self._kept(self._agents, spec.ctid, start, on_dead)

    def _mux_for(self, host: cfg.Host, transport: Transport):
        """The host's stream mux (remote.transport.hostmux), started on first use: the agents of its containers then
        share one SSH session and login shell. None where a command pays no login shell (a local host, a
        test double) or the mux cannot run there (no /usr/bin/python3): then each agent has its own session."""
        from .hostmux import MUX, MUX_SILENCE, Mux

        def start():
            # The system's python3, not whatever the login shell's PATH finds first (a pyenv shim, a venv).
            # A host that cannot be reached raises here, as any command to it would.
            stream = transport.open_stream([MUX_PYTHON, "-I", "-S", "-c", MUX, str(MUX_SILENCE)])
            try:
                return Mux(stream, host.name)
            except ConnectError:
                return None

        return self._kept(self._muxes, host.name, start) if transport.login_shell else None

    def host_run(self, host: cfg.Host, argv: list[str], *, deadline: float | None = None, mutates: bool = False,
                 container: int | None = None) -> Result:
        """A command on the host itself (`pct list`): through the host's mux when the session has one
        or will start one for its agents, else a session of its own. One that `mutates` is, in a dry run,
        a DryCommand (of `container`, where it is one container's) instead, as a container's commands are:
        the one place a host command asks whether the run is dry; it answers exit 0 and no output."""
        transport = self.transport(host)
        if self.dry and mutates:
            dryline.show(transport.describe, argv, self.sink, container)
            return Result(tuple(argv), 0, b"", b"", 0.0)
        mux = self._mux_for(host, transport) if self.agent else None
        if mux:
            try:
                return mux.run(argv, deadline=deadline)
            except NotStarted:
                pass  # the mux ended before the command started (its idle exit, a lost session): run it now,
                # on a session of its own, with the transport's own retries
            # Anything else: the command started and its connection was lost, so it may have run: never again by
            # itself (a `pct create`, a `pct set` or a snapshot run twice is not what was asked).
        return transport.run(argv, deadline=deadline)

    def host_fact(self, host: cfg.Host, argv: list[str], *, deadline: float | None = None) -> Result:
        """A host command whose answer holds while the host's connection does (its Proxmox node name): asked
        once per kept connection (the keeper keeps the answer), else once per Session by its caller."""
        transport = self.transport(host)
        if transport.kept:
            try:
                return cast("KeptTransport", transport).remembered(argv, deadline=deadline)
            except TransportError as exc:
                if "unknown request" not in str(exc):
                    raise
                # a keeper started by an older remote: asked as any command
        return self.host_run(host, argv, deadline=deadline)

    def kept_note(self, host_name: str) -> str | None:
        """`kept connection, pid N, up Ts` when the host's keeper is alive (what `remote status` shows)."""
        transport = self._transports.get(host_name)
        info = cast("KeptTransport", transport).info() if transport is not None and transport.kept else None
        if not info:
            return None
        return f"kept connection: pid {info['pid']}, up {time.time() - info['since']:.0f}s, " \
               f"ends after {info['persist']:g}s idle (`remote disconnect`)"

    def close(self) -> None:
        for a in self._agents.values():
            if not isinstance(a, float):
                a.close()
        self._agents.clear()
        for m in self._muxes.values():
            if not isinstance(m, float):
                m.close()
        self._muxes.clear()
        for t in self._transports.values():
            t.close()
        self._transports.clear()

    def __enter__(self) -> Session:
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
            result = session.host_run(host, pct_argv(host.pct, "list"), deadline=60)
            if result.exit_code != 0:
                raise classify(result.err, result.exit_code, 0, host) or \
                    PctError(0, f"`pct list` failed on {host.name}: {result.err.strip()}")
            found = parse_list(result.out)
            states.append(HostState(host.name, True, None, {c: found.get(c, "missing") for c in wanted}))
        except (TransportError, PctError) as exc:
            states.append(HostState(host.name, False, str(exc), {c: "unknown" for c in wanted}))
    return states
