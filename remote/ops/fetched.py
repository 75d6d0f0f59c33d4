"""Programs remote puts into containers (the pinned uv that builds venvs, py-spy for the stall watch).

Each comes from its PyPI wheel (`<name>.data/scripts/<project>`), found in a way every controller install
has, a `uv tool install` or pipx one included (no pip, no `uv` module needed), in this order:

1. a wheel file in one of `venv.find_links`' local folders (an air-gapped controller's wheel folder);
2. for uv only, a uv of exactly the pinned version found as `uv_command` finds it (the `uv` module's
   binary, one beside this Python, one on PATH), its bytes checked against its RECORD where it has one;
3. the package index's simple API (PEP 691 JSON, else PEP 503 HTML), fetched with urllib with a timeout:
   `venv.index_url` and `venv.extra_index_urls` first (a PyPI mirror), then PyPI. The wheel's sha256 must
   be the one the index publishes.

The binary is then checked against the wheel's own RECORD, and cached on the controller
(files.cached_binary). `venv.offline: true` never touches the network: a missing wheel is an error
naming the wheel file and the folder to put it in.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from ..config import VenvSpec
from ..errors import DeployError
from ..naming import normalize, redact, split_userinfo
from . import files

PYPI = "https://pypi.org/simple"
TIMEOUT = 30.0  # seconds: each connect and each read of the index and of the wheel
DEADLINE = 900.0  # seconds for one whole download
MAX_WHEEL = 256 << 20  # bytes: no program remote fetches is near this (uv: about 20 MiB)
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class Program:
    project: str
    platforms: tuple[str, ...]  # the manylinux tags its Linux wheels carry, best first


UV = Program("uv", ("manylinux_2_17", "manylinux2014"))
PY_SPY = Program("py-spy", ("manylinux_2_17", "manylinux2014", "manylinux_2_5", "manylinux1"))


@dataclass(frozen=True)
class Sources:
    """Where wheels are looked for: local folders first, then the indexes (none when offline)."""

    find_links: tuple[str, ...] = ()
    index_urls: tuple[str, ...] = (PYPI,)
    offline: bool = False
    timeout: float = TIMEOUT

    @classmethod
    def of(cls, venv: VenvSpec | None, timeout: float = TIMEOUT) -> Sources:
        if venv is None:
            return cls(timeout=timeout)
        indexes = [u for u in (venv.index_url, *venv.extra_index_urls) if u]
        indexes += [PYPI] if PYPI not in (u.rstrip("/") for u in indexes) else []
        return cls(tuple(venv.find_links), () if venv.offline else tuple(indexes), venv.offline, timeout)


def record_hash(data: bytes) -> str:
    """sha256 as a wheel's RECORD writes it (urlsafe base64, no padding)."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_matches(filename: str, program: Program, version: str, machine: str) -> bool:
    """Is `filename` `program`'s wheel of exactly `version` for Linux on `machine`?"""
    if not filename.endswith(".whl"):
        return False
    parts = urllib.parse.unquote(filename[:-4]).split("-")
    if len(parts) not in (5, 6):
        return False
    return (normalize(parts[0]) == normalize(program.project) and parts[1] == version
            and any(tag in parts[-1].split(".") for tag in (f"{p}_{machine}" for p in program.platforms)))


def wheel_pattern(program: Program, version: str, machine: str) -> str:
    return f"{program.project.replace('-', '_')}-{version}-*-{program.platforms[0]}_{machine}*.whl"


def binary_of(wheel: Path, program: Program) -> bytes:
    """The program's binary in `wheel`, checked against the wheel's RECORD."""
    try:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            name = next((n for n in names if n.endswith(f".data/scripts/{program.project}")), None)
            record = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
            if name is None or record is None:
                raise DeployError(f"{program.project} wheel {wheel}: it holds no {program.project} binary or no RECORD")
            data, lines = z.read(name), z.read(record).decode(errors="replace").splitlines()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DeployError(f"{program.project} wheel {wheel}: not a readable wheel ({exc})") from None
    want = next((line.split(",")[1] for line in lines if line.startswith(name + ",")), "")
    if want != f"sha256={record_hash(data)}":
        raise DeployError(f"{program.project} wheel {wheel.name}: {name} does not match the wheel's RECORD")
    return data


def _local_folders(sources: Sources) -> list[Path]:
    out = []
    for link in sources.find_links:
        if link.startswith("file://"):
            link = urllib.parse.unquote(urllib.parse.urlparse(link).path)
        elif "://" in link:
            continue  # an URL: uv reads it in the container; here only folders count
        if Path(link).is_dir():
            out.append(Path(link))
    return out


