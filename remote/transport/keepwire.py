"""The kept connection's socket (remote.transport.keeper's client and remote.transport.keeperd's keeper):
where the sockets live and how they are named, the frames on them (remote.transport.framing), who is at
the other end (SO_PEERCRED on Linux, getpeereid(3) on macOS and the BSDs), and errors carried across."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import struct
import sys
import tempfile
import threading
from pathlib import Path

from .. import errors
from ..config import Host
from ..errors import TransportError
from . import NotStarted, sshconfig
from .framing import Frames

FRAMES = Frames(">cI")  # kind, length
CHUNK = 1 << 18  # the largest payload of a data frame


# -- where the sockets live ----------------------------------------------------------------------------

def _private(d: Path) -> bool:
    """d exists (made 0700 if missing), is a real folder owned by us and closed to everyone else."""
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.geteuid():
        return False
    if st.st_mode & 0o077:
        try:
            os.chmod(d, 0o700)
        except OSError:
            return False
    return True


def runtime_dir() -> Path:
    """The folder of this user's keeper sockets: $XDG_RUNTIME_DIR/remote, /run/user/<uid>/remote, or
    /tmp/remote-<uid>, the first that is (or can be made) private to this user."""
    uid = os.geteuid()
    for base in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        if base and os.path.isdir(base) and os.stat(base).st_uid == uid:
            d = Path(base) / "remote"
            if len(str(d)) <= 72 and _private(d):  # a socket's path holds at most 107 bytes
                return d
    d = Path(tempfile.gettempdir()) / f"remote-{uid}"
    if not _private(d):
        raise TransportError("keeper", f"cannot use {d} for the kept connections' sockets: it is not a folder of "
                                       f"this user's with mode 0700 (remove it, or set control_persist: 0)")
    return d


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _stamp(path: str | None) -> list | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return st and [st.st_mtime_ns, st.st_size, st.st_ino]


_FILE_KEYS = re.compile(r"\s*(userknownhostsfile|globalknownhostsfile|identityfile)\s*[\s=]\s*(.+)$", re.IGNORECASE)


def _stamps(host: Host) -> list:
    """The files a connection to `host` is made from besides the hosts file: ~/.ssh/config with its Includes
    (which may name the address, port, user, keys and jump hosts: remote.transport.sshconfig), its key
    files and every known_hosts file that config or the hosts file names, the jump hosts' too (a superset:
    any of them changing retires the keeper, a removed host key first of all). Read without paramiko."""
    home = os.path.expanduser("~")
    text = sshconfig.read(home=home)
    names = {host.key_file, host.known_hosts, *sshconfig.DEFAULT_KNOWN_HOSTS, *sshconfig.GLOBAL_KNOWN_HOSTS}
    for line in text.splitlines():
        m = _FILE_KEYS.match(line)
        if m:
            names.update(v.strip('"') for v in m.group(2).split())
    files = sorted(sshconfig._expand_home(n, home) for n in names if n)
    return [_digest(text), *([f, _stamp(f)] for f in files)]


def file_of(config_file: str) -> str:
    """The keepers of one hosts file's hosts share this prefix (the first half of group_of's)."""
    return _digest(os.path.realpath(config_file))[:6]


def group_of(config_file: str, host_name: str) -> str:
    """The keepers of one host of one hosts file share this prefix, whatever its entry says: the file's
    part, so that one file's keepers are found without reading it, then the host's."""
    return file_of(config_file) + _digest(os.path.realpath(config_file) + "\0" + host_name)[:6]


def socket_path(host: Host, config_file: str, where: Path | None = None) -> Path:
    """The keeper's socket for this host entry: any change to the entry, its key file or known_hosts
    gives another name (and so another keeper)."""
    entry = json.dumps({**dataclasses.asdict(host), "stamps": _stamps(host)}, sort_keys=True, default=str)
    return (where or runtime_dir()) / f"{group_of(config_file, host.name)}-{_digest(entry)}.sock"


# -- frames and the peer's credentials ---------------------------------------------------------------

def send(sock: socket.socket, kind: bytes, data: bytes = b"", lock: threading.Lock | None = None) -> None:
    frame = FRAMES.pack(kind, data=data)
    if lock is None:
        sock.sendall(frame)
    else:
        with lock:
            sock.sendall(frame)


def recv(sock: socket.socket) -> tuple[bytes, bytes]:
    kind, data = FRAMES.read(sock)
    return kind, data


class NoPeerCredentials(TransportError):
    """This platform tells nobody who is at the other end of a Unix socket."""


def _getpeereid():
    """libc's getpeereid(3) (macOS and the BSDs), or None where libc has none (Linux's glibc)."""
    import ctypes  # here: Linux has SO_PEERCRED, and ctypes.util costs every command its import
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        call = libc.getpeereid
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)]
    call.restype = ctypes.c_int
    return call


def peer_credentials_supported() -> bool:
    """Whether this platform says who is at the other end of a Unix socket: SO_PEERCRED (Linux) or
    getpeereid(3) (macOS, the BSDs). Without it there is no kept connection: each command connects itself."""
    return hasattr(socket, "SO_PEERCRED") or _getpeereid() is not None


def peer(sock: socket.socket) -> tuple[int | None, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket; the pid is None where the
    platform does not say it. NoPeerCredentials where the platform has no such call, OSError if it fails."""
    if hasattr(socket, "SO_PEERCRED"):
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return pid, uid
    call = _getpeereid()
    if call is None:
        raise NoPeerCredentials("keeper", "this platform tells nobody which user is at the other end of a Unix "
                                          "socket (neither SO_PEERCRED nor getpeereid): set control_persist: 0")
    import ctypes

    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    if call(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    pid = None
    if sys.platform == "darwin":  # LOCAL_PEERPID (2) at SOL_LOCAL (0)
        try:
            pid = struct.unpack("i", sock.getsockopt(0, 2, 4))[0]
        except OSError:
            pass
    return pid, uid.value


def pack_error(exc: BaseException, where: str) -> dict:
    """An exception as JSON, to be raised again on the client's side with its class and attributes."""
    if not isinstance(exc, errors.RemoteError):
        exc = TransportError(where, f"{where}: the kept connection failed: {type(exc).__name__}: {exc}")
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, dict, list, type(None)))}
    return {"type": type(exc).__name__, "message": str(exc), "attrs": attrs}


def unpack_error(d: dict) -> BaseException:
    cls = NotStarted if d.get("type") == "NotStarted" else getattr(errors, str(d.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.RemoteError)):
        cls = TransportError
    exc = cls.__new__(cls)
    Exception.__init__(exc, d.get("message", ""))
    exc.__dict__.update(d.get("attrs") or {})
    return exc
