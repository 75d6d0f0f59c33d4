"""A resume's lineage on the command line, its checkpoint path named whole and unambiguously (remote.naming.
path_words: a path with control characters as a shell's $'...', never cut). Pure, no I/O; its own module because
remote/cli/format.py is at the 700-line wall."""

from __future__ import annotations

import dataclasses

from ..naming import path_words, printable
from ..results import Checkpoint
from ..results.runs import resumes_text


def resumes_words(parent: str | None, checkpoint: Checkpoint | None) -> str | None:
    """`resumes RUN at step N` (or `from PATH`, the path escaped whole); None for a run that started fresh."""
    if checkpoint is None:
        return None
    return printable(str(resumes_text(parent, dataclasses.replace(checkpoint, path=path_words(checkpoint.path)))))
