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
"""

from __future__ import annotations

import functools
import inspect

from invoke import Collection, Task
from invoke import Exit as InvokeExit

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
