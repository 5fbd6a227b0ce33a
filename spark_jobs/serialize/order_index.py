"""The reorder stage's lookup arrays (:mod:`glisp_core.dataset.order_index`), written by the executors.

Two shuffles, run at once (each is mostly fixed costs, so together they share the cores): the table by vertex id
chunk (``part``, ``part_pos``, ``pos``) and by partition-major position chunk (``vid``); each chunk is written
whole by one task, so no two tasks write one chunk and nothing reaches the driver.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import PART, POS, VID
from glisp_core.dataset.order_index import BY_PART, BY_VID, CHUNK, create_index, partition_starts
from glisp_core.storage.zarr_arrays import open_array
from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PPOS = "ppos"  # partition-major position: the partition's start + part_pos


def chunk_writer(store: str, key: str, values: dict[str, str], chunk: int, total: int) -> Any:
    """A mapInArrow function writing whole chunks of 1-d arrays: ``values[col] = array name``; the array element
    at ``key`` gets that column's value, absent elements keep the array's fill value."""

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
                    arr = arrays[name]
                    buf = np.full(hi - lo, arr.fill_value, arr.dtype)
                    buf[keys[a:b] - lo] = col[a:b]
                    arr[lo:hi] = buf
                written += 1
        yield pa.RecordBatch.from_arrays([pa.array([written], pa.int64())], ["chunks"])

    return write


def write_chunks(df: DataFrame, store: str, key: str, values: dict[str, str], chunk: int, total: int) -> int:
    """One Spark job: ``df`` shuffled by ``key``'s chunk and each chunk written whole; returns the chunks written."""
    from pyspark.sql import functions as F

    par = max(1, df.sparkSession.sparkContext.defaultParallelism)
    nchunks = -(-total // chunk)
    cols = [key, *[c for c in values if c != key]]
    parted = df.select(*cols).repartition(min(nchunks, 4 * par), F.floor(F.col(key) / chunk))
    rows = parted.mapInArrow(chunk_writer(store, key, values, chunk, total), "chunks long").collect()
    return sum(int(x["chunks"]) for x in rows)


def write_order_index(df: DataFrame, url: str, counts: list[int], in_driver: int = 0) -> dict[str, Any]:
    """Fill the arrays at ``url`` from the order table ``df`` (vid, part, pos, part_pos); ``counts``: vertices
    per partition. Up to ``in_driver`` vertices the four columns come to the driver and it writes the arrays
    (32 B per vertex); else the executors write them. Returns the chunk counts, where they were written, seconds."""
    t0 = time.perf_counter()
    n = int(sum(counts))
    create_index(url, n, counts)
    out: dict[str, Any] = _in_driver(df, url, counts) if n <= in_driver else _by_executors(df, url, counts)
    return {**out, "index_s": round(time.perf_counter() - t0, 3)}


def _by_executors(df: DataFrame, url: str, counts: list[int]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from glisp_spark.background import Background

    n = int(sum(counts))
    starts = F.array(*[F.lit(int(s)).cast("long") for s in partition_starts(counts)])
    t = df.select(VID, PART, POS, "part_pos").withColumn(
        PPOS, F.element_at(starts, F.col(PART) + 1) + F.col("part_pos")
    )
    by_vid = Background(lambda: write_chunks(t, url, VID, {c: c for c in BY_VID}, CHUNK, n))
    try:
        by_part = write_chunks(t, url, PPOS, {VID: BY_PART}, CHUNK, n)
    finally:
        by_vid.wait()
    return {"chunks_by_vid": by_vid.result(), "chunks_by_part": by_part, "written_by": "executors"}


def _in_driver(df: DataFrame, url: str, counts: list[int]) -> dict[str, Any]:
    n = int(sum(counts))
    t = df.select(VID, PART, POS, "part_pos").toArrow()
    vid = t.column(VID).to_numpy()
    cols = {c: t.column(c).to_numpy() for c in BY_VID}
    for name, col in cols.items():
        arr = open_array(url, name, mode="r+")
        full = np.full(n, arr.fill_value, arr.dtype)
        full[vid] = col
        arr[:] = full
    by_part = np.full(n, -1, np.int64)
    by_part[partition_starts(counts)[cols["part"]] + cols["part_pos"]] = vid
    open_array(url, BY_PART, mode="r+")[:] = by_part
    chunks = -(-n // CHUNK)
    return {"chunks_by_vid": chunks, "chunks_by_part": chunks, "written_by": "driver"}
