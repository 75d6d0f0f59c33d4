"""Air-gapped deploys without the lab: the `offline` / `index_url: none` / `cuda` keys, uv's arguments for
them, and scripts/wheelhouse-from-venv on a small venv made here by real uv from hand-made wheels."""

import base64
import hashlib
import os
import sys
import subprocess
import zipfile
from pathlib import Path

import pytest

from remote import config
from remote.config import VenvSpec
from remote.errors import ConfigError, DeployError
from remote.ops import fetched
from remote.ops import venv as venvmod

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "wheelhouse-from-venv"
HOSTS = "hosts:\n  h: {{address: x}}\nvenv: {venv}\ncontainers:\n  200: {{host: h}}\n"


def load(tmp_path, venv: str):
    p = tmp_path / "hosts.yaml"
    p.write_text(HOSTS.format(venv=venv))
    return config.load(str(p)).container(200).venv


def test_offline_spellings_and_uv_arguments(tmp_path):
    a = load(tmp_path, "{packages: [torch==2.11.0], find_links: [/w], offline: true, cuda: '13.0'}")
    b = load(tmp_path, "{packages: [torch==2.11.0], find_links: [/w], index_url: none, cuda: 13.0}")
    assert a == b and a.offline and a.index_url is None and a.cuda == "13.0"
    assert venvmod.uv_index_args(a) == ["--no-index", "--offline", "--find-links", "/w"]
    online = load(tmp_path, "{packages: [torch==2.11.0], find_links: [/w]}")
    assert venvmod.uv_index_args(online) == ["--find-links", "/w"]
    # Going offline (or naming the CUDA build) is a new venv; a spec without these keys keeps its old hash.
    hashes = {venvmod.spec_hash(s, "3.12.3", None) for s in (a, online)}
    assert len(hashes) == 2
    assert venvmod.spec_hash(online, "3.12.3", None) == venvmod.spec_hash(
        VenvSpec(packages=("torch==2.11.0",), find_links=("/w",)), "3.12.3", None)


@pytest.mark.parametrize("venv, key, message", [
    ("{packages: [torch], offline: true}", "venv.find_links", "installs from find_links only"),
    ("{packages: [torch], index_url: none}", "venv.find_links", "installs from find_links only"),
    ("{packages: [torch], find_links: [/w], offline: true, index_url: 'https://x/simple'}", "venv.offline",
     "drop index_url"),
    ("{packages: [torch], find_links: [/w], offline: true, extra_index_urls: ['https://x']}", "venv.offline",
     "drop index_url and extra_index_urls"),
    ("{packages: [torch], cuda: cu130}", "venv.cuda", "expected a CUDA version such as '13.0'"),
    ("{packages: [torch], offline: 'yes'}", "venv.offline", "expected bool"),
])
def test_bad_offline_settings_name_the_key(tmp_path, venv, key, message):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, venv)
    assert key in str(e.value) and message in str(e.value) and "hosts.yaml" in str(e.value)


def test_venv_cuda_is_what_torch_must_report():
    spec = VenvSpec(packages=("torch==2.11.0",), cuda="13.0", offline=True, find_links=("/w",))
    good = {"dists": {"torch": "2.11.0"}, "torch": "2.11.0+cu130", "cuda_build": "13.0"}
    venvmod.check_verify(spec, good)
    with pytest.raises(DeployError, match=r"venv.cuda 13.0 wants CUDA 13.0, torch 2.11.0\+cu128 reports CUDA 12.8"):
        venvmod.check_verify(spec, {**good, "torch": "2.11.0+cu128", "cuda_build": "12.8"})
    with pytest.raises(DeployError, match="wants a CPU build"):
        venvmod.check_verify(VenvSpec(packages=("torch==2.11.0",), cuda="cpu"), good)


# -- scripts/wheelhouse-from-venv --------------------------------------------------------------------------

