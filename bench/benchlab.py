"""What the benchmarks share: this checkout's `remote` first on the path, a private lab (a folder, a free port,
the test labs' wheel folder) brought up and always taken down, its hosts file, and `remote` run as a user runs it.

    from benchlab import ROOT, private_lab, hosts_file, remote_cli

Only the public `remote.lab.Lab` and the command line are used: a benchmark measures what a user gets.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's remote, before an installed one

# The test labs' wheel folder (tests/support.py's LAB_WHEELS): one torch wheel for every lab on this machine.
WHEELS = Path(tempfile.gettempdir()) / "remote-test-wheels"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_ids(text: str, n: int, flag: str = "--ids") -> tuple[int, ...]:
    """`220-227` or `220,221,...`: exactly n different container ids (LXC ids are machine-wide: a benchmark
    beside another lab takes other ids)."""
    ids: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        ids += range(int(low), int(high or low) + 1)
    if len(ids) != n or len(set(ids)) != n:
        raise SystemExit(f"{flag}: {n} different container ids, got {ids}")
    return tuple(ids)


@contextlib.contextmanager
def private_lab(containers: Sequence[int], *, second: Sequence[int] = (), wheels: Path | None = WHEELS,
                folder: Path | None = None, prepare=None, up_wheels: bool = True, **options: object) -> Iterator:
    """A lab of this run's own, up with `containers` (and a second host with `second`), taken down and purged
    however the benchmark ends. `folder`: where it lives (default: a new temporary folder, removed after);
    `prepare(lab)` runs before `up` (a storage setting, permissions); `up_wheels`: False for a benchmark that
    deploys nothing; `options`: more of Lab's fields (fake_gpu=2: the simulated NVIDIA driver)."""
    from remote.lab import Lab

    made = folder is None
    where = Path(tempfile.mkdtemp(prefix="remote-bench-", dir="/var/tmp")) if made else Path(folder)
    lab = Lab(dir=where / "lab" if made else where, port=free_port(),
              **({"wheels_dir": wheels} if wheels is not None else {}), **options)  # type: ignore[arg-type]
    try:
        if prepare is not None:
            prepare(lab)
        lab.up(tuple(containers), second=tuple(second), wheels=up_wheels)
        yield lab
    finally:
        lab.down(purge=True)
        if made:
            shutil.rmtree(where, ignore_errors=True)


def hosts_file(lab, path: Path, containers: Sequence[int], sections: str = "", *, second: Sequence[int] = (),
               **fields: object) -> Path:
    """The lab's hosts file for `containers` (and `second` on its second host) plus `sections` (YAML text,
    formatted with `fields`), written to `path`."""
    path.write_text(lab.hosts_yaml(tuple(containers), second=tuple(second)) + sections.format(**fields))
    return path


def remote_cli(hosts: Path | None, *argv: str, check: bool = True, env: dict | None = None,
               timeout: float | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """`remote ARGV` (this checkout's) with `hosts` as the hosts file: (wall seconds, the finished process).
    A failure ends the benchmark with its output unless check=False."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if hosts is not None:
        full["REMOTE_HOSTS_FILE"] = str(hosts)
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *argv], env=full,
                       capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - start
    if check and r.returncode != 0:
        raise SystemExit(f"remote {' '.join(argv)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return took, r
