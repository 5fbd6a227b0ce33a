"""Slice rows per seed of batched sample-wise inference on an R-MAT graph, in numpy (no Spark, no I/O).

The library half of ``bench/tree_sizes.py`` (which explains why the number matters); a test checks
:func:`batch_rows` against the real sampler at full fanout.

The graph is the R-MAT of ``spark_jobs.generate.rmat`` in numpy: the same per-level quadrant probabilities
(Graph500 defaults with NSKG noise), a random relabelling, symmetrised, self-loops dropped and parallel edges
kept, as the pipeline stores it. Each batch of random seeds is expanded hop by hop as
``glisp_sampling.khop.KHopSampler`` does: every vertex of a block's source side (the previous block's
vertices plus the new ones) draws up to ``fanout`` of its edges uniformly without replacement, once per hop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from glisp_core.config import RmatConfig
from spark_jobs.generate.rmat import level_probabilities


def rmat_csr(scale: int, edge_factor: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, neighbours) of the symmetrised R-MAT graph, level by level in numpy."""
    probs = level_probabilities(RmatConfig(scale=scale, edge_factor=edge_factor, seed=seed))
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    src = np.zeros(m, np.int64)
    dst = np.zeros(m, np.int64)
    for level in range(scale):
        q = np.searchsorted(np.cumsum(probs[level])[:3], rng.random(m), side="right")  # 0 a, 1 b, 2 c, 3 d
        src |= (q >= 2).astype(np.int64) << level
        dst |= (q & 1).astype(np.int64) << level
    perm = rng.permutation(n)
    src, dst = perm[src], perm[dst]
    keep = src != dst
    src, dst = np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


@njit(nogil=True, cache=True)
def _expand(
    front: np.ndarray, indptr: np.ndarray, nbrs: np.ndarray, fanout: int, seed: int, mark: np.ndarray, stamp: int
) -> np.ndarray:
    """One hop: the vertices not yet marked among up to ``fanout`` uniformly drawn edges of each frontier vertex."""
    np.random.seed(seed)
    out = np.empty(len(front) * fanout, np.int64)
    k = 0
    for v in front:
        a, d = indptr[v], indptr[v + 1] - indptr[v]
        take = min(d, fanout)
        pos = np.arange(d) if d > fanout else np.arange(0)
        for j in range(take):
            if d > fanout:  # partial Fisher-Yates: the first ``take`` of a random permutation
                r = j + np.random.randint(d - j)
                pos[j], pos[r] = pos[r], pos[j]
                u = nbrs[a + pos[j]]
            else:
                u = nbrs[a + j]
            if mark[u] != stamp:
                mark[u] = stamp
                out[k] = u
                k += 1
    return out[:k]


def batch_rows(
    indptr: np.ndarray, nbrs: np.ndarray, fanouts: list[int], seeds: np.ndarray, seed: int, mark: np.ndarray, stamp: int
) -> tuple[int, int]:
    """(slice rows, input vertices) of one batch of distinct ``seeds``: block k's destination side is the
    vertices within k hops. ``mark``: one int per vertex, never equal to ``stamp`` before the call."""
    mark[seeds] = stamp
    front, sizes = seeds.astype(np.int64), [len(seeds)]
    for h, f in enumerate(fanouts):
        new = _expand(front, indptr, nbrs, f, (seed * 7_919 + 1_000 * stamp + h) % 2**31, mark, stamp)
        front = np.concatenate([front, new])
        sizes.append(len(front))
    return sum(sizes[: len(fanouts)]), sizes[-1]


def tree_sizes(
    indptr: np.ndarray, nbrs: np.ndarray, fanouts: list[int], batch: int, batches: int, seed: int
) -> tuple[float, float]:
    """(slice rows, input vertices) per seed over ``batches`` batches of ``batch`` random seeds."""
    n = len(indptr) - 1
    mark = np.full(n, -1, np.int64)
    rng = np.random.default_rng(seed)
    rows = inputs = 0
    for b in range(batches):
        r, i = batch_rows(indptr, nbrs, fanouts, rng.choice(n, batch, replace=False), seed, mark, b)
        rows, inputs = rows + r, inputs + i
    return rows / (batch * batches), inputs / (batch * batches)
