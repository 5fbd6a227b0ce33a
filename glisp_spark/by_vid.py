"""Writing a by-vid Zarr array from a table with one row per vertex, in Spark tasks, whole chunks at a time.

The rows are grouped by chunk of vids (a task holds whole chunks, never a share of |V|); each task sorts its
rows, checks that every vid of a chunk is there once, computes the chunk's values from its rows and writes
them. The driver receives one small row per chunk. Used for inference's vertex keys (:mod:`glisp_infer.keys`),
its refresh's row map (:mod:`glisp_infer.row_map`) and the partition refresh's vertex map
(:mod:`spark_jobs.partition.incremental_ids`).

A Parquet table whose files each hold a range of vids of their own (ingest writes the id map so) needs no
shuffle: :func:`write_table_by_vid` reads the files' ranges from their footers, and each chunk's task reads
only the files that can hold its vids (one stage of Python tasks instead of a JVM scan, a shuffle and a
Python stage).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from glisp_core.storage.uri import StoreURI

Values = Callable[["pa.RecordBatch"], np.ndarray]  # a batch's rows -> their values, in the batch's order
MAX_RANGED_FILES = 20_000  # footers the driver reads for a shuffle-free write; past it the rows are shuffled


def write_by_vid(
    rows: DataFrame,
    url: str,
    array: str,
    n: int,
    values_of: Values,
    where: str,
    count_of: Callable[[np.ndarray, np.ndarray], int] | None = None,
    also: Sequence[tuple[str, str, Values]] = (),
) -> int:
    """Write ``array`` (n values by vid, in the Zarr group ``url``) from ``rows`` (a ``vid`` column and what
    ``values_of`` reads); returns the sum of ``count_of(vids, values)`` over the chunks (0 without it). ``where``
    names the input in errors. ``also``: more by-vid arrays (group, array, values) of the same chunks, written
    from the same rows by the same tasks (one shuffle of the rows for all of them)."""
    from pyspark.sql import functions as F

    from glisp_core.dataset.layout import VID

    chunk = _chunk_rows(url, array, also)
    chunks = -(-n // chunk)
    grouped = rows.repartition(chunks, F.floor(F.col(VID) / chunk))
    write = _ChunkWriter(url, array, n, chunk, values_of, where, count_of, also)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from glisp_spark.worker_heap import freeze_worker_heap

        freeze_worker_heap()
        for c, rows_in, counted in write(batches):
            yield pa.RecordBatch.from_pydict({"chunk": [c], "rows": [rows_in], "counted": [counted]})

    got = grouped.mapInArrow(task, "chunk long, rows long, counted long").collect()
    return _total(got, chunks, n, where)


def write_table_by_vid(
    spark: SparkSession,
    table: StoreURI,
    columns: Sequence[str],
    url: str,
    array: str,
    n: int,
    values_of: Values,
    count_of: Callable[[np.ndarray, np.ndarray], int] | None = None,
    also: Sequence[tuple[str, str, Values]] = (),
) -> int:
    """:func:`write_by_vid` of the Parquet table ``table``'s ``columns`` (``vid`` among them). Where every file's
    footer gives its vids' range, the ranges are disjoint and inside ``0..n-1``, each chunk's task reads only the
    files whose range meets the chunk (no shuffle, no JVM scan); otherwise Spark reads and shuffles the rows. A
    table of one chunk (at most a chunk's vertices, a bounded read) is written by the driver, without a job."""
    from glisp_spark.tables import parquet_files, read_parquet
    from glisp_spark.tasks import run_tasks

    chunk = _chunk_rows(url, array, also)
    chunks, where = -(-n // chunk), str(table)
    files = parquet_files(table)
    write = _ChunkWriter(url, array, n, chunk, values_of, where, count_of, also)
    if chunks == 1:  # one chunk (at most INDEX_CHUNK vertices): written here from every file, without a job
        return _total([write.chunk(0, _rows_in([str(f) for f in files], list(columns)))], 1, n, where)
    ranges = vid_ranges(files) if 0 < len(files) <= MAX_RANGED_FILES else None
    order = np.argsort(ranges[:, 0], kind="stable") if ranges is not None else np.empty(0, np.int64)
    if ranges is None or not _disjoint_inside(ranges[order], n):
        rows = read_parquet(spark, table).select(*columns)
        return write_by_vid(rows, url, array, n, values_of, where, count_of, also)
    lo, hi = ranges[order, 0], ranges[order, 1]
    names = [str(files[i]) for i in order]

    def one(c: int) -> dict[str, int]:
        first = int(np.searchsorted(hi, c * chunk, "left"))
        last = int(np.searchsorted(lo, (c + 1) * chunk - 1, "right"))
        return write.chunk(c, _rows_in(names[first:last], list(columns), (c * chunk, (c + 1) * chunk)))

    return _total(run_tasks(spark, chunks, one), chunks, n, where)


def vid_ranges(files: Sequence[StoreURI]) -> np.ndarray | None:
    """Each file's (lowest, highest) vid from its footer's statistics, by file; None where a file has no
    rows, no statistics of ``vid`` or a null vid (its rows are then shuffled)."""
    import pyarrow.parquet as pq

    from glisp_core.dataset.layout import VID
    from glisp_core.storage.store import store_for

    out = np.empty((len(files), 2), np.int64)
    for i, f in enumerate(files):
        with store_for(f).open_input(f) as fh:
            meta = pq.read_metadata(fh)
        col = meta.schema.names.index(VID) if VID in meta.schema.names else -1
        if col < 0 or meta.num_rows == 0:
            return None
        stats = [meta.row_group(g).column(col).statistics for g in range(meta.num_row_groups)]
        if any(st is None or not st.has_min_max or st.null_count for st in stats):
            return None
        out[i] = min(int(st.min) for st in stats), max(int(st.max) for st in stats)
    return out


def _disjoint_inside(ranges: np.ndarray, n: int) -> bool:
    """The files' ranges (sorted by their lowest vid) apart and within ``0..n-1``."""
    return bool(
        (ranges[:, 0] <= ranges[:, 1]).all()
        and (ranges[1:, 0] > ranges[:-1, 1]).all()
        and ranges[0, 0] >= 0
        and ranges[-1, 1] < n
    )


def _rows_in(names: list[str], columns: list[str], span: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of the files ``names``; with ``span`` (lo, hi), only those whose vid is in ``lo..hi-1``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from glisp_core.dataset.layout import VID
    from glisp_core.storage.store import store_for

    for name in names:
        with store_for(name).open_input(name) as fh:
            t = pq.ParquetFile(fh).read(columns=columns)
        if span is not None:
            v = t.column(VID)
            t = t.filter(pc.and_(pc.greater_equal(v, span[0]), pc.less(v, span[1])))
        yield from t.to_batches()


class _ChunkWriter:
    """A task's side of a by-vid write: its rows' chunks checked, their values computed and written; yields
    (chunk, rows, counted) per chunk."""

    def __init__(
        self,
        url: str,
        array: str,
        n: int,
        chunk: int,
        values_of: Values,
        where: str,
        count_of: Callable[[np.ndarray, np.ndarray], int] | None,
        also: Sequence[tuple[str, str, Values]],
    ) -> None:
        self.targets = [(url, array), *((u, a) for u, a, _ in also)]
        self.values = [values_of, *(f for _, _, f in also)]
        self.n, self.chunk_rows, self.where, self.count_of = n, chunk, where, count_of

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, int, int]]:
        from glisp_core.storage.zarr_arrays import open_array

        outs = [open_array(u, a, mode="r+") for u, a in self.targets]
        chunk = self.chunk_rows
        for c, vids, vals in chunks_of(batches, chunk, self.values):
            check_chunk(c, vids, chunk, self.n, self.where)
            for out, v in zip(outs, vals, strict=True):
                out[c * chunk : c * chunk + len(v)] = v
            yield c, len(vids), self.count_of(vids, vals[0]) if self.count_of is not None else 0

    def chunk(self, c: int, batches: Iterator[pa.RecordBatch]) -> dict[str, int]:
        """Write chunk ``c`` from ``batches`` (its rows, and no other chunk's but in error); its rows and count."""
        got = list(self(batches))
        if not got:  # no row of the chunk at all
            check_chunk(c, np.empty(0, np.int64), self.chunk_rows, self.n, self.where)
        return {"chunk": c, "rows": sum(g[1] for g in got), "counted": sum(g[2] for g in got)}


def _chunk_rows(url: str, array: str, also: Sequence[tuple[str, str, Values]]) -> int:
    """The chunk length of ``array``, which every array of ``also`` must share."""
    from glisp_core.storage.zarr_arrays import open_array

    chunk = int(open_array(url, array).chunks[0])
    for u, a, _ in also:
        if int(open_array(u, a).chunks[0]) != chunk:
            raise ValueError(f"{u}/{a}: chunks of {open_array(u, a).chunks[0]} vids, {array}'s of {chunk}")
    return chunk


def _total(got: Sequence[Any], chunks: int, n: int, where: str) -> int:
    """The summed counts of the chunks' results, after checking that every vid was written once."""
    written = sum(int(r["rows"]) for r in got)
    if len(got) != chunks or written != n:
        raise ValueError(f"{where}: {written} vertex ids in {len(got)} chunks, expected {n} ids 0..{n - 1}")
    return sum(int(r["counted"]) for r in got)


def chunks_of(
    batches: Iterator[pa.RecordBatch], chunk: int, values_of: Sequence[Values]
) -> Iterator[tuple[int, np.ndarray, list[np.ndarray]]]:
    """(chunk, its vids in order, their values by each of ``values_of``) for each chunk among a task's rows."""
    from glisp_core.dataset.layout import VID

    vids: list[np.ndarray] = []
    vals: list[list[np.ndarray]] = [[] for _ in values_of]
    for b in batches:
        vids.append(b.column(VID).to_numpy().astype(np.int64))
        for got, f in zip(vals, values_of, strict=True):
            got.append(f(b))
    if not vids:
        return
    v = np.concatenate(vids)
    order = np.argsort(v, kind="stable")
    v, ks = v[order], [np.concatenate(k)[order] for k in vals]
    c = v // chunk
    cuts = np.flatnonzero(np.diff(c)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(v)], strict=True):
        yield int(c[lo]), v[lo:hi], [k[lo:hi] for k in ks]


def check_chunk(c: int, vids: np.ndarray, chunk: int, n: int, where: str) -> None:
    """Every vid of chunk ``c`` is there once, or an error naming the input and the chunk's ids."""
    lo = c * chunk
    want = min(chunk, n - lo)
    if len(vids) != want or not np.array_equal(vids, np.arange(lo, lo + want)):
        raise ValueError(f"{where}: vertex ids {lo}..{lo + want - 1} are not each there once (got {len(vids)} rows)")
