"""The row index of an inference run: the reorder stage's lookup arrays (:mod:`glisp_core.dataset.order_index`)
in the run's own rows, so that the published store answers without the reorder stage.

- ``index/`` (Parquet, in the stage): ``orig_id, vtype, vid, part, row``: the user's ids to rows, written with the
  embeddings by the outputs' pass (:mod:`glisp_infer.outputs`) from the id map's rows :func:`located` here.
- Zarr ``index/vid`` (by row), ``index/row`` and ``index/pos`` (by vertex id): written by layer 0's tasks, a
  few chunks each; no task of the run reads them (tasks ask the order's arrays), the outputs and a later
  refresh do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import PART, VID
from glisp_infer.store import INDEX_CHUNK, INDEX_LABEL, INDEX_POS, INDEX_ROW, INDEX_VID, open_array, write_owned
from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from glisp_infer.plan import InferPlan

ROW = "row"


def write_run_index(plan: InferPlan, part: int, vids: np.ndarray) -> int:
    """Layer 0's share of the run's own index (no job of its own): partition ``part``'s rows of ``index/vid``
    (whole chunks: its rows start on a chunk boundary) and the by-vertex-id chunks ``j`` of ``index/row`` and
    ``index/pos`` with ``j % num_parts == part``, from the reorder stage's arrays. Returns the chunks written."""
    layout, oi = plan.layout, plan.order_index()
    vid_arr = open_array(plan.store, INDEX_VID, mode="r+")
    written = write_owned(vid_arr, layout.starts[part], np.asarray(vids, np.int64), layout.chunk_rows, fill=-1)
    row_arr, pos_arr = open_array(plan.store, INDEX_ROW, mode="r+"), open_array(plan.store, INDEX_POS, mode="r+")
    n = layout.num_vertices
    for j in range(part, -(-n // INDEX_CHUNK), plan.num_parts):
        lo, hi = j * INDEX_CHUNK, min((j + 1) * INDEX_CHUNK, n)
        row_arr[lo:hi] = oi.rows(np.arange(lo, hi), layout.starts)
        pos_arr[lo:hi] = oi.pos(np.arange(lo, hi))
        written += 2
    return written


def write_run_labels(plan: InferPlan, part: int, labels: np.ndarray | None, count: int) -> int:
    """Layer 0's rows of ``index/label`` (node task): the labels of the partition's ``count`` vertices as its file
    holds them (-1: none; all -1 for a graph without labels), so the outputs' tasks read them beside the rows.
    Returns the chunks written."""
    arr = open_array(plan.store, INDEX_LABEL, mode="r+")
    got = np.full(count, -1, np.int64) if labels is None else np.asarray(labels, np.int64)
    return write_owned(arr, plan.layout.starts[part], got, plan.layout.chunk_rows, fill=-1)


def located(idmap: DataFrame, plan: InferPlan) -> DataFrame:
    """``idmap`` (with a ``vid`` column) with each vertex's partition and row in the run's arrays, from the order's
    lookup arrays: a map-only step, no join."""
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    schema = StructType([*idmap.schema.fields, StructField(PART, IntegerType()), StructField(ROW, LongType())])
    oi, starts = plan.order_index(), plan.layout.starts

    def locate(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        freeze_worker_heap()
        for b in batches:
            part, row = oi.locate(b.column(VID).to_numpy(), starts)
            yield pa.RecordBatch.from_arrays(
                [*b.columns, pa.array(part.astype(np.int32)), pa.array(row)], names=[*b.schema.names, PART, ROW]
            )

    return idmap.mapInArrow(locate, schema)
