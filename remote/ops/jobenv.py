"""The environment of every process the tools start in a container: warmups, training jobs and `exec`.

Computed on the controller from what deploy verified (torch, its CUDA build, triton), so code that has
never heard of this project still compiles into the persistent, per-version cache folder and never into
torch's default under /tmp. `train.env` is added last and may override any of it; its values can be
secrets, so they travel on stdin (remote/sh/withenv.sh), never in an argv, and are never printed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import shell
from ..config import ContainerSpec
from ..naming import compile_cache  # noqa: F401 -- also this module's name
from ..transport import Result

if TYPE_CHECKING:
    from ..target import Target

# Log lines of torchrun's ranks carry their global rank; TailLog prefixes with this template.
RANK_PREFIX = "[rank${rank}]: "


def tool_env(spec: ContainerSpec, verify: Mapping | None) -> dict[str, str]:
    """What the tools set for every process: the venv, unbuffered output, and the compile caches."""
    return tool_env_at(spec, compile_cache(spec, verify))


def tool_env_at(spec: ContainerSpec, cache: str) -> dict[str, str]:
    """tool_env with the per-version compile cache folder `cache`."""
    return {
        "VIRTUAL_ENV": spec.venv.path,
        "PYTHONUNBUFFERED": "1",
        "REMOTE_COMPILE_CACHE": spec.warmup.cache_dir,  # remote_guard adopts the folders below
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        # Inductor puts some artifacts (precompiled headers) under tempfile.gettempdir() whatever
        # TORCHINDUCTOR_CACHE_DIR says: give the job a temp folder beside the cache (withenv.sh makes it).
        "TMPDIR": f"{cache}/tmp",
        # torchrun (PET_* are its flags' environment form): tee every rank's output, each line marked
        # with its rank. The log folder is set per run; elsewhere torchrun would make one under /tmp.
        "PET_TEE": "3",
        "PET_LOG_DIR": f"{spec.train.run_dir}/.torchrun",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX,
    }


def user_env(spec: ContainerSpec) -> dict[str, str]:
    return dict(spec.train.env)


def env_hash(spec: ContainerSpec, verify: Mapping | None) -> str:
    """Identifies the whole environment (values included) without revealing it."""
    env = {**tool_env(spec, verify), **user_env(spec)}
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]


def describe(spec: ContainerSpec, verify: Mapping | None) -> dict[str, str]:
    """The environment as it may be shown or recorded: train.env's values hidden."""
    overridden = {k: "(train.env)" for k in user_env(spec)}
    return {**tool_env(spec, verify), **overridden}


def stdin_for(env: Mapping[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


CACHE_MARK = "@REMOTE_CACHE_FOLDER@"  # stands for the per-version folder's name until the container says it
CACHE_FOLDER_FILE = "remote-cache-folder"  # in each venv deploy builds: that name (remote/sh/jobexec.sh)


def run_as_deployed(t: Target, argv: Sequence[str], **kwargs) -> Result:
    """`remote exec`'s command in ONE container command (remote/sh/jobexec.sh): where deploy has run (its
    records are there), in the checkout with the job's environment, the per-version cache folder read
    from the venv; elsewhere plainly from /root. No probe before it: a cold exec pays one `pct exec`."""
    spec = t.spec
    env = tool_env_at(spec, f"{spec.warmup.cache_dir.rstrip('/')}/{CACHE_MARK}")
    env["REMOTE_JOB_VARS"] = " ".join(env)
    return t.ct.run(["bash", "-c", shell.load("jobexec"), "jobexec", spec.venv.path, spec.code.path,
                   "1" if spec.code.repo else "0", CACHE_MARK, *argv], env=env, stdin=stdin_for(user_env(spec)),
                  **kwargs)


def run(t: Target, verify: Mapping | None, argv: Sequence[str], *, extra: Mapping[str, str] | None = None,
        **kwargs) -> Result:
    """Run argv in the container (its venv first on PATH) with the job environment; train.env goes over stdin
    (withenv.sh)."""
    spec = t.spec
    return t.ct.run(["bash", "-c", shell.load("withenv"), "withenv", *argv], env={**tool_env(spec, verify), **(extra or {})},
                  stdin=stdin_for(user_env(spec)), **kwargs)
