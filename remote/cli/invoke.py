"""remote's tasks as an invoke Collection: `invoke ...` in a checkout (tasks.py), and for a user's own tasks.py:

    from invoke import Collection
    from remote.cli import collection

    ns = Collection()
    ns.add_collection(collection(), "gpu")      # invoke gpu.deploy -c 200, invoke gpu.logs -f, ...

The tasks are the command line's (remote/cli/tasks.py), with the same options and checks: each task is the
same function; our `Exit` becomes invoke's, and short flags come from SHORT_FLAGS, not first letters. Made on
first use, so that `remote` itself never imports invoke. Settings come from invoke's configuration as well as
from flags and the environment: an `invoke.yaml` beside the tasks.py (or ~/.invoke.yaml, or
$INVOKE_REMOTE_HOSTS) with

    remote:
      hosts: hosts.yaml        # the hosts file, when --hosts is not given
      container: 200           # the container, when -c is not given

A flag wins over the configuration, which wins over $REMOTE_HOSTS_FILE / $REMOTE_CONTAINER.

invoke binds a flag to the task it follows: on an invoke line of `deploy warmup train --container 200
--dry` only train would be given --dry, and deploy and warmup would run for real. So the shared flags of remote's
command line (--container, --hosts, --dry, --fail-fast) apply to every task of the line, as `remote deploy
warmup train -c 200 --dry` does, and a line that cannot be run so (a task without --dry in a dry line,
two containers for a task given none) is refused, the flag named, before its first task runs.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import FrameType
from typing import Any

from invoke import Collection, Executor, Task
from invoke import Exit as InvokeExit

from .parse import ALL_OR_NOTHING, SHARED

DEFAULTS = {"hosts": None, "container": None}


def collection() -> Collection:
    """A new Collection of every remote task (groups such as `lab` as sub-collections), configured with
    the `remote` settings above (all None: flags and the environment decide)."""
    from .table import SHORT_FLAGS, TASKS, Exit
    from .tasks import run  # noqa: F401  (fills TASKS)

    ns = build(TASKS, SHORT_FLAGS, Exit)
    ns.configure({"remote": dict(DEFAULTS)})
    return ns


def build(tasks: dict, short_flags: dict[str, str], exit_type: type[BaseException]) -> Collection:
    class RemoteTask(Task):
        """An Invoke task whose short flags come from SHORT_FLAGS instead of first letters."""

        def arg_opts(self, name, default, taken_names):
            opts = super().arg_opts(name, default, taken_names)
            long = opts["names"][0]
            opts["names"] = [long] + ([short_flags[long]] if long in short_flags else [])
            return opts

    def body_of(spec):
        @functools.wraps(spec.fn)
        def body(c, *args, **kwargs):
            calls = _executing_calls()
            if calls is not None:
                kwargs.update(line_kwargs(spec, kwargs, calls, core_dry=_core_dry(c)))
                if getattr(calls[0].task, "remote_spec", None) is spec:  # the line's first task: before it runs
                    _check_line(c, calls)
            for param in spec.params.values():  # the checks `remote` makes, for what invoke passes as text
                value = kwargs.get(param.name)
                if param.kind and isinstance(value, str):
                    try:
                        kwargs[param.name] = param.kind.convert(value)
                    except ValueError as exc:
                        raise InvokeExit(f"error: --{param.flag}: {exc}", code=2) from None
            _from_config(c, spec, kwargs)
            try:
                return spec.fn(c, *args, **kwargs)
            except exit_type as e:
                raise InvokeExit(getattr(e, "message", None), code=getattr(e, "code", 1)) from None

        body.__signature__ = inspect.signature(spec.fn)  # type: ignore[attr-defined]
        return body

    ns = Collection()
    groups: dict[str, Collection] = {}
    for name, spec in tasks.items():
        group, _, sub = name.rpartition(" ")
        made = RemoteTask(body_of(spec), name=sub, help=getattr(spec.fn, "help", {}))
        made.remote_spec = spec  # type: ignore[attr-defined]  # what line_kwargs reads of the line's other tasks
        if group:
            if group not in groups:
                groups[group] = Collection(group)
                ns.add_collection(groups[group])
            groups[group].add_task(made)
        else:
            ns.add_task(made)
    return ns


def _from_config(c, spec, kwargs: dict) -> None:
    """Options not given on the command line from invoke's configuration (`remote: {hosts: ..., container: ...}`
    in invoke.yaml): a flag wins over it, and it over the environment."""
    settings = getattr(getattr(c, "config", None), "get", lambda *a: None)("remote")
    if not settings:
        return
    for key in ("hosts", "container"):
        value = settings.get(key)
        if value is not None and key in spec.params and kwargs.get(spec.params[key].name) is None:
            param = spec.params[key]
            kwargs[param.name] = param.kind.convert(str(value)) if param.kind else value


def _check_line(c, calls: list) -> None:
    """Every setting the line's tasks need (remote/cli/chain.py), each task with the line's shared flags and
    invoke's configuration as it will run: an invoke Exit (status 2, nothing run) where one is missing."""
    from types import SimpleNamespace

    from ..errors import RemoteError
    from .chain import check
    from .table import error_exit

    line = []
    for call in calls:
        spec = getattr(call.task, "remote_spec", None)
        if spec is not None:
            kwargs = {**call.kwargs, **line_kwargs(spec, call.kwargs, calls, core_dry=_core_dry(c))}
            _from_config(c, spec, kwargs)
            line.append(SimpleNamespace(spec=spec, kwargs=kwargs))
    try:
        check(line)
    except RemoteError as exc:
        e = error_exit(exc)
        raise InvokeExit(e.message, code=e.code) from None


