"""The pure naming rules facts and operations share: package names and `name==version` pins, the
per-version compile-cache folder, the operation lease's path. No I/O; below both remote.facts and
remote.ops, so the read side never imports an operation.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

LEASE = "/run/remote/ops.lock"  # the operation lease (remote.ops.oplock) that the facts probe reads


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(lines) -> dict[str, str]:
    """`name==version` requirement lines (a lock or the spec's packages) -> {normalized name: version}."""
    pins = {}
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\#]+)", line)
        if m:
            pins[normalize(m.group(1))] = m.group(3)
    return pins


def parse_lock(lines) -> dict[str, str]:
    """A lock's (or a spec's) requirements -> {normalized name: version}: `name==version` pins, and direct
    references (`name @ https://…/name-1.0-….whl`, `name @ git+https://…@sha`, as `uv pip compile`
    writes them) as "@ <url>", which `matches` compares by the version in a wheel's or sdist's file name."""
    pins = parse_pins(lines)
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*@\s*(\S+)", line)
        if m and normalize(m.group(1)) not in pins:
            pins[normalize(m.group(1))] = "@ " + m.group(3).rstrip("\\")
    return pins


def direct_version(url: str) -> str | None:
    """The version a direct reference's file name carries (a wheel or an sdist); None for a VCS reference
    or a name that says none."""
    if "+" in url.split("://", 1)[0]:  # git+https:// and the like: the version is whatever the commit says
        return None
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if name.endswith(".whl") and name.count("-") >= 4:
        return name.split("-")[1]
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if name.endswith(ext) and "-" in name:
            return name[: -len(ext)].rsplit("-", 1)[1]
    return None


def matches(locked: str, installed: str) -> bool:
    """Whether an installed version is what the lock says: a pin exactly, a direct reference by the version
    its file name carries (any version for a VCS reference: the commit in the URL is what was locked)."""
    if locked.startswith("@ "):
        want = direct_version(locked[2:])
        return want is None or want == installed
    return locked == installed


def compile_cache(spec, verify: Mapping | None) -> str:
    """The per-version compile cache folder: <warmup.cache_dir>/torch-<v>-cuda-<v>-triton-<v>."""
    from .guard import cache_subdir  # the one naming rule shared with remote_guard (here: the CLI needs no guard)

    v = verify or {}
    return cache_subdir(spec.warmup.cache_dir, {"torch": v.get("torch") or "none", "cuda": v.get("cuda_build"),
                                                "triton": v.get("triton")})


def split_userinfo(url: str) -> tuple[str | None, str | None, str]:
    """(user, password, the URL without them) of `url`, user and password percent-decoded; (None, None, url)
    where it carries none. Robust to what people paste: a password with an unencoded `@` (the last `@`
    before the host ends the user part) or `/` (a base64 token): text before the first `/` with a `:` whose
    right side is no port, and an `@` after that `/`, is `user:password@host`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None, None, url
    end = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    head = rest[:end]
    slash = head.find("/")
    authority = head if slash < 0 else head[:slash]
    if "@" in authority:
        at = authority.rfind("@")
    elif slash >= 0 and "@" in head[slash:] and _password_with_slash(authority):
        nxt = head.find("/", head.index("@", slash))
        at = head.rfind("@", 0, nxt if nxt >= 0 else len(head))
    else:
        return None, None, url
    user, colon, password = rest[:at].partition(":")
    return (unquote(user), unquote(password) if colon else None,
            f"{scheme}{sep}{rest[at + 1:]}")


def _password_with_slash(authority: str) -> bool:
    """Is `authority` (the text before a URL's first `/`) `user:start-of-a-password` rather than host:port?"""
    host, colon, port = authority.rpartition(":")
    if not colon or "]" in port:  # no `:`, or an IPv6 literal
        return False
    if port.isdigit() and len(port) <= 5 and int(port) <= 65535:
        return not ("." in host or host == "localhost" or host.startswith("["))  # a host name with a port
    return True


def has_userinfo(url: str) -> bool:
    return split_userinfo(url)[0] is not None


def with_encoded_userinfo(url: str) -> str:
    """`url` with its user and password percent-encoded (what uv and urllib parse: a `/` or `@` in a password
    becomes %2F, %40)."""
    user, password, bare = split_userinfo(url)
    if user is None:
        return url
    scheme, _, rest = bare.partition("://")
    secret = quote(user, safe="") + (":" + quote(password, safe="") if password is not None else "")
    return f"{scheme}://{secret}@{rest}"


def is_repo_url(repo: str) -> bool:
    """code.repo as git reads it: a URL (`https://`, `ssh://`, `file://`, ...) or scp-like `[user@]host:path` (a
    colon before any slash), not a local path."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", repo):
        return True
    head = repo.split("/", 1)[0]
    return ":" in head and not re.fullmatch(r"[A-Za-z]:.*", head)  # C:... is a drive, as git reads it too


def redact(url: str) -> str:
    """A URL as it may be shown: its user and password (a private index's token) replaced."""
    user, _, bare = split_userinfo(url)
    if user is None:
        return url
    scheme, _, rest = bare.partition("://")
    return f"{scheme}://***@{rest}"


def _escape(ch: str) -> str:
    n = ord(ch)
    if 0xDC80 <= n <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape: shown as that byte
        return f"\\x{n - 0xDC00:02x}"
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _shown(ch: str, keep: str) -> bool:
    if ch in keep:
        return True
    # Cc: C0, DEL and C1 controls (every ESC/CSI/OSC sequence starts with one); Cf: bidi overrides and
    # zero-width marks that reorder or hide text; Zl/Zp: line breaks; Cs: surrogates (bytes not UTF-8).
    return not (ch < " " or "\x7f" <= ch <= "\x9f" or
                (ch > "\x9f" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")))


def printable(text: str | bytes, *, lines: bool = False) -> str:
    """A value the container (or a host) supplied, safe to show on the user's terminal: every control
    character but \\t (C0, DEL, C1: and so every ESC, CSI and OSC sequence, which can write the clipboard or
    move the cursor to hide or forge a line) shown as a visible escape (`\\x1b`, `\\x07`, `\\x9b`), so are
    the format characters that reorder or hide text (bidi overrides, zero-width marks) and line breaks;
    bytes that are not UTF-8 are shown as `\\xNN`. With lines, newlines are kept (a message of several
    lines); otherwise a value meant to be one line stays one. Printable text is returned unchanged.

    The one terminal-safety rule: applied wherever a container's value is formatted for the terminal,
    never to a job's own output (`logs`, `exec`), which stays raw as ssh's does."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    elif not isinstance(text, str):
        text = str(text)
    keep = "\t\n" if lines else "\t"
    if text.isprintable():  # the common case: nothing to escape (isprintable is False for \t and \n too)
        return text
    return "".join(ch if _shown(ch, keep) else _escape(ch) for ch in text)


def path_words(path: str) -> str:
    """A path the container reported, named unambiguously in words: as it is where every character shows
    (a tab does not), else whole as a shell's `$'...'` string (control characters and the rest printable() escapes
    as `\\xNN`, a backslash and a quote escaped too), so `a\\x1bb` typed and an ESC in a name never read alike
    and the words can be pasted into a shell. Never cut."""
    if all(_shown(ch, "") for ch in path):
        return path
    return "$'" + "".join("\\\\" if ch == "\\" else "\\'" if ch == "'" else ch if _shown(ch, "") else _escape(ch)
                          for ch in path) + "'"


def copied_line(c: Any) -> str:
    """A compile-cache copy (remote.results.CacheCopy) as one line: the copy's progress, and `remote warmup`'s last line."""
    return (f"copied {c.files} cache file(s), {c.bytes / 2**20:.1f} MiB, from {c.src} "
            f"({c.present} already here, {c.total} in all; via {c.via}, {c.seconds:.1f}s); no compile ran")


def known_good_label(kg: Mapping[str, Any] | None) -> str:
    """A known-good record as doctor names it: `known-good run ID, VALUE UNIT` ("" for none)."""
    if not kg:
        return ""
    tp = kg.get("throughput") or {}
    value = f", {tp['value']:.4g} {tp.get('unit') or ''}".rstrip() if tp.get("value") is not None else ""
    return f"known-good run {kg.get('run')}{value}"


def passport_line(p: Mapping[str, Any]) -> str:
    """A compile cache's passport (remote/ops/passport.py) in one line, escaped, as `remote cache` and doctor show it."""
    made = (f"copied from {p['copied_from']}" if p.get("copied_from") is not None
            else f"warmed by {p.get('made_by')}" if p.get("made_by") is not None else "")
    gpu = " ".join(str(p[k]) for k in ("gpu", "capability") if p.get(k)) or "none (CPU)"
    git = f" (git {str(p['torch_git'])[:10]})" if p.get("torch_git") else ""
    d = p.get("devices")
    devices = [str(x) for x in d] if isinstance(d, list) else []  # a hand-edited passport may hold anything
    return printable(f"torch {p.get('torch')}{git}, CUDA {p.get('cuda') or 'none'}, triton "
                     f"{p.get('triton') or 'none'}, GPU {gpu}" + (f", driver {p['driver']}" if p.get("driver") else "")
                     + f", devices {','.join(devices) or '-'}, commit "
                     f"{str(p.get('commit'))[:12]}, lock {str(p.get('venv_lock'))[:12]}" + (f"; {made}" if made else ""))


JSON_DEPTH = 100  # nesting past this is no answer of remote's tools: a container's hostile or broken file


def json_loads(text: str | bytes) -> Any:
    """json.loads for what a container, host or process wrote (untrusted): a ValueError, as for any bad JSON, for
    a document nested past JSON_DEPTH (1001 `[` would otherwise raise RecursionError out of every parser, or
    parse here and raise it later, where the value is written again)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested more than {JSON_DEPTH} deep") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > JSON_DEPTH:
                raise ValueError(f"JSON nested more than {JSON_DEPTH} deep")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


def size(n: float) -> str:
    """Bytes as people read them: `512 B`, `1.5 MiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
