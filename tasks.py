"""Invoke entry point for this checkout: the same collection as the `remote` command."""

from remote.cli import ns  # noqa: F401  (invoke looks for `ns`)
