"""One operation at a time per container: a lease file in the container, taken atomically under flock.

    with oplock.hold(ct, "deploy") as lease:     # BusyError (exit 3) names the holder when it is taken
        ...                                      # lease.check() raises BusyError if the lease was lost
    hold(ct, command, *, holder=None, ttl=TTL, path=LEASE) -> Lease

deploy, warmup and launch each wrap their changing steps in `hold(ct, "<task>")`; read-only tasks
(status, logs, --check) do not. The lease (`/run/remote/ops.lock`: token, expiry, holder = controller
host and pid, command, start time) is written by remote/sh/oplock.sh under `flock`, with the
container's own clock. A background thread renews it every ttl/6 seconds through the same container
(several commands at once are fine there), so a controller that dies, even by SIGKILL, stops renewing
and its lease expires within `ttl` seconds; the next `hold` then takes it over and says so. /run is
a tmpfs: a reboot clears the lease. The lease is advisory: it orders our own tasks, nothing else.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import shell
from ..errors import BusyError, CommandError, RemoteError
from ..naming import LEASE
from ..threads import ContextThread
from ..transport.pct import Container

TTL = 30.0  # seconds a lease lasts without renewal (whole seconds there): how long a dead controller blocks it


def default_holder() -> str:
    """Who we are, as the one refused sees it: this controller's host and pid."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def parse(text: str) -> dict[str, str]:
    """The lease file's key=value lines (and the script's now=) -> a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            out.setdefault(key, value)
    return out


def busy_error(ctid: int, lease: dict, ttl: float = TTL) -> BusyError:
    """The refusal, naming the holder and what to do."""
    try:
        left = max(0, int(lease["expires"]) - int(float(lease["now"])))
        expiry = f"; if that controller is gone, its lease expires in {left}s (it renews it every few seconds)"
    except (KeyError, ValueError):
        expiry = ""
    return BusyError(ctid, f"container {ctid} is busy: `{lease.get('command') or '?'}` held by "
                           f"{lease.get('holder') or '?'} since {lease.get('started') or '?'}. Wait for it to "
                           f"finish and retry{expiry}", lease)


def live_foreign(lease: dict | None, token: str | None = None) -> bool:
    """Whether `lease` (parsed, with now=) is live and not ours."""
    if not lease or not lease.get("token") or lease.get("token") == token:
        return False
    try:
        return int(lease["expires"]) > float(lease["now"])
    except (KeyError, ValueError):
        return False


@dataclass
class Lease:
    """A held lease. `lost` says why it is no longer ours (a renewal found another token)."""

    ct: Container
    path: str
    token: str
    ttl: float
    took_over: dict | None = None  # the expired lease this one replaced, if any
    lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise BusyError when the lease was lost: the caller must not go on changing the container."""
        if self.lost:
            raise BusyError(self.ct.ctid, f"container {self.ct.ctid}: lost the operation lease ({self.lost}); "
                                          "stopped before changing anything further")

    def verify(self) -> None:
        """check(), after asking the container now (a renewal): BusyError when another controller took the
        lease over since the last renewal. Before a step that must not run without it (a passport written,
        a rollback), not only the background renewer's last word."""
        if self.lost is None and not self.ct.dry:
            r = self._run("renew")
            if r.exit_code == 4:
                self.lost = "another controller took it over: " + (parse(r.out).get("holder") or "?")
        self.check()

    def _run(self, action: str, *args: str):
        seconds = str(max(1, round(self.ttl)))
        return self.ct.script(shell.load("oplock"), action, self.path, self.token, seconds, *args, timeout=60,
                              check=False, label=f"oplock {action}")

    def _renew_forever(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self.ttl / 6):
            try:
                r = self._run("renew")
            except RemoteError as exc:  # a dropped connection: retry at the next tick
                r, why = None, str(exc)
            if r is not None and r.exit_code == 0:
                last_ok = time.monotonic()
                continue
            if r is not None and r.exit_code == 4:
                self.lost = "another controller took it over: " + (parse(r.out).get("holder") or "?")
                return
            if time.monotonic() - last_ok > self.ttl:
                self.lost = f"could not renew it for {self.ttl:g}s: " + (why if r is None else r.err.strip())
                return


@contextmanager
def hold(ct: Container, command: str, *, holder: str | None = None, ttl: float = TTL,
         path: str = LEASE) -> Iterator[Lease]:
    """Hold container `ct`'s operation lease for the block: BusyError (naming the holder) when another
    controller holds a live one; an expired one (its controller died) is taken over."""
    holder = " ".join((holder or default_holder()).split())  # one line in the lease file
    lease = Lease(ct, path, secrets.token_hex(8), ttl)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    r = lease._run("acquire", holder, " ".join(command.split()), started)
    if ct.dry:  # the command was printed; nothing is held
        yield lease
        return
    if r.exit_code == 3:
        raise busy_error(ct.ctid, parse(r.out), ttl)
    if r.exit_code != 0:
        raise CommandError(f"oplock acquire {path}", r.exit_code, r.err, ct.where)
    if r.out.startswith("took-over"):
        lease.took_over = parse(r.out)
    renewer = ContextThread(target=lease._renew_forever, daemon=True, name=f"oplock-{ct.ctid}")
    renewer.start()
    try:
        yield lease
    finally:
        lease._stop.set()
        renewer.join()
        try:
            lease._run("release")
        except RemoteError:
            pass  # unreachable now: the lease expires by itself within ttl
