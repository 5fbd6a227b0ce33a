"""Per-row cost of AdaDNE's numba kernels on one row group of an R-MAT graph (what one Spark task runs).

Each kernel is timed against a baseline run in the same process on the same rows:

* the round kernel (``kernels.edge_round``) against the previous build's loop, which sent every pair
  through the full decision (``kernels._decide``) before checking for a claimant or a shared open
  partition; the outputs must be equal;
* the relocation's vote kernel (``relocate.relocation_votes``) against its memory floor: one pass that
  only reads both endpoints' bitsets and leaf words (the random accesses the kernel cannot avoid).

The state is synthetic (a share of the vertices claimed, one random replica for another share), not a
partition in progress: the ratios are the point, not the absolute nanoseconds.

    flock /tmp/glisp-bench.lock .venv/bin/python bench/partition_kernels.py --scale 22
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glisp_testing.graphs import rmat_edges  # noqa: E402
from spark_jobs.partition import kernels, relocate  # noqa: E402
from spark_jobs.partition.selection import pack_bits  # noqa: E402


@njit(nogil=True)
def every_pair_decided(src, dst, claim, bits, open_bits, weight, accept, seed, take, quota):
    """The round kernel as the previous build ran it: every pair through ``_decide``."""
    m, groups = src.shape[0], quota.shape[0]
    q, out = quota.copy(), np.full(m, -1, np.int32)
    cand = np.empty(bits.shape[1] * 64, np.int64)
    i = 0
    while i < m:
        a, b, j = kernels.pair_run(src, dst, i)
        g = kernels.pair_group(a, b, groups)
        k = kernels._decide(a, b, j - i, q, g, claim, bits, open_bits, weight, accept, seed, take, cand)
        if k >= 0:
            q[g, k] -= j - i
            out[i:j] = k
        i = j
    return out


@njit(nogil=True)
def endpoint_reads(src, dst, bits, leaf):
    """The vote kernel's unavoidable memory traffic: both endpoints' bitset and leaf words, per pair."""
    m, i, acc = src.shape[0], 0, np.uint64(0)
    while i < m:
        a, b, j = kernels.pair_run(src, dst, i)
        for w in range(bits.shape[1]):
            acc ^= (bits[a, w] & bits[b, w]) ^ leaf[a, w] ^ leaf[b, w]
        i = j
    return acc


def timed(fn, *args, repeat: int = 3) -> tuple[float, object]:
    """Median seconds of ``repeat`` calls after a warm-up (compilation), and the last result."""
    out = fn(*args)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--groups", type=int, default=8, help="the row group is 1/groups of the graph's rows")
    ap.add_argument("--claimed", type=float, default=0.02, help="share of the vertices claimed this round")
    ap.add_argument("--placed", type=float, default=0.3, help="share of the vertices with one replica")
    a = ap.parse_args()
    n, p, rng = 1 << a.scale, a.parts, np.random.default_rng(1)
    src, dst = rmat_edges(a.scale, 16, seed=0)
    keep = (kernels.pair_hash(src, dst, 0) % np.uint64(a.groups)) == 0
    src, dst = src[keep], dst[keep]
    o = kernels.canonical_order(src, dst, np.arange(len(src)))
    src, dst = src[o], dst[o]
    rep = np.zeros((n, p), bool)
    placed = np.flatnonzero(rng.random(n) < a.placed)
    rep[placed, rng.integers(0, p, len(placed))] = True
    claim = np.where(rng.random(n) < a.claimed, rng.integers(0, p, n), -1).astype(np.int32)
    bits, leaf = pack_bits(rep), pack_bits(rep & (rng.random((n, p)) < 0.5))
    ones = np.ones(p)
    state = (claim, bits, pack_bits(np.ones((1, p), bool))[0], ones, ones, 7, ones, np.full((16, p), 1 << 40))
    t_base, base = timed(every_pair_decided, src, dst, *state)
    t_new, new = timed(kernels.edge_round, src, dst, *state)
    assert np.array_equal(base, new), "the round kernel's skip changed a decision"
    part = (kernels.pair_hash(src, dst, 3) % np.uint64(p)).astype(np.int32)
    light = np.arange(p) < p // 3
    t_floor, _ = timed(endpoint_reads, src, dst, bits, leaf)
    t_votes, (keys, _) = timed(relocate.relocation_votes, src, dst, part, bits, leaf, light, p)
    m = len(src)
    print(f"R-MAT {a.scale}, one of {a.groups} row groups: {m:,} rows, {n:,} vertices, p = {p}")
    print("| kernel | baseline (same run) | baseline ns/row | ns/row | ratio |")
    print("|---|---|---:|---:|---:|")
    for name, base_name, tb, tn in (
        ("edge_round", "every pair decided (previous build)", t_base, t_new),
        ("relocation_votes", "endpoint reads only (memory floor)", t_floor, t_votes),
    ):
        print(f"| {name} | {base_name} | {tb / m * 1e9:.1f} | {tn / m * 1e9:.1f} | {tn / tb:.2f} |")
    print(f"rows allocated by the round: {np.mean(new >= 0):.3f}; vote entries: {len(keys):,}")


if __name__ == "__main__":
    main()
