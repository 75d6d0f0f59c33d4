"""Local tier: the controller's cache of the uv binary that deploy pushes into containers."""

import hashlib
import importlib.metadata
import platform

import pytest

from remote.config import VenvSpec
from remote.ops.deploy import local_uv_binary

VERSION = importlib.metadata.version("uv")  # the uv installed next to this controller (a dev dependency)


def cache_dir(tmp_path):
    return tmp_path / "home" / ".cache" / "remote" / f"uv-{VERSION}-{platform.machine()}"


def test_a_changed_or_torn_uv_cache_is_never_trusted(tmp_path):
    path, digest = local_uv_binary(VenvSpec(uv_version=VERSION), platform.machine())
    good = path.read_bytes()
    assert digest == hashlib.sha256(good).hexdigest() and path.parent == cache_dir(tmp_path)
    assert (path.parent / "uv.sha256").read_text().split()[0] == digest
    # Changed in place (a truncated copy, another version dropped there): fetched again.
    path.write_bytes(b"#!/bin/sh\necho not uv\n")
    again, digest2 = local_uv_binary(VenvSpec(uv_version=VERSION), platform.machine())
    assert again.read_bytes() == good and digest2 == digest
    # A binary without its recorded hash (a write interrupted before the record): fetched again, not trusted.
    (path.parent / "uv.sha256").unlink()
    path.write_bytes(good[: len(good) // 2])
    again, _ = local_uv_binary(VenvSpec(uv_version=VERSION), platform.machine())
    assert again.read_bytes() == good
    assert sorted(p.name for p in path.parent.iterdir()) == ["uv", "uv.sha256"]  # no temporary files left


def test_a_container_architecture_that_is_no_name_never_becomes_a_path(tmp_path, monkeypatch):
    """uname -m comes from the container: a value like `x/../../..` must not make folders on the controller."""
    from remote.errors import TransferError
    from remote.ops import files

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for machine in ("x/../../../escape", "..", "", "x86_64\nrm"):
        with pytest.raises(TransferError, match="architecture"):
            files.cached_binary("uv", "0.1", machine, lambda: (b"x", "test"))
    assert not (tmp_path / "escape").exists() and not (tmp_path / "cache").exists()
    path, _ = files.cached_binary("uv", "0.1", "x86_64", lambda: (b"x", "test"))
    assert path.read_bytes() == b"x" and path.parent.parent == tmp_path / "cache" / "remote"
