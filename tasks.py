"""Invoke entry point for this checkout: the same collection as the `remote` command (remote/cli/invoke.py)."""

from remote.cli import collection

ns = collection()
