"""Local tier: the programs remote puts into containers (remote.ops.fetched), fetched as every controller
install can: a find_links folder first, the index's simple API (JSON or HTML) over urllib with the sha256 it
publishes and a timeout, never pip. The index here is a real HTTP server on loopback serving a wheel built
by the test (a RECORD and a fake `uv` script)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import platform
import socket
import threading
import zipfile
from pathlib import Path

import pytest

from remote.config import VenvSpec
from remote.errors import DeployError
from remote.ops import fetched

VERSION = "9.9.9"  # no uv on this machine has it: only the folder or the index can give it
MACHINE = platform.machine()
BINARY = b"#!/bin/sh\necho 'uv 9.9.9 (a fake)'\n"
WHEEL = f"uv-{VERSION}-py3-none-manylinux_2_17_{MACHINE}.manylinux2014_{MACHINE}.whl"


def make_wheel(folder: Path, binary: bytes = BINARY, recorded: bytes | None = None) -> Path:
    """uv's wheel layout: <name>.data/scripts/uv and a RECORD with its urlsafe sha256 (of `recorded`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WHEEL
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded or binary).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"uv-{VERSION}.data/scripts/uv", binary)
        z.writestr(f"uv-{VERSION}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: uv\nVersion: {VERSION}\n")
        z.writestr(f"uv-{VERSION}.dist-info/RECORD",
                   f"uv-{VERSION}.data/scripts/uv,sha256={digest},{len(binary)}\nuv-{VERSION}.dist-info/RECORD,,\n")
    return path


