"""A dry run's command in one line: each embedded script and other long argument elided, named where it is
one of remote/sh's (`bash -c <oplock.sh, 37 lines>`); the command in full to the `remote.dry` logger (DEBUG).

A dry run is read by a person: what runs where, in order. The scripts are files of the package (remote/sh/),
so their text says nothing the name does not; `remote ... --dry --verbose` (or that logger) shows it all.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from importlib import resources

from ..events import DryCommand, Sink

log = logging.getLogger("remote.dry")

LONG = 200  # an argument of one line longer than this is elided too (a JSON setting, a manifest)


@functools.cache
def _scripts() -> tuple[tuple[str, str], ...]:
    """(file name, text stripped) of each program in remote/sh, longest first."""
    folder = resources.files("remote").joinpath("sh")
    found = [(p.name, p.read_text().strip()) for p in folder.iterdir() if p.name.endswith((".sh", ".py"))]
    return tuple(sorted(found, key=lambda item: -len(item[1])))


def name_of(arg: str) -> str | None:
    """Which of remote/sh's programs `arg` holds (lib.sh only where it holds no other), or None."""
    held = [name for name, text in _scripts() if text and text in arg]
    others = [n for n in held if n != "lib.sh"]
    return (others or held)[0] if held else None


def elided(arg: str) -> str | None:
    """What a long or multi-line argument shows as (`<oplock.sh, 37 lines>`), or None to show it as it is."""
    if "\n" not in arg and len(arg) <= LONG:
        return None
    name, eq, value = arg.partition("=")
    if eq and name.isidentifier() and name.isupper():  # an environment variable: its name stays in sight
        return f"{name}={elided(value) or value}"
    lines = arg.count("\n") + 1
    return f"<{name_of(arg) or 'text'}, {lines} line{'s' if lines != 1 else ''}>" if lines > 1 else \
        f"<{name_of(arg) or 'text'}, {len(arg)} chars>"


def show(describe, argv: Sequence[str], sink: Sink, container: int | None) -> None:
    """A dry run's command: a DryCommand event of `container` (its line `short`) to `sink`, then the command
    in full to the `remote.dry` logger (DEBUG)."""
    sink(DryCommand(container, short(describe, argv), tuple(argv)))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", describe(list(argv)))


def short(describe, argv: Sequence[str]) -> str:
    """`describe(argv)` (a transport's command line) with the long arguments elided: one line."""
    argv = list(argv)
    shown: dict[str, str] = {}
    for i, arg in enumerate(argv):
        instead = elided(arg)
        if instead is not None:
            token = f"@ELIDED{i}@"  # characters shlex never quotes: it survives any quoting as it is
            shown[token], argv[i] = instead, token
    line = describe(argv)
    for token, instead in shown.items():
        line = line.replace(token, instead)
    return line.replace("\n", "\\n")

