"""The `remote` command line: a parser, help and dispatch over the task table of remote/cli/table.py.

    remote [--version] [-h] TASK [OPTIONS] [TASK [OPTIONS]]... [-- ARGV...]

- Only the tasks' own options exist (no invoke core flags). An option belongs to the task it follows;
  the shared ones (-c/--container, --hosts, -n/--dry, --fail-fast) may stand anywhere and apply to
  every task of the chain that takes them: `remote deploy warmup train -c 200`. --dry only where every
  task of the chain has a dry run, so nothing runs for real in a chain that asked for a dry one.
- -h/--help anywhere before `--` prints help (the task's, the group's or the program's): nothing is
  loaded or connected.
- Every value is checked and converted before the first task starts: exit 2, the flag named.
- `--` ends the options: what follows is the argv of the last task (exec runs it without a shell).

Imports nothing heavy: `remote --help` and `remote config` stay fast (bench/cli.py).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

HELP = ("-h", "--help")
SHARED = ("container", "hosts", "dry", "fail-fast")  # given anywhere, they apply to every task of the chain
ALL_OR_NOTHING = ("dry",)  # shared, and every task of the chain must take it


class Usage(Exception):
    """Bad input on the command line: exit status 2, nothing run."""

    def __init__(self, message: str, task: str | None = None):
        super().__init__(message)
        self.task = task


class Help(Exception):
    """-h/--help was given: print the help of `topic` (a task, a group, or None for the program)."""

    def __init__(self, topic: str | None):
        super().__init__(topic)
        self.topic = topic


class Version(Exception):
    pass


# -- value kinds: a converter that raises ValueError with what was expected --------------------------------

@dataclass(frozen=True)
class Kind:
    convert: Callable[[str], Any]
    metavar: str


def number(lo: float, hi: float, integer: bool = False, unit: str = "") -> Callable[[str], Any]:
    def convert(text: str):
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            what = ("a whole number" if integer else "a number") + (f" of{unit}" if unit else "")
            raise ValueError(f"expected {what}, got {text!r}") from None
        if value != value or not lo <= value <= hi:  # NaN included
            raise ValueError(f"expected {_bound(lo)} to {_bound(hi)}{unit}, got {text!r}")
        return value
    return convert


def _bound(x: float) -> str:
    """A range's end as a reader writes it: 2147483648, not `:g`'s 2.14748e+09; 0.5 as it is."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def pattern(regex: str, what: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def convert(text: str) -> str:
        if not compiled.fullmatch(text):
            raise ValueError(f"expected {what}, got {text!r}")
        return text
    return convert


def nonempty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def text_kind(metavar: str) -> Kind:
    return Kind(nonempty, metavar)


# -- the task table's entries ---------------------------------------------------------------------------

@dataclass
class Param:
    name: str  # the function's parameter (json_)
    flag: str  # json
    short: str | None
    default: Any
    required: bool
    help: str
    kind: Kind | None  # None: a boolean flag

    @property
    def takes_value(self) -> bool:
        return self.kind is not None

    def label(self) -> str:
        names = (f"-{self.short}, " if self.short else "    ") + f"--{self.flag}"
        return names + (f" {self.kind.metavar}" if self.kind else "")


@dataclass
class Spec:
    """One task: `name` as typed (`deploy`, `lab up`), its function, its options by flag."""

    name: str
    fn: Callable
    doc: str
    params: dict[str, Param]
    positional: str | None = None  # the parameter a bare word after the task fills (exec's command)
    argv: str | None = None  # the parameter that `-- ARGV...` fills (as a list)
    usage: str = ""  # extra usage lines

    @property
    def summary(self) -> str:
        """The docstring's first sentence, whole."""
        first = " ".join(self.doc.strip().split("\n\n")[0].split())
        m = re.search(r"(?<=[.!?])\s", first)
        return first[:m.start()] if m else first

    @property
    def group(self) -> str | None:
        return self.name.split()[0] if " " in self.name else None


