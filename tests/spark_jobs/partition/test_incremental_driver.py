"""The partition refresh in Spark keeps nothing per vertex of the graph in the driver: the vertex map is a
Spark join written by tasks, the placement holds only the vertices the added rows touch, replicas/ is a
Spark group-by. A graph of 1,000,003 vertex ids and 8k edge rows (most vertices isolated, as the sharded
partitioner's tests spread theirs), so that a per-vertex array would dominate what the driver allocates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import with_values
from glisp_testing.driver_memory import traced
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition
from spark_jobs.partition.job import run_partition
from tests.spark_jobs.partition.test_partition_contract import check_contract

P, N, SPREAD = 4, 1_000_003, 900  # R-MAT vertex v is id SPREAD * v of N


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """v1 (base, partitioned by min(src, dst) % P) and v2: every vid renumbered, 1,000 isolated vertices
    removed, 3 added, 1 % of the rows replaced by rows among the graph's vertices and the new ones."""
    rng = np.random.default_rng(5)
    root = tmp_path_factory.mktemp("incremental-driver")
    s, d = rmat_edges(10, 8, seed=5)
    src, dst = SPREAD * s, SPREAD * d
    names = np.array([f"u{i}" for i in range(N)], object)
    v1 = write_dataset(root, "g", src, dst, num_vertices=N, orig_ids=list(names), version="v1")
    run = publish_partition(v1, np.minimum(src, dst) % P, P, algorithm="hdrf")
    used = np.unique(np.concatenate([src, dst]))
    gone = rng.choice(np.setdiff1d(np.arange(N), used), 1000, replace=False)
    ids2 = np.concatenate([np.delete(names, gone), np.array([f"new{i}" for i in range(3)], object)])
    keep = rng.random(len(src)) >= 0.01
    k = int((~keep).sum())
    pool = np.concatenate([names[used], ids2[-3:]])
    s2 = np.concatenate([names[src[keep]], rng.choice(pool, k)])
    d2 = np.concatenate([names[dst[keep]], rng.choice(pool, k)])
    order = rng.permutation(len(ids2))  # new vid of ids2[j] is order[j]
    vid = pd.Series(order, index=ids2)
    v2 = write_dataset(
        root, "g", vid[s2].to_numpy(), vid[d2].to_numpy(), num_vertices=len(ids2),
        orig_ids=list(ids2[np.argsort(order)]), version="v2",
    )  # fmt: skip
    return v1, v2, run, k


def _cfg(cfg, v1, run, **kw):
    cfg = with_values(cfg, "dataset", root=str(v1.root))
    loose = dict(incremental_max_vb=9.0, incremental_max_eb=9.0, incremental_max_rf_growth=0.0)
    return with_values(
        cfg, "partition", algorithm="hdrf", parts=P, name=run, incremental=True, incremental_base="v1",
        incremental_local_edges=0, **loose, **kw,
    )  # fmt: skip


def test_a_spark_refresh_holds_nothing_per_vertex_in_the_driver(spark, cfg, versions, tmp_path):
    from glisp_core.storage.zarr_arrays import open_group
    from spark_jobs.partition.incremental_place import place_capped

    v1, v2, run, k = versions
    z = np.zeros(1, np.int64)  # the placement kernel loaded before measuring (numba's cache: not the refresh)
    place_capped(z, z, z + 1, z, np.zeros((1, 1), np.uint64), np.zeros(P, np.int64), 9, 1.0, np.full(3, -1))
    # zarr's modules imported and its codecs set up before measuring: a fixed cost, not the refresh's state
    open_group(str(tmp_path / "warm.zarr"), mode="w").create_array("a", shape=(4,), chunks=(2,), dtype="int64")[:] = 1
    with traced() as t:
        rec = run_partition(spark, _cfg(cfg, v1, run), v2)
    peak = t.peak
    inc = rec.counts["incremental"]
    assert (inc["path"], inc["mode"], inc["same_ids"], inc["same_vids"]) == ("incremental", "spark", False, False), inc
    assert inc["added"] >= k > 0 and inc["kept"] + inc["added"] == rec.counts["edges"], inc
    assert 0 < inc["touched_vertices"] <= 2 * inc["placed"] and inc["driver_state_bytes"] < 64 * 2 * inc["placed"]
    check_contract(v2, rec, P)
    # a per-vertex array in the driver (the id maps' match, the partition sets, the degrees) is 8 bytes a
    # vertex or more: 8 MB here; the refresh's own driver work (its jobs, the record, the modules
    # its Spark calls import: 1.3 MB) does not grow with the ids
    assert peak < 4 * N, f"the driver allocated {peak} bytes for {N} vertex ids"


def test_a_refresh_whose_placement_would_not_fit_the_driver_runs_in_full(spark, cfg, versions):
    """Past ``partition.state_auto_mb`` for the vertices the added rows touch, the refresh declines and says
    why; the full run publishes."""
    v1, v2, run, _ = versions
    rec = run_partition(spark, _cfg(cfg, v1, run, state_auto_mb=0), v2, force=True)
    inc = rec.counts["incremental"]
    assert inc["path"] == "full" and "partition.state_auto_mb = 0" in inc["reason"], inc
    check_contract(v2, rec, P)
