"""Measure what a block of driver code allocates (``tracemalloc``), without the interpreter's own table growth.

Why: CPython keeps interned strings in one dict for the whole process. Every string ``sys.intern`` adds takes
a slot, freed strings leave holes, and when the slots run out the table is rebuilt: one block of 7.7 MB once
it holds 2^19 slots (a test process holds 100-200 thousand interned strings). pathlib interns each part of
every path it builds, zarr's local store builds one per chunk it reads, so a rebuild lands in whatever
measured window the process's history puts it, and that window then reads 7.7 MB "allocated" by code that
holds nothing. :func:`traced` rebuilds the table just before the window, which leaves it room for at least as
many new strings as it holds.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

REBUILT = 1 << 20  # a block this large allocated while interning short strings is the table being rebuilt
BATCH = 1024
MAX_INSERTS = 4_000_000  # bounds the loop where no rebuild is seen (another interpreter's interning)


def make_room_for_interned_strings() -> int:
    """Intern short-lived strings until the table is rebuilt; returns how many it took (``MAX_INSERTS`` when
    no rebuild was seen). After it the table has room for at least as many new strings as it holds."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        for done in range(0, MAX_INSERTS, BATCH):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            for i in range(done, done + BATCH):
                sys.intern(f"glisp-room-{i}")  # dies at once: a slot taken, a hole left
            if tracemalloc.get_traced_memory()[1] - before >= REBUILT:
                return done + BATCH
        return MAX_INSERTS
    finally:
        if not was_tracing:
            tracemalloc.stop()


@dataclass
class Traced:
    peak: int = 0  # bytes, set when the block ends


@contextmanager
def traced() -> Iterator[Traced]:
    """``tracemalloc`` over the block, started after :func:`make_room_for_interned_strings`; the block may
    reset the peak itself (``tracemalloc.reset_peak``) to measure parts apart. ``peak`` is the peak since the
    last reset."""
    out = Traced()
    make_room_for_interned_strings()
    tracemalloc.start()
    try:
        yield out
        out.peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
