"""How much work batched sample-wise inference does per seed, by graph scale and density (no Spark, no I/O).

Why: layerwise inference computes 3 slice rows per vertex for a 3-layer model; batched sample-wise inference
computes, per seed, the distinct vertices of its batch's blocks (``slice rows``). Their ratio bounds the
node-task speedup when a slice row costs both the same, so this script answers "on what graph could the
node task reach a given speedup?" for graphs too large to build on one machine (docs/inference.md).

The graph is the R-MAT of ``spark_jobs.generate.rmat`` in numpy: the same per-level quadrant probabilities
(Graph500 defaults with NSKG noise), a random relabelling, symmetrised, self-loops dropped and parallel edges
kept, as the pipeline stores it. Each batch of random seeds is expanded hop by hop as
``glisp_sampling.khop.KHopSampler`` does: every vertex of a block's source side (the previous block's
vertices plus the new ones) draws up to ``fanout`` of its edges uniformly without replacement, once per hop.
The real sampler's counts for R-MAT 18 and 20 (``bench/infer.py``: ``slice_rows_per_seed``) are the check.

    .venv/bin/python bench/tree_sizes.py --scales 18 20 22 --edge-factors 8 --batch-sizes 1024 1
"""

from __future__ import annotations

import argparse
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="+", default=[18, 20])
    ap.add_argument("--edge-factors", type=int, nargs="+", default=[8])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 1], help="seeds per sample-wise batch")
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5], help="per hop, first hop first")
    ap.add_argument("--seeds-per-setting", type=int, default=16_384, help="seeds drawn per (graph, batch size)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    layers = len(args.fanouts)
    print(
        f"| R-MAT scale | edge factor | directed edges | batch | slice rows per seed | input vertices per seed | "
        f"rows vs layerwise ({layers} per vertex) |"
    )
    print("|---|---|---|---|---|---|---|")
    for scale in args.scales:
        for ef in args.edge_factors:
            t = time.perf_counter()
            indptr, nbrs = rmat_csr(scale, ef, args.seed)
            for b in args.batch_sizes:
                rows, inputs = tree_sizes(indptr, nbrs, args.fanouts, b, max(args.seeds_per_setting // b, 1), args.seed)
                print(
                    f"| {scale} | {ef} | {len(nbrs):,} | {b} | {rows:.1f} | {inputs:.1f} | {rows / layers:.1f}x |",
                    flush=True,
                )
            del indptr, nbrs
            print(f"<!-- scale {scale}, edge factor {ef}: {time.perf_counter() - t:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
