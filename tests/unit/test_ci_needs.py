"""Under CI=true (.ci/run) a test that needs a tool the machine lacks fails naming what to install, never skips:
a CI machine without root, runuser, unshare or mknod is broken, and a skip would hide the tests it keeps from
running (support.needs)."""

from __future__ import annotations

import re

import pytest
from support import TESTS, needs

# The modules whose tools a CI machine must have: every missing one goes through support.needs.
NEEDY = ("local/test_sudoers_local.py", "local/test_gpu_node_local.py", "lab/test_gpufix_lab.py")


@pytest.mark.fault("A CI machine without a tool a test needs", promise="under CI=true the test fails naming what "
                   "to install (root, runuser, unshare), never skips; elsewhere it skips naming what it needs")
def test_a_missing_tool_fails_under_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and this machine lacks runuser: apt-get install util-linux"):
        needs(False, "runuser", "apt-get install util-linux")
    needs(True, "runuser", "apt-get install util-linux")  # present: nothing happens
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="needs runuser"):
        needs(False, "runuser", "apt-get install util-linux")


def test_the_modules_that_need_tools_skip_only_through_needs():
    for name in NEEDY:
        text = (TESTS / name).read_text()
        found = re.findall(r"pytest\.skip\(|skipif\(|importorskip\(", text)
        assert not found, f"tests/{name}: {found}: use support.needs (a failure under CI=true)"
