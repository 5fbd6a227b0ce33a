"""The refresh's new-vid -> previous-row map, written by Spark tasks (the driver holds nothing per vertex).

A vertex of the new version and one of the previous run are the same when their vertex type name and
original id are (an id type change compares the ids as text, as the partition refresh's
:mod:`spark_jobs.partition.incremental_ids` does). The previous run's published ``index`` table already pairs (type name, original id) with its
row, so one left join of this version's id map with it gives each new vid its previous row (or none); tasks
grouped by chunk of vids write whole chunks of the by-vid array :data:`glisp_infer.incremental.PREV_ROW`
(:func:`glisp_spark.by_vid.write_by_vid`, as the vertex keys are written).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from glisp_infer import incremental as I

TYPE_CODE = "vtype_code"  # the id map's vertex type code, kept beside its name for the keys

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
    keys: tuple[str, str] | None = None,
) -> int:
    """Write the map into the refresh's directory ``root``; returns how many of this version's ``n`` vertices
    the previous run holds (the driver receives one count per chunk). ``keys`` (the run's store and array):
    the vertex keys too, by the same tasks from the same rows (:func:`glisp_infer.keys.write_keys`' job
    otherwise: a second read and shuffle of the id map)."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_infer.index import ROW
    from glisp_spark.by_vid import write_by_vid
    from glisp_spark.tables import read_parquet

    I.create_prev_row(root, n)
    if n == 0:
        return 0
    names = F.array(*[F.lit(t) for t in vertex_types]) if vertex_types else F.array(F.lit(""))
    new = read_parquet(spark, dv.idmap).select(
        VID, F.col(VTYPE).alias(TYPE_CODE), F.element_at(names, F.col(VTYPE) + 1).alias(VTYPE), ORIG_ID
    )
    prev = read_parquet(spark, prev_index).select(VTYPE, ORIG_ID, ROW)
    if ids_as_text:  # a key hashes an integer id as its decimal text: the same key either way
        new, prev = (d.withColumn(ORIG_ID, F.col(ORIG_ID).cast("string")) for d in (new, prev))
    rows = new.join(prev, [VTYPE, ORIG_ID], "left").select(VID, ROW, *([TYPE_CODE, ORIG_ID] if keys else []))
    also = []
    if keys is not None:
        from glisp_infer.keys import key_type_names, keys_of

        types = key_type_names(dv)
        also.append((*keys, lambda b: keys_of(b, types, TYPE_CODE)))
    where = f"{dv.idmap} joined with {prev_index} (a vertex twice in the previous run's index adds a row)"
    return write_by_vid(rows, I.prev_row_url(root), I.PREV_ROW, n, _prev_row, where, _matched, also)


def _prev_row(b: pa.RecordBatch) -> np.ndarray:
    """The previous row of each vertex of the batch, -1 for one the previous run does not hold."""
    from glisp_infer.index import ROW

    return b.column(ROW).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _matched(vids: np.ndarray, rows: np.ndarray) -> int:
    return int((rows >= 0).sum())
