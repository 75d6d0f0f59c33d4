"""~/.ssh/config as ssh reads it, applied to a host of the hosts file: where and how to connect.

Pure: the config's text and a `Host` in, a `Target` out (every hop of a ProxyJump chain resolved from
its own Host entry). hosts.yaml's own keys win over the config; what neither says takes ssh's default
(and `root` for the Proxmox host's user). paramiko's SSHConfig does the matching (Host, Match, tokens);
`Include` is expanded here, when the text is read (`read`).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from ..config import Host
from ..errors import ConfigError

CONFIG = "~/.ssh/config"
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts",)
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts",)
DEFAULT_USER = "root"  # a Proxmox host's pct needs root: the default for a host of the hosts file
MAX_HOPS = 8


@dataclass(frozen=True)
class Target:
    """One SSH endpoint, resolved: the hops before it are in `via` (None: connect directly)."""

    label: str  # who it is in messages: the hosts file's name, or "jump host NAME"
    alias: str  # the name looked up in ~/.ssh/config
    hostname: str
    port: int
    user: str
    identities: tuple[str, ...]  # key files to try, in order
    identities_from: str  # "key_file", "connect_kwargs" (a Fabric Connection's), "IdentityFile" or "default"
    agent: bool  # also try the keys of ssh-agent
    known_hosts: tuple[str, ...]  # every file whose keys are accepted (missing files hold none)
    via: Target | None = None

    @property
    def address(self) -> str:
        """host or [host]:port, as known_hosts and ssh-keygen -R spell it."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def hops(self) -> list[Target]:
        """The jump hosts, outermost first."""
        chain: list[Target] = []
        hop = self.via
        while hop is not None:
            chain.insert(0, hop)
            hop = hop.via
        return chain


def read(path: str = CONFIG, *, home: str | None = None) -> str:
    """The text of an ssh config file with its `Include`s expanded ("" when there is none)."""
    home = home or os.path.expanduser("~")
    return _read(_expand_home(path, home), home, depth=0)


def _read(path: str, home: str, depth: int) -> str:
    if depth > 16:
        raise ConfigError(path, "Include", "Include nested more than 16 deep (a loop?)")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(path, "", f"cannot read: {exc.strerror}") from None
    out = []
    for line in lines:
        m = re.match(r"\s*include\s*[\s=]\s*(.+)$", line, re.IGNORECASE)
        if not m:
            out.append(line)
            continue
        # As ssh: relative names are relative to ~/.ssh; each pattern is a glob, read in sorted order.
        for pattern in m.group(1).split():
            pattern = _expand_home(pattern.strip('"'), home)
            if not os.path.isabs(pattern):
                pattern = os.path.join(home, ".ssh", pattern)
            for name in sorted(glob.glob(pattern)):
                out.append(_read(name, home, depth + 1))
    return "\n".join(out) + "\n"


def _expand_home(path: str, home: str) -> str:
    path = path.replace("%d", home)
    return home + path[1:] if path == "~" or path.startswith("~/") else path


def _parser():
    """paramiko's SSHConfig, leaving ~ and %d in IdentityFile to `resolve` (whose `home` is given, not $HOME)."""
    import paramiko

    class Parser(paramiko.SSHConfig):
        TOKENS_BY_CONFIG_KEY = {**paramiko.SSHConfig.TOKENS_BY_CONFIG_KEY, "identityfile": [
            t for t in paramiko.SSHConfig.TOKENS_BY_CONFIG_KEY["identityfile"] if t not in ("~", "%d")]}

    return Parser


