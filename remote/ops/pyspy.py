"""py-spy for the stall watch: pinned, fetched once to the controller, pushed into the container as uv is.

The watch (remote/sh/watch.py) dumps a stalled run's Python stacks with `py-spy dump`. The binary comes
from py-spy's wheel as uv's does (remote.ops.fetched: venv.find_links' folders, else the index with the
sha256 it publishes; the binary is checked against the wheel's RECORD), is cached on the controller beside uv, and lives in the container at
<UV_HOME>/py-spy-<version>/py-spy, outside every venv: the user's venv and its lock stay exactly theirs.
It is pushed again whenever its sha256 there differs. Where it cannot be had, the run starts anyway and
the stacks file says so (the watch falls back to the kernel's view of each thread).
"""

from __future__ import annotations

from pathlib import Path

from .. import facts
from ..config import VenvSpec
from ..errors import RemoteError
from ..events import quiet
from ..transport.pct import Container
from . import fetched, files

PY_SPY_VERSION = "0.4.3"


def container_path(version: str = PY_SPY_VERSION) -> str:
    return f"{facts.UV_HOME}/py-spy-{version}/py-spy"


def local_binary(machine: str, version: str = PY_SPY_VERSION, venv: VenvSpec | None = None) -> tuple[Path, str]:
    """The py-spy binary for `machine`, cached on the controller (rechecked by its recorded sha256), from
    the wheel folders and indexes of `venv` (PyPI when None)."""
    return fetched.cached(fetched.PY_SPY, version, machine, fetched.Sources.of(venv))


def ensure(ct: Container, *, echo=quiet, venv: VenvSpec | None = None) -> str | None:
    """The pinned py-spy in the container, byte for byte (one round trip when it is there already); None,
    with a line saying why, where it cannot be had: the watch then records the kernel's view only. `venv`:
    the container's venv spec, whose find_links, indexes and offline setting the wheel is fetched by."""
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
        echo(f"==> installing py-spy {PY_SPY_VERSION} in the container for the stall watch "
             f"({'its sha256 differs' if there else 'not there yet'}; verified)")
        files.push_file(ct, binary, path, 0o755)
        return path
    except (RemoteError, OSError, IndexError) as exc:
        echo(f"!! py-spy {PY_SPY_VERSION} cannot be had ({exc}): a stall's stacks file will hold the kernel's "
             "view of each thread only")
        return None
