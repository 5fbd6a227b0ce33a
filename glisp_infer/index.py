"""The row index of an inference run, built by Spark from the reorder table (nothing reaches the driver).

- ``index/`` (Parquet, in the stage): ``orig_id, vtype, vid, part, row``: the user's ids to rows.
- Zarr ``index/vid`` (by row), ``index/row`` and ``index/pos`` (by vertex id): what tasks look up.
  Rows are grouped by Zarr chunk before the write, so each chunk is written whole by one Spark task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import ORIG_ID, PART, POS, VID, VTYPE, DatasetVersion
from glisp_core.storage.uri import StoreURI
from glisp_infer.store import INDEX_CHUNK, INDEX_POS, INDEX_ROW, INDEX_VID, RowLayout, open_array
from glisp_spark.tables import read_parquet, write_parquet
from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROW = "row"


def chunk_writer(store: str, key: str, values: dict[str, str], chunk: int, total: int) -> Any:
    """A mapInArrow function writing whole chunks of 1-d index arrays: ``values[col] = array name``,
    the array element at ``key`` gets that column's value; absent elements stay -1."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        freeze_worker_heap()
        import pyarrow as pa

        got = list(batches)
        tbl = pa.Table.from_batches(got) if got else None
        written = 0
        if tbl is not None and tbl.num_rows:
            keys = tbl.column(key).to_numpy()
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            cols = {name: tbl.column(col).to_numpy()[order] for col, name in values.items()}
            arrays = {name: open_array(store, name, mode="r+") for name in cols}
            cid = keys // chunk
            cuts = np.flatnonzero(np.diff(cid)) + 1
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(keys)], strict=True):
                lo = int(cid[a]) * chunk
                hi = min(lo + chunk, total)
                for name, col in cols.items():
                    buf = np.full(hi - lo, -1, np.int64)
                    buf[keys[a:b] - lo] = col[a:b]
                    arrays[name][lo:hi] = buf
                written += 1
        yield pa.RecordBatch.from_arrays([pa.array([written], pa.int64())], ["chunks"])

    return write


def build_index(
    spark: SparkSession,
    dv: DatasetVersion,
    reorder_path: StoreURI,
    layout: RowLayout,
    store: str,
    out: StoreURI,
    vertex_types: list[str],
) -> tuple[dict[str, float], Callable[[], dict[str, float]]]:
    """Fill the Zarr index arrays of ``store`` (from the executors) and start writing the Parquet id map to
    ``out`` in the background: no layer task reads it, so its join and write overlap the plan and layer jobs.
    Returns the arrays' chunk counts and seconds, and ``finish()``: waits for the id map (re-raising its error)
    and returns its seconds; the caller calls it before the outputs, which read it."""
    import time

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from glisp_spark.background import Background

    starts = F.array(*[F.lit(s).cast("long") for s in layout.starts])
    r = (
        read_parquet(spark, reorder_path)
        .select(VID, PART, POS, F.col("part_pos").cast("long").alias("part_pos"))
        .withColumn(ROW, F.element_at(starts, F.col(PART) + 1) + F.col("part_pos"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    names = F.array(*[F.lit(t) for t in vertex_types]) if vertex_types else F.array(F.lit(""))
    idmap = read_parquet(spark, dv.idmap).select(VID, ORIG_ID, F.element_at(names, F.col(VTYPE) + 1).alias(VTYPE))

    def id_map() -> float:
        t = time.perf_counter()
        write_parquet(r.join(idmap, VID).select(ORIG_ID, VTYPE, VID, PART, ROW), out, "error")
        return time.perf_counter() - t

    t0 = time.perf_counter()
    background = Background(id_map)
    try:
        counts = _index_arrays(spark, r, layout, store)
    except BaseException:
        background.wait()
        r.unpersist()
        raise

    def finish() -> dict[str, float]:
        try:
            return {"index_parquet_s": background.result()}
        finally:
            r.unpersist()

    return {**counts, "index_arrays_s": time.perf_counter() - t0}, finish


def _index_arrays(spark: SparkSession, r: Any, layout: RowLayout, store: str) -> dict[str, float]:
    """``index/row`` and ``index/pos`` by vertex id, ``index/vid`` by row: each chunk written whole by one task."""
    from pyspark.sql import functions as F

    from glisp_spark.background import Background

    n, c = layout.num_vertices, layout.chunk_rows
    par = max(1, spark.sparkContext.defaultParallelism)

    def job(key: str, values: dict[str, str], chunk: int, total: int) -> int:
        nchunks = -(-total // chunk)
        df = r.select(key, *[col for col in values if col != key]).repartition(
            min(nchunks, 4 * par), F.floor(F.col(key) / chunk)
        )
        rows = df.mapInArrow(chunk_writer(store, key, values, chunk, total), "chunks long").collect()
        return sum(int(x["chunks"]) for x in rows)

    # the two jobs at once: each is mostly its shuffle's fixed costs, so together they share the cores
    by_vid = Background(lambda: job(VID, {ROW: INDEX_ROW, POS: INDEX_POS}, INDEX_CHUNK, n))
    try:
        by_row = job(ROW, {VID: INDEX_VID}, c, layout.rows)
    finally:
        by_vid.wait()
    return {"index_chunks_by_vid": by_vid.result(), "index_chunks_by_row": by_row}
