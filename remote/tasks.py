"""Deprecated: remote's invoke Collection moved to `remote.cli.collection()` (remote/cli/invoke.py).

`from remote.tasks import collection` keeps working, with a DeprecationWarning naming the new place.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from invoke import Collection

DEFAULTS = {"hosts": None, "container": None}


def collection() -> Collection:
    """Deprecated: use `from remote.cli import collection`."""
    warnings.warn("remote.tasks.collection is deprecated: use `from remote.cli import collection`",
                  DeprecationWarning, stacklevel=2)
    from .cli import collection as make

    return make()
