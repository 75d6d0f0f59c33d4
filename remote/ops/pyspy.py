"""py-spy for the stall watch: pinned, fetched once to the controller, pushed into the container as uv is.

The watch (remote/sh/watch.py) dumps a stalled run's Python stacks with `py-spy dump`. The binary comes
from PyPI's py-spy wheel (pip checks the wheel against the index's hash; the binary is checked against
the wheel's RECORD), is cached on the controller beside uv, and lives in the container at
<UV_HOME>/py-spy-<version>/py-spy, outside every venv: the user's venv and its lock stay exactly theirs.
It is pushed again whenever its sha256 there differs. Where it cannot be had, the run starts anyway and
the stacks file says so (the watch falls back to the kernel's view of each thread).
"""

from __future__ import annotations

from pathlib import Path

from . import files
from .. import facts
from ..errors import RemoteError
from ..transport.pct import Container

PY_SPY_VERSION = "0.4.3"


def container_path(version: str = PY_SPY_VERSION) -> str:
    return f"{facts.UV_HOME}/py-spy-{version}/py-spy"


def _from_wheel(version: str, machine: str) -> tuple[bytes, str]:
    from .deploy import wheel_binary  # deploy imports jobs, which imports this module

    return wheel_binary("py-spy", version, machine, ("manylinux_2_17", "manylinux2014", "manylinux_2_5", "manylinux1"))


def local_binary(machine: str, version: str = PY_SPY_VERSION) -> tuple[Path, str]:
    """The py-spy binary for `machine`, cached on the controller (files.cached_binary: rechecked by its
    recorded sha256)."""
    return files.cached_binary("py-spy", version, machine, lambda: _from_wheel(version, machine))


def ensure(ct: Container, *, echo=print) -> str | None:
    """The pinned py-spy in the container, byte for byte (one round trip when it is there already); None,
    with a line saying why, where it cannot be had: the watch then records the kernel's view only."""
    path = container_path()
    if ct.dry:
        return path
    try:
        r = ct.run(["bash", "-c", 'uname -m; sha256sum -- "$1" 2>/dev/null || true', "pyspy", path],
                   mutates=False, timeout=60, label="py-spy check")
        lines = r.out.split()
        machine, there = lines[0], lines[1:2]
        binary, digest = local_binary(machine)
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
