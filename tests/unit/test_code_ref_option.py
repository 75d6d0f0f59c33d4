"""code.ref is never read by git as an option: `git fetch origin --upload-pack=CMD` would run CMD here."""

from __future__ import annotations

import pytest
import yaml

from remote import config
from remote.errors import ConfigError, DeployError
from remote.ops import code

HOSTS = ("hosts:\n  pve1: {address: 10.0.0.1}\ncontainers:\n  200: {host: pve1}\n"
         "code:\n  repo: https://example.invalid/x.git\n  ref: '--upload-pack=touch /tmp/x;git-upload-pack'\n")


@pytest.mark.fault("code.ref that starts with '-'", promise="refused by the loader naming code.ref (and by the URL "
                   "fetch before any git runs): git would read it as an option and --upload-pack runs a command on "
                   "the controller")
def test_a_ref_that_git_would_read_as_an_option_is_refused(monkeypatch):
    with pytest.raises(ConfigError, match=r"hosts.yaml: code.ref: .*starts with '-'"):
        config.parse(yaml.safe_load(HOSTS), "hosts.yaml")

    def no_git(*a, **k):
        raise AssertionError("git ran")

    monkeypatch.setattr(code.subprocess, "run", no_git)
    with pytest.raises(DeployError, match="starts with '-'"):
        code.fetch_url("https://example.invalid/x.git", "--upload-pack=touch /tmp/x")
