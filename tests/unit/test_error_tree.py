"""Every exception remote raises on purpose is public: exported from `remote`, drawn in remote/errors.py's tree
and in docs/reference/library.md's, so that a script can catch what the API raises by name; and the command line
reference names every task run on a host itself."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import remote
import remote.errors as errors

ROOT = Path(__file__).resolve().parents[2]
TREE = [name for name, c in vars(errors).items()
        if inspect.isclass(c) and issubclass(c, errors.RemoteError) and c.__module__ == errors.__name__]


@pytest.mark.fault("error tree", promise="every RemoteError of remote.errors (RootRequired, GpuFixError and "
                   "HostSetupError, which gpu fix and host setup raise, included) is importable from `remote` and "
                   "drawn in the errors module's tree and in docs/reference/library.md's")
@pytest.mark.parametrize("name", TREE)
def test_every_error_is_exported_and_in_both_trees(name):
    assert name in remote.__all__ and getattr(remote, name) is getattr(errors, name)
    library = (ROOT / "docs" / "reference" / "library.md").read_text().split("## Errors", 1)[1].split("```", 1)[0]
    assert f" {name}" in errors.__doc__.split("remote's exit status")[0], f"{name}: not in remote/errors.py's tree"
    assert f" {name}" in library, f"{name}: not in library.md's error tree"


@pytest.mark.fault("docs", promise="docs/reference/cli.md's task table names every task run on a Proxmox host itself "
                   "(init, create, gpu fix, host setup), each with its usage")
@pytest.mark.parametrize("task", ["init", "create", "gpu fix", "host setup"])
def test_the_cli_reference_table_names_the_host_tasks(task):
    rows = [line for line in (ROOT / "docs" / "reference" / "cli.md").read_text().splitlines() if line.startswith("| `")]
    assert any(line.startswith(f"| `remote {task} ") for line in rows), task
