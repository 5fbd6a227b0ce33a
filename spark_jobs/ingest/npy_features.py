"""Vertex features from an (n, d) ``.npy`` file: read in slices by the executors (mmap), never on the driver.

Why a file of its own: the features come aligned by row order (a single-file vertex table) or by an id
array (``features_npy_ids``), and both ways need checks of their own that name the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from glisp_core.config import VertexSource
from glisp_core.errors import BadInputError
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.ingest.columns import ROWPOS
from spark_jobs.ingest.dense_index import dense_index

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession


def _checked_arrays(src: VertexSource) -> tuple[int, int, np.ndarray | None]:
    """(rows, width, the id array or None) of the source's .npy files, which must fit each other."""
    arr = np.load(src.features_npy, mmap_mode="r")
    if arr.ndim != 2:
        raise BadInputError(
            src.features_npy,
            "features_npy",
            1,
            1,
            f"is not a 2-D array (shape {arr.shape})",
            hint="save an (n, d) array",
        )
    n, d = arr.shape
    ids = None
    if src.features_npy_ids:
        ids = np.load(src.features_npy_ids, mmap_mode="r")
        if ids.ndim != 1 or len(ids) != n:
            raise BadInputError(
                src.features_npy_ids,
                "features_npy_ids",
                len(ids),
                n,
                f"ids for {n} feature rows (shape {ids.shape})",
                hint="one id per feature row",
            )
    return n, d, ids


def _npy_frame(spark: SparkSession, src: VertexSource, n: int, d: int, ids: np.ndarray | None) -> DataFrame:
    """The .npy rows as (_row, _feat[, _nid]), read by the executors in slices of about 32 MiB."""
    npy_path, ids_path = str(Path(src.features_npy).resolve()), src.features_npy_ids
    id_kind = "long" if (ids is not None and ids.dtype.kind in "iu") else "string"
    parts = max(1, min(64, (n * d * 4) // (32 << 20) + 1))
    schema = "_row long, _feat array<float>" + (f", _nid {id_kind}" if ids is not None else "")

    def read_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        import numpy as np
        import pyarrow as pa

        a = np.load(npy_path, mmap_mode="r")
        b = np.load(ids_path, mmap_mode="r") if ids_path else None
        for batch in batches:
            rows = batch.column(0).to_numpy()
            x = np.ascontiguousarray(a[rows], dtype=np.float32)
            feat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]).cast(pa.list_(pa.float32()))
            cols = {"_row": pa.array(rows, pa.int64()), "_feat": feat}
            if b is not None:
                v = b[rows]
                cols["_nid"] = pa.array(v.astype(np.int64)) if v.dtype.kind in "iu" else pa.array(v.astype(str))
            yield pa.RecordBatch.from_pydict(cols)

    return spark.range(0, n, numPartitions=parts).mapInArrow(read_rows, schema)


def attach_npy(spark: SparkSession, df: DataFrame, src: VertexSource, vkey: Column, id_long: bool) -> DataFrame:
    """``df`` (a vertex table's rows; ``vkey`` its id as the key) with ``_feat`` from the source's .npy."""
    from pyspark.sql import functions as F

    n, d, ids = _checked_arrays(src)
    npy = _npy_frame(spark, src, n, d, ids)
    base = df.drop("_feat", "_feat_raw")
    if ids is None:
        cnt = base.count()
        if cnt != n:
            raise BadInputError(
                src.features_npy,
                "features_npy",
                n,
                cnt,
                f"feature rows but the vertex table {src.path} has {cnt} rows",
                hint="features_npy without features_npy_ids must align row by row",
            )
        indexed, _, _, _ = dense_index(base, [F.col(ROWPOS)], "_row")
        out = indexed.join(npy, "_row", "left").drop("_row")
    else:
        key = F.col("_nid").cast("long") if id_long else F.trim(F.col("_nid").cast("string"))
        npy = npy.withColumn("_nid", key).drop("_row")
        base = base.withColumn("_nid", vkey)
        unknown = npy.join(base.select("_nid"), "_nid", "left_anti")
        nu = unknown.count()
        if nu:
            ex = [r["_nid"] for r in unknown.limit(3).collect()]
            raise BadInputError(
                src.features_npy_ids,
                "features_npy_ids",
                nu,
                n,
                f"name ids that are not in the vertex table {src.path}",
                ex,
                hint="every feature id must be a vertex of that table",
            )
        out = base.join(npy, "_nid", "left").drop("_nid")
    return out.withColumn("_feat_raw", F.lit(f"row of {Path(src.features_npy).name}"))
