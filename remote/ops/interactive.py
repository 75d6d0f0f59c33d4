"""`remote shell`: an interactive bash in a container, in the checkout, with the job's environment.

The environment is what warmups and jobs get (remote/ops/jobenv.py): the venv first on PATH, the
compile cache, train.env. train.env's values may be secrets, so they never travel in an argv: they go
over stdin into a file only root reads, which the shell reads and deletes before it starts
(remote/sh/shell.sh). Before the first deploy the shell still opens, plainly, in /root.
"""

from __future__ import annotations

import os

from .. import shell
from ..errors import ContainerCommandNotFound, DeployError
from ..target import Target
from ..transport.pct import exec_argv
from ..transport.tty import interactive
from . import jobenv


def open_shell(t: Target) -> int:
    """Run the shell until it exits; its exit status."""
    from ..facts import deployed

    session, spec, ct = t.session, t.spec, t.ct
    try:
        verify = deployed(t).verify.as_record()
    except (DeployError, ContainerCommandNotFound) as exc:
        t.note(f"{exc}; a plain shell, without the job's environment")
        env, saved = {}, ""
    else:
        env = jobenv.tool_env(spec, verify)
        saved = ""
        if jobenv.user_env(spec):
            saved = ct.script(shell.load("shell"), "save", stdin=jobenv.stdin_for(jobenv.user_env(spec)),
                              mutates=False, timeout=30, label="pass train.env to the shell").out.strip()
    env["TERM"] = os.environ.get("TERM") or "xterm"
    argv = exec_argv(spec.host.pct, spec.ctid, ["bash", "-c", shell.load("shell"), "shell", "start", saved,
                                                spec.code.path], env=env, cwd="/root", path=ct.path)
    return interactive(session.transport(spec.host), argv)
