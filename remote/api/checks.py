"""The API's argument checks: a wrong type or value is a TypeError or ValueError naming the argument, raised
before anything connects (never a lost connection or a traceback from deep inside)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def argv(value: Any) -> list[str]:
    """A command: a str (a bash command line) or a sequence of str (an argv, run as it is)."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("argv: an empty command line")
        return ["bash", "-c", value]
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        bad = [repr(a) for a in value if not isinstance(a, str)]
        if bad:
            raise TypeError(f"argv: every item must be a str, got {', '.join(bad[:3])} (str() them first)")
        if not value:
            raise ValueError("argv: an empty argv")
        return list(value)
    raise TypeError(f"argv: expected a str (a bash command line) or a list of str, got {type(value).__name__}")


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


def path(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    return value


def count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: expected at least {minimum}, got {value}")
    return value


def seconds(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected seconds (a number) or None, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a number of seconds above 0, got {value}")
    return float(value)


def words(name: str, value: Any) -> list[str] | None:
    """None, or a list of str (never one str, which would be taken letter by letter)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name}: expected a list of str, got {value!r}")
    return list(value)


def environment(name: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError(f"{name}: expected a mapping of str to str, got {value!r}")
    return dict(value)
