"""Warnings about where compiling threads sit, said before a job starts (pure; never imports torch).

Train's preflight and `remote doctor` pass the devices of the threads that compile in one process
(a drafter list such as "0,1,0", or warmup.devices) and the venv's torch version. Two compiling
threads on one device are what docs/evidence/gpu-race.md measured failing: the same dynamo cache entry is
then looked up by two threads at once, and torch's lookup can miss it (a steady-state recompile).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter

# What docs/evidence/gpu-race.md measured on 2 x H200 with torch 2.11.0+cu130 (3 threads over 2 GPUs).
MEASURED_TORCH = "2.11"
SAFE_LAYOUT = "one compiling thread per device"
GUARDED = ("remote_guard: CompileGuard.compile (each thread compiles its own copy) with every thread's "
           "first step in guard.first_step")


def device_key(device) -> str:
    """'0', 0 and 'cuda:0' name one device; anything else ('cpu', 'cuda:1') is taken as written."""
    text = str(device).strip().lower()
    return f"cuda:{text}" if text.isdigit() else text


def devices_from_command(command: str | None, flags=("--drafter-gpus",)) -> list[str] | None:
    """The comma-separated device list a command passes with one of `flags` ("--drafter-gpus 0,1,0" or
    "--drafter-gpus=0,1,0"), one entry per compiling thread; None when the command passes none."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag in flags:
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            return [d for d in value.split(",") if d.strip()]
    return None


def torch_minor(version: str | None) -> tuple[int, int] | None:
    """(2, 13) for '2.13.0+cpu' or '2.14.0.dev20260101'; None when it does not parse."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def compile_layout_notes(devices, torch_version: str | None) -> list[str]:
    """Warnings when several compiling threads share a device ([] when none do, or `devices` is None).

    `devices` has one entry per compiling thread; `torch_version` is the venv's (None: unknown)."""
    keys = [device_key(d) for d in devices or []]
    shared = {k: n for k, n in Counter(keys).items() if n > 1}
    if not shared:
        return []
    where = ", ".join(f"{k} has {n} threads ({', '.join(str(i + 1) for i, x in enumerate(keys) if x == k)})"
                      for k, n in shared.items())
    notes = [f"several compiling threads on one device: {where} of the layout {', '.join(keys)}. Dynamo's "
             "cache lookup is not safe when two threads hit the same entry: measured on 2 x H200 with torch "
             f"{MEASURED_TORCH}, 3 threads over 2 GPUs failed with a steady-state recompile in 6 of 10 runs "
             "when the threads shared one compiled function, and ran clean in 30 of 30 with " + GUARDED + "."]
    minor = torch_minor(torch_version)
    if minor is None:
        notes.append("torch version unknown: known safe is torch " + MEASURED_TORCH + " with " + SAFE_LAYOUT
                     + ", or several per device only through " + GUARDED + ".")
    elif minor <= (2, 13):
        notes.append(f"torch {torch_version}: the FX-tracing flag is global, so compiling threads also race while "
                     f"compiling; known safe: {SAFE_LAYOUT}, or several per device only through {GUARDED}.")
    else:
        notes.append(f"torch {torch_version} was not measured with this layout (measured: {MEASURED_TORCH}); "
                     f"known safe: {SAFE_LAYOUT}, or several per device through {GUARDED}, "
                     "until docs/evidence/gpu-race.md has a row for this version.")
    return notes
