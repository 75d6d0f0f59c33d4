"""Invoke entry point for this checkout: the same collection as the `remote` command (remote/tasks.py)."""

from remote.tasks import collection

ns = collection()
