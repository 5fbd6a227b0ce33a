"""Task results of any size: spilled through the run's store (a local root and a real S3 API)."""

from __future__ import annotations

import sys

import numpy as np
from pyspark import cloudpickle

from glisp_core.storage.store import store_for
from glisp_spark.tasks import iter_tasks, run_tasks

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module


def _result(i: int) -> tuple[int, np.ndarray]:
    return i, np.arange(200_000, dtype=np.int64) * (i + 1)


def test_spilled_results_come_back_in_order_through_the_store_and_are_removed(spark, any_root):
    spill, store = any_root / "results", store_for(any_root)
    got = iter_tasks(spark, 4, _result, spill)
    i, arr = next(got)
    # the job has run: the other three results wait in the store (in the job's own directory), not in the JVM
    (job,) = store.names(spill)
    assert (i, sorted(store.names(spill / job))) == (0, ["task-000001.pkl", "task-000002.pkl", "task-000003.pkl"])
    assert np.array_equal(arr, _result(0)[1])
    rest = list(got)
    assert [r[0] for r in rest] == [1, 2, 3] and all(np.array_equal(r[1], _result(r[0])[1]) for r in rest)
    assert not store.exists(spill) or not store.names(spill)
    assert [r[0] for r in run_tasks(spark, 3, _result)] == [0, 1, 2]  # unspilled: the same results
