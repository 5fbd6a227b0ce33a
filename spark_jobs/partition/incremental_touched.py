"""Degrees and partition sets of the vertices a refresh's added rows touch, from the match's files.

The placement of the fresh rows needs, for each vertex they touch, its degree among all new rows and the
partitions its decided (kept and attached) rows are in. A Spark aggregate of every row's two ends (explode,
semi-join with the touched vertices, group by vertex) moved 2 x |E| ends through the JVM's rows: 32 s of a
310 s partition refresh at R-MAT 23. Here each Spark task reads one of the match's Parquet files itself (pyarrow),
looks both ends of its rows up in a hash table of the touched vertices (numba) and sends back only the
touched vertices it saw, with their partial degree and partition bits, through the run's store; the driver adds
them up one task's at a time in arrays of one entry per touched vertex (what it holds for the placement anyway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from glisp_core.errors import StageError
from glisp_core.storage.store import store_for
from glisp_spark.tables import read_arrow_table
from glisp_spark.tasks import iter_tasks
from spark_jobs.partition.incremental_match import FRESH  # rows without a partition add to the degree only
from spark_jobs.partition.kernels import MIX

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from glisp_core.storage.uri import StoreURI


@njit(nogil=True, cache=True)
def _slot(v, shift):  # noqa: ANN001, ANN202
    """Fibonacci hashing: the product's high bits, so strided ids (all even, all multiples of 1024) spread too."""
    return np.int64((np.uint64(v) * MIX) >> np.uint64(shift))


@njit(nogil=True, cache=True)
def _table(vids):  # noqa: ANN001, ANN202
    """Open addressing (linear probing) of ``vids`` -> their index; a power-of-two size at least twice theirs.
    Returns the keys, the values and the shift of :func:`_slot`."""
    bits = 1
    while (1 << bits) < 2 * len(vids) + 2:
        bits += 1
    size, shift = 1 << bits, 64 - bits
    keys = np.full(size, -1, np.int64)
    vals = np.zeros(size, np.int64)
    for i in range(len(vids)):
        h = _slot(vids[i], shift)
        while keys[h] != -1:
            h = (h + 1) & (size - 1)
        keys[h], vals[h] = vids[i], i
    return keys, vals, shift


@njit(nogil=True, cache=True)
def _find(keys, vals, shift, v):  # noqa: ANN001, ANN202
    mask = len(keys) - 1
    h = _slot(v, shift)
    while keys[h] != -1:
        if keys[h] == v:
            return vals[h]
        h = (h + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def _scan(src, dst, part, how, keys, vals, shift, d, bits):  # noqa: ANN001, ANN202
    """Add each row's ends that are touched vertices to ``d`` (a self-loop twice) and, for a decided row, set
    its partition's bit in ``bits``."""
    for r in range(len(src)):
        for v in (src[r], dst[r]):
            i = _find(keys, vals, shift, v)
            if i >= 0:
                d[i] += 1
                if how[r] != FRESH:
                    bits[i, part[r] // 64] |= np.uint64(1) << np.uint64(part[r] % 64)


def _file_task(files: list[str], vids_bc: Any, words: int) -> Any:
    """The task of file i: the touched vertices its rows name (their indices), their degree and bits there."""

    def fn(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        vids = vids_bc.value
        t = read_arrow_table(files[i], columns=["src", "dst", "part", "how"])
        src, dst, part, how = (np.asarray(t.column(c).to_numpy(), np.int64) for c in ("src", "dst", "part", "how"))
        keys, vals, shift = _table(vids)
        d = np.zeros(len(vids), np.int64)
        bits = np.zeros((len(vids), words), np.uint64)
        _scan(src, dst, part, how, keys, vals, shift, d, bits)
        seen = np.flatnonzero(d)
        return seen.astype(np.int32), d[seen].astype(np.int32), bits[seen]

    return fn


def degrees_and_words(
    spark: SparkSession, matched: StoreURI, vids: np.ndarray, words: int, spill: StoreURI
) -> tuple[np.ndarray, np.ndarray]:
    """Per vertex of ``vids`` (sorted, distinct, fewer than 2^31): its degree among the rows of the match's table
    ``matched`` and its partition set among their decided rows as ``words`` bitset words (one Spark task per
    file). A hub is in every file, so the tasks' partial results add up to far more than one entry per vertex
    (1 GB over 269 tasks at R-MAT 23, past ``spark.driver.maxResultSize``): they pass through ``spill`` in
    the run's store and the driver adds up one at a time."""
    store = store_for(matched)
    files = sorted(str(matched / rel) for rel, _ in store.files(matched) if rel.endswith(".parquet"))
    bc = spark.sparkContext.broadcast(np.ascontiguousarray(vids, np.int64))
    d = np.zeros(len(vids), np.int64)
    bits = np.zeros((len(vids), words), np.uint64)
    try:
        for seen, dd, bb in iter_tasks(spark, len(files), _file_task(files, bc, words), spill):
            d[seen] += dd  # each task's indices are distinct
            bits[seen] |= bb
    finally:
        bc.unpersist()
    if len(vids) and not d.all():
        miss = vids[d == 0][:3].tolist()
        raise StageError(f"partition refresh: touched vertices {miss} have no row in the match's output {matched}")
    return d, bits
