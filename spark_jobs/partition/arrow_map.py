"""Run a numpy/numba edge kernel over a DataFrame in Arrow batches (no per-row Python)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import DataFrame

ALLOC_SCHEMA = "eid long, src long, dst long, part int"


def _cols(batch: pa.RecordBatch, *names: str) -> list[np.ndarray]:
    return [batch.column(batch.schema.get_field_index(n)).to_numpy(zero_copy_only=False) for n in names]


def assign_with(
    edges: DataFrame, kernel: Callable[..., np.ndarray], *args: Any, broadcast: Broadcast[tuple] | None = None
) -> DataFrame:
    """``edges`` (eid, src, dst) -> (eid, src, dst, part) with ``part = kernel(src, dst, *args[, *bc])``.

    ``broadcast`` is a Spark broadcast of a tuple of arrays appended to ``args`` (e.g. a degree array).
    """

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        extra = tuple(broadcast.value) if broadcast is not None else ()
        for b in batches:
            eid, src, dst = _cols(b, "eid", "src", "dst")
            part = kernel(src, dst, *args, *extra)
            yield pa.RecordBatch.from_arrays(
                [pa.array(eid), pa.array(src), pa.array(dst), pa.array(part.astype(np.int32))],
                names=["eid", "src", "dst", "part"],
            )

    return edges.select("eid", "src", "dst").mapInArrow(fn, ALLOC_SCHEMA)
