"""The refresh's new-vid -> previous-row map, written by Spark tasks (the driver holds nothing per vertex).

A vertex of the new version and one of the previous run are the same when their vertex type name and
original id are (an id type change compares the ids as text, as the partition refresh's
:mod:`spark_jobs.partition.incremental_ids` does). The previous run's published ``index`` table already pairs (type name, original id) with its
row, so one left join of this version's id map with it gives each new vid its previous row (or none); tasks
grouped by chunk of vids write whole chunks of the by-vid array :data:`glisp_infer.incremental.PREV_ROW`
(:func:`glisp_spark.by_vid.write_by_vid`, as the vertex keys are written).

Most snapshots keep their vertices' ids: ingest numbers vertices by a total order of their ids, so a snapshot
that only adds edges, or vertices after the others, gives every old vertex its old vid. Then the join is not
needed: :func:`write_kept_rows` (the keys job, which runs anyway) compares each vertex's key with the previous
run's ``index/key`` at the same vid and takes the previous ``index/row`` where they agree. When every vid the
two versions share agrees, that map is the join's; otherwise the join runs after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_infer import incremental as I

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from glisp_core.dataset.layout import DatasetVersion
    from glisp_core.storage.uri import StoreURI

TYPE_CODE = "vtype_code"  # the id map's type code beside the joined type name: the keys hash the code's name


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
    """Write the map into the refresh's directory ``root`` by a join on the original ids; returns how many of
    this version's ``n`` vertices the previous run holds (the driver receives one count per chunk). ``keys``
    (the run's store and array): the vertex keys too, by the same tasks from the same rows, where no job of
    :func:`write_kept_rows` wrote them (a second read and shuffle of the id map)."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_infer.index import ROW
    from glisp_infer.store import open_array
    from glisp_spark.by_vid import write_by_vid
    from glisp_spark.tables import read_parquet

    I.create_prev_row(root, n, int(open_array(*keys).chunks[0]) if keys else 0)
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


def write_kept_rows(
    spark: SparkSession, dv: DatasetVersion, keys: tuple[str, str], prev_store: str, root: StoreURI | str, n: int
) -> int | None:
    """The vertex keys (``keys``: the run's store and array) and the row map of the vertices that kept their vid:
    a vertex whose key equals the previous run's key at the same vid is that vertex (keys hash the type name
    and original id: :mod:`glisp_infer.keys`). Returns how many vertices the previous run holds when every vid
    below both versions' counts kept its vertex (the map is then complete: a vertex at a vid past the previous
    count is new, as every previous vertex is matched below it); None otherwise (the caller joins)."""
    from glisp_core.dataset.layout import ORIG_ID, VID, VTYPE
    from glisp_infer.keys import key_type_names
    from glisp_infer.store import INDEX_ROW, open_array
    from glisp_spark.by_vid import write_table_by_vid

    chunk = int(open_array(*keys).chunks[0])
    I.create_prev_row(root, n, chunk)
    if n == 0:
        return 0
    prev_n = int(open_array(prev_store, INDEX_ROW).shape[0])
    kept = KeptVids(prev_store, prev_n, key_type_names(dv))
    both = min(n, prev_n)

    def lost(vids: np.ndarray, rows: np.ndarray) -> int:
        return int(((vids < both) & (rows < 0)).sum())

    url = I.prev_row_url(root)
    cols = [VID, VTYPE, ORIG_ID]  # one chunk (at most INDEX_CHUNK vertices) is written here, without a job
    missing = write_table_by_vid(spark, dv.idmap, cols, url, I.PREV_ROW, n, kept.prev_rows, lost, [(*keys, kept.keys)])
    return both if missing == 0 else None


class KeptVids:
    """Per batch of id-map rows (vid, type code, original id): their keys, and each one's previous row where
    the previous run's vertex of the same vid has the same key (-1 elsewhere). The previous run's by-vid
    ``index/key`` and ``index/row`` are read a chunk at a time, a few chunks kept (a task holds whole chunks)."""

    KEEP = 4  # previous chunks held at once

    def __init__(self, prev_store: str, prev_n: int, types: list[str]) -> None:
        self.prev_store, self.prev_n, self.types = prev_store, prev_n, types
        self._batch: Any = None
        self._keys = np.empty(0, np.uint64)
        self._chunks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._chunk = 0  # the previous arrays' chunk, read by the first batch that needs it

    def keys(self, b: pa.RecordBatch | pa.Table) -> np.ndarray:
        """The batch's keys (computed once for both arrays)."""
        from glisp_infer.keys import keys_of

        if b is not self._batch:
            self._batch, self._keys = b, keys_of(b, self.types)
        return self._keys

    def prev_rows(self, b: pa.RecordBatch | pa.Table) -> np.ndarray:
        from glisp_core.dataset.layout import VID

        keys = self.keys(b)
        vids = b.column(VID).to_numpy().astype(np.int64)
        out = np.full(len(vids), -1, np.int64)
        inside = np.flatnonzero(vids < self.prev_n)
        if len(inside) == 0:
            return out
        chunk = self._chunk_size()
        c_of = vids[inside] // chunk
        for c in np.unique(c_of):
            at = inside[c_of == c]
            pk, pr = self._prev_chunk(int(c), chunk)
            j = vids[at] - c * chunk
            out[at] = np.where(pk[j] == keys[at], pr[j], -1)
        return out

    def _chunk_size(self) -> int:
        from glisp_infer.store import INDEX_ROW, open_array

        if not self._chunk:
            self._chunk = int(open_array(self.prev_store, INDEX_ROW).chunks[0])
        return self._chunk

    def _prev_chunk(self, c: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        from glisp_infer.store import INDEX_KEY, INDEX_ROW, open_array

        if c not in self._chunks:
            if len(self._chunks) >= self.KEEP:
                self._chunks.pop(next(iter(self._chunks)))
            lo, hi = c * chunk, min((c + 1) * chunk, self.prev_n)
            self._chunks[c] = (
                np.asarray(open_array(self.prev_store, INDEX_KEY)[lo:hi], np.uint64),
                np.asarray(open_array(self.prev_store, INDEX_ROW)[lo:hi], np.int64),
            )
        return self._chunks[c]


def _prev_row(b: pa.RecordBatch) -> np.ndarray:
    """The previous row of each vertex of the batch, -1 for one the previous run does not hold."""
    from glisp_infer.index import ROW

    return b.column(ROW).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _matched(vids: np.ndarray, rows: np.ndarray) -> int:
    return int((rows >= 0).sum())