def resolve(host: Host, text: str = "", *, home: str | None = None, local_user: str = "root",
            source: str = CONFIG) -> Target:
    """Where and how to reach `host`: its hosts-file keys over `text` (an ssh config) over the defaults."""
    import paramiko

    home = home or os.path.expanduser("~")
    try:
        parsed = _parser().from_text(text or "")
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise ConfigError(source, "", f"{exc} (fix the line, or move the file aside to try without it)") from None
    opts = _lookup(parsed, host.address, source)
    known: tuple[str, ...]
    identities: tuple[str, ...]
    if host.known_hosts:
        known = (host.known_hosts,)
    else:
        known = _known_hosts(opts, home)
    if host.key_file:
        identities, origin = (host.key_file,), "connect_kwargs" if "key_filename" in host.given_by.split() else "key_file"
    elif "identityfile" in opts:
        identities, origin = tuple(_expand_home(p, home) for p in opts["identityfile"]), "IdentityFile"
    else:
        identities, origin = tuple(_expand_home(p, home) for p in DEFAULT_IDENTITIES), "default"
    target = Target(
        label=host.name,
        alias=host.address,
        hostname=opts.get("hostname") or host.address,
        port=host.port or _port(opts, source, host.address),
        user=host.user or opts.get("user") or DEFAULT_USER,
        identities=identities,
        identities_from=origin,
        # An explicit key_file is the only key (as `ssh -o IdentitiesOnly=yes -i KEY`), as it always was here.
        agent=not host.key_file and not _yes(opts, "identitiesonly") and opts.get("identityagent") != "none",
        known_hosts=known,
    )
    if "proxycommand" in opts and opts["proxycommand"] and "proxyjump" not in opts:
        raise ConfigError(source, f"Host {host.address}: ProxyCommand",
                          "ProxyCommand is not supported by remote; use ProxyJump (ssh -J) for a jump host")
    jump = opts.get("proxyjump")
    if jump and jump.lower() != "none":
        extra = (host.known_hosts,) if host.known_hosts else ()
        via = _jumps(parsed, jump, home, local_user, source, extra, seen=(host.address,))
        target = _replace(target, via=via)
    return target


def _lookup(parsed, alias: str, source: str) -> dict:
    try:
        return dict(parsed.lookup(alias))
    except Exception as exc:  # a bad Match, canonicalization that failed: ssh would refuse to start too
        raise ConfigError(source, f"Host {alias}", f"cannot apply: {exc}") from None


def _port(opts: dict, source: str, alias: str) -> int:
    raw = opts.get("port", "22")
    if not str(raw).isdigit() or not 1 <= int(raw) <= 65535:
        raise ConfigError(source, f"Host {alias}: Port", f"expected a port from 1 to 65535, got {raw!r}")
    return int(raw)


def _yes(opts: dict, key: str) -> bool:
    return str(opts.get(key, "no")).lower() == "yes"


def _known_hosts(opts: dict, home: str) -> tuple[str, ...]:
    user = opts.get("userknownhostsfile")
    files = tuple(_expand_home(p, home) for p in user.split()) if user else DEFAULT_KNOWN_HOSTS
    glob_ = opts.get("globalknownhostsfile")
    return tuple(_expand_home(p, home) for p in files) + (tuple(glob_.split()) if glob_ else GLOBAL_KNOWN_HOSTS)


_HOP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@\[\]]+))(?::(?P<port>\d+))?$")


def _jumps(parsed, spec: str, home: str, local_user: str, source: str, extra_known: tuple[str, ...],
           seen: tuple[str, ...]) -> Target:
    """ProxyJump `a,b`: reach b through a (a's own ProxyJump applies, b's is replaced by a), as ssh -J does."""
    via: Target | None = None
    for i, hop_spec in enumerate(s.strip() for s in spec.split(",")):
        m = _HOP.match(hop_spec)
        if not m:
            raise ConfigError(source, f"ProxyJump {spec}", f"cannot read {hop_spec!r}: expected [user@]host[:port]")
        alias = m.group("v6") or m.group("host")
        if alias in seen or len(seen) > MAX_HOPS:
            raise ConfigError(source, f"ProxyJump {spec}", f"jump hosts loop through {alias!r}: "
                              + " -> ".join((*seen, alias)))
        opts = _lookup(parsed, alias, source)
        has_own = "identityfile" in opts
        hop = Target(
            label=f"jump host {alias}",
            alias=alias,
            hostname=opts.get("hostname") or alias,
            port=int(m.group("port")) if m.group("port") else _port(opts, source, alias),
            user=m.group("user") or opts.get("user") or local_user,
            identities=tuple(_expand_home(p, home) for p in (opts["identityfile"] if has_own else DEFAULT_IDENTITIES)),
            identities_from="IdentityFile" if has_own else "default",
            agent=not _yes(opts, "identitiesonly") and opts.get("identityagent") != "none",
            known_hosts=_known_hosts(opts, home) + extra_known,
        )
        own = opts.get("proxyjump")
        if i == 0 and own and own.lower() != "none":
            hop = _replace(hop, via=_jumps(parsed, own, home, local_user, source, extra_known, (*seen, alias)))
        elif via is not None:
            hop = _replace(hop, via=via)
        via, seen = hop, (*seen, alias)
    assert via is not None  # spec.split(",") has one hop at least, and each is a Target or raised
    return via


def _replace(target: Target, **changes) -> Target:
    import dataclasses

    return dataclasses.replace(target, **changes)
