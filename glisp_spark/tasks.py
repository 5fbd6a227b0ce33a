"""``run_tasks``: one Spark job of n Python tasks that return small results (counts, key sets).

Why ``mapInArrow`` over ``spark.range`` and not ``sparkContext.parallelize``: the SQL and the RDD
Python runners start separate Python worker daemons (each worker importing numpy/pyarrow anew), so
keeping every task on the SQL runner saves about a second of start-up per worker. Ingest and layerwise inference
(its plan and layer tasks) both run their tasks here, so a stage's Python workers import their modules once.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import SparkSession


def run_tasks(spark: SparkSession, n: int, fn: Callable[[int], Any]) -> list[Any]:
    """``[fn(0), ..., fn(n-1)]``, each call a Spark task; results come back pickled, in index order."""

    def task(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        freeze_worker_heap()
        import pyarrow as pa

        for b in batches:
            for i in b.column(0).to_pylist():
                yield pa.RecordBatch.from_pydict({"i": [i], "payload": [pickle.dumps(fn(i), protocol=5)]})

    if n <= 0:
        return []
    rows = spark.range(0, n, 1, n).mapInArrow(task, "i long, payload binary").collect()
    return [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["i"])]
