"""The refresh's new-vid -> previous-row map, written by Spark tasks (the driver holds nothing per vertex).

A vertex of the new version and one of the previous run are the same when their vertex type name and
original id are (an id type change compares the ids as text, as :func:`spark_jobs.partition.incremental.
vid_map` does). The previous run's published ``index`` table already pairs (type name, original id) with its
row, so one left join of this version's id map with it gives each new vid its previous row (or none); tasks
grouped by chunk of vids write whole chunks of the by-vid array :data:`glisp_infer.incremental.PREV_ROW`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from glisp_infer import incremental as I

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from glisp_core.dataset.layout import DatasetVersion
    from glisp_core.storage.uri import StoreURI


def write_prev_rows(
    spark: SparkSession,
    dv: DatasetVersion,
    vertex_types: list[str],
    prev_index: StoreURI,
    ids_as_text: bool,
    root: StoreURI | str,
    n: int,
) -> int:
    """Write the map into the refresh's directory ``root``; returns how many of this version's ``n`` vertices
    the previous run holds (the driver receives one count per chunk)."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_infer.index import ROW
    from glisp_spark.tables import read_parquet

    arr = I.create_prev_row(root, n)
    chunk = int(arr.chunks[0])
    chunks = -(-n // chunk)
    if n == 0:
        return 0
    names = F.array(*[F.lit(t) for t in vertex_types]) if vertex_types else F.array(F.lit(""))
    new = read_parquet(spark, dv.idmap).select(VID, F.element_at(names, F.col(VTYPE) + 1).alias(VTYPE), ORIG_ID)
    prev = read_parquet(spark, prev_index).select(VTYPE, ORIG_ID, ROW)
    if ids_as_text:
        new, prev = (d.withColumn(ORIG_ID, F.col(ORIG_ID).cast("string")) for d in (new, prev))
    rows = new.join(prev, [VTYPE, ORIG_ID], "left").select(VID, ROW)
    rows = rows.repartition(chunks, F.floor(F.col(VID) / chunk))
    url, where = I.prev_row_url(root), str(dv.idmap)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from glisp_infer.store import open_array
        from glisp_spark.worker_heap import freeze_worker_heap

        freeze_worker_heap()
        out = open_array(url, I.PREV_ROW, mode="r+")
        for c, got in _chunks(batches, chunk):
            want = min(chunk, n - c * chunk)
            if len(got) != want or not np.array_equal(got[:, 0], np.arange(c * chunk, c * chunk + want)):
                raise ValueError(
                    f"{where}: vertex ids {c * chunk}..{c * chunk + want - 1} are not each there once "
                    f"(got {len(got)} rows; a vertex twice in the previous run's index would do this)"
                )
            out[c * chunk : c * chunk + want] = got[:, 1]
            yield pa.RecordBatch.from_pydict({"chunk": [c], "rows": [want], "matched": [int((got[:, 1] >= 0).sum())]})

    got = rows.mapInArrow(task, "chunk long, rows long, matched long").collect()
    if len(got) != chunks or sum(int(r["rows"]) for r in got) != n:
        raise ValueError(f"{where}: {sum(int(r['rows']) for r in got)} vertex ids in {len(got)} chunks, expected {n}")
    return sum(int(r["matched"]) for r in got)


def _chunks(batches: Iterator[pa.RecordBatch], chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """(chunk, its (vid, previous row or -1) pairs in vid order) for each chunk among a task's rows."""
    from glisp_core.dataset.layout import VID
    from glisp_infer.index import ROW

    parts = []
    for b in batches:
        row = b.column(ROW).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        parts.append(np.stack([b.column(VID).to_numpy().astype(np.int64), row], axis=1))
    if not parts:
        return
    a = np.concatenate(parts)
    a = a[np.argsort(a[:, 0], kind="stable")]
    c = a[:, 0] // chunk
    cuts = np.flatnonzero(np.diff(c)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(a)], strict=True):
        yield int(c[lo]), a[lo:hi]
