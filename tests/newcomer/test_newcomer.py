"""The newcomer tier: the repository as a new user meets it on a Proxmox host's own Debian.

A fresh `git clone` (and a shallow one) is set up by `bash scripts/setup` with nothing but Debian's
python3 and root's default PATH (`env -i`), into a venv and a bin folder of the test's own
($REMOTE_VENV, $REMOTE_BIN_DIR: /opt/remote and /usr/local/bin are left alone); then the `remote` it
links runs from `/`. pip fetches from the machine's configured indexes (PyPI in CI) through the user's
pip cache.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from support import ROOT

pytestmark = pytest.mark.newcomer

DEBIAN_PYTHON = "/usr/bin/python3"
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # root's on Debian
PIP_CACHE = Path(os.environ.get("HOME", "/root")) / ".cache" / "pip"  # read before conftest moves HOME
UV_CACHE = Path(os.environ.get("HOME", "/root")) / ".cache" / "uv"
TASKS = ("deploy", "warmup", "train", "logs", "status", "stop", "exec", "push", "pull", "doctor")



# The machine's network settings (a proxy, its CA), which a login shell there would have too.
NETWORK = {k: v for k, v in os.environ.items()
           if k in ("SSL_CERT_FILE", "SSL_CERT_DIR") or k.lower() in ("http_proxy", "https_proxy", "no_proxy")}


def plain_env(home: Path, **extra: str) -> dict[str, str]:
    """What `env -i HOME=... PATH=<root's default>` leaves, plus the network settings and `extra`."""
    return {"HOME": str(home), "PATH": PLAIN_PATH, "PIP_CACHE_DIR": str(PIP_CACHE), **NETWORK, **extra}


def system_site_packages() -> dict[str, list[str]]:
    """What Debian's python3 has installed (its site folders' entries): setup must not change it."""
    r = subprocess.run([DEBIAN_PYTHON, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
                       capture_output=True, text=True, check=True)
    return {d: sorted(os.listdir(d)) for d in r.stdout.split() if os.path.isdir(d)}


def clone(dest: Path, shallow: bool = False) -> Path:
    argv = ["git", "clone", "-q", *(["--depth", "1", f"file://{ROOT}"] if shallow else [str(ROOT)]), str(dest)]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return dest


def setup(checkout: Path, home: Path, venv: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/setup"], cwd=checkout, capture_output=True, text=True, timeout=900,
                          env=plain_env(home, REMOTE_VENV=str(venv), REMOTE_BIN_DIR=str(bin_dir)))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh clone set up with Debian's python3 on a plain PATH: the clone, venv, bin folder and setup's result."""
    if not os.path.exists(DEBIAN_PYTHON):
        pytest.fail(f"the newcomer tier needs Debian's python3 at {DEBIAN_PYTHON} (apt-get install python3)")
    d = tmp_path_factory.mktemp("newcomer")
    (d / "home").mkdir()
    before = system_site_packages()
    checkout = clone(d / "remote")
    r = setup(checkout, d / "home", d / "venv", d / "bin")
    return {"dir": d, "checkout": checkout, "venv": d / "venv", "bin": d / "bin", "setup": r,
            "before": before, "after": system_site_packages()}


