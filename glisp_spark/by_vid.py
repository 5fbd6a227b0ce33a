"""Writing a by-vid Zarr array from a table with one row per vertex, in Spark tasks, whole chunks at a time.

The rows are grouped by chunk of vids (a task holds whole chunks, never a share of |V|); each task sorts its
rows, checks that every vid of a chunk is there once, computes the chunk's values from its rows and writes
them. The driver receives one small row per chunk. Used for inference's vertex keys (:mod:`glisp_infer.keys`),
its refresh's row map (:mod:`glisp_infer.row_map`) and the partition refresh's vertex map
(:mod:`spark_jobs.partition.incremental_ids`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

Values = Callable[["pa.RecordBatch"], np.ndarray]  # a batch's rows -> their values, in the batch's order


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
    from glisp_core.storage.zarr_arrays import open_array

    chunk = int(open_array(url, array).chunks[0])
    for u, a, _ in also:
        if int(open_array(u, a).chunks[0]) != chunk:
            raise ValueError(f"{u}/{a}: chunks of {open_array(u, a).chunks[0]} vids, {array}'s of {chunk}")
    chunks = -(-n // chunk)
    grouped = rows.repartition(chunks, F.floor(F.col(VID) / chunk))

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from glisp_spark.worker_heap import freeze_worker_heap

        freeze_worker_heap()
        outs = [open_array(u, a, mode="r+") for u, a in [(url, array), *((u, a) for u, a, _ in also)]]
        for c, vids, vals in chunks_of(batches, chunk, [values_of, *(f for _, _, f in also)]):
            check_chunk(c, vids, chunk, n, where)
            for out, v in zip(outs, vals, strict=True):
                out[c * chunk : c * chunk + len(v)] = v
            counted = count_of(vids, vals[0]) if count_of is not None else 0
            yield pa.RecordBatch.from_pydict({"chunk": [c], "rows": [len(vids)], "counted": [counted]})

    got = grouped.mapInArrow(task, "chunk long, rows long, counted long").collect()
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
