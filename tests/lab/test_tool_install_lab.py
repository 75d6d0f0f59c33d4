"""Lab tier: a controller that has remote from `uv tool install` alone (the README's first install: no pip,
no `uv` module, no uv on PATH) deploys a venv to the lab container, fetching the pinned uv as such an
install can (remote.ops.fetched); and one whose package indexes cannot be reached deploys from the uv wheel
in its venv.find_links folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, load_config

from remote.config import UV_VERSION
from remote.ops import fetched
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab

PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_PYTHON = "/usr/bin/python3"
UV_CACHE = Path(os.environ.get("HOME", "/root")) / ".cache" / "uv"  # read before conftest moves HOME
NETWORK = {k: v for k, v in os.environ.items()
           if k in ("SSL_CERT_FILE", "SSL_CERT_DIR") or k.lower() in ("http_proxy", "https_proxy", "no_proxy")}
TOOL_ONLY = ("Tool-only controller (uv tool install, no pip)",
             "uv and py-spy are fetched without pip or the uv module: find_links folders, a uv of the pinned "
             "version, the index's simple API with its published sha256, with a timeout")


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    """remote installed from a clone of this checkout with `uv tool install` into folders of its own."""
    d = tmp_path_factory.mktemp("tool")
    checkout = d / "remote"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True, capture_output=True)
    env = {"HOME": str(d), "PATH": PLAIN_PATH, **NETWORK, "UV_TOOL_DIR": str(d / "tools"),
           "UV_TOOL_BIN_DIR": str(d / "bin"), "UV_CACHE_DIR": str(UV_CACHE), "UV_PYTHON_DOWNLOADS": "never"}
    r = subprocess.run([str(fetched.find_uv()), "tool", "install", "--python", DEBIAN_PYTHON, "."], cwd=checkout,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    python = d / "tools" / "remote" / "bin" / "python"
    r = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('pip'), u.find_spec('uv'))"],
                       capture_output=True, text=True)
    assert r.stdout.split() == ["None", "None"], r.stdout + r.stderr  # what the fix is for: neither is there
    return {"dir": d, "remote": d / "bin" / "remote"}


def deploy_with(tool, hosts: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    """The installed `remote deploy` on a plain PATH, with an empty controller cache (HOME of its own)."""
    home.mkdir(exist_ok=True)
    full = {"HOME": str(home), "PATH": PLAIN_PATH, **NETWORK, "REMOTE_HOSTS_FILE": str(hosts),
            "XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"], **env}
    return subprocess.run([str(tool["remote"]), "deploy", "-c", "200"], cwd="/", env=full, capture_output=True,
                          text=True, timeout=900)


def a_spec_to_build(lab_hosts, extra: str, **edits) -> Path:
    """The lab's hosts file with one more package: a spec no other test builds, so deploy must build (and
    so fetch uv)."""
    return load_config(lab_hosts, **{"packages: [torch==2.13.0+cpu, numpy==2.2.6]":
                                     f"packages: [torch==2.13.0+cpu, numpy==2.2.6, '{extra}']"}, **edits)


@pytest.mark.fault(*TOOL_ONLY)
def test_a_uv_tool_install_deploys(tool, lab_hosts, deployed, lab_session, tmp_path):
    hosts = a_spec_to_build(lab_hosts, "mpmath>=0.11")
    r = deploy_with(tool, hosts, tmp_path / "home")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "venv /root/venv ->" in r.stdout, r.stdout + r.stderr
    origin = (tmp_path / "home" / ".cache" / "remote" / f"uv-{UV_VERSION}-x86_64" / "uv.sha256").read_text()
    assert "sha256 as published" in origin, origin  # from the index's simple API, with its hash checked
    ct = lab_session.container(200)
    assert ct.run(["python", "-c", "import mpmath, torch"]).ok
    from remote.ops.deploy import deploy

    deploy(target_of(lab_session, 200))  # back to the session's spec


@pytest.mark.fault(*TOOL_ONLY)
def test_a_controller_with_no_index_deploys_from_the_uv_wheel_in_find_links(tool, lab_hosts, deployed, lab_session,
                                                                            tmp_path):
    from support import LAB_WHEELS

    wheels = tmp_path / "wheels"
    # Made beforehand where an index is reachable, as an air-gapped controller's folder is.
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux_2_17_x86_64", "-d", str(wheels), f"uv=={UV_VERSION}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    hosts = a_spec_to_build(lab_hosts, "mpmath>=0.12",
                            **{f"find_links: [{LAB_WHEELS}]": f"find_links: [{LAB_WHEELS}, {wheels}]"})
    dead = "http://127.0.0.1:9"  # nothing listens: every index the controller could ask is unreachable
    r = deploy_with(tool, hosts, tmp_path / "home", http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead,
                    HTTPS_PROXY=dead, no_proxy="", NO_PROXY="")
    assert r.returncode == 0, r.stdout + r.stderr
    origin = (tmp_path / "home" / ".cache" / "remote" / f"uv-{UV_VERSION}-x86_64" / "uv.sha256").read_text()
    assert str(wheels) in origin, origin
    # Without the wheel there, the same controller says which wheel to put where (and builds nothing).
    for w in wheels.iterdir():
        w.unlink()
    hosts = a_spec_to_build(lab_hosts, "mpmath>=0.13",
                            **{f"find_links: [{LAB_WHEELS}]": f"find_links: [{LAB_WHEELS}, {wheels}]"})
    r = deploy_with(tool, hosts, tmp_path / "home2", http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead,
                    HTTPS_PROXY=dead, no_proxy="", NO_PROXY="")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"uv-{UV_VERSION}-*-manylinux_2_17_x86_64*.whl" in r.stderr and str(wheels) in r.stderr, r.stderr
    from remote.ops.deploy import deploy

    deploy(target_of(lab_session, 200))  # back to the session's spec


@pytest.mark.fault("`remote lab up` from a wheel (no lab in it)", promise="one line saying the lab comes with a "
                   "checkout, exit 2; remote.testing is there")
def test_an_installed_wheel_has_no_lab_and_says_where_it_is(tool, tmp_path):
    env = {"HOME": str(tmp_path), "PATH": PLAIN_PATH}
    r = subprocess.run([str(tool["remote"]), "lab", "up"], cwd="/", env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "the lab is not part of this installation of remote" in r.stderr and "checkout" in r.stderr
    python = tool["dir"] / "tools" / "remote" / "bin" / "python"
    r = subprocess.run([str(python), "-c", "import remote.testing, importlib.util as u; print(u.find_spec('remote.lab'))"],
                       cwd="/", capture_output=True, text=True)
    assert r.stdout.strip() == "None", r.stdout + r.stderr
