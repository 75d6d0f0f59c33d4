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


def _python_file(name: str) -> str:
    return resources.files(__package__).joinpath("sh").joinpath(f"{name}.py").read_text()


@functools.cache
def load_python(name: str) -> str:
    """The text of remote/sh/<name>.py: standard-library Python that runs in the container with the
    system python3 -I -S (nothing of the user's venv), e.g. the job's watch. A line
    `from OTHER import FUNC  # remote.shell inlines it` is replaced by FUNC's definition in remote/sh/OTHER.py:
    one copy of a function that two of them need, where neither can import the other there (ckpt.py runs as
    `python3 -c TEXT`, the watch from a file of its own)."""
    text = _python_file(name)
    if INLINE not in text:
        return text
    return "\n".join(_function(*line.split()[1:4:2]) if line.startswith("from ") and INLINE in line else line
                     for line in text.split("\n"))


INLINE = "  # remote.shell inlines it"


def _function(module: str, name: str) -> str:
    """The source of `def NAME` at the top level of remote/sh/MODULE.py."""
    import ast

    source = _python_file(module)
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return str(ast.get_source_segment(source, node))
    raise LookupError(f"remote/sh/{module}.py defines no {name}() at its top level")
