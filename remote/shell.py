"""Shell that runs inside the container, kept as real files (remote/sh/*.sh, package data, shellcheck-clean;
remote/sh/*.py: standard-library Python run there with python3 -I -S).

`Container.script(load("name"), *args)` runs one with `bash -c` in strict mode; its arguments are
$1.. and are never pasted into the text, so nothing is quoted twice.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def load(name: str) -> str:
    """The text of remote/sh/<name>.sh."""
    return resources.files(__package__).joinpath("sh").joinpath(f"{name}.sh").read_text()


def with_lib(name: str) -> str:
    """remote/sh/<name>.sh preceded by lib.sh, the functions the job scripts share (one liveness rule)."""
    return load("lib") + "\n" + load(name)


@functools.cache
def load_python(name: str) -> str:
    """The text of remote/sh/<name>.py: standard-library Python that runs in the container with the
    system python3 -I -S (nothing of the user's venv), e.g. the job's watch."""
    return resources.files(__package__).joinpath("sh").joinpath(f"{name}.py").read_text()
