"""The two-level cache: rows come back exactly, and hits follow FIFO / LRU as the replay predicts."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.errors import GlispError
from glisp_infer.cache import ChunkCache, StaticCache, batch_chunks, capacity_of, reread_plan, simulate_hits


def _static(tmp_path, n=100, dim=3, chunk_rows=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.permutation(1000)[:n]  # global ids in local order (not sorted)
    c = StaticCache(tmp_path, ids, dim, chunk_rows)
    vals = rng.normal(size=(n, dim)).astype(np.float32)
    c.put(np.arange(n)[::-1], vals[::-1])  # any order of puts
    return c, ids, vals


def test_static_cache_local_ids_and_missing(tmp_path) -> None:
    c, ids, _ = _static(tmp_path)
    assert np.array_equal(c.local_ids(ids[[5, 0, 99]]), [5, 0, 99])
    with pytest.raises(GlispError, match="were not cached"):
        c.local_ids(np.array([ids[0], 5000]))
    assert c.num_chunks == 13 and c.path.exists()
    c.close()
    assert not c.path.exists()


@pytest.mark.parametrize("resident", [False, True])
@pytest.mark.parametrize("policy", ["fifo", "lru"])
def test_dynamic_cache_rows_and_hits_match_the_replay(tmp_path, policy, resident) -> None:
    """Exact rows and the replay's hits, with chunk data moved into the cache, and (``resident``: a static cache
    in memory) without: the same accesses, slots and counts."""
    c, _, vals = _static(tmp_path)
    dyn = ChunkCache(c, 3, policy, resident=resident)
    rng = np.random.default_rng(1)
    trace = []
    for _ in range(60):
        # batches skewed to the first chunks, as PDS makes them
        local = np.minimum(rng.geometric(0.05, size=rng.integers(1, 12)) - 1, 99)
        got, touched = dyn.gather(local)
        np.testing.assert_array_equal(got, vals[local])
        assert np.array_equal(touched, np.unique(local // 8))  # each distinct chunk read once per batch
        trace.append(touched)
    t = np.concatenate(trace)
    bounds = np.cumsum([0] + [len(x) for x in trace])
    every = np.ones(len(t), bool)
    assert dyn.reads == len(t) and dyn.hits == simulate_hits(t, bounds, c.num_chunks, 3, policy == "lru", every)
    assert 0 < dyn.hits < dyn.reads
    c.close()


def test_fifo_and_lru_differ_as_defined() -> None:
    t = np.array([0, 1, 0, 2, 0, 3, 0])  # one chunk per batch; capacity 2: LRU keeps the hot chunk 0, FIFO not
    b = np.arange(len(t) + 1)
    every = np.ones(len(t), bool)
    assert simulate_hits(t, b, 4, 2, True, every) == 3
    assert simulate_hits(t, b, 4, 2, False, every) == 2


def test_a_batch_reads_resident_chunks_first_and_misses_from_the_top() -> None:
    # capacity 2, FIFO. Misses from the top: batch [0, 5, 9] loads 9, 5, 0, so 0 (the lowest: under PDS the
    # high-degree vertices) survives for the next batch; loaded upwards it would be evicted by 9.
    every = np.ones(4, bool)
    assert simulate_hits(np.array([0, 5, 9, 0]), np.array([0, 3, 4]), 10, 2, False, every) == 1
    # Resident first: chunk 1 is read before the batch's misses 3 and 2 can evict it.
    assert simulate_hits(np.array([1, 1, 2, 3]), np.array([0, 1, 4]), 10, 2, False, every) == 1


def test_capacity_of() -> None:
    assert capacity_of(400, 0.05) == 20 and capacity_of(10, 0.05) == 1 and capacity_of(10, 0.05, 4) == 4
    with pytest.raises(GlispError, match="cache_fraction"):
        capacity_of(10, 1.5)


def test_reread_plan_admits_only_chunks_read_again_within_the_window() -> None:
    # batches: [0 1 2] [0 3] [4] [0 1]
    t, b = np.array([0, 1, 2, 0, 3, 4, 0, 1]), np.array([0, 3, 5, 6, 8])
    assert reread_plan(t, b, 5, 1).tolist() == [True, False, False, False, False, False, False, False]
    assert reread_plan(t, b, 5, 2).tolist() == [True, False, False, True, False, False, False, False]
    assert reread_plan(t, b, 5, 3).tolist() == [True, True, False, True, False, False, False, False]
    assert reread_plan(t, b, 5, 0).all()
    assert not reread_plan(t, b, 5, -1).any()  # never: every miss is served from the static cache
    trace, bounds = batch_chunks([np.array([9, 0, 1, 8]), np.array([17])], 8)
    assert trace.tolist() == [0, 1, 2] and bounds.tolist() == [0, 2, 3]


@pytest.mark.parametrize("resident", [False, True])
def test_admission_keeps_the_chunks_the_next_batch_reads(tmp_path, resident) -> None:
    """A hot chunk read by every batch and two chunks read once per batch: plain FIFO with 2 slots loses the
    hot chunk to the one-off chunks every other batch, the planned admission keeps it; rows are exact either way."""
    c, _, vals = _static(tmp_path, n=200, chunk_rows=4)
    batches = [np.array([1, 2, 8 + 8 * k, 12 + 8 * k]) for k in range(20)]  # chunk 0, then chunks 2k+2, 2k+3
    trace, bounds = batch_chunks(batches, 4)
    admit = reread_plan(trace, bounds, c.num_chunks, 1)
    hits = {}
    for plan in (None, admit):
        dyn = ChunkCache(c, 2, "fifo", resident=resident)
        for k, x in enumerate(batches):
            got, touched = dyn.gather(x, None if plan is None else plan[bounds[k] : bounds[k + 1]])
            np.testing.assert_array_equal(got, vals[x])
            assert np.array_equal(touched, trace[bounds[k] : bounds[k + 1]])
        hits["all" if plan is None else "planned"] = dyn.hits
        every = np.ones(len(trace), bool) if plan is None else plan
        assert dyn.hits == simulate_hits(trace, bounds, c.num_chunks, 2, False, every)
        if plan is not None:
            assert dyn.bypassed == 40 and dyn.misses == 41  # every one-off chunk went around the cache
    assert hits == {"all": 10, "planned": 19}  # FIFO loses chunk 0 every other batch
    with pytest.raises(GlispError, match="admission plan"):
        ChunkCache(c, 2, "fifo", resident=resident).gather(batches[0], admit[:1])
    c.close()


def test_a_static_cache_in_memory_is_served_in_place(tmp_path, monkeypatch) -> None:
    """On a tmpfs, or on a disk when the file is at most a quarter of the memory available (the page cache keeps
    it), the dynamic cache moves no chunk data (its pool holds none); on a disk past that it copies chunks."""
    from glisp_infer import scratch
    from glisp_infer.scratch import SHM

    monkeypatch.setattr(scratch, "in_memory", lambda p: False)  # tmp_path on a disk, wherever pytest puts it
    c, _, vals = _static(tmp_path)
    size = c.path.stat().st_size
    monkeypatch.setattr(scratch, "cgroup_headroom", lambda: None)
    monkeypatch.setattr(scratch, "host_available", lambda meminfo=None: 4 * size)
    dyn = ChunkCache(c, 3, "fifo")
    assert dyn.resident and dyn.pool.size == 0
    np.testing.assert_array_equal(dyn.gather(np.array([3, 50, 3]))[0], vals[[3, 50, 3]])
    monkeypatch.setattr(scratch, "host_available", lambda meminfo=None: 4 * size - 1)
    assert not ChunkCache(c, 3, "fifo").resident and ChunkCache(c, 3, "fifo").pool.size == 3 * 8 * 3
    monkeypatch.setattr(scratch, "host_available", lambda meminfo=None: 1 << 40)
    monkeypatch.setattr(scratch, "cgroup_headroom", lambda: 4 * size - 1)  # a container's limit counts too
    assert not ChunkCache(c, 3, "fifo").resident
    c.close()
    monkeypatch.undo()
    if SHM.is_dir():
        m, _, vals = _static(SHM)
        dyn = ChunkCache(m, 3, "fifo")
        assert dyn.resident and dyn.pool.size == 0
        np.testing.assert_array_equal(dyn.gather(np.array([3, 50, 3]))[0], vals[[3, 50, 3]])
        m.close()


def _lru_oracle(trace: np.ndarray, bounds: np.ndarray, capacity: int, admit: np.ndarray) -> int:
    """LRU hits by an ordered dict, served as ChunkCache serves a batch: resident chunks first, then the admitted
    misses from the highest chunk down, each evicting the least recently used."""
    from collections import OrderedDict

    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for b in range(len(bounds) - 1):
        idx = range(bounds[b], bounds[b + 1])
        resident = [i for i in idx if trace[i] in cache]
        for i in resident:
            hits += 1
            cache.move_to_end(int(trace[i]))
        for i in [i for i in idx if i not in resident][::-1]:
            if admit[i]:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[int(trace[i])] = None
    return hits


@pytest.mark.parametrize("capacity", [1, 3, 17])
def test_lru_evicts_the_least_recently_used_chunk(tmp_path, capacity) -> None:
    """The O(1) LRU list against an ordered dict, on skewed batches with and without an admission plan; the real
    cache returns exact rows and the same hits."""
    rng = np.random.default_rng(capacity)
    c, _, vals = _static(tmp_path, n=400, chunk_rows=4, seed=capacity)
    batches = [np.minimum(rng.geometric(0.02, size=rng.integers(1, 20)) - 1, 399) for _ in range(300)]
    trace, bounds = batch_chunks(batches, 4)
    for admit in (np.ones(len(trace), bool), rng.random(len(trace)) < 0.6):
        expected = _lru_oracle(trace, bounds, capacity, admit)
        assert simulate_hits(trace, bounds, c.num_chunks, capacity, True, admit) == expected
        dyn = ChunkCache(c, capacity, "lru")
        for k, x in enumerate(batches):
            got, _ = dyn.gather(x, admit[bounds[k] : bounds[k + 1]])
            np.testing.assert_array_equal(got, vals[x])
        assert dyn.hits == expected and 0 < expected < len(trace)
    c.close()


def test_admitting_no_chunk_serves_every_read_from_the_static_cache(tmp_path) -> None:
    """``cache_admit_window = -1``: no chunk enters the dynamic cache, so nothing hits, every miss bypasses it, and
    the rows are still exact."""
    c, _, vals = _static(tmp_path, n=200, chunk_rows=4)
    batches = [np.array([1, 2, 8 + 8 * k, 12 + 8 * k]) for k in range(20)]
    trace, bounds = batch_chunks(batches, 4)
    admit = reread_plan(trace, bounds, c.num_chunks, -1)
    dyn = ChunkCache(c, 2, "fifo")
    for k, x in enumerate(batches):
        got, _ = dyn.gather(x, admit[bounds[k] : bounds[k + 1]])
        np.testing.assert_array_equal(got, vals[x])
    assert dyn.reads == len(trace) and dyn.hits == 0 and dyn.bypassed == dyn.misses == len(trace)
    assert simulate_hits(trace, bounds, c.num_chunks, 2, False, admit) == 0
    c.close()
