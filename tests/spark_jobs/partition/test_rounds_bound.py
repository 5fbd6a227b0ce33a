"""AdaDNE's rounds on a high-diameter graph are bounded (``partition.adadne.round_budget``); on a power-law
graph the pace holds and the partition is the same as without the bound."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import with_values
from glisp_testing.graphs import grid_edges, rmat_edges, write_dataset
from spark_jobs.partition.registry import get_partitioner


def _run(cfg, src, dst, n, p, **adadne):
    c = with_values(cfg, "partition", algorithm="adadne", parts=p, seed=1, progress=False)
    c = with_values(c, "partition.adadne", **adadne)
    return get_partitioner(c.partition).run_local(src, dst, n)


def _rf(src, dst, part, p, n):
    return len(np.unique(np.concatenate([src * p + part, dst * p + part]))) / n


def test_a_grid_finishes_within_the_round_budget_with_a_lower_rf(cfg):
    (src, dst), n = grid_edges(150, seed=3)  # diameter about 300: over 200 rounds without the bound
    free, free_rounds = _run(cfg, src, dst, n, 8, round_budget=0, starts=1, cluster_start=False)
    paced, rounds = _run(cfg, src, dst, n, 8, round_budget=32, starts=1, cluster_start=False)
    assert free_rounds > 2 * 32 and rounds <= 2 * 32
    assert _rf(src, dst, paced, 8, n) <= _rf(src, dst, free, 8, n)
    edges = np.bincount(paced, minlength=8)
    assert (paced >= 0).all() and edges.max() <= 1.05 * len(src) / 8


def test_long_paths_end_in_the_finishing_pass_at_twice_the_budget(cfg):
    from glisp_testing.graphs import chains_edges

    src, dst = chains_edges()
    n = int(max(src.max(), dst.max())) + 1
    part, rounds = _run(cfg, src, dst, n, 4, round_budget=16, starts=1, cluster_start=False)
    assert rounds <= 2 * 16 + 1 and (part >= 0).all()
    assert np.bincount(part, minlength=4).max() <= 1.05 * len(src) / 4


@pytest.mark.parametrize("p", [4, 16])
def test_a_power_law_graph_keeps_its_partition(cfg, p):
    s, d = rmat_edges(13, edge_factor=8, seed=2)
    n = 1 << 13
    keep = s != d
    a, b = np.minimum(s[keep], d[keep]), np.maximum(s[keep], d[keep])
    u = np.unique(a * n + b)
    src, dst = np.concatenate([u // n, u % n]), np.concatenate([u % n, u // n])
    with_bound, r1 = _run(cfg, src, dst, n, p, round_budget=64)
    without, r2 = _run(cfg, src, dst, n, p, round_budget=0)
    assert r1 == r2 and np.array_equal(with_bound, without)


@pytest.mark.parametrize("state", ["driver", "sharded"])
def test_spark_rounds_on_a_grid_are_bounded(spark, cfg, tmp_path_factory, state):
    """The Spark path (rounds as Spark jobs; the vertex state in the driver or in shards) keeps the bound,
    and with the driver's state it is the in-process run row for row."""
    from glisp_core.dataset.manifest import read_manifest
    from spark_jobs.partition.job import run_partition

    (src, dst), n = grid_edges(60, seed=5)
    dv = write_dataset(tmp_path_factory.mktemp("grid"), "g", src, dst, num_vertices=n)
    c = with_values(cfg, "partition", algorithm="adadne", parts=4, seed=1, progress=False, state=state)
    c = with_values(c, "partition", name=f"grid-{state}", local_finish_edges=len(src) // 50, shard_vertices=n // 2)
    c = with_values(c, "partition.adadne", round_budget=12, starts=1, cluster_start=False, refine_rounds=0)
    rec = run_partition(spark, c, dv)
    counts = read_manifest(dv).stage(f"partition/grid-{state}").counts
    assert counts["spark_rounds"] + counts["local_rounds"] <= 2 * 12 + 1, counts
    got = pd.read_parquet(dv.assignment(f"grid-{state}")).sort_values("eid")
    assert got.part.between(0, 3).all() and rec.metrics["eb"] <= 1.05
    if state == "driver":
        want, _ = _run(c, src, dst, n, 4, round_budget=12, starts=1, cluster_start=False, refine_rounds=0)
        assert np.array_equal(got.part.values, want[got.eid.values])