class Index:
    """A simple-API index on loopback: /simple/uv/ (JSON or HTML) and /files/<wheel>; counts every request."""

    def __init__(self, wheel: Path, *, sha256: str | None = None, html: bool = False, host: str = "127.0.0.1",
                 require: str | None = None, redirect: str | None = None):
        """`require`: the Authorization every request must carry (else 401); `redirect`: the project page
        answers 302 to this URL."""
        self.wheel, self.requests, self.auth = wheel, [], []
        self.sha256 = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.requests.append(self.path)
                index.auth.append(self.headers.get("Authorization"))
                if require is not None and self.headers.get("Authorization") != require:
                    self.send_error(401)
                    return
                if redirect is not None and self.path == "/simple/uv/":  # moved: /moved/uv/ is the same page
                    self.send_response(302)
                    self.send_header("Location", redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path in ("/simple/uv/", "/moved/uv/"):
                    if html:
                        body = (f'<html><body><a href="../../files/{WHEEL}#sha256={index.sha256}">{WHEEL}</a>'
                                "</body></html>").encode()
                        kind = "text/html"
                    else:
                        body = json.dumps({"meta": {"api-version": "1.0"}, "name": "uv", "files": [
                            {"filename": WHEEL, "url": f"../../files/{WHEEL}", "hashes": {"sha256": index.sha256}}]}).encode()
                        kind = "application/vnd.pypi.simple.v1+json"
                elif self.path == f"/files/{WHEEL}":
                    body, kind = index.wheel.read_bytes(), "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(tmp_path):
    made = []

    def serve(**kw) -> Index:
        made.append(Index(make_wheel(tmp_path / "served"), **kw))
        return made[-1]

    yield serve
    for index in made:
        index.close()


def sources(*indexes: str, find_links=(), offline=False, timeout=10.0) -> fetched.Sources:
    return fetched.Sources(tuple(str(f) for f in find_links), tuple(indexes), offline, timeout)


@pytest.mark.parametrize("html", [False, True], ids=["pep691-json", "pep503-html"])
def test_a_program_comes_from_the_index_simple_api_checked_by_its_published_sha256(served, html):
    index = served(html=html)
    data, origin = fetched.fetch(fetched.UV, VERSION, MACHINE, sources(index.url))
    assert data == BINARY and WHEEL in origin
    assert index.requests == ["/simple/uv/", f"/files/{WHEEL}"]


@pytest.mark.fault("Tool-only controller (uv tool install, no pip)",
                   "uv and py-spy are fetched without pip or the uv module: find_links folders, a uv of the "
                   "pinned version, the index's simple API with its published sha256, with a timeout")
def test_a_wheel_whose_sha256_is_not_the_published_one_is_refused(served, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    index = served(sha256="0" * 64)
    with pytest.raises(DeployError, match=r"sha256 .* is not the 0{64} the index publishes"):
        fetched.cached(fetched.UV, VERSION, MACHINE, sources(index.url))
    assert not list((tmp_path / "cache").rglob("uv"))  # nothing cached, nothing to push


def test_a_binary_that_is_not_its_wheels_record_is_refused(tmp_path):
    make_wheel(tmp_path / "wheels", binary=BINARY, recorded=b"another binary")
    with pytest.raises(DeployError, match="does not match the wheel's RECORD"):
        fetched.fetch(fetched.UV, VERSION, MACHINE, sources(find_links=[tmp_path / "wheels"]))


@pytest.mark.fault("Tool-only controller (uv tool install, no pip)",
                   "uv and py-spy are fetched without pip or the uv module: find_links folders, a uv of the "
                   "pinned version, the index's simple API with its published sha256, with a timeout")
def test_an_index_that_never_answers_ends_in_its_timeout(tmp_path):
    with socket.socket() as silent:  # accepts connections (the backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
        with pytest.raises(DeployError) as e:
            fetched.fetch(fetched.UV, VERSION, MACHINE, sources(url, timeout=0.3))
    assert "timed out" in str(e.value) and url in str(e.value) and WHEEL.split("-")[0] in str(e.value)


def test_the_find_links_folder_comes_before_any_index(served, tmp_path):
    index = served()
    make_wheel(tmp_path / "wheels")
    data, origin = fetched.fetch(fetched.UV, VERSION, MACHINE,
                                 sources(index.url, find_links=[f"file://{tmp_path / 'wheels'}"]))
    assert data == BINARY and str(tmp_path / "wheels") in origin
    assert index.requests == []


def test_an_index_without_the_project_gives_way_to_the_next(served):
    index = served()
    data, _ = fetched.fetch(fetched.UV, VERSION, MACHINE, sources(index.url.replace("/simple", "/other"), index.url))
    assert data == BINARY and index.requests == ["/other/uv/", "/simple/uv/", f"/files/{WHEEL}"]


def test_an_index_url_with_credentials_sends_them_as_a_header_and_never_shows_them(served):
    index = served(sha256="1" * 64)
    url = index.url.replace("http://", "http://alice:s3cret@")
    with pytest.raises(DeployError) as e:
        fetched.fetch(fetched.UV, VERSION, MACHINE, sources(url))
    assert index.auth[0] == "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert "s3cret" not in str(e.value) and "alice" not in str(e.value)


@pytest.mark.fault("Tool-only controller (uv tool install, no pip)",
                   "uv and py-spy are fetched without pip or the uv module: find_links folders, a uv of the "
                   "pinned version, the index's simple API with its published sha256, with a timeout")
def test_offline_never_touches_the_network_and_names_the_wheel_and_the_folder(tmp_path, monkeypatch):
    def no_network(*a, **kw):
        raise AssertionError("an offline fetch opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(fetched.urllib.request, "urlopen", no_network)
    (tmp_path / "wheels").mkdir()
    spec = VenvSpec(uv_version=VERSION, offline=True, find_links=(str(tmp_path / "wheels"),))
    assert fetched.Sources.of(spec).index_urls == ()
    with pytest.raises(DeployError) as e:
        fetched.fetch(fetched.UV, VERSION, MACHINE, fetched.Sources.of(spec))
    text = str(e.value)
    assert f"uv-{VERSION}-*-manylinux_2_17_{MACHINE}*.whl" in text and str(tmp_path / "wheels") in text
    assert "venv.offline" in text
    make_wheel(tmp_path / "wheels")  # put there, as the message says: the same fetch now works
    assert fetched.fetch(fetched.UV, VERSION, MACHINE, fetched.Sources.of(spec))[0] == BINARY


def test_the_venvs_indexes_come_first_then_pypi():
    spec = VenvSpec(index_url="https://mirror.example/simple", extra_index_urls=("https://more.example/simple",))
    assert fetched.Sources.of(spec).index_urls == ("https://mirror.example/simple", "https://more.example/simple",
                                                    fetched.PYPI)
    assert fetched.Sources.of(VenvSpec(index_url=fetched.PYPI + "/")).index_urls == (fetched.PYPI + "/",)
    assert fetched.Sources.of(None).index_urls == (fetched.PYPI,)


def test_only_the_wheel_of_the_exact_version_and_architecture_matches():
    assert fetched.wheel_matches(WHEEL, fetched.UV, VERSION, MACHINE)
    assert not fetched.wheel_matches(WHEEL, fetched.UV, "9.9.10", MACHINE)
    assert not fetched.wheel_matches(WHEEL, fetched.UV, VERSION, "aarch64" if MACHINE != "aarch64" else "x86_64")
    assert not fetched.wheel_matches(WHEEL.replace("uv-", "uvx-"), fetched.UV, VERSION, MACHINE)
    assert fetched.wheel_matches(f"py_spy-0.4.3-py2.py3-none-manylinux_2_5_{MACHINE}.manylinux1_{MACHINE}.whl",
                                 fetched.PY_SPY, "0.4.3", MACHINE)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


CREDENTIALS = ("Credentials of a private index",
               "sent only to the index's own scheme, host and port (its wheel URLs included), dropped on a "
               "redirect anywhere else; a password with an unencoded `/` or `@` is a credential: never in an "
               "argv or a message")


@pytest.mark.fault(*CREDENTIALS)
@pytest.mark.parametrize("elsewhere", ["another-host", "another-port"])
def test_a_redirect_away_from_the_index_never_carries_its_credentials(served, elsewhere):
    other = served(host="127.0.0.2" if elsewhere == "another-host" else "127.0.0.1")
    index = served(redirect=other.url + "/uv/")
    url = index.url.replace("http://", "http://alice:s3cret@")
    data, _ = fetched.fetch(fetched.UV, VERSION, MACHINE, sources(url))
    assert data == BINARY
    assert index.auth == [basic("alice", "s3cret")]  # the index itself got them ...
    assert other.requests == ["/simple/uv/", f"/files/{WHEEL}"] and other.auth == [None, None]  # ... nobody else


@pytest.mark.fault(*CREDENTIALS)
@pytest.mark.parametrize("html", [False, True], ids=["pep691-json", "pep503-html"])
def test_a_private_index_gets_its_credentials_for_its_page_its_redirects_and_its_wheels(served, html):
    """An index that answers 401 without them: the page, a redirect within its origin (/simple/uv/ ->
    /moved/uv/) and the wheel URL resolved against the page all carry them."""
    index = served(html=html, require=basic("alice", "s3cret"), redirect="/moved/uv/")
    data, _ = fetched.fetch(fetched.UV, VERSION, MACHINE, sources(index.url.replace("http://", "http://alice:s3cret@")))
    assert data == BINARY and index.requests == ["/simple/uv/", "/moved/uv/", f"/files/{WHEEL}"]
    assert index.auth == [basic("alice", "s3cret")] * 3


@pytest.mark.fault(*CREDENTIALS)
def test_a_password_with_a_slash_is_a_credential_sent_as_a_header_and_never_shown(served, tmp_path):
    index = served(require=basic("alice", "pa/ss@word"))
    url = index.url.replace("http://", "http://alice:pa/ss@word@")
    data, origin = fetched.fetch(fetched.UV, VERSION, MACHINE, sources(url))
    assert data == BINARY and "pa/ss" not in origin and "alice" not in origin
    assert index.auth == [basic("alice", "pa/ss@word")] * 2
    wrong = served(sha256="1" * 64, require=basic("alice", "pa/ss@word"))
    with pytest.raises(DeployError) as e:
        fetched.fetch(fetched.UV, VERSION, MACHINE, sources(wrong.url.replace("http://", "http://alice:pa/ss@word@")))
    assert "pa/ss" not in str(e.value) and "word" not in str(e.value) and "alice" not in str(e.value)
    # uv in the container: the URL goes to its environment (stdin), percent-encoded as uv parses it; no argv
    from remote.ops import venv

    spec = VenvSpec(index_url=url, find_links=(url.replace("/simple", "/links"),))
    assert not any("pa/ss" in a or "pa%2Fss" in a for a in venv.uv_index_args(spec))
    env = venv.uv_index_env(spec)
    assert env["UV_INDEX_URL"] == index.url.replace("http://", "http://alice:pa%2Fss%40word@")
    assert env["UV_FIND_LINKS"].startswith("http://alice:pa%2Fss%40word@127.0.0.1:")
