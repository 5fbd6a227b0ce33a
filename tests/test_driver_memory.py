"""The driver-memory tests' measure leaves out the interpreter's table of interned strings."""

from __future__ import annotations

import sys
import tracemalloc

from glisp_testing.driver_memory import REBUILT, make_room_for_interned_strings, traced


def _interned_peak(n: int, tag: str) -> int:
    """The traced peak while interning ``n`` new strings that die at once (a chunk read's path parts)."""
    tracemalloc.start()
    try:
        for i in range(n):
            sys.intern(f"{tag}-{i}")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_table_is_rebuilt_and_then_has_room():
    make_room_for_interned_strings()
    room = make_room_for_interned_strings()  # from one rebuild to the next: the room the first one left
    assert 10_000 <= room < 4_000_000, room
    # without the room made, these strings rebuild the table somewhere in them: a block of 1 MB or more
    assert _interned_peak(room + 1024, "without-room") >= REBUILT
    make_room_for_interned_strings()
    assert _interned_peak(room // 2, "with-room") < REBUILT // 4


def test_traced_measures_the_block_and_stops_tracing():
    with traced() as t:
        held = bytearray(3 << 20)
    assert 3 << 20 <= t.peak < (3 << 20) + (1 << 20) and not tracemalloc.is_tracing()
    del held
