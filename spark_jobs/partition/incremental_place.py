"""Placing a refresh's added edge rows: capped sequential HDRF against the partition sets decided so far.

Both refresh paths (:mod:`spark_jobs.partition.incremental`) run the same kernel over the same order of rows,
so they place alike; the Spark path runs it over compact vertex indices (the vertices the added rows touch),
the in-process path over vids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Laps:
    """Seconds of a refresh's successive phases, into ``clock`` (the stage record's ``seconds``)."""

    def __init__(self, clock: dict[str, float]) -> None:
        self.clock, self.t = clock, time.perf_counter()

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.clock[phase], self.t = now - self.t, now


@dataclass
class Done:
    """The rows decided so far (kept and attached) and the state the placement starts from: the partition sets
    (``bits``, one row per vertex the placement indexes) and the rows per partition."""

    bits: np.ndarray
    sizes: np.ndarray
    kept: int
    attached: int


def bits_of(vid: np.ndarray, part: np.ndarray, n: int, p: int) -> np.ndarray:
    """Partition sets (n x ceil(p/64) uint64 bitsets) of the given (vertex index, partition) pairs."""
    bits = np.zeros((n, (p + 63) // 64), np.uint64)
    part = np.asarray(part, np.int64)
    np.bitwise_or.at(bits, (vid, part // 64), np.left_shift(np.uint64(1), (part % 64).astype(np.uint64)))
    return bits


@njit(nogil=True, cache=True)
def place_capped(
    src: np.ndarray,
    dst: np.ndarray,
    rows: np.ndarray,
    deg: np.ndarray,
    bits: np.ndarray,
    sizes: np.ndarray,
    cap: int,
    lam: float,
    last: np.ndarray,
) -> np.ndarray:
    """Partition of each streamed added row; -1 where no partition has room for the row's pair.

    Rows of one unordered pair arrive adjacent (``rows`` = the pair's row count) and share the pair's
    decision (``last`` carries it across chunks). Score of partition k for pair (a, b), over the
    partitions with ``sizes[k] + rows <= cap`` only::

        g(a, k) + g(b, k) + lam * (max_size - sizes[k]) / (1 + max_size - min_size)
        g(x, k) = 1 + (1 - theta(x)) if k holds x else 0,  theta(a) = deg(a) / (deg(a) + deg(b))

    HDRF's replication term with the new version's full degrees (the lower-degree endpoint pulls
    harder, so hubs take the replicas) and its balance term; bits and sizes update after each pair.
    """
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    out = np.empty(src.shape[0], np.int32)
    for i in range(src.shape[0]):
        if lo[i] != last[0] or hi[i] != last[1]:  # a new pair: decide it once for all its rows
            last[0], last[1] = lo[i], hi[i]
            last[2] = _best_capped(lo[i], hi[i], deg, bits, sizes, rows[i], cap, lam)
        k = last[2]
        if k >= 0:
            sizes[k] += 1
        out[i] = k
    return out


@njit(nogil=True, cache=True)
def _best_capped(
    a: int, b: int, deg: np.ndarray, bits: np.ndarray, sizes: np.ndarray, need: int, cap: int, lam: float
) -> int:
    """The best partition for pair (a, b) among those with room for ``need`` rows (-1: none); marks it."""
    theta = deg[a] / (deg[a] + deg[b]) if deg[a] + deg[b] > 0 else 0.5
    hi_size, lo_size = sizes.max(), sizes.min()
    choice, best = -1, -np.inf
    for k in range(sizes.shape[0]):
        if sizes[k] + need > cap:
            continue
        word, mask = k // 64, np.uint64(1) << np.uint64(k % 64)
        rep = (2.0 - theta if bits[a, word] & mask else 0.0) + (1.0 + theta if bits[b, word] & mask else 0.0)
        score = rep + lam * (hi_size - sizes[k]) / (1.0 + hi_size - lo_size)
        if score > best:
            choice, best = k, score
    if choice >= 0:
        word, mask = choice // 64, np.uint64(1) << np.uint64(choice % 64)
        bits[a, word] |= mask
        bits[b, word] |= mask
    return choice


@dataclass
class Placed:
    """What a refresh path decided: the new rows' partitions (arrays in the in-process path, a DataFrame in
    Spark), the state after the kept and attached rows, the added rows without room, whether the base's ids
    all stand for themselves (vertex ids and edge type codes; ``same_vids``: the vertex ids alone), and
    ``fallback`` set when the path declined (a full run must follow)."""

    alloc: dict[str, np.ndarray] | DataFrame | None
    done: Done
    unplaced: int
    same_ids: bool
    fallback: str = ""
    state: dict[str, int | str] = field(default_factory=dict)  # the placement's driver state; the base rows' source
    same_vids: bool = False  # every base vertex kept its vid (what inference's refresh reads: its rows are by vid)