def remote(installed, *args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    """The installed `remote`, found on PATH (the test's bin folder first), from `cwd`."""
    assert (installed["bin"] / "remote").exists(), "setup linked no `remote`"
    env = plain_env(installed["dir"] / "home")
    env["PATH"] = f"{installed['bin']}:{PLAIN_PATH}"
    return subprocess.run(["remote", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.fault("Debian's python3 is externally managed (PEP 668)",
                   promise="setup builds a venv of its own from it and links `remote` on PATH; nothing goes into the system python")
def test_setup_builds_its_own_venv_from_debians_python3(installed):
    r = installed["setup"]
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "externally-managed-environment" not in r.stderr
    cfg = (installed["venv"] / "pyvenv.cfg").read_text()
    assert re.search(r"^home = /usr/bin$", cfg, re.M), cfg  # made from Debian's python3, not another one
    for name in ("remote", "invoke"):
        link = installed["bin"] / name
        assert link.is_symlink() and link.resolve() == (installed["venv"] / "bin" / name).resolve()
    # The tool and its test tools are in the venv, importable there, from this clone.
    r = subprocess.run([str(installed["venv"] / "bin" / "python"), "-c",
                        "import remote, fabric, pytest, xdist, hypothesis, uv; print(remote.__file__)"],
                       capture_output=True, text=True, cwd="/", env=plain_env(installed["dir"] / "home"))
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_relative_to(installed["checkout"])
    # ... and nothing of the build was left in the checkout (no build/, no *.egg-info; bytecode aside).
    st = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=installed["checkout"],
                        capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line for line in st if "__pycache__" not in line] == []


@pytest.mark.fault("Debian's python3 is externally managed (PEP 668)",
                   promise="setup builds a venv of its own from it and links `remote` on PATH; nothing goes into the system python")
def test_setup_installs_nothing_into_the_system_python(installed):
    assert installed["after"] == installed["before"]
    r = subprocess.run([DEBIAN_PYTHON, "-c", "import remote"], capture_output=True, text=True, cwd="/",
                       env=plain_env(installed["dir"] / "home"))
    assert r.returncode != 0 and "No module named 'remote'" in r.stderr


def test_remote_help_from_the_root_folder_lists_the_tasks(installed):
    r = remote(installed, "--help")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    listed = set(re.findall(r"^\s+([a-z][\w.-]*)", r.stdout, re.M))
    assert set(TASKS) <= listed, r.stdout


def test_remote_version(installed):
    r = remote(installed, "--version")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert r.returncode == 0 and r.stdout.strip() == f"remote {version}", (r.stdout, r.stderr)


def test_invoke_in_the_checkout_lists_the_same_tasks(installed):
    """The design card's `invoke deploy` works inside a checkout: setup links `invoke` too."""
    env = plain_env(installed["dir"] / "home")
    env["PATH"] = f"{installed['bin']}:{PLAIN_PATH}"
    r = subprocess.run(["invoke", "--list"], cwd=installed["checkout"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert set(TASKS) <= set(re.findall(r"^\s+([a-z][\w.-]*)", r.stdout, re.M)), r.stdout


@pytest.mark.fault("the clone folder shadows the package", promise="after the README's set-up, Python started in "
                   "the folder above the clone (named remote) imports the installed package, not the clone as an "
                   "empty namespace package, and `mypy --strict` type-checks a script there that uses remote, with "
                   "no configuration")
def test_the_folder_above_the_clone_imports_remote_and_mypy_strict_follows_it(installed):
    above = installed["dir"]
    assert (above / "remote").is_dir() and not (above / "remote" / "__init__.py").exists()  # the README's clone
    (above / "usesremote.py").write_text("from __future__ import annotations\n\nimport remote\n\n\n"
                                         "def count(fleet: remote.Fleet) -> int:\n    return len(fleet.ids)\n")
    python = str(installed["venv"] / "bin" / "python")
    env = plain_env(above / "home")
    r = subprocess.run([python, "-c", "import remote, remote.testing; print(remote.open.__name__, remote.__file__)"],
                       capture_output=True, text=True, cwd=above, env=env)
    assert r.returncode == 0 and r.stdout.startswith("open "), r.stdout + r.stderr
    r = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", "usesremote.py"],
                       capture_output=True, text=True, cwd=above, env=env)
    assert "No module named" not in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run([python, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(above / ".mypy"),
                        "usesremote.py"], capture_output=True, text=True, cwd=above, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # what the install exposes is the package only, not the checkout's root
    r = subprocess.run([python, "-c", "import tasks"], capture_output=True, text=True, cwd="/", env=env)
    assert "No module named 'tasks'" in r.stderr


def test_setup_says_when_its_bin_folder_is_not_on_path(installed):
    """The test's bin folder is not on the plain PATH setup ran with: setup says so, and how to add it."""
    r = installed["setup"]
    assert f"{installed['bin']} is not on PATH" in r.stderr and "export PATH=" in r.stderr, r.stderr



def test_a_shallow_clone_sets_up_over_the_same_venv(installed):
    """A second checkout (shallow, as CI and quick tries clone) set up into the existing venv: setup runs
    again without rebuilding it, and `remote` then runs that checkout's code."""
    d = installed["dir"]
    shallow = clone(d / "shallow", shallow=True)
    assert subprocess.run(["git", "-C", str(shallow), "rev-parse", "--is-shallow-repository"],
                          capture_output=True, text=True).stdout.strip() == "true"
    venv_python = (installed["venv"] / "bin" / "python").resolve()
    r = setup(shallow, d / "home", installed["venv"], installed["bin"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "creating the venv" not in r.stderr and (installed["venv"] / "bin" / "python").resolve() == venv_python
    r = subprocess.run([str(installed["venv"] / "bin" / "python"), "-c", "import remote; print(remote.__file__)"],
                       capture_output=True, text=True, cwd="/", env=plain_env(d / "home"))
    assert Path(r.stdout.strip()).is_relative_to(shallow), r.stdout + r.stderr
    assert remote(installed, "--help").returncode == 0


def test_the_tool_alone_installs_with_uv_tool_install(tmp_path):
    """The README's install without the lab: `uv tool install .` from a checkout (a built wheel, not an
    editable install) gives a `remote` that runs anywhere and carries its shell scripts."""
    import uv

    checkout = clone(tmp_path / "remote")
    (tmp_path / "home").mkdir(exist_ok=True)
    env = plain_env(tmp_path / "home", UV_TOOL_DIR=str(tmp_path / "tools"),
                    UV_TOOL_BIN_DIR=str(tmp_path / "bin"), UV_CACHE_DIR=str(UV_CACHE), UV_PYTHON_DOWNLOADS="never")
    r = subprocess.run([uv.find_uv_bin(), "tool", "install", "--python", DEBIAN_PYTHON, "."], cwd=checkout, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(tmp_path / "bin" / "remote"), "--version"], cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("remote "), r.stderr
    tool_python = tmp_path / "tools" / "remote" / "bin" / "python"
    r = subprocess.run([str(tool_python), "-c", "import remote; from remote import shell; "
                        "print(remote.__file__); print(len(shell.load('follow')))"],
                       cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    where, size = r.stdout.split()
    assert Path(where).is_relative_to(tmp_path / "tools") and int(size) > 0  # installed, not the checkout
    st = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=checkout, capture_output=True, text=True)
    assert st.stdout == ""  # nothing built in the checkout
