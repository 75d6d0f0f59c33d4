"""The hosts file's text -> plain data: yaml's safe loader with numbers that keep their text and keys given
twice refused, and what it made kept per text (so a command whose file is unchanged never imports yaml)."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError

_MISSING = object()  # nothing there: no entry kept for this text, no default for a key


class _Number:
    """A YAML number that remembers how it was written: where a setting is a string, `ref: 0123456` and
    `UMASK: 0022` mean those characters, not YAML 1.1's octal 42798 and 18."""

    text: str


class _Int(_Number, int):
    pass


class _Float(_Number, float):
    pass


def _keep_text(kind):
    import yaml

    base = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{'int' if kind is _Int else 'float'}"]

    def construct(loader, node):
        value = kind(base(loader, node))
        value.text = node.value
        return value
    return construct


def _text(value) -> str:
    """A scalar as the string it was written as (a number's own characters)."""
    return getattr(value, "text", None) or str(value)


def _read_yaml(file: str, text: str) -> Any:
    import yaml  # here, not at the top: `remote --help` never needs it, nor a command whose file is parsed

    try:
        return yaml.load(text, Loader=_loader())
    except DuplicateKey as exc:
        raise ConfigError(file, exc.path, f"given twice (lines {exc.first} and {exc.second}): "
                          "the second would silently win; keep one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(file, "", f"{where}not valid YAML: {getattr(exc, 'problem', exc)}") from None


# -- the parsed file, kept: a command whose hosts file is unchanged does not import yaml -------------------
# importing yaml and running its pure-Python loader is ~10-20% of a warm one-off command. What the loader
# made (before any check: those run every time) is kept as JSON in the user's own runtime folder, under
# the sha256 of the file's text, so an edit is a new entry. A cache that is missing, unreadable, not ours
# or not understood is ignored and the file read again.

def _cache_dir() -> Path | None:
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "remote" / "hosts-parsed"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # someone else's, or others may write: not used
        return None
    return folder


def _cache_file(text: str) -> Path | None:
    import hashlib

    folder = _cache_dir()
    return folder / (hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40] + ".json") if folder else None


def _parsed(text: str) -> Any:
    """What the loader made of this text before, or _MISSING."""
    path = _cache_file(text)
    if path is None:
        return _MISSING
    try:
        import json

        return _decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return _MISSING


def _keep_parsed(text: str, data: Any) -> None:
    path = _cache_file(text)
    if path is None:
        return
    try:
        encoded = _encode(data)
    except TypeError:  # a YAML type kept as is (a date, a set, bytes): read the file each time
        return
    import json
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(encoded, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _encode(value: Any) -> Any:
    """The loader's output as JSON, every type kept: {"m": [[key, value], ...]} a mapping (keys need not be
    strings), {"l": [...]} a list, {"i"/"f": text, "v": value} a number that remembers its text."""
    if isinstance(value, _Int):
        return {"i": value.text, "v": int(value)}
    if isinstance(value, _Float):
        return {"f": value.text, "v": float(value)}
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is dict:
        return {"m": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if type(value) is list:
        return {"l": [_encode(v) for v in value]}
    raise TypeError(type(value).__name__)


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "m" in value:
        return {_decode(k): _decode(v) for k, v in value["m"]}
    if "l" in value:
        return [_decode(v) for v in value["l"]]
    number = _Int(value["v"]) if "i" in value else _Float(value["v"])
    number.text = value["i"] if "i" in value else value["f"]
    return number


class DuplicateKey(Exception):
    def __init__(self, path: str, first: int, second: int):
        self.path, self.first, self.second = path, first, second


@functools.cache
def _loader() -> type:
    """yaml's SafeLoader, but a key given twice in one mapping is an error (YAML says keys are unique;
    PyYAML keeps the last one without a word)."""
    import yaml

    class Loader(yaml.SafeLoader):
        """yaml.safe_load's loader: numbers keep their source text (_Number), a key twice is an error."""

        def construct_document(self, node):
            self._remote_root = node  # for the key path in the message
            return super().construct_document(node)

        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`, whose keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if first is not None:
                    raise DuplicateKey(_path_of(self, node, key), first, key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    Loader.add_constructor("tag:yaml.org,2002:int", _keep_text(_Int))
    Loader.add_constructor("tag:yaml.org,2002:float", _keep_text(_Float))
    return Loader


def _path_of(loader, node, key) -> str:
    """The key path of `key` in mapping `node` (hosts.pve1.port), found from the document's root."""
    import yaml

    def walk(current, path):
        if current is node:
            return path
        if isinstance(current, yaml.MappingNode):
            for k, v in current.value:
                found = walk(v, path + [str(getattr(k, "value", "?"))])
                if found is not None:
                    return found
        elif isinstance(current, yaml.SequenceNode):
            for i, v in enumerate(current.value):
                found = walk(v, path[:-1] + [f"{path[-1]}[{i}]"] if path else [f"[{i}]"])
                if found is not None:
                    return found
        return None

    root = getattr(loader, "_remote_root", None)
    path = walk(root, []) if root is not None else None
    return ".".join((path or []) + [str(key)])
