"""``map_partitions``: one Spark job over a DataFrame's partitions whose tasks send back Python objects.

Why: the scan, the vertex rows written by rank and the edges joined with the dictionary each run numpy over
a partition's Arrow batches and return small results (counts, key sets, rows per bucket). This is the one
place that freezes the worker heap, gives the task its partition and pickles the results back, as
``glisp_spark.tasks.run_tasks`` does for tasks over an index.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

T = TypeVar("T")


def map_partitions(df: DataFrame, fn: Callable[[int, Iterator[pa.RecordBatch]], Iterator[T]]) -> list[T]:
    """Every result ``fn(partition id, its Arrow batches)`` yields, in partition order."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("map_partitions runs its function inside a Spark task only")
        for res in fn(ctx.partitionId(), batches):
            yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(res, protocol=5)]})

    return [pickle.loads(r["payload"]) for r in df.mapInArrow(task, "payload binary").collect()]
