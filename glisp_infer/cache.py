"""The two-level embedding cache of one inference task (GLISP section III-D).

- :class:`StaticCache` (first level, local disk): before each layer the task has, on local disk, the
  previous layer's rows of every vertex it will read, its own vertices and the sampled neighbours
  mastered elsewhere, under consecutive local ids in the chosen order. Every lookup of the layer hits it.
- :class:`ChunkCache` (second level, memory): the static cache is read in chunks of
  ``cache_chunk_rows`` rows; the dynamic cache keeps up to ``capacity`` of them, evicting FIFO (the
  paper's choice) or LRU. With an admission plan (:func:`reread_plan`) a missed chunk enters the cache only
  if one of the next ``window`` batches reads it again; otherwise its rows are copied straight from the
  static cache and the resident chunks stay.

**Chunk reads** (what the order comparison counts): the task streams its vertices in batches; a
batch needs the rows of its vertices and of their sampled neighbours, and every distinct static-cache
chunk holding one of those rows is one chunk read, served by the dynamic cache (a hit) or by the
static cache (a miss). Orders that put a partition's vertices, and its high-degree vertices, next to
each other make a batch touch fewer chunks and the same chunks again soon, so they read fewer chunks
and hit more. :func:`simulate_hits` replays the access trace under other policies and sizes.

**Why admission needs a plan, and why the task has one.** A batch of 1,024 vertices reads about 80 distinct
chunks, five times what a 5% cache holds, so under plain FIFO or LRU every batch flushes the cache with chunks
read once, and the few hot chunks (each partition group's high-degree head under PDS) do not survive to the
next batch; even the offline optimum (Belady's MIN) hits only a little more at that batch size. A layer's
reads are known before it streams: the samples are a function of (seed, layer, vertex) and the plan job
drew them. So the task computes every batch's chunks first (:func:`batch_chunks`) and admits a missed chunk
only if it is read again soon: the cache then holds what the next batches reuse.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from glisp_core.errors import GlispError
from glisp_core.partition_format.reader import positions_in
from glisp_infer.scratch import allocate, disk_scratch, reads_in_place

POLICIES = ("fifo", "lru")


class StaticCache:
    """Rows of ``ids`` (global vertex ids, already in local-id order) in one float32 file on local disk."""

    def __init__(self, scratch: Path, ids: np.ndarray, dim: int, chunk_rows: int, adopt: Path | None = None) -> None:
        """``adopt``: a file of exactly these rows, partly filled already (the previous task wrote its rows in
        place); it is moved here, so a retry of this task never sees it half-filled."""
        self.ids = np.asarray(ids, np.int64)
        self.dim, self.chunk_rows = int(dim), int(chunk_rows)
        self._sorter = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._sorter]
        name = f"static-{uuid.uuid4().hex}.f32"
        self.path = Path(scratch) / name
        shape = (max(len(self.ids), 1), self.dim)
        if adopt is not None:
            os.replace(adopt, self.path)
        elif not allocate(self.path, shape[0] * shape[1] * 4):  # memory was full: this one goes to the disk
            self.path = disk_scratch(Path(scratch).name) / name
            if not allocate(self.path, shape[0] * shape[1] * 4):
                raise GlispError(f"static cache: no room for {shape[0] * shape[1] * 4:,} bytes in {self.path.parent}")
        self.mm: np.memmap[Any, np.dtype[np.float32]] | None = np.memmap(
            self.path, dtype=np.float32, mode="r+", shape=shape
        )

    @property
    def num_chunks(self) -> int:
        return -(-len(self.ids) // self.chunk_rows)

    def local_ids(self, vids: np.ndarray) -> np.ndarray:
        """Local id of each global id; every id the task reads is cached, so a miss is a bug."""
        p = positions_in(self._sorted, vids)
        if (p < 0).any():
            bad = np.asarray(vids)[p < 0][:3].tolist()
            raise GlispError(f"static cache: vertices {bad} were not cached (the fill missed them)")
        return self._sorter[p]

    def put(self, local: np.ndarray, rows: np.ndarray) -> None:
        assert self.mm is not None
        self.mm[np.asarray(local, np.int64)] = rows

    def close(self) -> None:
        mm, self.mm = self.mm, None
        if mm is not None:
            mm._mmap.close()  # type: ignore[attr-defined]
        self.path.unlink(missing_ok=True)


class ChunkCache:
    """The dynamic (memory) cache: up to ``capacity`` chunks of a static cache, FIFO or LRU.

    Chunks live in one preallocated pool ``(capacity, chunk_rows, dim)``; :meth:`gather` serves a
    batch's rows in one compiled pass: each distinct chunk is one access (a hit, or a miss that copies
    the chunk from the static cache into a slot, evicting the oldest or the least recently used).
    Within a batch the resident chunks are read first and the misses from the highest chunk down
    (see ``_gather``); :func:`simulate_hits` replays a trace in exactly this order.
    """

    def __init__(self, static: StaticCache, capacity: int, policy: str, resident: bool | None = None) -> None:
        """``resident``: the static cache's file is in memory or stays in the page cache
        (:func:`glisp_infer.scratch.reads_in_place`, the default when None); then a chunk load has nothing to
        move, and the cache keeps its slots, hits, misses and evictions as it would with the data while every
        row is read from the static cache's pages."""
        if policy not in POLICIES:
            raise GlispError(f"infer.cache_policy: expected one of {POLICIES} (got {policy!r})")
        if capacity < 1:
            raise GlispError(f"dynamic cache: capacity must be at least 1 chunk (got {capacity})")
        self.static, self.lru = static, policy == "lru"
        self.resident = reads_in_place(static.path) if resident is None else resident
        self.capacity = int(min(capacity, max(static.num_chunks, 1)))
        shape = (self.capacity, 1, 0) if self.resident else (self.capacity, static.chunk_rows, static.dim)
        self.pool = np.empty(shape, np.float32)
        self.slot_of = np.full(max(static.num_chunks, 1), -1, np.int64)
        self.slot_chunk = np.full(self.capacity, -1, np.int64)
        self.link = new_links(self.capacity)
        self.state = new_state()

    def gather(self, local: np.ndarray, admit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the local ids ``local`` (any order, repeats allowed) and the chunks the batch read.

        ``admit``: per distinct chunk of the batch (ascending), whether a miss may enter the cache
        (:func:`reread_plan`); None admits every miss."""
        local = np.asarray(local, np.int64)
        if self.resident:
            return self._gather_resident(local, admit)
        order = np.argsort(local // self.static.chunk_rows, kind="stable")
        out = np.empty((len(local), self.static.dim), np.float32)
        touched = np.empty(len(local), np.int64)
        adm = np.ones(len(local), np.bool_) if admit is None else np.asarray(admit, np.bool_)
        st = self.static
        k = _gather(
            local,
            order,
            np.asarray(st.mm),
            len(st.ids),
            self.pool,
            *self._slots(),
            adm,
            out,
            touched,
        )
        if k < 0 or (admit is not None and len(adm) != k):
            raise GlispError(
                f"dynamic cache: the admission plan has {len(adm)} chunks for a batch that reads more or fewer"
            )
        return out, touched[:k]

    def _slots(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        """The cache's bookkeeping as the compiled code takes it: slot of each chunk, chunk of each slot, the LRU
        list, the counters, the policy."""
        return self.slot_of, self.slot_chunk, self.link, self.state, self.lru

    def _gather_resident(self, local: np.ndarray, admit: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The same accesses as :meth:`gather` (one per distinct chunk, in its order), without moving chunk data."""
        touched = np.unique(local // self.static.chunk_rows)
        adm = np.ones(len(touched), np.bool_) if admit is None else np.asarray(admit, np.bool_)
        if len(adm) != len(touched):
            raise GlispError(
                f"dynamic cache: the admission plan has {len(adm)} chunks for a batch that reads {len(touched)}"
            )
        k = len(touched)
        _serve(
            touched,
            np.zeros(k + 1, np.int64),
            _NONE,
            _NONE,
            _NO_ROWS,
            *self._slots(),
            adm,
            np.empty((len(self.slot_of), 0), np.float32),
            len(self.slot_of),
            self.pool,
        )
        assert self.static.mm is not None
        return np.asarray(self.static.mm)[local], touched

    @property
    def hits(self) -> int:
        return int(self.state[2])

    @property
    def misses(self) -> int:
        return int(self.state[3])

    @property
    def reads(self) -> int:
        return self.hits + self.misses

    @property
    def bypassed(self) -> int:
        """Misses served straight from the static cache (not admitted)."""
        return int(self.state[4])

    @property
    def evictions(self) -> int:
        return max(0, self.misses - self.bypassed - self.capacity)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.reads if self.reads else 0.0


_NONE = np.empty(0, np.int64)
_NO_ROWS = np.empty((0, 0), np.float32)

# state: used slots, FIFO head, hits, misses, misses not admitted, LRU least recent slot, LRU most recent
STATE_LEN = 7


@njit(cache=True)
def new_state() -> np.ndarray:  # pragma: no cover - compiled
    st = np.zeros(STATE_LEN, np.int64)
    st[5] = st[6] = -1
    return st


@njit(cache=True)
def new_links(capacity: int) -> np.ndarray:  # pragma: no cover - compiled
    """The LRU list over slots: ``link[0, s]`` the slot used just before ``s``, ``link[1, s]`` just after (-1: none)."""
    return np.full((2, max(capacity, 1)), -1, np.int64)


@njit(nogil=True, cache=True)
def _unlink(s, link, state):  # pragma: no cover - compiled
    p, n = link[0, s], link[1, s]
    if p >= 0:
        link[1, p] = n
    else:
        state[5] = n
    if n >= 0:
        link[0, n] = p
    else:
        state[6] = p
    link[0, s] = link[1, s] = -1


@njit(nogil=True, cache=True)
def _touch(s, link, state):  # pragma: no cover - compiled
    """Make slot ``s`` the most recently used (it must not be in the list)."""
    t = state[6]
    link[0, s] = t
    link[1, s] = -1
    if t >= 0:
        link[1, t] = s
    else:
        state[5] = s
    state[6] = s


@njit(nogil=True, cache=True)
def _victim(capacity, state, link, lru):  # pragma: no cover - compiled
    """The slot a miss fills: a free one, else the least recently used (LRU, the head of the list: O(1)) or the
    oldest (FIFO)."""
    used = state[0]
    if used < capacity:
        state[0] = used + 1
        return used
    if lru:
        s = state[5]
        _unlink(s, link, state)
        return s
    s = state[1]
    state[1] = (s + 1) % capacity
    return s


@njit(nogil=True, cache=True)
def _access(c, slot_of, slot_chunk, link, state, lru, static, nrows, pool):  # pragma: no cover - compiled
    """One chunk read: the chunk's slot, loading it from the static cache on a miss."""
    chunk_rows = pool.shape[1]
    s = slot_of[c]
    if s >= 0:
        state[2] += 1
        if lru:
            _unlink(s, link, state)
            _touch(s, link, state)
        return s
    state[3] += 1
    s = _victim(pool.shape[0], state, link, lru)
    if slot_chunk[s] >= 0:
        slot_of[slot_chunk[s]] = -1
    a = c * chunk_rows
    b = min(a + chunk_rows, nrows)
    pool[s, : b - a, :] = static[a:b, :]
    slot_chunk[s] = c
    slot_of[c] = s
    if lru:
        _touch(s, link, state)
    return s


@njit(nogil=True, cache=True)
def _serve(
    chunks, starts, local, order, out, slot_of, slot_chunk, link, state, lru, admit, static, nrows, pool
):  # pragma: no cover - compiled
    """Serve one batch's distinct ``chunks`` (ascending), copying rows ``order[starts[g]:starts[g + 1]]``
    of chunk ``g`` into ``out``: resident chunks first (this batch's misses cannot evict them before
    they are read), then the misses from the highest chunk down, so that the chunks left in memory
    for the next batch are the lowest ones: under PDS, the partition's highest-degree vertices. A miss
    with ``admit[g]`` false is copied from the static cache without taking a slot."""
    nt = len(chunks)
    hit = np.empty(nt, np.bool_)
    for g in range(nt):
        hit[g] = slot_of[chunks[g]] >= 0
    chunk_rows = pool.shape[1]
    for p in range(2):
        for q in range(nt):
            g = q if p == 0 else nt - 1 - q
            if hit[g] != (p == 0):
                continue
            c = chunks[g]
            if p == 1 and not admit[g]:
                state[3] += 1
                state[4] += 1
                for i in range(starts[g], starts[g + 1]):
                    j = order[i]
                    out[j, :] = static[local[j], :]
                continue
            s = _access(c, slot_of, slot_chunk, link, state, lru, static, nrows, pool)
            for i in range(starts[g], starts[g + 1]):
                j = order[i]
                out[j, :] = pool[s, local[j] - c * chunk_rows, :]


@njit(nogil=True, cache=True)
def _gather(
    local, order, static, nrows, pool, slot_of, slot_chunk, link, state, lru, admit, out, touched
):  # pragma: no cover - compiled
    chunk_rows = pool.shape[1]
    m = len(order)
    starts = np.empty(m + 1, np.int64)
    nt = 0
    for i in range(m):
        c = local[order[i]] // chunk_rows
        if i == 0 or c != touched[nt - 1]:
            touched[nt] = c
            starts[nt] = i
            nt += 1
    starts[nt] = m
    if len(admit) < nt:
        return -1
    _serve(
        touched[:nt], starts, local, order, out, slot_of, slot_chunk, link, state, lru, admit[:nt], static, nrows, pool
    )
    return nt


def capacity_of(num_chunks: int, fraction: float, chunks: int = 0) -> int:
    """Dynamic cache size in chunks: ``chunks`` if set, else ``floor(fraction * num_chunks)``, at least 1."""
    if chunks > 0:
        return int(chunks)
    if not 0 < fraction <= 1:
        raise GlispError(f"infer.cache_fraction: expected a fraction in (0, 1] (got {fraction})")
    return max(1, int(fraction * num_chunks))


@njit(nogil=True, cache=True)
def simulate_hits(trace, bounds, num_chunks, capacity, lru, admit):  # pragma: no cover - compiled
    """Hits of a ``capacity``-chunk FIFO (``lru=False``) or LRU cache on a chunk access trace: batch
    ``b`` read the distinct chunks ``trace[bounds[b]:bounds[b + 1]]`` (ascending), served exactly as
    :class:`ChunkCache` serves them (a miss enters the cache only where ``admit``), without the data."""
    slot_of = np.full(num_chunks, -1, np.int64)
    slot_chunk = np.full(capacity, -1, np.int64)
    link = new_links(capacity)
    state = new_state()
    pool = np.empty((capacity, 1, 0), np.float32)  # no data: chunk c stands for row c
    rows = np.empty((num_chunks, 0), np.float32)
    none = np.empty(0, np.int64)
    out = np.empty((0, 0), np.float32)
    for b in range(len(bounds) - 1):
        k = bounds[b + 1] - bounds[b]
        _serve(
            trace[bounds[b] : bounds[b + 1]],
            np.zeros(k + 1, np.int64),
            none,
            none,
            out,
            slot_of,
            slot_chunk,
            link,
            state,
            lru,
            admit[bounds[b] : bounds[b + 1]],
            rows,
            num_chunks,
            pool,
        )
    return state[2]


def batch_chunks(local_by_batch: list[np.ndarray], chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunk access trace a layer will make: batch ``b`` reads the distinct chunks
    ``trace[bounds[b]:bounds[b + 1]]`` (ascending) of the local ids it needs, as :meth:`ChunkCache.gather`
    will read them."""
    per = [np.unique(np.asarray(x, np.int64) // chunk_rows) for x in local_by_batch]
    bounds = np.zeros(len(per) + 1, np.int64)
    np.cumsum([len(x) for x in per], out=bounds[1:])
    trace = np.concatenate(per) if per else np.empty(0, np.int64)
    return trace, bounds


@njit(nogil=True, cache=True)
def reread_plan(trace, bounds, num_chunks, window):  # pragma: no cover - compiled
    """Per access of ``trace``: admit the chunk on a miss only if one of the next ``window`` batches reads it
    again (``window`` 0: admit every miss; -1: none, every miss is served from the static cache). A chunk read
    once, or only much later, would take the slot of a chunk the next batch needs: with plain FIFO a 5% cache is
    flushed by every batch of 1,024 vertices."""
    if window < 0:
        return np.zeros(len(trace), np.bool_)
    admit = np.ones(len(trace), np.bool_)
    if window == 0:
        return admit
    nxt = np.full(num_chunks, np.iinfo(np.int64).max, np.int64)  # the next batch (after b) that reads chunk c
    for b in range(len(bounds) - 2, -1, -1):
        for i in range(bounds[b], bounds[b + 1]):
            c = trace[i]
            admit[i] = nxt[c] - b <= window
        for i in range(bounds[b], bounds[b + 1]):
            nxt[trace[i]] = b
    return admit