class LineUnreadable(InvokeExit):
    """invoke's Executor runs this line, but not as remote reads it: the shared flags could not be applied to
    every task of it (a --dry would stop at the task it follows), so nothing runs."""


def _executing_calls() -> list | None:
    """The Calls of the invoke line that runs now (every task of it, each with its own arguments): invoke's
    Executor.execute holds them, as `calls`, while it runs each in turn (invoke 1.0 to 2.x). None where a
    task is called otherwise (as a function, by a program of one's own, no Executor on the stack). An
    Executor on the stack whose `execute` frame holds no list of calls (another invoke, an Executor of one's
    own) is refused (LineUnreadable), not run as if the line had one task: a `--dry` given once would
    silently stop applying to the line's other tasks."""
    frame: FrameType | None = sys._getframe(1)
    seen = None
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, Executor):
            seen = f"{type(owner).__module__}.{type(owner).__qualname__}.{frame.f_code.co_name}"
            if frame.f_code.co_name == "execute":
                calls = frame.f_locals.get("calls")
                if isinstance(calls, list) and all(hasattr(c, "task") and hasattr(c, "kwargs") for c in calls):
                    return list(calls)
        frame = frame.f_back
    if seen is not None:
        import invoke

        raise LineUnreadable(f"error: invoke {getattr(invoke, '__version__', '?')}: {seen} holds no list of the "
                             "line's calls, so remote's shared flags (--dry, --container, --hosts, --fail-fast) "
                             "cannot be applied to every task of the line; run the tasks with `remote`, or with "
                             "invoke 1.x or 2.x", code=2)
    return None


def _params(task) -> dict[str, tuple[str, Any]]:
    """flag -> (parameter name, default) of one of remote's tasks, from its spec; {} for any other task (a
    user's own task whose parameter shares a name, `--hosts web1,web2`, is that task's, never the line's)."""
    spec = getattr(task, "remote_spec", None)
    if spec is None:
        return {}
    return {flag: (p.name, inspect.signature(spec.fn).parameters[p.name].default) for flag, p in spec.params.items()}


def _core_dry(c) -> bool:
    """invoke's own --dry (`deploy known-good --dry` on an invoke line: a flag the last task lacks is invoke's), which
    only echoes `c.run` commands: for remote's tasks, a dry run of the line all the same."""
    try:
        return bool(c.config.run.dry)
    except AttributeError:
        return False


def line_kwargs(spec, own: dict, calls: list, core_dry: bool = False) -> dict:
    """The shared flags given to any task of the line, for this task where it was not given its own; an
    invoke Exit (status 2, nothing run) where the line cannot be run as asked."""
    names = [c.called_as or c.task.name for c in calls]
    tasks = [(name, _params(c.task), c.kwargs) for name, c in zip(names, calls, strict=True)]
    out: dict = {}
    for flag in SHARED:
        values: list = [True] if flag == "dry" and core_dry else []
        for _, params, kwargs in tasks:
            if flag in params:
                name, default = params[flag]
                value = kwargs.get(name, default)
                if value not in (None, False, default) and value not in values:
                    values.append(value)
        if not values:
            continue
        if flag in ALL_OR_NOTHING:
            without = [name for name, params, _ in tasks if flag not in params]
            if without:
                foreign = " (a task not of remote's is never given remote's shared flags)" \
                    if any(getattr(c.task, "remote_spec", None) is None for c in calls) else ""
                raise InvokeExit(f"error: --{flag}: {', '.join(without)} has no --{flag}; run it on its own "
                                 f"(this line asked for a dry run of every task){foreign}", code=2)
        for name, params, kwargs in tasks:  # the whole line is checked by its first task, before it runs
            if flag in params and kwargs.get(params[flag][0], params[flag][1]) in (None, False, params[flag][1]) \
                    and len(values) > 1:
                raise InvokeExit(f"error: {name}: which --{flag}? {' or '.join(map(str, values))} were given to "
                                 "other tasks; give it once for all, or to each task", code=2)
        param = spec.params.get(flag)
        if param is not None and own.get(param.name) in (None, False):
            out[param.name] = values[0]
    return out
