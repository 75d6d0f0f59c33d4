"""The lab's CPU torch wheel.

The lab's hosts files (the shipped hosts.yaml, the tests') pin the CPU build of torch and install it
from the lab's wheel folder, `<lab dir>/wheels`, which every container sees at the same path (their
lower layer is this machine's root). `provide` puts the pinned wheel there, for the Python the
containers run: from a folder pip is configured with (`find-links`, `$PIP_FIND_LINKS`) or the default
lab's folder where one has it (a hard link, or a copy), otherwise downloaded from the PyTorch CPU index
($REMOTE_LAB_TORCH_INDEX overrides it). Where none of that works, the error says what to put where.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

TORCH_VERSION = "2.13.0+cpu"
TORCH = f"torch=={TORCH_VERSION}"
INDEX = "https://download.pytorch.org/whl/cpu"


class WheelError(Exception):
    pass


def python_tag(python: str) -> tuple[str, str]:
    """('3.11', 'x86_64') of the interpreter the containers run."""
    if python == sys.executable:
        import platform

        return f"{sys.version_info[0]}.{sys.version_info[1]}", platform.machine()
    r = subprocess.run([python, "-c", "import sys, platform; print('%d.%d' % sys.version_info[:2], platform.machine())"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise WheelError(f"cannot ask {python} for its version: {r.stderr.strip()[-200:]}")
    version, machine = r.stdout.split()
    return version, machine


def matches(filename: str, version: str, machine: str) -> bool:
    """Is `filename` the pinned torch wheel for CPython `version` ('3.11') on Linux `machine`?"""
    if not filename.endswith(".whl"):
        return False
    parts = unquote(filename[:-4]).split("-")
    if len(parts) not in (5, 6):
        return False
    name, ver, py, abi, plat = parts[0], parts[1], parts[-3], parts[-2], parts[-1]
    cp = "cp" + version.replace(".", "")
    return (name == "torch" and ver == TORCH_VERSION and cp in py.split(".") and abi == cp
            and any(p.endswith("_" + machine) and "linux" in p for p in plat.split(".")))


def find(folder: Path, version: str, machine: str) -> Path | None:
    try:
        return next((p for p in sorted(folder.iterdir()) if p.is_file() and matches(p.name, version, machine)), None)
    except OSError:
        return None


def configured_folders(python: str = sys.executable) -> list[Path]:
    """The local folders pip's find-links names ($PIP_FIND_LINKS and pip's configuration files)."""
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    try:
        r = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.endswith(".find-links"):
                try:
                    values.append(str(ast.literal_eval(value)))
                except (ValueError, SyntaxError):
                    values.append(value)
    except (OSError, subprocess.SubprocessError):
        pass
    folders: list[Path] = []
    for value in values:
        for link in value.split():
            url = urlparse(link)
            path = Path(unquote(url.path)) if url.scheme == "file" else Path(link) if not url.scheme else None
            if path and path.is_dir() and path not in folders:
                folders.append(path)
    return folders


def _place(src: Path, folder: Path) -> Path:
    """A hard link to `src` in `folder` (a copy across file systems), never a half-written file."""
    dest = folder / src.name
    tmp = folder / f".{src.name}.part"
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
    return dest


def download(folder: Path, version: str, machine: str, index: str, python: str = sys.executable) -> Path:
    """The pinned wheel from `index` into `folder` (pip checks the hash the index publishes)."""
    cp = "cp" + version.replace(".", "")
    platforms = [f"manylinux_2_{n}_{machine}" for n in (28, 17)] + [f"manylinux2014_{machine}", f"linux_{machine}"]
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        argv = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                "--only-binary=:all:", "--python-version", version, "--implementation", "cp", "--abi", cp,
                *(a for p in platforms for a in ("--platform", p)), "--index-url", index,
                "--timeout", "30", "--retries", "1", "-d", tmp, TORCH]
        try:
            r = subprocess.run(argv, capture_output=True, text=True)
        except OSError as e:
            raise WheelError(f"cannot run pip: {e}") from None
        got = find(Path(tmp), version, machine)
        if r.returncode != 0 or got is None:
            raise WheelError(_reason(r.stderr + r.stdout) or f"pip download exited with status {r.returncode}")
        dest = folder / got.name
        os.replace(got, dest)
    return dest


def _reason(pip_output: str) -> str:
    """pip's reason in a few words: the connection's failure where there was one, else its last line."""
    m = (re.search(r"Failed to establish a new connection: (?:\[Errno [^\]]*\] )?([^'\"]+)", pip_output)
         or re.search(r"(certificate verify failed|Read timed out|timed out)", pip_output))
    if m:
        return f"cannot reach it: {m.group(1).strip()}"
    lines = [line.strip() for line in pip_output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def provide(folder: Path, python: str, sources: list[Path] | None = None, also=(), index: str | None = None,
            log=lambda line: print(line, file=sys.stderr)) -> Path:
    """The pinned torch wheel for `python` (the containers' interpreter) in `folder`: already there, placed
    from one of `sources` (default: pip's configured folders) or `also`, or downloaded from `index`.
    Raises WheelError saying what to put where."""
    version, machine = python_tag(python)
    folder.mkdir(parents=True, exist_ok=True)
    have = find(folder, version, machine)
    if have:
        return have
    for src in [*(sources if sources is not None else configured_folders()), *also]:
        got = find(src, version, machine)
        if got:
            log(f"lab: {got.name} from {src} into {folder}")
            return _place(got, folder)
    index = index or os.environ.get("REMOTE_LAB_TORCH_INDEX") or INDEX
    log(f"lab: downloading {TORCH} (CPython {version}, {machine}, about 200 MB) from {index} into {folder}")
    try:
        return download(folder, version, machine, index)
    except WheelError as e:
        cp = "cp" + version.replace(".", "")
        raise WheelError(
            f"the lab needs the CPU torch wheel {TORCH} for CPython {version} on {machine} "
            f"(torch-{TORCH_VERSION}-{cp}-{cp}-manylinux_2_28_{machine}.whl) and could not download it from "
            f"{index}: {e}\n"
            f"  Download it where that index can be reached:\n"
            f"    pip download --no-deps --only-binary=:all: --python-version {version} --platform "
            f"manylinux_2_28_{machine} --index-url {INDEX} -d . '{TORCH}'\n"
            f"  then put the .whl into {folder}/ (or into a folder named in pip's find-links) and run "
            f"`remote lab up` again") from None
