"""The lab's tasks: `remote lab up`, `remote lab down` (registered in TASKS when remote/cli/tasks.py imports
this module). The lab comes with a checkout of remote (and its editable install), not with a wheel: these
tasks are the one place remote/ imports it, and say so in one line where it is not there."""

from __future__ import annotations

from typing import Any

from .table import Exit, handled, say, task


def _lab() -> tuple[Any, Any]:
    """The lab's package and its opener: a checkout's (and its editable install's), not a wheel's."""
    import sys

    try:
        from ..lab import ns  # `from .. import lab` would go through remote's lazy names: ImportError, not this
    except ModuleNotFoundError as exc:
        if exc.name not in ("remote.lab", "remote.lab.ns"):
            raise
        raise Exit("error: the lab is not part of this installation of remote (a wheel has the tool only): it "
                   "comes with a checkout of remote (`bash scripts/setup` there; docs/guide/lab.md)", code=2) from None
    return sys.modules["remote.lab"], ns


@task(name="lab up", help={"containers": "comma-separated container ids (default 200)",
                       "port": "sshd port on 127.0.0.1 (default: the port this lab folder was brought up on, "
                               "else 2222)",
                       "second": "comma-separated container ids on a second look-alike host, lab2 (sshd on port + 1)",
                       "backend": "lxc (sshd + LXC containers) or ns (Linux namespaces, no sshd: the host is "
                                  "`local: true`); default: lxc where it is installed, else ns"})
@handled
def lab_up(c, containers="200", port=None, second=None, backend=None):
    """Start the local lab: sshd on loopback, LXC containers, the pct double.

    With --second, a second look-alike host as well; with --backend ns, namespace containers and the pct
    double only."""
    lab_, ns = _lab()
    lab = ns.open_lab(backend=backend, port=int(port or lab_.DEFAULT_PORT))
    if not port:  # a lab brought up before on another port stays there (its hosts files name that port)
        lab.port = lab_.saved_port(lab.dir) or lab.port
    EXAMPLES = lab_.EXAMPLES
    ids = [int(x) for x in str(containers).split(",") if x.strip()]
    more = [int(x) for x in str(second or "").split(",") if x.strip()]
    lab.up(ids, second=more)
    if not EXAMPLES.is_dir():
        say(f"note: no demo repository ({lab.dir / 'dflash'}): the demo drafter comes with a checkout of remote "
            "(examples/), not with an install; point code.repo at your own project, or run `remote lab up` "
            "from a checkout")
    if lab.backend == "ns":
        say(f"lab up (namespaces, no sshd): containers {', '.join(map(str, ids))} running ({lab.dir}); "
            f"hosts file: {lab.dir / 'hosts.yaml'}" + (" (deploys the demo drafter)" if EXAMPLES.is_dir() else ""))
        return
    say(f"lab up: sshd on 127.0.0.1:{lab.port}, containers {', '.join(map(str, ids))} running ({lab.dir})")
    if more:
        say(f"lab2 up: sshd on 127.0.0.1:{lab.port + 1}, containers {', '.join(map(str, more))} running "
              f"({lab.second().dir})")
    _say_hosts_file(lab, lab_.DEFAULT_DIR, lab_.DEFAULT_PORT)


def _say_hosts_file(lab: Any, default_dir: Any, default_port: int) -> None:
    """Which hosts file targets this lab: the one it wrote (its folder, port and key); the checkout's
    hosts.yaml targets only the default lab (/var/lib/remote-lab on 2222)."""
    hosts = lab.dir / "hosts.yaml"
    say(f"hosts file: {hosts} (REMOTE_HOSTS_FILE={hosts} remote deploy warmup train, or --hosts {hosts})")
    if str(lab.dir) != str(default_dir) or lab.port != default_port:
        say(f"note: a checkout's hosts.yaml targets the default lab ({default_dir}, port {default_port}), not this one")


@task(name="lab down", help={"purge": "also delete the containers' files (venvs, checkouts, compile caches)"})
@handled
def lab_down(c, purge=False):
    """Stop the local lab's containers and sshd."""
    lab = _lab()[1].open_lab()
    lab.down(purge=purge)
    say("lab down" + (" and purged" if purge else " (container files kept; --purge deletes them)"))
