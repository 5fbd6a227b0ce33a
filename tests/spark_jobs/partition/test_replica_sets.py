"""replicas/ by a Spark group-by (``metrics.replica_sets``): one OR-ed word per vertex up to 64 partitions, sets
collected past that; both give each vertex's partitions, sorted, as the reference does."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_testing.partitions import replica_sets as reference
from spark_jobs.partition.metrics import replica_sets


@pytest.mark.parametrize("parts", [1, 8, 64, 70])
def test_replica_sets_are_each_vertex_sorted_partitions(spark, parts):
    rng = np.random.default_rng(parts)
    m, n = 3000, 500
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    part = rng.integers(0, parts, m).astype(np.int32)
    part[:2] = parts - 1  # the highest partition: the word's top bit at p = 64
    alloc = spark.createDataFrame(
        [(i, int(s), int(d), int(k)) for i, (s, d, k) in enumerate(zip(src, dst, part, strict=True))],
        "eid long, src long, dst long, part int",
    )
    sets = replica_sets(alloc, parts)
    # the written schema is the one every writer of replicas/ gives (a list of non-null int32): the cluster's
    # sharded run and a local run's driver bitsets publish tables that must compare equal
    assert (
        sets.schema["parts"].dataType.simpleString() == "array<int>" and not sets.schema["parts"].dataType.containsNull
    )
    got = {r["vid"]: list(r["parts"]) for r in sets.collect()}
    want = reference(src, dst, part, n, parts)
    assert got == {v: want[v].tolist() for v in range(n) if len(want[v])}