def _from_folders(program: Program, version: str, machine: str, sources: Sources) -> tuple[bytes, str] | None:
    for folder in _local_folders(sources):
        try:
            found = sorted(p for p in folder.iterdir() if wheel_matches(p.name, program, version, machine))
        except OSError:
            continue
        if found:
            return binary_of(found[0], program), f"{found[0]}, checked against its RECORD"
    return None


def uv_command() -> list[Path]:
    """The uv programs this controller has, as remote looks for them: the `uv` module's binary (the dev
    extra), the one beside this Python (a venv's bin/), then PATH's."""
    found: list[Path] = []
    try:
        import uv as uv_pkg

        found.append(Path(uv_pkg.find_uv_bin()))
    except (ImportError, OSError, FileNotFoundError):
        pass
    found.append(Path(sys.executable).parent / "uv")
    on_path = shutil.which("uv")
    if on_path:
        found.append(Path(on_path))
    seen, out = set(), []
    for p in found:
        try:
            real = p.resolve(strict=True)
        except OSError:
            continue
        if real not in seen and os.access(real, os.X_OK):
            seen.add(real)
            out.append(real)
    return out


def find_uv() -> Path | None:
    """The first uv of `uv_command`, or None (what the tests run, as remote finds it, never through PATH alone)."""
    found = uv_command()
    return found[0] if found else None


def _recorded_hash(path: Path) -> str | None:
    """The sha256 the `uv` distribution's RECORD gives `path`, when that distribution installed it."""
    try:
        for f in md.distribution("uv").files or []:
            if f.hash and f.hash.mode == "sha256" and Path(f.locate()).resolve() == path:
                return f.hash.value
    except (md.PackageNotFoundError, OSError):
        pass
    return None


def _installed_uv(version: str, machine: str) -> tuple[bytes, str] | None:
    """A uv on this controller of exactly `version`, when the container has this machine's architecture;
    checked against its distribution's RECORD where it has one."""
    if machine != platform.machine():
        return None
    for path in uv_command():
        try:
            out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout.split()
            if not (len(out) > 1 and out[0] == "uv" and out[1] == version):
                continue
            data = path.read_bytes()
        except (OSError, subprocess.SubprocessError):
            continue
        recorded = _recorded_hash(path)
        if recorded is None:
            return data, f"the uv {version} at {path} (its own --version)"
        if recorded == record_hash(data):
            return data, f"the installed uv {version} ({path}), checked against its RECORD"
    return None


# --- the package index --------------------------------------------------------------------------------


class _Links(HTMLParser):
    """PEP 503: every <a href> of a project page."""

    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (filename, href)
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


@dataclass(frozen=True)
class _Credential:
    """A private index's user and password, as a Basic header sent to the index's own origin only."""

    origin: tuple[str, str, int]  # scheme, host, port
    header: str


def _origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme, 0)


def _credential(url: str) -> tuple[str, _Credential | None]:
    """`url` without its user and password, and those as a credential for its origin (None without)."""
    user, password, bare = split_userinfo(url)
    if user is None:
        return url, None
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    return bare, _Credential(_origin(bare), "Basic " + token)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """urllib copies every header to a redirect's target, Authorization included, whatever its host or
    scheme: here the credential goes only where the new URL is the index's own scheme, host and port."""

    def __init__(self, credential: _Credential | None):
        self.credential = credential

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.remove_header("Authorization")
            if self.credential is not None and _origin(new.full_url) == self.credential.origin:
                new.add_unredirected_header("Authorization", self.credential.header)
        return new


def _open(url: str, credential: _Credential | None, timeout: float, accept: str | None = None):
    """GET `url` (no user or password in it), with the credential where `url` is on its origin, following
    redirects with it only while they stay there."""
    url, own = _credential(url)  # a URL that carries its own (a file link the index wrote so) uses those
    credential = own or credential
    headers = {"User-Agent": "remote (fetched programs)"}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(url, headers=headers)
    if credential is not None and _origin(url) == credential.origin:
        request.add_unredirected_header("Authorization", credential.header)
    return urllib.request.build_opener(_Redirects(credential)).open(request, timeout=timeout)


def _files(index: str, credential: _Credential | None, program: Program,
           timeout: float) -> list[tuple[str, str, str | None]]:
    """(filename, absolute URL, published sha256) of every file on the project's page of `index` (a URL
    without user or password); [] when the index has no such project."""
    page = f"{index.rstrip('/')}/{normalize(program.project)}/"
    try:
        with _open(page, credential, timeout, ACCEPT) as r:
            body, kind, where = r.read(16 << 20), r.headers.get("Content-Type", ""), r.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    out = []
    if "json" in kind:
        for f in json.loads(body).get("files", []):
            out.append((f["filename"], urllib.parse.urljoin(where, f["url"]), (f.get("hashes") or {}).get("sha256")))
        return out
    parser = _Links()
    parser.feed(body.decode(errors="replace"))
    for text, href in parser.links:
        url, _, fragment = urllib.parse.urljoin(where, href).partition("#")
        name = urllib.parse.unquote(url.rsplit("/", 1)[-1]) or text
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        out.append((name, url, digest))
    return out


