"""The two-level embedding cache of one inference task (GLISP section III-D).

- :class:`StaticCache` (first level, local disk): before each layer the task copies the previous
  layer's rows of every vertex it will read (its own vertices and the sampled out-of-partition
  neighbours) from the layer's Zarr array into one file on local disk, under consecutive local ids
  in the chosen order. Every lookup of the layer hits it.
- :class:`ChunkCache` (second level, memory): the static cache is read in chunks of
  ``cache_chunk_rows`` rows; the dynamic cache keeps up to ``capacity`` of them, evicting FIFO (the
  paper's choice) or LRU.

**Chunk reads** (what the order comparison counts): the task streams its vertices in batches; a
batch needs the rows of its vertices and of their sampled neighbours, and every distinct static-cache
chunk holding one of those rows is one chunk read, served by the dynamic cache (a hit) or by the
static cache (a miss). Orders that put a partition's vertices, and its high-degree vertices, next to
each other make a batch touch fewer chunks and the same chunks again soon, so they read fewer chunks
and hit more. :func:`simulate_hits` replays the access trace under other policies and sizes.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numba import njit

from glisp_core.errors import GlispError
from glisp_core.partition_format.reader import positions_in

POLICIES = ("fifo", "lru")


class StaticCache:
    """Rows of ``ids`` (global vertex ids, already in local-id order) in one float32 file on local disk."""

    def __init__(self, path: str | os.PathLike[str], ids: np.ndarray, dim: int, chunk_rows: int) -> None:
        self.path = Path(path)
        self.ids = np.asarray(ids, np.int64)
        self.dim, self.chunk_rows = int(dim), int(chunk_rows)
        self._sorter = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._sorter]
        n = max(len(self.ids), 1)  # np.memmap refuses an empty file
        self.mm = np.memmap(self.path, dtype=np.float32, mode="w+", shape=(n, self.dim))

    @property
    def num_chunks(self) -> int:
        return -(-len(self.ids) // self.chunk_rows)

    @property
    def nbytes(self) -> int:
        return len(self.ids) * self.dim * 4

    def local_ids(self, vids: np.ndarray) -> np.ndarray:
        """Local id of each global id; every id the task reads is cached, so a miss is a bug."""
        p = positions_in(self._sorted, vids)
        if (p < 0).any():
            bad = np.asarray(vids)[p < 0][:3].tolist()
            raise GlispError(f"static cache: vertices {bad} were not cached (the fill missed them)")
        return self._sorter[p]

    def put(self, local: np.ndarray, rows: np.ndarray) -> None:
        self.mm[np.asarray(local, np.int64)] = rows

    def chunk(self, c: int) -> np.ndarray:
        """Chunk ``c`` read from disk (a copy: the dynamic cache owns it)."""
        a = c * self.chunk_rows
        return np.array(self.mm[a : min(a + self.chunk_rows, len(self.ids))])

    def close(self) -> None:
        mm, self.mm = self.mm, None
        if mm is not None:
            mm._mmap.close()  # type: ignore[attr-defined]
        self.path.unlink(missing_ok=True)


class ChunkCache:
    """The dynamic (memory) cache: up to ``capacity`` chunks loaded by ``load``, FIFO or LRU."""

    def __init__(self, capacity: int, policy: str, load: Callable[[int], np.ndarray]) -> None:
        if policy not in POLICIES:
            raise GlispError(f"infer.cache_policy: expected one of {POLICIES} (got {policy!r})")
        if capacity < 1:
            raise GlispError(f"dynamic cache: capacity must be at least 1 chunk (got {capacity})")
        self.capacity, self.lru, self.load = int(capacity), policy == "lru", load
        self._chunks: OrderedDict[int, np.ndarray] = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def get(self, c: int) -> np.ndarray:
        a = self._chunks.get(c)
        if a is not None:
            self.hits += 1
            if self.lru:
                self._chunks.move_to_end(c)
            return a
        self.misses += 1
        a = self.load(c)
        if len(self._chunks) >= self.capacity:
            self._chunks.popitem(last=False)
            self.evictions += 1
        self._chunks[c] = a
        return a

    @property
    def reads(self) -> int:
        return self.hits + self.misses

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.reads if self.reads else 0.0


def gather_rows(cache: ChunkCache, local: np.ndarray, chunk_rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the local ids ``local`` through the dynamic cache; returns them and the chunks read."""
    local = np.asarray(local, np.int64)
    chunk = local // chunk_rows
    order = np.argsort(chunk, kind="stable")
    cs = chunk[order]
    cut = np.flatnonzero(np.diff(cs)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(cs)]])
    out = np.empty((len(local), dim), np.float32)
    touched = cs[starts] if len(cs) else np.empty(0, np.int64)
    for c, a, b in zip(touched.tolist(), starts.tolist(), ends.tolist(), strict=True):
        idx = order[a:b]
        out[idx] = cache.get(c)[local[idx] - c * chunk_rows]
    return out, touched


def capacity_of(num_chunks: int, fraction: float, chunks: int = 0) -> int:
    """Dynamic cache size in chunks: ``chunks`` if set, else ``floor(fraction * num_chunks)``, at least 1."""
    if chunks > 0:
        return int(chunks)
    if not 0 < fraction <= 1:
        raise GlispError(f"infer.cache_fraction: expected a fraction in (0, 1] (got {fraction})")
    return max(1, int(fraction * num_chunks))


@njit(nogil=True, cache=True)
def simulate_hits(trace, num_chunks, capacity, lru):  # pragma: no cover - compiled
    """Hits of a ``capacity``-chunk FIFO (``lru=False``) or LRU cache on the chunk access ``trace``."""
    slot_of = np.full(num_chunks, -1, np.int64)
    slots = np.full(capacity, -1, np.int64)
    stamp = np.zeros(capacity, np.int64)
    used = 0
    head = 0  # FIFO: next slot to evict
    hits = 0
    for t in range(len(trace)):
        c = trace[t]
        s = slot_of[c]
        if s >= 0:
            hits += 1
            if lru:
                stamp[s] = t
            continue
        if used < capacity:
            s = used
            used += 1
        elif lru:
            s = 0
            for j in range(1, capacity):
                if stamp[j] < stamp[s]:
                    s = j
            slot_of[slots[s]] = -1
        else:
            s = head
            head = (head + 1) % capacity
            slot_of[slots[s]] = -1
        slots[s] = c
        slot_of[c] = s
        stamp[s] = t
    return hits
