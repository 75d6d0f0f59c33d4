"""Running an argv on a Proxmox host: the Transport protocol, SSH and local implementations.

Only this package imports paramiko (connecting: remote.transport.connect). A command is an argv, quoted exactly once here
(`shlex.join`) for the host's login shell. Stdin is closed (or fed and then closed), there is no
pty, and stdout and stderr are drained together so neither can fill up and stall the other.
A `deadline` here only stops waiting: whoever builds the argv must also bound the process where
it runs (`timeout` inside the container), because closing a channel does not kill anything.

`run` collects a command's output; `open_stream` hands its stdin and stdout to the caller as a
`Stream` to read and write in chunks (the in-container agent, file transfers), on both transports.
Locally, Ctrl-C is passed on to the child's process group (it runs in a session of its own).

The package by kind: base (the Transport and Stream protocols, Result), local (LocalTransport), ssh
(SshTransport, ChannelStream, the heartbeat); every name importable from here as well.
"""

from __future__ import annotations

import warnings

from ..config import Host
from .base import Capabilities, InContainer, NotStarted, OutputCallback, Result, Stream, Transport, _check_argv
from .local import LocalStream, LocalTransport
from .ssh import (
    HEARTBEAT_EVERY,
    HEARTBEAT_SILENCE,
    STREAM_PACKET,
    STREAM_WINDOW,
    UNREACHABLE_HOLD,
    ChannelStream,
    SshTransport,
)

# paramiko 3.x names cryptography's TripleDES where cryptography 43+ warns that it moved: a warning at paramiko's
# import that the user of a command can do nothing about, and that would stand before remote's own error on
# stderr. Only that warning, only from paramiko's modules; every other warning is left as the process has it.
warnings.filterwarnings("ignore", message="TripleDES has been moved", module=r"paramiko(\.|$)")

__all__ = ["Capabilities", "InContainer", "HEARTBEAT_EVERY", "HEARTBEAT_SILENCE", "STREAM_PACKET", "STREAM_WINDOW", "UNREACHABLE_HOLD", "ChannelStream",
           "LocalStream", "LocalTransport", "NotStarted", "OutputCallback", "Result", "SshTransport", "Stream",
           "Transport", "_check_argv", "for_host"]


def for_host(host: Host, **kwargs) -> Transport:
    """The transport a host's configuration asks for."""
    return LocalTransport(host.name) if host.local else SshTransport(host, **kwargs)
