"""The sharded vertex state (spark_jobs/partition/shards.py): the per-shard merge of a round's deltas equals
the driver's ExpansionState, whatever the task order; a retried merge task writes the same bytes; the
summaries the driver gets are O(p x buckets) and add up over the shards; the claims computed from the
thresholds do not depend on how the ids are sharded and cover each partition's lowest keys."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.storage.uri import parse_uri
from glisp_testing.graphs import rmat_edges
from spark_jobs.partition import kernels
from spark_jobs.partition.shards import (
    BUCKETS,
    CellView,
    ShardFiles,
    ShardRanges,
    VertexShards,
    _read_ipc,
    boundary_thresholds,
    key_bucket,
    score_class,
    seed_ranges,
    shard_claims,
    shard_summary,
    write_deltas,
)
from spark_jobs.partition.state import ExpansionState

N, P = 1000, 5


def random_state(seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 300, N) * (rng.random(N) < 0.9)
    resid = np.minimum(deg, rng.integers(0, 300, N))
    mask = (rng.random((N, P)) < 0.3) & (deg < 200)[:, None]
    bits = np.zeros((N, 1), np.uint64)
    for k in range(P):
        bits[:, 0] |= mask[:, k].astype(np.uint64) << np.uint64(k)
    return {"ids": np.arange(N), "resid": resid.astype(np.int64), "deg": deg.astype(np.int64), "bits": bits}


def cut(st: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    return {c: a[lo:hi] for c, a in st.items()}


def test_key_bucket_is_monotone_in_the_key():
    rng = np.random.default_rng(1)
    score = np.sort(rng.integers(0, 1 << 40, 5000))
    h = rng.integers(0, 1 << 62, 5000, dtype=np.uint64) << np.uint64(2)
    order = np.lexsort((h, [score_class(int(x)) for x in score]))  # the sharded selection's key order
    b = np.array([key_bucket(int(score[i]), h[i]) for i in order])
    assert (np.diff(b) >= 0).all() and b.max() < BUCKETS
    assert len({key_bucket(s, np.uint64(0)) for s in range(32)}) == 32  # small scores exact


def test_summaries_add_over_shards_and_claims_do_not_depend_on_them():
    st = random_state()
    whole = shard_summary(st, P, 11, 5)
    ranges = ShardRanges(N, 3)
    parts = [shard_summary(cut(st, *ranges.bounds(s)), P, 11, 5) for s in range(3)]
    assert whole[0].shape == (P + 1, BUCKETS)
    np.testing.assert_array_equal(whole[0], sum(p[0] for p in parts))
    np.testing.assert_array_equal(whole[1], sum(p[1] for p in parts))
    t = boundary_thresholds(*whole, np.full(P, 40), np.full(P, np.inf))
    rank = np.array([2, 0, 4, 1, 3], np.int32)
    seeds = seed_ranges(whole[0][P], whole[1][P], np.argsort(rank), np.full(P, 500), np.full(P, 10))
    one = shard_claims(st, t, rank, seeds, 11, 5)
    sharded = np.concatenate([shard_claims(cut(st, *ranges.bounds(s)), t, rank, seeds, 11, 5) for s in range(3)])
    np.testing.assert_array_equal(one, sharded)
    assert (one >= 0).sum() > 0


def test_thresholds_cover_the_lowest_keys_and_the_cap():
    st = random_state(4)
    count, weight = shard_summary(st, P, 7, 2)
    ids = np.arange(N)
    bsel = np.array([key_bucket(int(r), h) for r, h in zip(st["resid"], kernels.vertex_hash(ids, 7), strict=True)])
    nsel = np.array([1, 10, 50, 200, 10_000])
    t = boundary_thresholds(count, weight, nsel, np.full(P, np.inf))
    cls = np.array([score_class(int(r)) for r in st["resid"]], np.int64)
    key = (cls << 40) | (kernels.vertex_hash(ids, 7) >> np.uint64(24)).astype(np.int64)
    for k in range(P):
        on = np.flatnonzero((st["resid"] > 0) & ((st["bits"][:, 0] >> np.uint64(k)) & np.uint64(1)).astype(bool))
        lowest = on[np.argsort(key[on], kind="stable")[: nsel[k]]]
        chosen = on[bsel[on] < t[k]]
        assert set(lowest) <= set(chosen)  # the exact selection, rounded up to whole buckets
        assert len(chosen) <= nsel[k] + count[k, t[k] - 1]
    cap = np.array([1.0, 100.0, 1000.0, 5000.0, np.inf])
    tc = boundary_thresholds(count, weight, nsel, cap)
    for k in range(P - 1):
        rows = weight[k, : tc[k]].sum()
        assert rows <= cap[k] or count[k, : tc[k] - 1].sum() == 0  # only the first bucket may pass the cap


def test_seed_ranges_follow_the_rank_and_the_budgets():
    count = np.array([0, 3, 1, 0, 4, 2, 0, 5])
    weight = count * 10
    r = seed_ranges(count, weight, np.array([2, 0, 1]), np.array([15, 25, 5]), np.array([100, 100, 1]))
    assert r.tolist() == [[2, 5], [5, 8], [0, 2]]  # 2 first (one bucket: budget), 0 then, 1 what is left


@pytest.fixture(scope="module")
def rows():
    s, d = rmat_edges(10, 8, seed=3)
    s, d = s % N, d % N
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    return s[o], d[o]


def test_merge_equals_the_driver_state_and_retries_write_the_same(spark, rows, tmp_path, monkeypatch):
    s, d = rows
    files = ShardFiles(parse_uri(str(tmp_path)), ShardRanges(N, 3), P, counts=True)
    shards = VertexShards(spark, files)
    groups = 4
    grp = (kernels.pair_keys(s, d) % np.uint64(groups)).astype(np.int64)
    rng = np.random.default_rng(2)
    pair = np.minimum(s, d) * N + np.maximum(s, d)
    _, inv = np.unique(pair, return_inverse=True)
    when = rng.integers(1, 3, inv.max() + 1)[inv]  # each pair allocated in round 1 or 2
    part = rng.integers(0, P, inv.max() + 1)[inv].astype(np.int32)
    deg = np.bincount(s, minlength=N) + np.bincount(d, minlength=N)
    driver = ExpansionState(P, deg.copy(), np.zeros((N, 1), np.uint64), np.arange(N), 5, len(s))
    driver.counts = np.zeros((N, P), np.int32)

    def degrees(g: int) -> None:
        m = grp == g
        v = np.concatenate([s[m], d[m]])
        write_deltas(
            files.delta_dir(0),
            g,
            files.ranges,
            (v, np.full(len(v), -1), np.ones(len(v), np.int64), np.zeros(len(v), np.int64)),
        )

    from glisp_spark.tasks import run_tasks

    run_tasks(spark, groups, degrees)
    gain, count, _ = shards.merge(0, 1, 5)
    assert gain.sum() == 0 and count[P].sum() == (deg > 0).sum()
    replicas = np.zeros(P, np.int64)
    for r in (1, 2):

        def alloc(g: int, r: int = r) -> tuple:
            m = grp == g
            delta = kernels.incidence_delta(s[m], d[m], np.where(when[m] == r, part[m], -1), P)
            write_deltas(files.delta_dir(r), g, files.ranges, delta)
            return delta

        for delta in run_tasks(spark, groups, alloc):
            driver.apply(delta)
        names = sorted(p.name for p in (tmp_path / "vdelta" / f"r{r:05d}").iterdir())
        first = files.merge_shard(shards.round, r, 1, names, 9, 5)
        written = files.state_uri(r, 1).local.read_bytes()
        gain, count, weight = shards.merge(r, 9, 5)  # the job's task 1 is a retry of the call above
        assert files.state_uri(r, 1).local.read_bytes() == written
        replicas += gain
        assert count.shape == (P + 1, BUCKETS) and first[0].shape == (P,)
    back = [files.read(2, i) for i in range(3)]
    ids = np.concatenate([b["ids"] for b in back])  # a shard holds the vertices with edges, in memory too
    np.testing.assert_array_equal(ids, np.flatnonzero(deg > 0))
    np.testing.assert_array_equal(np.concatenate([b["resid"] for b in back]), driver.resid[ids])
    np.testing.assert_array_equal(np.concatenate([b["bits"] for b in back]), driver.bits[ids])
    np.testing.assert_array_equal(np.concatenate([b["counts"] for b in back]), driver.counts[ids])
    np.testing.assert_array_equal(np.concatenate([b["deg"] for b in back]), deg[ids])
    np.testing.assert_array_equal(replicas, driver.vcount)
    assert driver.resid.sum() == 0 and shards.driver_bytes() == 0
    assert not (tmp_path / "vstate" / "r00001").exists()  # the previous round's state is dropped
    for i in range(3):  # the isolated ids are neither written nor held
        lo, hi = files.ranges.bounds(i)
        assert _read_ipc(files.state_uri(2, i)).num_rows == len(back[i]["ids"]) == (deg[lo:hi] > 0).sum()
    view = CellView(files, 2, 0, 2)  # a cell's local rows: shard 0's vertices, then shard 2's
    v = np.concatenate([back[2]["ids"][::7], back[0]["ids"][::5]])
    np.testing.assert_array_equal(view.globals(view.local(v)), v)
    np.testing.assert_array_equal(view.col("deg")[view.local(v)], deg[v])
    with pytest.raises(ValueError, match="not in its shards"):
        view.local(np.flatnonzero(deg == 0)[:1])  # an isolated id has no row
    assert (deg == 0).sum() > 0
    assert view._rows is not None and view._rows.table is not None  # dense ids: rows by a table
    monkeypatch.setattr("spark_jobs.partition.shards.TABLE_SPAN", 0)
    searched = CellView(files, 2, 0, 2)  # sparse ones by a binary search: the same rows
    np.testing.assert_array_equal(searched.local(v), view.local(v))
    assert searched._rows is not None and searched._rows.table is None
    for bad in (np.flatnonzero(deg == 0)[:1], np.array([int(v.max()) + 10**6])):  # isolated; past the span
        with pytest.raises(ValueError, match="not in its shards"):
            searched.local(bad)
        with pytest.raises(ValueError, match="not in its shards"):
            view.local(bad)


def test_relocation_cuts_bound_vb_and_the_balance_excess():
    from spark_jobs.partition.sharded_relocate import balance_bounds, trim_classes

    vcount = np.array([100, 100, 96, 100])
    count = np.zeros((4, 8), np.int64)
    count[2] = [5, 5, 5, 5, 0, 0, 0, 5]  # the lightest partition plans 25 removals over five classes
    count[0, 0] = 3
    cost = count.copy()
    cut = trim_classes(count, cost, vcount, 1.05)
    v = vcount - np.array([cost[k, : cut[k]].sum() for k in range(4)])
    assert v.max() / v.mean() <= 1.05 + 1e-9 and cut[0] == 8  # partition 2 trimmed, 0 untouched
    assert cut[2] == 2  # its two cheapest classes stay (10 removals): the dearest went first
    assert (trim_classes(count, cost, vcount, 2.0) == 8).all()  # a loose bound drops nothing
    cand = np.zeros((4, 5), np.int64)
    cand[1] = [2, 2, 2, 2, 2]
    heavy = np.array([False, True, False, False])
    b = balance_bounds(cand, np.array([100, 116, 100, 100]), heavy, 1.05)  # excess 7: three buckets of 2
    assert b[1] == 3 and b[0] == 0


def test_cells_and_the_state_switch(cfg):
    from glisp_core.config import with_values
    from spark_jobs.partition.sharded import cell_of, cell_shards, use_shards

    s = 5
    pairs = cell_shards(s)
    a, b = np.meshgrid(np.arange(s), np.arange(s))
    idx = cell_of(a.ravel(), b.ravel(), s)
    assert len(pairs) == 15 and set(idx.tolist()) == set(range(15))
    assert all(pairs[i] == (min(x, y), max(x, y)) for i, x, y in zip(idx, a.ravel(), b.ravel(), strict=True))
    auto = with_values(cfg, "partition", state_auto_mb=10**6).partition  # ids alone decide
    assert auto.state == "auto" and use_shards(auto, 10**9)
    assert use_shards(auto, auto.state_auto_vertices) and not use_shards(auto, auto.state_auto_vertices - 1)
    # by memory (the default): the driver mode's estimate for the ids and partitions against state_auto_mb
    mem = with_values(cfg, "partition", state_auto_mb=1600, parts=8).partition
    assert not use_shards(mem, 4_194_304)  # R-MAT 22 at p = 8: about 1.5 GB, measured 1.9 GB peak: the driver
    assert use_shards(mem, 8_388_608)  # R-MAT 23 at p = 8: about 3.1 GB
    assert use_shards(with_values(cfg, "partition", state_auto_mb=1600, parts=32).partition, 4_194_304)
    assert not use_shards(with_values(cfg, "partition", state="driver").partition, 10**9)
    assert use_shards(with_values(cfg, "partition", state="sharded").partition, 10)