def spec_of(fn: Callable, name: str, help: dict[str, str], *, short: dict[str, str], kinds: dict[str, Kind],
            positional: str | None = None, argv: str | None = None, usage: str = "") -> Spec:
    """A Spec from a task function's signature (its first parameter is the context, never an option)."""
    sig = inspect.signature(fn)
    params = {}
    for p in list(sig.parameters.values())[1:]:
        flag = p.name.rstrip("_").replace("_", "-")
        required = p.default is inspect.Parameter.empty
        default = None if required else p.default
        if isinstance(default, bool):
            kind = None
        elif flag in kinds:
            kind = kinds[flag]
        elif isinstance(default, int):
            kind = Kind(number(0, 2**31), "N")
        else:
            kind = text_kind(flag.upper().replace("-", "_"))
        text = next((help[k] for k in (p.name, p.name.rstrip("_"), flag) if k in help), "")
        params[flag] = Param(p.name, flag, short.get(flag), default, required, text, kind)
    return Spec(name, fn, inspect.cleandoc(fn.__doc__ or ""), params, positional, argv, usage)


# -- parsing ---------------------------------------------------------------------------------------------

@dataclass
class Call:
    spec: Spec
    kwargs: dict[str, Any] = field(default_factory=dict)
    given: set[str] = field(default_factory=set)  # flags set on this task itself


