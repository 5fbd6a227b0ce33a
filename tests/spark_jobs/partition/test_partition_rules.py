"""Algorithm rules: DNE's leftover rule and threshold, AdaDNE's adaptive factor, and partition quality on an
R-MAT graph (the expansion runs in one process with the same kernels the Spark rounds use; the Spark
path is checked equal to it in test_partition_contract.py, and one Spark run here checks the metrics)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from glisp_core.config import AdaDNEConfig, with_values
from glisp_testing.graphs import rmat_edges, write_dataset
from spark_jobs.partition import kernels
from spark_jobs.partition.adadne import adaptive_factors
from spark_jobs.partition.metrics import quality
from spark_jobs.partition.registry import get_partitioner


def local_metrics(src, dst, part, p):
    epp = np.bincount(part, minlength=p)
    key = np.unique(np.concatenate([src * p + part, dst * p + part]))
    vpp = np.bincount(key % p, minlength=p)
    return quality(epp, vpp, len(np.unique(np.concatenate([src, dst]))))


def run_local(cfg, algo, p, src, dst, n, **sub):
    c = with_values(cfg, "partition", algorithm=algo, parts=p)
    for section, values in sub.items():
        c = with_values(c, f"partition.{section}", **values)
    part, rounds = get_partitioner(c.partition).run_local(src, dst, n)
    assert (part >= 0).all()
    return part, rounds


@pytest.fixture(scope="module")
def rmat15():
    s, d = rmat_edges(15, 4, seed=3)  # 131,072 directed edge rows, power-law degrees
    return s, d, 1 << 15


def test_adaptive_factor_slows_heavy_partitions():
    a = AdaDNEConfig()
    lam = adaptive_factors(np.array([100, 300, 200]), np.array([50, 50, 200]), 400, 1000, a)
    assert lam[0] > lam[2] and lam[0] > lam[1]  # lightest in edges and vertices expands fastest
    e = adaptive_factors(np.array([100, 300, 200]), np.array([50, 50, 200]), 400, 1000, AdaDNEConfig(form="exp"))
    assert e[0] > e[1] and e[0] > e[2]
    assert np.all(lam >= a.lambda_min) and np.all(lam <= a.lambda_max)
    # as the remainder shrinks, accel > 0 speeds every partition up alike
    fast = adaptive_factors(np.array([1, 1]), np.array([1, 1]), 10, 1000, AdaDNEConfig(accel=0.5))
    slow = adaptive_factors(np.array([1, 1]), np.array([1, 1]), 1000, 1000, AdaDNEConfig(accel=0.5))
    assert np.all(fast > slow)


def test_dne_threshold_and_leftover_rule(cfg, rmat15):
    src, dst, n = rmat15
    p = 4
    c = with_values(cfg, "partition", algorithm="dne", parts=p)
    algo = get_partitioner(c.partition)
    part, rounds = algo.run_local(src, dst, n)
    epp = np.bincount(part, minlength=p)
    T = c.partition.dne.alpha * len(src) / p
    # every partition but the one that took the leftovers stays within the threshold (plus one round's
    # sampling error of the two-hop estimate)
    over = np.flatnonzero(epp > T * 1.02)
    assert len(over) <= 1
    # leftover rule on a hand-made state: all but the smallest full -> everything to the smallest
    st = algo.new_state(np.array([2, 2, 2, 2], np.int64), 100)
    algo.threshold = 30.0
    st.ecount[:] = [31, 31, 31, 5]
    assert algo.select(st).leftover_to == 3
    # remaining fits in the smallest: leftover too
    st.ecount[:] = [31, 20, 29, 18]  # remaining = 2 <= 30 - 18
    assert algo.select(st).leftover_to == 3


def test_quality_on_rmat(cfg, rmat15):
    """AdaDNE: EB, VB <= 1.10; VB below DNE's; RF within 1.1x DNE's and below 2D hash and random (p = 4, 8)."""
    src, dst, n = rmat15
    for p in (4, 8):
        ada = local_metrics(src, dst, run_local(cfg, "adadne", p, src, dst, n)[0], p)
        dne = local_metrics(src, dst, run_local(cfg, "dne", p, src, dst, n)[0], p)
        h2d = local_metrics(src, dst, kernels.edge_partition_2d(src, dst, p), p)
        rnd = local_metrics(src, dst, (kernels.pair_hash(src, dst, 1) % np.uint64(p)).astype(np.int32), p)
        assert ada["eb"] <= 1.10 and ada["vb"] <= 1.10, (p, ada)
        assert ada["vb"] < dne["vb"], (p, ada, dne)
        assert ada["rf"] <= 1.1 * dne["rf"], (p, ada, dne)  # DNE's replication, HDRF-like balance
        assert ada["rf"] < h2d["rf"] and ada["rf"] < rnd["rf"], (p, ada, h2d, rnd)


def test_quality_published_by_spark_run(spark, cfg, rmat15, tmp_path):
    """The published metrics of a real run equal the in-process ones (p=8, rounds partly in Spark)."""
    from spark_jobs.partition.job import run_partition

    src, dst, n = rmat15
    dv = write_dataset(tmp_path, "rmat15", src, dst, num_vertices=n)
    c = with_values(cfg, "partition", algorithm="adadne", parts=8, progress=False, local_finish_edges=60_000)
    c = with_values(c, "partition.adadne", cluster_start=False)  # its Spark jobs: test_clusters.py
    rec = run_partition(spark, c, dv)
    want = local_metrics(src, dst, run_local(c, "adadne", 8, src, dst, n)[0], 8)  # one start: as in Spark
    assert rec.counts["spark_rounds"] >= 1
    for k in ("rf", "vb", "eb"):
        assert rec.metrics[k] == pytest.approx(want[k], rel=1e-6)


# ---- balance by construction ------------------------------------------------------------------------


def test_round_kernel_never_exceeds_quota_or_splits_a_pair():
    """edge_round on a random state: rows per (group, partition) stay within the quotas, whatever the
    claims, shared partitions and acceptance say, and the rows of a pair get one decision."""
    rng = np.random.default_rng(3)
    n, p, groups = 400, 5, 4
    s, d = rmat_edges(9, 8, seed=11)
    s, d = np.concatenate([s, d]), np.concatenate([d, s])  # both directions: pairs of two rows
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    s, d = s[o] % n, d[o] % n
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    s, d = s[o], d[o]
    bits = rng.integers(0, 1 << p, (n, 1)).astype(np.uint64)
    claim = rng.integers(-1, p, n).astype(np.int32)
    quota = rng.integers(0, 40, (groups, p)).astype(np.int64)
    ones = np.ones(p)
    part = kernels.edge_round(s, d, claim, bits, np.array([(1 << p) - 1], np.uint64), ones, ones, 5, ones, quota)
    assert (part >= 0).sum() > 0
    grp = (kernels.pair_keys(s, d) % np.uint64(groups)).astype(np.int64)
    for g in range(groups):
        used = np.bincount(part[(grp == g) & (part >= 0)], minlength=p)
        assert (used <= quota[g]).all(), (g, used, quota[g])
    key = np.minimum(s, d) * n + np.maximum(s, d)
    for k in np.unique(key):
        assert len(set(part[key == k].tolist())) == 1


def test_canonical_order_is_the_lexsort_by_pair_then_eid():
    """The fast canonical order (one argsort of the pair key, ties by eid) is exactly the lexsort by
    (min, max, eid): repeated pairs in both directions, eids out of order, and ids too large for the key."""
    rng = np.random.default_rng(5)
    s, d = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    s, d = np.concatenate([s, d, s[:500]]), np.concatenate([d, s, d[:500]])  # both directions, repeats
    s, d = np.concatenate([s, np.full(200, 7)]), np.concatenate([d, np.full(200, 9)])  # a long run of one pair
    eid = rng.permutation(len(s)).astype(np.int64)
    for off in (0, 4_000_000_000):  # the second takes the lexsort fallback (n * n past int64)
        a, b = s + off, d + off
        want = np.lexsort((eid, np.maximum(a, b), np.minimum(a, b)))
        assert np.array_equal(kernels.canonical_order(a, b, eid), want)
        a, b, e = a[want], b[want], eid[want]  # rows in the order (a relocation's file): read_allocated keeps them
        assert kernels.in_canonical_order(a, b, e) and not kernels.in_canonical_order(a[::-1], b[::-1], e[::-1])
        a[[0, -1]], b[[0, -1]], e[[0, -1]] = a[[-1, 0]], b[[-1, 0]], e[[-1, 0]]  # first and last rows swapped
        assert not kernels.in_canonical_order(a, b, e)
    assert len(kernels.canonical_order(s[:0], d[:0], eid[:0])) == 0


def test_finishing_pass_never_exceeds_the_capacity():
    """finish_greedy where the replication score pulls every pair into partition 0 (it holds every vertex):
    partition 0 stops at its capacity and the rest spills over, every pair whole."""
    n, p = 60, 4
    a, b = np.triu_indices(n, 1)
    s, d = np.concatenate([a, b]), np.concatenate([b, a])  # a clique, two rows per pair
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    s, d = s[o], d[o]
    bits = np.zeros((n, 1), np.uint64)
    bits[:, 0] = 1  # every vertex already in partition 0
    ecount, vcount = np.array([100, 0, 0, 0], np.int64), np.array([n, 0, 0, 0], np.int64)
    cap = np.full(p, 1.04 * len(s) / p).astype(np.int64)
    deg = np.full(n, 2 * (n - 1), np.int64)
    part = kernels.finish_greedy(s, d, deg, bits, ecount, vcount, cap, 1.0, 1.0, 1.0)
    rows = np.bincount(part, minlength=p) + [100, 0, 0, 0]
    assert (rows <= cap).all() and rows[0] == cap[0] - cap[0] % 2, (rows, cap)
    key = np.minimum(s, d) * n + np.maximum(s, d)
    assert all(len(set(part[key == k].tolist())) == 1 for k in np.unique(key))


def test_group_quota_splits_room_without_exceeding_it():
    for room in (0, 1, 3, 7, 31, 1000, 12345):
        q = kernels.group_quota(np.array([room, room + 5]), 8, 3)
        assert (q.sum(axis=0) <= [room, room + 5]).all() and (q >= 0).all()
        assert q.max() >= min(room, 4)  # a pair of up to four rows fits in some group


@pytest.mark.parametrize("shape", ["ego", "chains", "star"])
@pytest.mark.parametrize("p", [3, 16])
def test_edge_balance_holds_on_any_shape(cfg, shape, p):
    """The hard capacity on the shapes that broke edge balance before (a dense ego-network, many small
    components and long chains, one hub): AdaDNE EB <= capacity (the relocation's), DNE EB <= alpha, every row allocated;
    AdaDNE's vertex balance within its target."""
    from glisp_testing.graphs import chains_edges, ego_network_edges

    if shape == "ego":
        s, d = ego_network_edges(n=1500)
    elif shape == "chains":
        s, d = chains_edges(chains=400, long_chains=2, long_len=1500)
    else:
        leaves = np.arange(1, 3001)
        s, d = np.concatenate([np.zeros(3000, np.int64), leaves]), np.concatenate([leaves, np.zeros(3000, np.int64)])
    n = int(max(s.max(), d.max()) + 1)
    ada = local_metrics(s, d, run_local(cfg, "adadne", p, s, d, n)[0], p)
    dne = local_metrics(s, d, run_local(cfg, "dne", p, s, d, n)[0], p)
    a = cfg.partition.adadne
    assert ada["eb"] <= max(a.capacity, a.refine_capacity) + 1e-9, ada  # expansion, then relocation bound
    assert dne["eb"] <= cfg.partition.dne.alpha + 1e-9, dne
    assert ada["vb"] <= 1.10, ada


def test_spark_finishing_pass_keeps_the_capacity(spark, cfg, rmat15, tmp_path):
    """A finishing pass that starts while the rows are still in Spark (one job, each group placing its rows
    from the broadcast state within its quotas) keeps the hard capacity and the output contract."""
    from spark_jobs.partition.job import run_partition
    from tests.spark_jobs.partition.test_partition_contract import check_contract

    src, dst, n = rmat15
    dv = write_dataset(tmp_path, "rmat15", src, dst, num_vertices=n)
    c = with_values(
        cfg, "partition", algorithm="adadne", parts=8, progress=False, local_finish_edges=20_000, driver_finish_edges=0
    )
    c = with_values(c, "partition.adadne", finish=0.6, starts=1)
    rec = run_partition(spark, c, dv)
    check_contract(dv, rec, 8)
    assert rec.counts["spark_rounds"] >= 1 and rec.counts["local_rounds"] == 0
    assert any(j["kind"] == "finish" for j in rec.counts["spark_jobs"])
    a = c.partition.adadne
    assert rec.metrics["eb"] <= max(a.capacity, a.refine_capacity) + 1e-9


def test_a_thin_boundary_is_topped_up_with_one_seed_per_round(cfg):
    """AdaDNE on a long path among triangles (p=2; the path's ends are the only degree-1 vertices, so the
    expansion starts there): a partition whose boundary is down to a vertex or two takes one extra seed
    per round (a new front), never a bulk of them (a bulk scattered a partition over tolokers' dense core:
    docs/partitioning.md, "Seeds"). Behind the round budget's pace it picks its whole boundary, then one seed."""
    import math

    path = np.arange(0, 600)
    tri = np.arange(1000, 1600).reshape(-1, 3)
    s = np.concatenate([path[:-1], tri[:, 0], tri[:, 1], tri[:, 2]])
    d = np.concatenate([path[1:], tri[:, 1], tri[:, 2], tri[:, 0]])
    s, d = np.concatenate([s, d]), np.concatenate([d, s])
    n = int(max(s.max(), d.max()) + 1)
    c = with_values(cfg, "partition", algorithm="adadne", parts=2)
    seen: list[tuple] = []  # (round, partition, boundary, boundary picks, claims)

    def on_round(st, sel):
        ptr, _ = kernels.boundaries(st.resid, st.bits, 2)
        lam = adaptive_factors(st.ecount, st.vcount, st.remaining, st.total, c.partition.adadne)
        for k in range(2):
            b = int(ptr[k + 1] - ptr[k])
            if st.rounds > 0 and b > 0:
                picks = b if st.slow > 1 else max(1, math.ceil(lam[k] * b))  # behind pace: the whole boundary
                seen.append((st.rounds, k, b, picks, int((st.claim[sel.claimed] == k).sum())))

    get_partitioner(c.partition).run_local(s, d, n, on_round=on_round)
    assert all(claims <= picks + 1 for _, _, _, picks, claims in seen), seen
    assert sum(claims == picks + 1 for _, _, _, picks, claims in seen) >= 5  # the rule was exercised


def test_calibration_sweep_reports_the_rounds_spark_would_run():
    """bench/partition_sweep.py (the in-process sweep the docs' tables come from) runs, and its "spark"
    column counts the rounds that start above local_finish_edges (from run_local's round hook): some at a
    20,000-row cap on rmat12, none at the default cap."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "partition_sweep.py"),
            "--graphs",
            "rmat12",
            "--parts",
            "2",
            "--configs",
            '{"top.local_finish_edges": 20000}',
            "{}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=root,
    )
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("rmat12")]
    spark = [int(r[-4]) for r in rows]  # columns: ... rounds spark /DNEref /HDRF sec
    assert len(rows) == 2 and spark[0] > 0 and spark[1] == 0, out.stdout


def test_restarts_prefer_a_start_within_the_balance_bounds(cfg):
    """A start with fewer replicas but a vertex or edge balance over the refinement's bounds loses to one
    within them (the relocation could not repair it); among starts within the bounds, fewer replicas win;
    partition.adadne.starts below 1 is a configuration error; a graph past starts_max_edges gets one start."""
    from glisp_core.errors import ConfigError
    from spark_jobs.partition.state import ExpansionState

    c = with_values(cfg, "partition", algorithm="adadne", parts=4)
    ada = get_partitioner(c.partition)

    def state(vcount, ecount):
        st = ExpansionState(4, np.zeros(1, np.int64), np.zeros((1, 1), np.uint64), np.zeros(0, np.int64), 1, 400)
        st.vcount, st.ecount = np.array(vcount), np.array(ecount)
        return st

    lean_unbalanced = ada.start_score(state([130, 100, 90, 80], [100] * 4))  # 400 replicas, VB 1.3
    balanced = ada.start_score(state([110, 105, 100, 95], [100] * 4))  # 410 replicas, VB 1.07
    over_edges = ada.start_score(state([100] * 4, [110, 100, 100, 90]))  # 400 replicas, EB 1.10
    leaner = ada.start_score(state([108, 102, 100, 95], [100] * 4))  # 405 replicas, VB 1.067
    assert balanced < lean_unbalanced and balanced < over_edges and leaner < balanced
    with pytest.raises(ConfigError, match="partition.adadne.starts"):
        get_partitioner(with_values(c, "partition.adadne", starts=0).partition).starts(1000)
    capped = get_partitioner(with_values(c, "partition.adadne", starts=4, starts_max_edges=1000).partition)
    assert (capped.starts(1000), capped.starts(1001)) == (4, 1)  # past starts_max_edges: one start


def test_two_identical_partition_runs_at_once_do_the_work_once(spark, cfg, tmp_path_factory, capsys, monkeypatch):
    """Two `glisp partition` runs of one version, name and parameters at the same time (two driver threads on
    one Spark session, as two schedulers' tasks would be): one partitions, the other waits for its claim
    and returns the same record; the stage has one record. The first run's write is held until the second
    has found the claim live (a run of 0.4 s otherwise can finish before the second starts)."""
    from glisp_core.dataset import publish
    from glisp_core.dataset.records import RECORDS
    from spark_jobs.partition import job
    from spark_jobs.partition.job import run_partition

    seen_live = threading.Event()
    real_is_live, real_write = publish.is_live, job.write_outputs

    def is_live(doc):  # the second run finding the first's claim live releases the first's write
        live = real_is_live(doc)
        if live and threading.current_thread() is threads[1]:
            seen_live.set()
        return live

    def write_outputs(*a, **k):
        seen_live.wait(60)
        return real_write(*a, **k)

    monkeypatch.setattr(publish, "is_live", is_live)
    monkeypatch.setattr(job, "write_outputs", write_outputs)

    src, dst = rmat_edges(10, edge_factor=8, seed=5)
    dv = write_dataset(tmp_path_factory.mktemp("twice"), "g", src, dst, num_vertices=1 << 10)
    c = with_values(cfg, "partition", algorithm="adadne", parts=4, seed=1, progress=False, name="twice")
    out: dict[int, object] = {}

    def run(i: int) -> None:
        out[i] = run_partition(spark, c, dv)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    threads[0].start()
    claim, deadline = dv.path / publish.RUNNING / "partition--twice.json", time.time() + 120
    while not dv.store.exists(claim):  # the first holds its claim; its write waits for the second
        assert time.time() < deadline and threads[0].is_alive(), "the first run never claimed the stage"
        time.sleep(0.005)
    threads[1].start()
    for t in threads:
        t.join(300)
    assert seen_live.is_set()
    assert out[0] == out[1]
    assert dv.store.names(dv.path / RECORDS / "partition/twice") == ["00000001.json"]
    assert "an identical run is in progress" in capsys.readouterr().out
