"""Vertex features from an (n, d) ``.npy`` file: read in row ranges by the executors, never on the driver.

Why a file of its own: the features come aligned by row order (a single-file vertex table) or by an id
array (``features_npy_ids``), and both ways need checks of their own that name the file. The driver reads
only the files' headers; each task opens the file through the store itself (a local path or a URI such as
``s3://bucket/x.npy``) and reads just the bytes of its rows.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import VertexSource
from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import parse_uri
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.ingest.columns import ROWPOS
from spark_jobs.ingest.dense_index import dense_index
from spark_jobs.ingest.plan import npy_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

_HEADER_BYTES = 1 << 17  # a version 1 header is at most 64 KiB


@dataclass(frozen=True)
class NpyFile:
    """A ``.npy`` file's header: where it is (a local path or URI string), shape, dtype, data offset."""

    uri: str
    shape: tuple[int, ...]
    dtype: str
    fortran: bool
    offset: int

    @property
    def dt(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)


def npy_header(path: str, key: str) -> NpyFile:
    """The header of the ``.npy`` file ``path`` (config key ``key``), read through its store."""
    u = npy_uri(path)
    with store_for(u).open_input(u) as f:
        head = io.BytesIO(f.read_at(min(_HEADER_BYTES, f.size()), 0))
    try:
        version = np.lib.format.read_magic(head)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
        else:
            raise ValueError(f"npy format version {version} is not supported (save it with numpy.save)")
    except ValueError as e:
        raise BadInputError(
            path, key, 1, 1, f"is not a readable .npy file ({e})", hint="save it with numpy.save"
        ) from None
    if dtype.hasobject:
        raise BadInputError(path, key, 1, 1, "holds Python objects", hint="save a numeric or string array")
    return NpyFile(str(u), tuple(int(x) for x in shape), dtype.str, bool(fortran), head.tell())


def read_npy_rows(f: Any, npy: NpyFile, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` of the open file ``f``: one ranged read of the rows' span (C order)."""
    dt, tail = npy.dt, npy.shape[1:]
    if len(rows) == 0:
        return np.zeros((0, *tail), dt)
    if npy.fortran:  # column-major: the rows of one column are not together; read it whole
        whole = np.frombuffer(f.read_at(f.size() - npy.offset, npy.offset), dt)
        return whole.reshape(npy.shape, order="F")[rows]
    lo, hi = int(rows.min()), int(rows.max()) + 1
    row_bytes = dt.itemsize * int(np.prod(tail, dtype=np.int64))
    data = f.read_at((hi - lo) * row_bytes, npy.offset + lo * row_bytes)
    return np.frombuffer(data, dt).reshape((hi - lo, *tail))[rows - lo]


def _checked_arrays(src: VertexSource) -> tuple[NpyFile, NpyFile | None]:
    """(the features' header, the id file's header or None) of the source's .npy files, which must fit."""
    arr = npy_header(src.features_npy, "features_npy")
    if len(arr.shape) != 2:
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
        ids = npy_header(src.features_npy_ids, "features_npy_ids")
        if len(ids.shape) != 1 or ids.shape[0] != n:
            raise BadInputError(
                src.features_npy_ids,
                "features_npy_ids",
                ids.shape[0] if ids.shape else 1,
                n,
                f"ids for {n} feature rows (shape {ids.shape})",
                hint="one id per feature row",
            )
    return arr, ids


def _npy_frame(spark: SparkSession, feats: NpyFile, ids: NpyFile | None) -> DataFrame:
    """The .npy rows as (_row, _feat[, _nid]), read by the executors in slices of about 32 MiB."""
    n, d = feats.shape
    id_kind = "long" if (ids is not None and ids.dt.kind in "iu") else "string"
    parts = max(1, min(64, (n * d * 4) // (32 << 20) + 1))
    schema = "_row long, _feat array<float>" + (f", _nid {id_kind}" if ids is not None else "")

    def read_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        import numpy as np
        import pyarrow as pa

        with _open(feats) as a, _open(ids) as b:
            for batch in batches:
                rows = batch.column(0).to_numpy()
                x = np.ascontiguousarray(read_npy_rows(a, feats, rows), dtype=np.float32)
                feat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]).cast(pa.list_(pa.float32()))
                cols = {"_row": pa.array(rows, pa.int64()), "_feat": feat}
                if b is not None and ids is not None:
                    v = read_npy_rows(b, ids, rows)
                    cols["_nid"] = pa.array(v.astype(np.int64)) if v.dtype.kind in "iu" else pa.array(v.astype(str))
                yield pa.RecordBatch.from_pydict(cols)

    return spark.range(0, n, numPartitions=parts).mapInArrow(read_rows, schema)


def _open(npy: NpyFile | None) -> Any:
    """The file of ``npy`` opened through its store (a null context for no file)."""
    from contextlib import nullcontext

    if npy is None:
        return nullcontext(None)
    u = parse_uri(npy.uri)
    return store_for(u).open_input(u)


def attach_npy(spark: SparkSession, df: DataFrame, src: VertexSource, vkey: Column, id_long: bool) -> DataFrame:
    """``df`` (a vertex table's rows; ``vkey`` its id as the key) with ``_feat`` from the source's .npy."""
    from pyspark.sql import functions as F

    feats, ids = _checked_arrays(src)
    n = feats.shape[0]
    npy = _npy_frame(spark, feats, ids)
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
    return out.withColumn("_feat_raw", F.lit(f"row of {posixpath.basename(src.features_npy)}"))
