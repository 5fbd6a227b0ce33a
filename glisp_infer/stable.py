"""Neighbour samples that survive a new version: a function of (seed, layer, vertex, its neighbours) alone.

The service's kernels seed a vertex's draw from its dense vertex id and the partition holding the edges, and
pick edges by position in that partition's CSR. A new version renumbers vertices (ids are ranks of the original
ids) and moves edges between partitions, so those samples change for vertices whose neighbourhood did not.
An incremental refresh (``infer.incremental``) copies such vertices' rows from the previous version, so its
samples must not change. Here every vertex gets a **key** hashed from (vertex type name, original id), and a
vertex's sample at hop ``h`` keeps, per slot (relation), the ``f`` in-neighbours (in the aggregation direction)
with the smallest edge keys ``mix(hop seed, key(v), key(u), occurrence, slot)``, in key order: uniform without
replacement (bottom-k of random keys), independent of vids, partitions, chunks and task order, and in a
canonical order, so the aggregation adds the same numbers in the same order in both versions. At full fanout
every neighbour is kept, in key order.

The **signatures** say whether a vertex's layer-1 input changed between versions: a hash of its feature row,
and an order-free hash of the multiset of (neighbour key, slot) over its in-edges (a removed or added neighbour
changes it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from glisp_sampling.apply import HopSample

# the service's splitmix64 (glisp_sampling.kernels): one set of constants and one finalizer
from glisp_sampling.kernels import _GAMMA as _G
from glisp_sampling.kernels import _M1, _M2, _mix
from glisp_sampling.kernels import _S1 as _C_NBR
from glisp_sampling.kernels import _S2 as _C_OCC

_C_SLOT = np.uint64(0xA24BAED4963EE407)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, np.uint64) + _G
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _segments(counts: np.ndarray) -> np.ndarray:
    """The (vertex, slot) segment of every entry of a sample grouped by vertex, then slot."""
    return np.repeat(np.arange(counts.size, dtype=np.int64), counts.reshape(-1))


@njit(inline="always", nogil=True, cache=True)
def _mix1(x: np.uint64) -> np.uint64:
    return _mix(x + _G)


SMALL = 32  # segments up to this size are keyed and ordered in scratch buffers (no allocation per segment)


@njit(nogil=True, cache=True)
def _bottom_k(counts, nk, base, nslot, fanout):  # pragma: no cover - compiled
    """Per segment (vertex, slot) of ``counts``: the positions of its ``fanout`` smallest edge keys, in key order
    (all of them with ``fanout < 0``); and the kept count per segment."""
    nseg = len(counts)
    kept = np.empty(nseg, np.int64)
    total = 0
    for s in range(nseg):
        kept[s] = counts[s] if fanout < 0 else min(counts[s], fanout)
        total += kept[s]
    out = np.empty(total, np.int64)
    ek = np.empty(SMALL, np.uint64)
    idx = np.empty(SMALL, np.int64)
    a = 0
    o = 0
    for s in range(nseg):
        c = counts[s]
        slot = np.uint64(s % nslot)
        if c <= SMALL:
            for j in range(c):  # occurrence: earlier entries of the same neighbour (parallel edges)
                occ = np.uint64(0)
                for q in range(j):
                    if nk[a + q] == nk[a + j]:
                        occ += np.uint64(1)
                ek[j] = _mix1(base[s // nslot] + nk[a + j] * _C_NBR + occ * _C_OCC + slot * _C_SLOT)
                idx[j] = j
                i = j  # insertion sort of the positions by key
                while i > 0 and ek[idx[i - 1]] > ek[idx[i]]:
                    idx[i - 1], idx[i] = idx[i], idx[i - 1]
                    i -= 1
            for j in range(kept[s]):
                out[o + j] = a + idx[j]
        else:
            order = _large_segment(nk[a : a + c], base[s // nslot], slot, kept[s])
            for j in range(kept[s]):
                out[o + j] = a + order[j]
        o += kept[s]
        a += c
    return out, kept


@njit(nogil=True, cache=True)
def _large_segment(seg_nk, b, slot, k):  # pragma: no cover - compiled
    """The positions of the ``k`` smallest edge keys of one large segment, in key order."""
    c = len(seg_nk)
    by_nbr = np.argsort(seg_nk)
    ek = np.empty(c, np.uint64)
    occ = np.uint64(0)
    for j in range(c):
        p = by_nbr[j]
        if j > 0 and seg_nk[p] == seg_nk[by_nbr[j - 1]]:
            occ += np.uint64(1)
        else:
            occ = np.uint64(0)
        ek[p] = _mix1(b + seg_nk[p] * _C_NBR + occ * _C_OCC + slot * _C_SLOT)
    if k < c:  # the k smallest keys (distinct: 64-bit hashes of distinct inputs), then only those sorted
        cut = np.partition(ek, k - 1)[k - 1]
        sel = np.flatnonzero(ek <= cut)
        return sel[np.argsort(ek[sel])]
    return np.argsort(ek)


def stable_sample(full: HopSample, own_keys: np.ndarray, nbr_keys: np.ndarray, hop_seed: int, fanout: int) -> HopSample:
    """Per (vertex, slot) of ``full`` (every neighbour), the ``fanout`` neighbours of smallest edge key, in key
    order (``fanout < 0``: all of them, in key order). ``own_keys[i]`` is vertex i's key, ``nbr_keys`` the key of
    every entry of ``full.nbrs``. Edge key: ``mix(mix(hop seed ^ key(v)) + key(u)·C1 + occurrence·C2 + slot·C3)``,
    the occurrence numbering parallel edges to the same neighbour."""
    counts = np.asarray(full.counts, np.int64)
    base = mix64(np.uint64(hop_seed & 0xFFFFFFFFFFFFFFFF) ^ np.asarray(own_keys, np.uint64))
    pos, kept = _bottom_k(counts.reshape(-1), np.asarray(nbr_keys, np.uint64), base, counts.shape[1], int(fanout))
    return HopSample(counts=kept.reshape(counts.shape), nbrs=np.asarray(full.nbrs, np.int64)[pos])


def neighbour_signature(full: HopSample, nbr_keys: np.ndarray) -> np.ndarray:
    """Per vertex, an order-free hash of the multiset of (neighbour key, slot) over every entry of ``full``."""
    counts = np.asarray(full.counts, np.int64)
    nslot = counts.shape[1]
    seg = _segments(counts)
    with np.errstate(over="ignore"):
        h = mix64(np.asarray(nbr_keys, np.uint64) + (seg % nslot + 1).astype(np.uint64) * _C_SLOT)
        cs = np.zeros(len(h) + 1, np.uint64)
        np.cumsum(h, out=cs[1:])
        ends = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts.sum(axis=1), out=ends[1:])
        total = cs[ends[1:]] - cs[ends[:-1]]
        return mix64(total ^ (np.diff(ends).astype(np.uint64) * _C_OCC))


def feature_signature(rows: np.ndarray) -> np.ndarray:
    """Per row, a hash of its float32 bits: ``mix(sum_j mix(bits[j] ^ mix(j)))`` (wrapping sums), in one compiled
    pass (the element-wise numpy form made ten temporaries of the whole feature matrix: 1.5 s at R-MAT 18)."""
    x = np.ascontiguousarray(rows, np.float32).view(np.uint32)
    cols = mix64(np.arange(x.shape[1], dtype=np.uint64))
    return _feature_signature(x, cols)


@njit(nogil=True, cache=True)
def _feature_signature(x, cols):  # pragma: no cover - compiled
    n, d = x.shape
    out = np.empty(n, np.uint64)
    for i in range(n):
        s = np.uint64(0)
        for j in range(d):
            s += _mix1(np.uint64(x[i, j]) ^ cols[j])
        out[i] = _mix1(s)
    return out
