"""The lab's CPU torch wheel (remote/lab/wheels.py): found in the lab's folder, placed from a configured
folder, downloaded from a real PEP 503 index (http.server on loopback), and a clear error, with nothing
half-written left, when the index cannot be reached."""

from __future__ import annotations

import functools
import http.server
import os
import platform
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

from support import ROOT, free_port
from remote.lab import DEFAULT_DIR, Lab, wheels

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
CP = "cp" + PY.replace(".", "")
MACHINE = platform.machine()
NAME = f"torch-2.13.0+cpu-{CP}-{CP}-manylinux_2_28_{MACHINE}.whl"


def fake_wheel(folder: Path, name: str = NAME) -> Path:
    """A small wheel that pip accepts as torch 2.13.0+cpu (its metadata agrees with its name)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torch/__init__.py", "")
        z.writestr("torch-2.13.0+cpu.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
        z.writestr("torch-2.13.0+cpu.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {CP}-{CP}-manylinux_2_28_{MACHINE}\n")
        z.writestr("torch-2.13.0+cpu.dist-info/RECORD", "")
    return path


@pytest.fixture
def no_pip_config(monkeypatch):
    """pip as on a machine without configured wheel folders (pip's own config may name one that has torch)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)


def test_only_the_pinned_cpu_build_for_the_containers_python_matches():
    assert wheels.matches(NAME, PY, MACHINE)
    assert wheels.matches(NAME.replace("+", "%2B"), PY, MACHINE)  # as an index's URL spells it
    assert not wheels.matches(NAME.replace("+cpu", "+cu128"), PY, MACHINE)
    assert not wheels.matches(NAME.replace("2.13.0+cpu", "2.13.0"), PY, MACHINE)
    assert not wheels.matches(NAME.replace(CP, "cp39"), PY, MACHINE)
    assert not wheels.matches(NAME.replace(f"manylinux_2_28_{MACHINE}", "macosx_11_0_arm64"), PY, MACHINE)
    assert not wheels.matches(NAME.replace("torch-", "torchvision-"), PY, MACHINE)
    assert not wheels.matches(NAME + ".part", PY, MACHINE)


def test_the_shipped_hosts_file_installs_the_pin_from_the_lab_folder():
    cfg = yaml.safe_load((ROOT / "hosts.yaml").read_text())
    assert wheels.TORCH in cfg["venv"]["packages"]
    assert cfg["venv"]["find_links"] == [str(Lab(dir=Path(DEFAULT_DIR)).wheels)]


def test_a_wheel_already_in_the_lab_folder_is_used_without_asking_anyone(tmp_path, no_pip_config):
    have = fake_wheel(tmp_path / "wheels")
    dead = f"http://127.0.0.1:{free_port()}/"  # nothing listens: a download would fail
    assert wheels.provide(tmp_path / "wheels", sys.executable, sources=[], index=dead) == have


def test_a_configured_folder_is_linked_not_downloaded(tmp_path, no_pip_config, monkeypatch):
    src = fake_wheel(tmp_path / "configured")
    fake_wheel(tmp_path / "configured", NAME.replace("+cpu", "+cu128"))  # another build beside it
    monkeypatch.setenv("PIP_FIND_LINKS", f"file://{tmp_path / 'elsewhere'} {tmp_path / 'configured'}")
    lines = []
    got = wheels.provide(tmp_path / "lab" / "wheels", sys.executable, index=f"http://127.0.0.1:{free_port()}/",
                         log=lines.append)
    assert got == tmp_path / "lab" / "wheels" / NAME
    assert os.path.samefile(got, src) and src.exists()  # a hard link: no copy of 200 MB
    assert sorted(p.name for p in got.parent.iterdir()) == [NAME]
    assert lines == [f"lab: {NAME} from {tmp_path / 'configured'} into {tmp_path / 'lab' / 'wheels'}"]


@pytest.fixture
def index(tmp_path):
    """A PEP 503 index on loopback (http.server's folder listing) holding the wheel under /torch/."""
    root = tmp_path / "index"
    fake_wheel(root / "torch")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_without_a_configured_wheel_it_is_downloaded_from_the_index(tmp_path, no_pip_config, index):
    lines = []
    got = wheels.provide(tmp_path / "wheels", sys.executable, sources=[tmp_path / "empty"], index=index,
                         log=lines.append)
    assert got == tmp_path / "wheels" / NAME
    assert zipfile.ZipFile(got).read("torch-2.13.0+cpu.dist-info/METADATA").startswith(b"Metadata-Version")
    assert sorted(p.name for p in got.parent.iterdir()) == [NAME]  # no download folder left
    assert lines and index in lines[0] and "downloading torch==2.13.0+cpu" in lines[0]


@pytest.mark.fault("The PyTorch CPU index cannot be reached (lab up)",
                   promise="the error names the wheel, the folder to put it in and the pip line to fetch it; nothing half-written left")
def test_an_unreachable_index_says_what_to_put_where_and_leaves_nothing(tmp_path, no_pip_config):
    folder = tmp_path / "lab" / "wheels"
    with pytest.raises(wheels.WheelError) as e:
        wheels.provide(folder, sys.executable, sources=[], index=f"http://127.0.0.1:{free_port()}/", log=lambda _: None)
    msg = str(e.value)
    assert "Traceback" not in msg and "cannot reach it: Connection refused" in msg
    assert f"torch-2.13.0+cpu-{CP}-{CP}-manylinux_2_28_{MACHINE}.whl" in msg
    assert f"put the .whl into {folder}/" in msg
    assert "--index-url https://download.pytorch.org/whl/cpu" in msg and f"--python-version {PY}" in msg
    assert list(folder.iterdir()) == []


def test_lab_up_stops_with_a_lab_error_before_starting_anything(tmp_path, no_pip_config, monkeypatch):
    """Without the wheel anywhere, `Lab.up` raises a LabError (the CLI prints it, exit 1) naming the folder,
    before any sshd or container starts."""
    import remote.lab as lab_module

    monkeypatch.setattr(lab_module, "DEFAULT_DIR", str(tmp_path / "default-lab"))
    monkeypatch.setenv("REMOTE_LAB_TORCH_INDEX", f"http://127.0.0.1:{free_port()}/")
    monkeypatch.setattr(Lab, "_check_tools", lambda self: None)  # root and LXC are not what this is about
    lab = Lab(dir=tmp_path / "lab", port=free_port())
    with pytest.raises(lab_module.LabError) as e:
        lab.up((200,))
    assert f"put the .whl into {tmp_path / 'lab' / 'wheels'}/" in str(e.value)
    assert not (tmp_path / "lab" / "ssh").exists() and not lab.sshd_running()
