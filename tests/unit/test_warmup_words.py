"""A device's warmup line: the library reports its figures as a typed event (remote.events.DeviceWarmed), the
command line words it (remote/cli/warmup.py) as the warmup always printed it."""

import remote
from remote.cli import format as fmt
from remote.events import DeviceWarmed
from remote.ops import warmup as wm


def event_of(result: "wm.DeviceResult") -> DeviceWarmed:
    d = result.public()
    return DeviceWarmed(200, "", d.device, d.seconds, d.new_files, d.new_bytes, d.cache_files, d.cache_bytes,
                        d.hits, d.misses, d.counted_by)


def test_a_cold_device_is_worded_with_its_gain_and_the_guards_counts():
    cold = wm.DeviceResult("0", 10.0, 51.25, {"fxgraph_miss": 3, "autograd_hit": 1}, (2, 100), (9, 100 + 3 * 1024 ** 2))
    assert fmt.event_text(event_of(cold), None) == \
        "  device 0:   41.2s  cache: +7 files, +3.0 MiB (now 9 files, 3.0 MiB); guard: 1 hits, 3 misses"
    assert fmt.event_text(event_of(cold), 200).startswith("[200]   device 0:")  # marked inside a group call


def test_a_warm_device_counted_by_torch_and_one_counted_by_nothing():
    warm = wm.DeviceResult("1", 0.0, 4.0, {}, (9, 50), (9, 50), stats={"fxgraph_hit": 5})
    assert fmt.event_text(event_of(warm), None) == "  device 1:    4.0s  cache: nothing new (warm); torch: 5 hits, 0 misses"
    bare = wm.DeviceResult("all", 0.0, 1.0, {}, (0, 0), (1, 2048))
    assert fmt.event_text(event_of(bare), None) == "  device all:    1.0s  cache: +1 files, +2.0 KiB (now 1 files, 2.0 KiB)"
    assert bare.public().counted_by == "" and warm.public().warm and not bare.public().warm


def test_the_api_warmup_carries_each_devices_figures():
    a = wm.DeviceResult("0", 0.0, 2.0, {"fxgraph_hit": 1}, (0, 0), (3, 30))
    b = wm.DeviceResult("1", 1.0, 4.0, {}, (3, 30), (3, 30))
    got = wm.result_of(200, [a, b])
    assert isinstance(got.per_device[0], remote.WarmupDevice)
    assert [(d.device, d.seconds, d.new_files, d.counted_by) for d in got.per_device] == [("0", 2.0, 3, "guard"),
                                                                                           ("1", 3.0, 0, "")]
    assert (got.seconds, got.new_files, got.hits, got.guarded) == (5.0, 3, 1, True)
