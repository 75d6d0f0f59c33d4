"""Lab tier: the uv binary deploy pushes into a container is checked there, and pushed again when changed
(the controller's cache of it is in tests/local/test_uv_cache_local.py)."""

import importlib.metadata
import platform

import pytest

from remote.config import VenvSpec
from remote.ops.deploy import local_uv_binary
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab

VERSION = importlib.metadata.version("uv")  # the uv installed next to this controller (a dev dependency)


def test_a_changed_uv_in_the_container_is_pushed_again(deployed, lab_session, lab_hosts, ct):
    from support import load_config

    from remote import config
    from remote.ops.deploy import deploy
    from remote.facts import uv_path
    from remote.transport.session import Session

    path = uv_path(VERSION)
    ct.script('printf "#!/bin/sh\\nexit 1\\n" > "$1" && chmod 755 "$1"', path)  # still executable: X_OK passes
    spec = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, idna==3.10]"})
    with Session(config.load(str(spec)), agent=True) as s:
        deploy(target_of(s, 200))
    local, digest = local_uv_binary(VenvSpec(uv_version=VERSION), platform.machine())
    assert ct.run(["sha256sum", path]).out.split()[0] == digest
    deploy(target_of(lab_session, 200))  # back to the session's spec
