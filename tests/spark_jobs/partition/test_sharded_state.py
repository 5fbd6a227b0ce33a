"""``partition.state = "sharded"`` (spark_jobs/partition/sharded.py) through the real ``run_partition`` on real
Spark: the output contract holds, a run is deterministic for its seed and configuration, and the driver holds
no per-vertex state: ``driver_state_bytes`` is 0 and no broadcast grows with the vertex ids (the ids of the
graph spread over 50 x as many; an O(|V|) array in a broadcast would show at once)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import with_values
from glisp_testing.graphs import rmat_edges, write_dataset
from spark_jobs.partition.job import run_partition
from tests.spark_jobs.partition.test_partition_contract import check_contract

SPREAD = 50  # vertex id v of the R-MAT graph becomes SPREAD * v: |V| grows, the edges do not


@pytest.fixture(scope="module")
def sparse_ids(tmp_path_factory):
    s, d = rmat_edges(9, 8, seed=5)
    n = SPREAD * (int(max(s.max(), d.max())) + 1)
    return write_dataset(tmp_path_factory.mktemp("rmat9-spread"), "rmat9s", SPREAD * s, SPREAD * d, num_vertices=n), n


def test_sharded_state_is_deterministic_and_off_the_driver(spark, cfg, sparse_ids):
    dv, n = sparse_ids
    c = with_values(cfg, "partition", algorithm="adadne", parts=4, seed=3, progress=False, state="sharded")
    c = with_values(c, "partition", shard_vertices=n // 3 + 1)  # 3 shards, 6 cells
    a = run_partition(spark, with_values(c, "partition", name="sharded-a"), dv, force=True)
    b = run_partition(spark, with_values(c, "partition", name="sharded-b"), dv, force=True)
    check_contract(dv, a, 4)
    x = pd.read_parquet(dv.assignment("sharded-a")).sort_values("eid")
    y = pd.read_parquet(dv.assignment("sharded-b")).sort_values("eid")
    assert (x.part.values == y.part.values).all() and a.metrics == b.metrics
    assert a.counts["shards"] == 3 and a.counts["spark_rounds"] >= 3 and a.counts["starts"] == []
    assert a.counts["driver_state_bytes"] == 0
    jobs = a.counts["spark_jobs"]
    assert {j["kind"] for j in jobs} >= {"round", "finish"}
    # O(p x cells) per broadcast: 4 partitions, 6 cells; one int32 per vertex id would be 4 * n = 102 KB
    assert max(j["broadcast_bytes"] for j in jobs) < 2048 < 4 * n
    assert a.metrics["eb"] <= cfg.partition.adadne.capacity + 1e-9
    assert np.isfinite(a.metrics["rf"]) and a.metrics["rf"] >= 1.0
