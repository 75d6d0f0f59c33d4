"""Threads that run in a copy of their starter's context: the container whose work a thread does
(remote.events.CONTAINER, the `[id]` mark of its lines) follows its work into the helper threads it starts
(a local command's output readers, parallel warmup devices, a follow's pump, pools), as it does not with a
plain threading.Thread, which starts in an empty context. Standard library only: below every layer."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")


class ContextThread(threading.Thread):
    """threading.Thread whose target runs in a copy of the context of the thread that made it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._remote_context = contextvars.copy_context()

    def run(self) -> None:
        self._remote_context.run(super().run)


def submit(pool: Executor, fn: Callable[..., T], *args: Any) -> Future[T]:
    """pool.submit(fn, *args), run in a copy of the submitting thread's context."""
    return pool.submit(contextvars.copy_context().run, fn, *args)
