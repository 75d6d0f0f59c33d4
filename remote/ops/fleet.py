"""Fleets: which containers a --container value names, and every host's `pct list` at once.

`select` turns a --container value (an id, `200,201,305`, a group name from `groups:`, or `all`) into
container ids. Running work on many containers at once is remote.executor's (one executor).
"""

from __future__ import annotations

from ..config import CONTAINER_KEY, Config
from ..errors import ConfigError

ALL = "all"


def is_selection(value) -> bool:
    """True when a --container value names several containers (a list, a group, `all`), not one id."""
    if value is None or isinstance(value, int):
        return False
    return not str(value).strip().isdigit()


def select(config: Config, value) -> list[int]:
    """The container ids a --container value names, in the order given (groups and `all` in file order)."""
    if value is None:
        return [config.container(None).ctid]
    ids: list[int] = []
    for part in (p.strip() for p in str(value).split(",")):
        if not part:
            continue
        if part == ALL:
            found = list(config.containers)
        elif part in config.groups:
            found = list(config.groups[part])
        elif part.isdigit():
            found = [config.container(part).ctid]  # unknown ids are refused there, with the known ones
        else:
            known = ", ".join(["all", *config.groups])
            raise ConfigError(config.file, CONTAINER_KEY,
                              f"{part!r} is neither a container id nor a group (groups: {known})")
        ids += [i for i in found if i not in ids]
    if not ids:
        raise ConfigError(config.file, CONTAINER_KEY, f"no container selected by {value!r}")
    return ids


def inventory(session) -> list:
    """session.inventory (each host's `pct list`) for all hosts at once, each over its own connection."""
    import copy
    import dataclasses

    from .. import executor
    from ..errors import RemoteError
    from ..transport.session import HostState
    from ..transport.session import inventory as one_host_at_a_time

    names = list(session.config.hosts)
    for name in names:  # the transports made here, in one thread: Session's map is not locked
        session.transport(session.config.hosts[name])

    def one(name: str):
        view = copy.copy(session)  # shares the transports; never closed itself
        view.config = dataclasses.replace(session.config, hosts={name: session.config.hosts[name]})
        try:
            return one_host_at_a_time(view)
        except ConfigError as exc:  # bad input (a ~/.ssh/config ssh would refuse): exit 2, not an unreachable host
            return exc
        except RemoteError as exc:  # `pct list` past its deadline (CommandTimeout), ...: that host is unknown
            wanted = [c.ctid for c in session.config.containers.values() if c.host.name == name]
            return [HostState(name, False, f"`pct list` on {name}: {exc}", {c: "unknown" for c in wanted})]
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread below
            return exc

    states = []
    for got in executor.per_host(names, one):
        if isinstance(got, BaseException):
            raise got
        states.extend(got)
    return states
