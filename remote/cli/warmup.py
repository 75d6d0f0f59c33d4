"""The warmup's words on the command line: a device's line as it ends (remote.events.DeviceWarmed). Pure, no
I/O; its own module because remote/cli/format.py is at the 700-line wall."""

from __future__ import annotations

from ..events import DeviceWarmed


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
