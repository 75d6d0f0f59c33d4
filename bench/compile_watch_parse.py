"""The compile watch's parse of torch's texts on hostile input (issue 39, item 11): the old guard regex against
the watch's bounded, linear parse, on a recompile reason of spaces around one `#` (torch pads a guard with
spaces before its `# source` comment). The old regex grows with the cube of the length (measured here: 2,015
characters took 286 s on the shared 2-core machine); the watch's parse is bounded to PARSE_MAX characters.

    python bench/compile_watch_parse.py [--chars 400]

Stdlib only: loads remote/sh/compilewatch.py by path. Prints one JSON object with each parse's seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import time
from pathlib import Path

WATCH = Path(__file__).resolve().parent.parent / "remote" / "sh" / "compilewatch.py"
OLD = r"\s+#\s*(.*?)\s+#\s*(\S+:\d+)(?: in \S+)?\s*$"  # the reason regex before issue 39


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=400)
    n = ap.parse_args().chars
    spec = importlib.util.spec_from_file_location("w", WATCH)
    w = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w)
    text = "G['K'] == 1.0" + " " * (n // 2) + "#" + " " * (n // 2) + "x"
    t0 = time.perf_counter()
    re.search(OLD, text)
    old = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = w.guard_text(text)
    new = time.perf_counter() - t0
    print(json.dumps({"chars": len(text), "old_regex_s": round(old, 4), "watch_s": round(new, 6), "guard": got[0]}))


if __name__ == "__main__":
    main()