def _download(url: str, credential: _Credential | None, want: str, dest: Path, timeout: float) -> None:
    """`url` into `dest`, whose sha256 must be `want`; each read within `timeout`, the whole within DEADLINE."""
    end = time.monotonic() + DEADLINE
    h, size = hashlib.sha256(), 0
    with _open(url, credential, timeout) as r, open(dest, "wb") as f:
        while chunk := r.read(1 << 20):
            size += len(chunk)
            if size > MAX_WHEEL or time.monotonic() > end:
                raise DeployError(f"{dest.name}: over {MAX_WHEEL >> 20} MiB or {DEADLINE:.0f}s: not a wheel remote fetches")
            h.update(chunk)
            f.write(chunk)
    if h.hexdigest() != want:
        raise DeployError(f"{dest.name} from {redact(url)}: its sha256 {h.hexdigest()} is not the {want} the index "
                          "publishes (a changed or corrupted download): nothing was used")


def _from_index(program: Program, version: str, machine: str, sources: Sources) -> tuple[bytes, str]:
    errors = []
    for index in sources.index_urls:
        try:
            bare, credential = _credential(index)
        except ValueError as exc:  # a port out of range, or no number: the hosts file's URL, named (redacted)
            errors.append(f"venv.index_url {redact(index)} is not a usable URL ({type(exc).__name__}: its host or "
                          "port does not parse): fix it in the hosts file")
            continue
        try:
            candidates = [(n, u, d) for n, u, d in _files(bare, credential, program, sources.timeout)
                          if wheel_matches(n, program, version, machine)]
        except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException) as exc:
            # URLError, timeouts, a page that is no index, a URL urllib cannot open (InvalidURL: no port number)
            errors.append(f"{redact(index)}: {_reason(exc)}")
            continue
        if not candidates:
            errors.append(f"{redact(index)}: no {wheel_pattern(program, version, machine)}")
            continue
        name, url, digest = candidates[0]
        if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
            errors.append(f"{redact(index)}: {name} has no published sha256")
            continue
        with tempfile.TemporaryDirectory() as d:
            wheel = Path(d) / name.replace("/", "_")
            try:
                _download(url, credential, digest, wheel, sources.timeout)
            except (OSError, ValueError, http.client.HTTPException) as exc:  # a link urllib cannot open (InvalidURL)
                errors.append(f"{redact(index)}: {name}: {_reason(exc)}")
                continue
            return binary_of(wheel, program), f"{name} from {redact(index)}, sha256 as published, checked against its RECORD"
    raise DeployError("; ".join(errors) or "no package index to fetch from")


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason


def fetch(program: Program, version: str, machine: str, sources: Sources, *, context: str = "") -> tuple[bytes, str]:
    """`program`'s checked binary for Linux on `machine`, and where it came from (see the module's text)."""
    found = _from_folders(program, version, machine, sources)
    if found is None and program == UV:
        found = _installed_uv(version, machine)
    if found is not None:
        return found
    pattern = wheel_pattern(program, version, machine)
    folders = ", ".join(str(f) for f in _local_folders(sources)) or "no local folder"
    if sources.offline:
        raise DeployError(f"{context}{program.project} {version} for {machine}: venv.offline is set and no wheel "
                          f"{pattern} is in venv.find_links ({folders}): put that wheel there (e.g. from "
                          f"`pip download --no-deps --only-binary=:all: --platform {program.platforms[0]}_{machine} "
                          f"{program.project}=={version}` on a machine with an index)")
    try:
        return _from_index(program, version, machine, sources)
    except DeployError as exc:
        raise DeployError(f"{context}cannot fetch {program.project} {version} for {machine}: {exc}. Or put the wheel "
                          f"{pattern} into a folder of venv.find_links ({folders})") from None


def cached(program: Program, version: str, machine: str, sources: Sources, *,
           context: str = "") -> tuple[Path, str]:
    """The binary, cached on the controller, and its sha256 (files.cached_binary: rechecked on every use,
    fetched again when torn or changed)."""
    def fetcher() -> tuple[bytes, str]:
        return fetch(program, version, machine, sources, context=context)

    return files.cached_binary(program.project, version, machine, fetcher)


def uv_binary(venv: VenvSpec, machine: str) -> tuple[Path, str]:
    """The pinned uv (venv.uv_version) for the container's architecture."""
    return cached(UV, venv.uv_version, machine, Sources.of(venv), context="venv.uv_version: ")
