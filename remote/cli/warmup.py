"""The warmup's words on the command line: a device's line as it ends (remote.events.DeviceWarmed) and the
warning that what it compiled will not serve the run (remote.events.WarmupUnserved). Pure, no I/O; its own
module because remote/cli/format.py is at the 700-line wall."""

from __future__ import annotations

from ..events import DeviceWarmed, Event, WarmupUnserved
from ..naming import printable


def warmup_text(e: Event) -> str | None:
    """The warmup's own kinds as the command line shows them (format.event_text); None for any other kind."""
    if isinstance(e, DeviceWarmed):
        return device_warmed_text(e)
    if isinstance(e, WarmupUnserved):
        return unserved_text(e)
    return None


def unserved_text(e: WarmupUnserved) -> str:
    """`  [0] !! what this warmup compiled will not serve the run: REASON; ...` (at most three reasons), under
    the device's compile lines."""
    # the reasons name the job's functions and guards (the container's words): escaped, as printable() does
    return printable(f"  [{e.device}] !! what this warmup compiled will not serve the run: " + "; ".join(e.reasons[:3]))


def device_warmed_text(e: DeviceWarmed) -> str:
    """`  device 0:   41.2s  cache: +3 files, +1.2 MiB (now 9 files, 4.0 MiB); guard: 2 hits, 1 misses`."""
    gain = ("cache: nothing new (warm)" if e.new_files == 0 and e.new_bytes == 0 else
            f"cache: +{e.new_files} files, +{_size(e.new_bytes)} (now {e.cache_files} files, {_size(e.cache_bytes)})")
    counted = f"; {e.counted_by}: {e.hits} hits, {e.misses} misses" if e.counted_by else ""
    return f"  device {e.device}: {e.seconds:6.1f}s  {gain}{counted}"


def _size(n: float) -> str:
    # remote.naming.size, but by the magnitude: a cache that shrank reads -1.5 MiB, not -1572864 B
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
