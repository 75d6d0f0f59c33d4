"""Local tier: a real bash on this machine splits the quoted command back into the argv (the string checks
of the same row are in tests/unit/test_faults.py)."""

import shlex
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.mark.fault("10,000 fuzzed argv", promise="quoted exactly once: the host shell hands pct exactly the argv")
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(argv=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12),
                     min_size=1, max_size=6))
def test_a_real_shell_splits_the_quoted_command_back_into_the_argv(argv):
    """The part no string check can prove: bash, as the login shell on the host, parses shlex.join's text."""
    start = time.monotonic()
    out = subprocess.run(["bash", "-c", shlex.join(["printf", "%s\\0", *argv])], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode("utf-8", "surrogateescape") for a in argv]
    assert time.monotonic() - start < 10
