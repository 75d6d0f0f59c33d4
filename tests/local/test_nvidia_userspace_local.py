"""remote/sh/nvidia-userspace.sh against a host root of files (REMOTE_GPU_SYSROOT): the loaded module's own
files copied with their sonames, a no-op when current, refilled in place after an upgrade, refused when the
loaded version's files are not on disk (a pending reboot with the old files gone), nothing without a module."""

import os
import subprocess
from pathlib import Path

import pytest

from remote import shell

LIB = "usr/lib/x86_64-linux-gnu"
DEST = "/var/lib/remote/nvidia"


def driver(root: Path, version: str, loaded: str | None = None) -> None:
    """A host's driver files of `version` (its libraries with the sonames' links, nvidia-smi), module `loaded`."""
    lib = root / LIB
    lib.mkdir(parents=True, exist_ok=True)
    for name, soname in (("libcuda", "1"), ("libnvidia-ml", "1"), ("libnvidia-nvvm", "4"),
                         ("libnvidia-ptxjitcompiler", "1")):
        (lib / f"{name}.so.{version}").write_text(f"{name} {version}\n")
        link = lib / f"{name}.so.{soname}"
        link.unlink(missing_ok=True)
        link.symlink_to(f"{name}.so.{version}")
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/nvidia-smi").write_text(f"#!/bin/sh\necho {version}\n")
    if loaded:
        (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
        (root / "proc/driver/nvidia/version").write_text(
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {loaded}  Release Build  (dvs-builder@U16)\n")


def fill(root: Path, *extra: str) -> tuple[int, dict[str, str]]:
    r = subprocess.run(["bash", "-c", shell.load("nvidia-userspace"), "nvidia-userspace", DEST, *extra],
                       capture_output=True, text=True, env={**os.environ, "REMOTE_GPU_SYSROOT": str(root)})
    assert not r.stderr, r.stderr
    return r.returncode, dict(line.split(" ", 1) for line in r.stdout.splitlines())


def test_fills_the_loaded_versions_files_with_their_sonames(tmp_path):
    driver(tmp_path, "580.95.05", loaded="580.95.05")
    rc, out = fill(tmp_path)
    assert rc == 0 and out["version"] == "580.95.05" and out["state"] == "filled" and out["files"] == "5"
    cur = tmp_path / DEST.lstrip("/") / "current"
    assert os.readlink(cur) == "580.95.05"
    assert (cur / "lib/libcuda.so.1").read_text() == "libcuda 580.95.05\n"
    assert os.readlink(cur / "lib/libnvidia-nvvm.so.4") == "libnvidia-nvvm.so.580.95.05"
    assert (cur / "bin/nvidia-smi").exists() and (cur / "VERSION").read_text() == "580.95.05\n"
    assert fill(tmp_path) == (0, {**out, "state": "unchanged"})


def test_an_upgrade_refills_in_place_and_a_pending_reboot_keeps_the_loaded_version(tmp_path):
    driver(tmp_path, "580.95.05", loaded="580.95.05")
    fill(tmp_path)
    driver(tmp_path, "580.105.08")  # the new files installed; the old module still loaded (reboot pending)
    assert fill(tmp_path)[1]["state"] == "unchanged"
    assert fill(tmp_path, "--check")[0] == 0
    driver(tmp_path, "580.105.08", loaded="580.105.08")  # rebooted
    rc, out = fill(tmp_path, "--check")
    assert rc == 5 and out["state"] == "stale 580.95.05"
    rc, out = fill(tmp_path)
    dest = tmp_path / DEST.lstrip("/")
    assert rc == 0 and out["state"] == "filled"
    assert (dest / "current/lib/libcuda.so.1").read_text() == "libcuda 580.105.08\n"
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == ["580.105.08", "current"]


@pytest.mark.fault("A pending reboot whose upgrade removed the loaded version's files, the folder already filled",
                   promise="create and gpu fix find the folder `unchanged` and go on, not refused")
def test_a_pending_reboot_with_the_folder_already_the_loaded_version_is_unchanged(tmp_path):
    driver(tmp_path, "580.95.05", loaded="580.95.05")
    fill(tmp_path)
    for f in (tmp_path / LIB).glob("*580.95.05"):  # the upgrade's package removed the old files
        f.unlink()
    driver(tmp_path, "580.105.08")  # the new files; the old module still loaded (reboot pending)
    rc, out = fill(tmp_path)
    assert rc == 0 and out["state"] == "unchanged" and out["version"] == "580.95.05" and out["files"] == "5"
    assert (tmp_path / DEST.lstrip("/") / "current/lib/libcuda.so.1").read_text() == "libcuda 580.95.05\n"
    assert fill(tmp_path, "--check")[0] == 0


def test_the_loaded_versions_files_missing_is_refused_naming_what_is_there(tmp_path):
    driver(tmp_path, "580.105.08", loaded="580.95.05")
    for f in (tmp_path / LIB).glob("*580.95.05"):
        f.unlink()
    rc, out = fill(tmp_path)
    assert rc == 4 and "libcuda versions on disk: 580.105.08" in out["error"]
    assert not (tmp_path / DEST.lstrip("/")).exists()


def test_no_module_writes_nothing(tmp_path):
    driver(tmp_path, "580.95.05")
    rc, out = fill(tmp_path)
    assert rc == 3 and "no NVIDIA kernel module" in out["error"]
    assert not (tmp_path / DEST.lstrip("/")).exists()
