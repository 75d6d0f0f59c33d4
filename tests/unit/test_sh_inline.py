"""One copy of a function two in-container programs need: the watch's marked() is ckpt.py's, put in place by
remote.shell.load_python (neither can import the other there: ckpt.py runs as `python3 -c TEXT`)."""

from __future__ import annotations

import ast

import pytest
from support import ROOT

from remote import shell

SH = ROOT / "remote" / "sh"


def top_functions(text: str) -> list[str]:
    return [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]


@pytest.mark.fault("A function duplicated between in-container programs", promise="the watch's marked() (which "
                   "processes are the run's) is ckpt.py's own, inlined into the text launch installs: one copy, so "
                   "stop --save and the stall watch never disagree on the run's processes")
def test_the_watch_uses_ckpts_marked_and_no_copy_of_its_own():
    assert "marked" not in top_functions((SH / "watch.py").read_text())  # the file: no copy of its own
    watch, ckpt = shell.load_python("watch"), shell.load_python("ckpt")
    assert top_functions(watch).count("marked") == 1 and "from ckpt import" not in watch
    source = (SH / "ckpt.py").read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "marked")
    assert ast.get_source_segment(source, node) in watch and ckpt == source
    compile(watch, "watch", "exec")


def test_a_function_to_inline_that_is_not_there_is_named(monkeypatch):
    monkeypatch.setattr(shell, "_python_file", lambda name: {"a": "from b import gone  # remote.shell inlines it\n",
                                                             "b": "def here():\n    pass\n"}[name])
    shell.load_python.cache_clear()
    try:
        with pytest.raises(LookupError, match=r"remote/sh/b.py defines no gone\(\)"):
            shell.load_python("a")
    finally:
        shell.load_python.cache_clear()
