"""py-spy for the stall watch: pinned, fetched once to the controller, pushed into the container as uv is.

The watch (remote/sh/watch.py) dumps a stalled run's Python stacks with `py-spy dump`. The binary comes
from py-spy's wheel as uv's does (remote.ops.fetched: venv.find_links' folders, else the index with the
sha256 it publishes; the binary is checked against the wheel's RECORD), is cached on the controller beside uv, and lives in the container at
<UV_HOME>/py-spy-<version>/py-spy, outside every venv: the user's venv and its lock stay exactly theirs.
It is pushed again whenever its sha256 there differs. Where it cannot be had, the run starts anyway and
the stacks file says so (the watch falls back to the kernel's view of each thread).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import facts
from ..config import VenvSpec
from ..errors import RemoteError
from ..transport.pct import Container
from . import fetched, files

if TYPE_CHECKING:
    from ..target import Target

PY_SPY_VERSION = "0.4.3"


def container_path(version: str = PY_SPY_VERSION) -> str:
    return f"{facts.UV_HOME}/py-spy-{version}/py-spy"


def local_binary(machine: str, version: str = PY_SPY_VERSION, venv: VenvSpec | None = None) -> tuple[Path, str]:
    """The py-spy binary for `machine`, cached on the controller (rechecked by its recorded sha256), from
    the wheel folders and indexes of `venv` (PyPI when None)."""
    return fetched.cached(fetched.PY_SPY, version, machine, fetched.Sources.of(venv))


def ensure(t: Target, *, say: bool = True) -> str | None:
    """The pinned py-spy in container t (its Target: t.ct, whose venv spec's find_links, indexes and offline
    setting the wheel is fetched by), byte for byte (one round trip when it is there already); None, with a
    warning saying why, where it cannot be had: the watch then records the kernel's view only. Its install
    is a step, its absence a warning, each typed through t (`say=False`: neither, as a node of a multi-node
    launch that the run announces as a whole)."""
    if not say:
        return _ensure(t.ct, t.spec.venv, _silent, _silent)
    return _ensure(t.ct, t.spec.venv, t.step, t.warn)


def _silent(text: str) -> None:
    """What an unannounced ensure reports through: nothing."""


def _ensure(ct: Container, venv: VenvSpec | None, step: Callable[[str], None],
            warn: Callable[[str], None]) -> str | None:
    path = container_path()
    if ct.dry:
        return path
    try:
        r = ct.run(["bash", "-c", 'uname -m; sha256sum -- "$1" 2>/dev/null || true', "pyspy", path],
                   mutates=False, timeout=60, label="py-spy check")
        lines = r.out.split()
        machine, there = lines[0], lines[1:2]
        binary, digest = local_binary(machine, venv=venv)
        if there == [digest]:
            return path
        step(f"installing py-spy {PY_SPY_VERSION} in the container for the stall watch "
             f"({'its sha256 differs' if there else 'not there yet'}; verified)")
        files.push_file(ct, binary, path, 0o755)
        return path
    except (RemoteError, OSError, IndexError) as exc:
        warn(f"py-spy {PY_SPY_VERSION} cannot be had ({exc}): a stall's stacks file will hold the kernel's "
             "view of each thread only")
        return None