def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, requires=(), files=None, entry_points="", scripts=None) -> Path:
    """A real wheel, as a build backend writes it."""
    info = f"{name}-{version}.dist-info"
    files = dict(files or {f"{name}/__init__.py": f"VERSION = {version!r}\n"})
    files[f"{info}/METADATA"] = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points
    for script, body in (scripts or {}).items():
        files[f"{name}-{version}.data/scripts/{script}"] = body
    record = "".join(f"{p},{_hash(d.encode())},{len(d.encode())}\n" for p, d in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{info}/RECORD", record)
    return path


def uv(*args, **kw):
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    return subprocess.run([str(fetched.find_uv()), *args], capture_output=True, text=True, env=env, **kw)


def venv_with(tmp_path: Path, name: str, links: Path, *reqs: str) -> Path:
    v = tmp_path / name
    assert uv("venv", "-q", "--python", sys.executable, str(v)).returncode == 0
    r = uv("pip", "install", "-q", "--python", str(v / "bin" / "python"), "--no-index", "--offline",
           "--find-links", str(links), "--cache-dir", str(tmp_path / f"uvcache-{name}"), *reqs)
    assert r.returncode == 0, r.stderr
    return v


def installed_files(v: Path) -> dict[str, bytes]:
    site = next(v.glob("lib/python3*/site-packages"))
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json"}
    out = {str(p.relative_to(site)): p.read_bytes() for p in site.rglob("*")
           if p.is_file() and p.name not in skip and "__pycache__" not in p.parts and not p.name.startswith("_virtualenv")}
    out.update({f"bin/{p.name}": p.read_bytes().replace(str(v).encode(), b"VENV") for p in (v / "bin").iterdir()
                if p.name in ("app", "app-tool")})
    return out


@pytest.fixture
def small_venv(tmp_path):
    """app needs lib and lib[fast]; lib[fast] needs speedy; the rest is for other extras or other Pythons."""
    src = tmp_path / "src"
    src.mkdir()
    make_wheel(src, "app", "1.0", requires=["lib>=2", "lib[fast]", 'never; python_version < "3"',
                                            'docs; extra == "docs"'],
               entry_points="[console_scripts]\napp = app:main\n",
               scripts={"app-tool": "#!python\nprint('tool')\n"},
               files={"app/__init__.py": "def main():\n    print('app main')\n", "app/data.bin": "\x00\x01"})
    make_wheel(src, "lib", "2.1", requires=['speedy==0.3; extra == "fast"', 'slowpoke; extra == "slow"'])
    make_wheel(src, "speedy", "0.3")
    make_wheel(src, "slowpoke", "9.9")
    make_wheel(src, "unrelated", "1.0")
    return venv_with(tmp_path, "orig", src, "app", "unrelated", "slowpoke"), src


def test_wheelhouse_from_venv_repacks_the_closure_exactly(small_venv, tmp_path):
    venv, _ = small_venv
    house = tmp_path / "house"
    r = subprocess.run([str(SCRIPT), str(venv), str(house), "app"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in house.iterdir()) == [
        "app-1.0-py3-none-any.whl", "lib-2.1-py3-none-any.whl", "speedy-0.3-py3-none-any.whl"]
    with zipfile.ZipFile(house / "app-1.0-py3-none-any.whl") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        assert "app-1.0.data/scripts/app-tool" in z.namelist() and not any(n.endswith("scripts/app") for n in z.namelist())
    # Installed again, offline, from nothing but the wheelhouse: the same files, the console script made again.
    again = venv_with(tmp_path, "again", house, "app")
    mine, theirs = installed_files(again), installed_files(venv)
    assert {k: v for k, v in theirs.items() if not k.startswith(("unrelated", "slowpoke"))} == mine
    out = subprocess.run([str(again / "bin" / "app")], capture_output=True, text=True).stdout
    assert out == "app main\n"


@pytest.mark.fault("Venv changed after its install, repacked into a wheelhouse",
                   promise="refused, naming the distribution and file; no partial wheel left")
def test_a_changed_venv_is_refused_and_leaves_no_partial_wheel(small_venv, tmp_path):
    venv, _ = small_venv
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "lib" / "__init__.py").write_text("HACKED = True\n")
    house = tmp_path / "house"
    r = subprocess.run([str(SCRIPT), str(venv), str(house), "app"], capture_output=True, text=True)
    assert r.returncode == 1 and "lib: lib/__init__.py differs from its RECORD" in r.stderr, r.stderr
    assert not list(house.glob("*.partial"))
    r = subprocess.run([str(SCRIPT), str(venv), str(house), "nothere"], capture_output=True, text=True)
    assert r.returncode == 1 and "nothere is not installed in the venv" in r.stderr
    r = subprocess.run([str(SCRIPT), str(tmp_path / "no-venv"), str(house)], capture_output=True, text=True)
    assert r.returncode == 1 and "must be a virtualenv" in r.stderr