class Parser:
    def __init__(self, tasks: dict[str, Spec]):
        self.tasks = tasks
        self.groups = {s.group for s in tasks.values() if s.group}
        self.shorts = {p.short: p for s in tasks.values() for p in s.params.values() if p.short}
        self.flags = {f: p for s in tasks.values() for f, p in s.params.items()}

    def parse(self, argv: list[str]) -> list[Call]:
        self.argv = list(argv)
        cut = self.argv.index("--") if "--" in self.argv else len(self.argv)
        self.head, rest = self.argv[:cut], (self.argv[cut + 1:] if cut < len(self.argv) else None)
        self.calls: list[Call] = []
        self.shared: dict[str, Any] = {}
        self.topic: str | None = None
        i = 0
        while i < len(self.head):
            tok = self.head[i]
            if tok in HELP:
                raise Help(self.topic)
            if tok == "--version":
                raise Version()
            if tok.startswith("-") and len(tok) > 1:
                i = self._option(i)
                continue
            cur = self.calls[-1] if self.calls else None
            if cur and cur.spec.positional and cur.spec.positional not in cur.given:
                self._set(cur, cur.spec.params[cur.spec.positional], tok)
                i += 1
                continue
            if tok in self.groups:
                self.topic = tok
                sub = self.head[i + 1] if i + 1 < len(self.head) else None
                if (sub is None or f"{tok} {sub}" not in self.tasks) and f"{tok} list" in self.tasks:
                    sub, i = "list", i - 1  # a group with a `list` task runs it where no task of it follows
                if sub is None or f"{tok} {sub}" not in self.tasks:
                    subs = [s.name.split()[1] for s in self.tasks.values() if s.group == tok]
                    self._fail(f"`{tok}` needs one of: {', '.join(subs)}" + (f" (got {sub!r})" if sub else ""))
                name, i = f"{tok} {sub}", i + 2
            elif tok in self.tasks:
                name, i = tok, i + 1
            else:
                import difflib

                close = difflib.get_close_matches(tok, [t for t in self.tasks if " " not in t], n=1)
                self._fail(f"unknown task {tok!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                           + "; `remote --help` lists them")
            self.topic = name
            self.calls.append(Call(self.tasks[name]))
        self._finish(rest)
        return self.calls

    def _fail(self, message: str) -> NoReturn:
        """Bad input; but help asked for later on the line wins (help in every position)."""
        if any(t in HELP for t in self.head):
            raise Help(self.topic)
        raise Usage(message, self.topic)

    def _option(self, i: int) -> int:
        tok = self.head[i]
        if tok.startswith("--"):
            flag, eq, value = tok[2:].partition("=")
            param = self._resolve(flag, tok)
            if not param.takes_value:
                if eq:
                    self._fail(f"--{flag} takes no value (got {tok!r})")
                self._apply(param, True)
                return i + 1
            if not eq:
                value, i = self._value(i, tok), i + 1
            self._apply(param, value)
            return i + 1
        letters = tok[1:]
        for j, letter in enumerate(letters):
            if letter == "h":
                raise Help(self.topic)
            short = self.shorts.get(letter)
            if short is None:
                self._fail(f"unknown option -{letter}" + (f" in {tok!r}" if len(letters) > 1 else "")
                           + self._options_hint())
            param = self._resolve(short.flag, f"-{letter}")
            if not param.takes_value:
                self._apply(param, True)
                continue
            value = letters[j + 1:].removeprefix("=")
            if not value:
                value, i = self._value(i, f"-{letter}"), i + 1
            self._apply(param, value)
            break
        return i + 1

    def _value(self, i: int, tok: str) -> str:
        nxt = self.head[i + 1] if i + 1 < len(self.head) else None
        if nxt in HELP:
            raise Help(self.topic)
        if nxt is None:
            self._fail(f"{tok} needs a value")
        return nxt

    def _options_hint(self) -> str:
        if self.topic not in self.tasks:
            return ""
        spec = self.tasks[self.topic]
        if spec.argv:  # `remote exec -c 200 ls -la`: the command's own options
            return f" (a command's own options go after `--`: remote {spec.name} -c ID -- CMD ARG...)"
        return f" (`remote {self.topic} --help` lists its options)"

    def _resolve(self, flag: str, tok: str) -> Param:
        """The Param that `flag` names here: the current task's, else a shared one, else an error that says whose it is."""
        cur = self.calls[-1] if self.calls else None
        if cur and flag in cur.spec.params:
            return cur.spec.params[flag]
        if flag in SHARED and flag in self.flags:
            return self.flags[flag]
        owners = [s.name for s in self.tasks.values() if flag in s.params]
        if not owners:
            import difflib

            close = difflib.get_close_matches(flag, list(self.flags), n=1, cutoff=0.75)
            self._fail(f"unknown option {tok}" + (f" (did you mean --{close[0]}?)" if close else "")
                       + self._options_hint())
        if cur is None:
            self._fail(f"{tok} belongs after its task: remote {owners[0]} {tok} ...")
        self._fail(f"{cur.spec.name} has no option {tok} (it is an option of {', '.join(owners[:4])})"
                   + self._options_hint())

    def _apply(self, param: Param, value: Any) -> None:
        cur = self.calls[-1] if self.calls else None
        value = self._convert(param, value)
        if param.flag in SHARED:  # also the chain's value, for its tasks that were not given their own
            seen = self.shared.setdefault(param.flag, [])
            if value not in seen:
                seen.append(value)
        if cur and param.flag in cur.spec.params:
            self._set(cur, cur.spec.params[param.flag], value)

    def _convert(self, param: Param, value: Any) -> Any:
        if param.kind is None or not isinstance(value, str):
            return value
        try:
            return param.kind.convert(value)
        except ValueError as exc:
            self._fail(f"--{param.flag}: {exc}")

    def _set(self, call: Call, param: Param, value: Any) -> None:
        value = self._convert(param, value)
        if param.flag in call.given and call.kwargs[param.name] != value:
            self._fail(f"{call.spec.name}: --{param.flag} given twice ({call.kwargs[param.name]!r} and {value!r})")
        call.kwargs[param.name] = value
        call.given.add(param.flag)

    def _finish(self, rest: list[str] | None) -> None:
        if not self.calls:
            if rest is not None or self.shared:
                raise Usage("no task given; `remote --help` lists them")
            raise Help(None)
        if rest is not None:
            last = self.calls[-1]
            if not last.spec.argv:
                raise Usage(f"{last.spec.name} takes no arguments after `--`", last.spec.name)
            if not rest:
                raise Usage(f"{last.spec.name}: nothing after `--` (give the command and its arguments)", last.spec.name)
            param = last.spec.params[last.spec.argv]
            if param.flag in last.given:
                raise Usage(f"{last.spec.name}: give --{param.flag} STRING or `-- CMD ARG...`, not both", last.spec.name)
            last.kwargs[param.name] = list(rest)
            last.given.add(param.flag)
        for flag, values in self.shared.items():
            takers = [c for c in self.calls if flag in c.spec.params]
            if not takers:
                raise Usage(f"--{flag}: no task here takes it ({', '.join(c.spec.name for c in self.calls)})")
            if flag in ALL_OR_NOTHING and len(takers) < len(self.calls):
                without = [c.spec.name for c in self.calls if flag not in c.spec.params]
                raise Usage(f"--{flag}: {', '.join(without)} has no --{flag}; run it on its own")
            for call in takers:
                if flag in call.given:
                    continue
                if len(values) > 1:
                    raise Usage(f"{call.spec.name}: which --{flag}? {' or '.join(map(str, values))} were given to "
                                "other tasks; give it once for all, or to each task", call.spec.name)
                call.kwargs[call.spec.params[flag].name] = values[0]
        for call in self.calls:
            for param in call.spec.params.values():
                if param.required and param.name not in call.kwargs:
                    how = (f"`-- CMD ARG...` or --{param.flag} STRING" if call.spec.argv == param.name
                           else f"--{param.flag} {param.kind.metavar if param.kind else ''}".rstrip())
                    raise Usage(f"{call.spec.name} needs {how}", call.spec.name)


# -- help ------------------------------------------------------------------------------------------------

def _width() -> int:
    import shutil

    return max(60, min(100, shutil.get_terminal_size((100, 24)).columns))


def _wrap(text: str, indent: int, first: str = "") -> list[str]:
    import textwrap

    width = _width()
    if not text:
        return [first.rstrip()]
    pad = " " * indent
    lines = textwrap.wrap(text, width, initial_indent=first.ljust(indent) if len(first) < indent else first + " ",
                          subsequent_indent=pad)
    return lines if len(first) < indent else [first] + textwrap.wrap(text, width, initial_indent=pad,
                                                                       subsequent_indent=pad)


def program_help(tasks: dict[str, Spec], version: str, footer: str, order: tuple[str, ...] = ()) -> str:
    """One line per task (its first sentence), in `order`, then the rest as defined; groups on one line."""
    import textwrap

    tasks = {k: tasks[k] for k in sorted(tasks, key=lambda k: order.index(k) if k in order else len(order))}

    lines = [f"remote {version}: drive PyTorch training inside Proxmox LXC GPU containers over SSH.", "",
             "Usage: remote TASK [OPTIONS] [TASK [OPTIONS]]...",
             "       remote TASK --help", "", "Tasks:"]
    groups: dict[str, list[str]] = {}
    for spec in tasks.values():
        if spec.group:
            groups.setdefault(spec.group, []).append(spec.name.split()[1])
            continue
        lines += _wrap(spec.summary, 15, f"  {spec.name}")
    lines.append("")
    for group, subs in groups.items():
        lines.append(f"Also: remote {group} {'|'.join(subs)} (`remote {group} --help`).")
    lines += ["", *textwrap.wrap(footer, _width())]
    return "\n".join(lines) + "\n"


def group_help(tasks: dict[str, Spec], group: str) -> str:
    specs = [s for s in tasks.values() if s.group == group]
    lines = [f"Usage: remote {group} {'|'.join(s.name.split()[1] for s in specs)} [OPTIONS]", ""]
    for spec in specs:
        lines += _wrap(spec.summary, 15, f"  {spec.name.split()[1]}")
    lines += ["", f"`remote {group} <task> --help` shows a task's options."]
    return "\n".join(lines) + "\n"


def task_help(spec: Spec) -> str:
    import textwrap

    width = _width()
    required = "".join(f" --{p.flag} {p.kind.metavar if p.kind else ''}".rstrip() for p in spec.params.values()
                       if p.required and p.name not in (spec.argv, spec.positional))
    opts = required + (" [OPTIONS]" if spec.params else "")
    usage = [f"Usage: remote {spec.name}{opts}"]
    if spec.positional and spec.argv:
        usage = [f"Usage: remote {spec.name}{opts} -- CMD [ARG...]",
                 f"       remote {spec.name}{opts} --{spec.params[spec.positional].flag} STRING"]
    lines = usage + [f"       {u}" for u in spec.usage.splitlines() if u] + [""]
    for para in spec.doc.split("\n\n"):
        lines += textwrap.wrap(" ".join(para.split()), width) + [""]
    lines.append("Options:")
    params = sorted(spec.params.values(), key=lambda p: (p.flag not in ("container",), p.flag in SHARED[1:], p.flag))
    for p in params:
        text = p.help + (" (required)" if p.required and spec.argv != p.name else "")
        lines += _wrap(text, 28, "  " + p.label())
    lines += _wrap("this help", 28, "  -h, --help")
    return "\n".join(lines) + "\n"

