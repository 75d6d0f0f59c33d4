"""Guards beside test_layers.py (issue 47): warnings travel typed (no `!! ` built outside remote.events and
remote.target), a transport's capabilities are declared (no getattr/hasattr probe of one), and every event kind
of remote/events.py is documented, with its fields, and rendered by the command line."""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent / "remote"
LIBRARY_MD = ROOT.parent / "docs" / "reference" / "library.md"

# Where `!! ` is built: the events' own words (Note.of) and the Target's; the command line, which renders lines
# for people, may word its own. A module of the library that builds one writes a warning for someone to read
# back: it reports a typed warning (Target.warn, Note(level="warning"), a Finding) instead.
BANG_MAY_BUILD = ("remote/events.py", "remote/target.py")
BANG_RENDERERS = ("remote/cli/",)


def bang_builders(root: Path) -> dict[str, int]:
    """Each module (outside remote/sh, the in-container scripts) -> how many string literals (f-string parts
    included, docstrings not) hold `!! `."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        if path.relative_to(root).parts[0] == "sh" or rel in BANG_MAY_BUILD or rel.startswith(BANG_RENDERERS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        n = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and "!! " in node.value and id(node) not in docs)
        if n:
            out[rel] = n
    return out


def test_no_warning_prefix_is_built_outside_events_and_target(tmp_path):
    assert bang_builders(ROOT) == {}  # strict: no allow-list (a warmup's and a log notice's were the last)
    (tmp_path / "remote" / "ops").mkdir(parents=True)
    (tmp_path / "remote" / "ops" / "x.py").write_text('"""`!! ` in a docstring is no line."""\n\n\ndef f(w):\n'
                                                      '    return [f"!! {w}", "-- fine"]\n')
    (tmp_path / "remote" / "events.py").write_text('def of(t):\n    return "!! " + t\n')
    assert bang_builders(tmp_path / "remote") == {"remote/ops/x.py": 1}


def transport_probes(root: Path) -> dict[str, int]:
    """Each module -> how many getattr/hasattr calls look at a transport (an argument named or ending in
    `transport`): a capability is declared on the Transport protocol (remote.transport.base), never probed."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        n = 0
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and node.args and re.search(r"transport\b", ast.unparse(node.args[0])):
                n += 1
        if n:
            out[str(path.relative_to(root.parent))] = n
    return out


def test_no_transport_is_probed_with_getattr_or_hasattr(tmp_path):
    assert transport_probes(ROOT) == {}
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "x.py").write_text("def f(self, transport, t):\n    return getattr(transport, 'kept', 0), "
                                              "hasattr(self.transport, 'open_stream'), getattr(t, 'x', 0), "
                                              "getattr(getattr(self.transport, 'host', None), 'user', None)\n")
    assert transport_probes(tmp_path / "remote") == {"remote/x.py": 4}  # the nested one: twice (host, then user)


def test_every_transport_declares_its_capabilities():
    """What session.py and pct.py read of a transport, each transport of remote has (the protocol's members)."""
    from remote.lab.testing import CountingTransport, FakeTransport, Recording
    from remote.testing.mock import _HostTransport
    from remote.transport import LocalTransport, SshTransport
    from remote.transport.base import Transport
    from remote.transport.keeper import KeptTransport

    declared = {"kept", "login_shell", "can_stream", "host"}
    assert declared <= set(Transport.__annotations__) | set(vars(Transport))
    for cls in (LocalTransport, SshTransport, KeptTransport, _HostTransport, FakeTransport, CountingTransport, Recording):
        assert {name for name in declared if hasattr(cls, name)} == declared, cls


def event_kinds() -> list[type]:
    """Every event kind remote/events.py defines (Event's subclasses, at any depth), in the file's order."""
    from remote import events

    return [v for v in vars(events).values() if isinstance(v, type) and issubclass(v, events.Event) and v is not events.Event]


def sample(kind: type):
    """An event of `kind` with a value of each field's type (the command line must word any)."""
    hints = typing.get_type_hints(kind)
    values = {}
    for f in dataclasses.fields(kind):
        hint = hints[f.name]
        origin = typing.get_origin(hint)
        if origin is typing.Literal:
            values[f.name] = typing.get_args(hint)[0]
        elif hint in (int, float, str) or origin is None and hint is not type(None):
            values[f.name] = {int: 200, float: 1.5, str: "x"}.get(hint, None)
        elif origin is tuple:
            values[f.name] = ()
        else:  # int | None and the like
            values[f.name] = None
    return kind(**values)


def test_the_kinds_are_read_from_events_py():
    from remote.events import DryCommand, Event, Note, Output

    kinds = event_kinds()
    assert Event not in kinds and {Note, Output, DryCommand} <= set(kinds)  # a kind under a kind counts too


@pytest.mark.parametrize("kind", event_kinds(), ids=lambda k: k.__name__)
def test_every_event_kind_is_documented_with_its_fields(kind):
    """docs/reference/library.md's table of event kinds: a row per kind naming each field of its own."""
    text = LIBRARY_MD.read_text()
    row = next((line for line in text.splitlines() if line.startswith(f"| `{kind.__name__}` |")), None)
    assert row is not None, f"docs/reference/library.md: no row `| `{kind.__name__}` | ...` in the event kinds' table"
    base = kind.__mro__[1]
    own = [f.name for f in dataclasses.fields(kind) if f.name not in {g.name for g in dataclasses.fields(base)}] \
        if dataclasses.is_dataclass(base) else []
    for name in own:
        assert f"`.{name}`" in row, f"{kind.__name__}: its field {name} is not in its row: {row}"


@pytest.mark.parametrize("kind", event_kinds(), ids=lambda k: k.__name__)
def test_the_command_line_words_every_event_kind(kind):
    from remote.cli import format as fmt

    event = sample(kind)
    text = fmt.event_text(event, None)
    assert text is None or isinstance(text, str)
    assert isinstance(fmt.event_on_stderr(event, False), bool)
