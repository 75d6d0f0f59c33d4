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

from .. import shell
from ..config import ContainerSpec
from ..naming import compile_cache  # noqa: F401 -- also this module's name
from ..transport import Result
from ..transport.pct import Container

# Log lines of torchrun's ranks carry their global rank; TailLog prefixes with this template.
RANK_PREFIX = "[rank${rank}]: "


def tool_env(spec: ContainerSpec, verify: Mapping | None) -> dict[str, str]:
    """What the tools set for every process: the venv, unbuffered output, and the compile caches."""
    cache = compile_cache(spec, verify)
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


def run(ct: Container, spec: ContainerSpec, verify: Mapping | None, argv: Sequence[str], *,
        extra: Mapping[str, str] | None = None, **kwargs) -> Result:
    """Run argv in the container with the job environment; train.env goes over stdin (withenv.sh)."""
    return ct.run(["bash", "-c", shell.load("withenv"), "withenv", *argv], env={**tool_env(spec, verify), **(extra or {})},
                  stdin=stdin_for(user_env(spec)), **kwargs)
