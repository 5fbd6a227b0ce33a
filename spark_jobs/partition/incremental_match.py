"""Match a new snapshot's edge rows to the base's by a sorted merge, in numpy/numba (no Spark window).

One implementation for both modes of :mod:`spark_jobs.partition.incremental`: the driver runs it once
over all rows when the base and the new edge set each have at most ``partition.local_finish_edges``
rows; otherwise each Spark task runs it over the rows of the unordered pairs hashed to it (a pair's
rows, base and new, both directions and every edge type, always meet in one call), so both give the
same result.

Rows of both sides are sorted by (unordered pair, direction, edge type, side, eid). Within a key
(src, dst, edge type) the k-th new row in eid order takes the partition of the k-th base row
(duplicates match one to one): **kept**. A new row left over joins the partition of a kept row of its
unordered pair when there is one (the pair contract keeps a pair's rows in one partition):
**attached**. The rest are **fresh**: placed later by the capped HDRF score.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from spark_jobs.partition import kernels

KEPT, ATTACHED, FRESH = 0, 1, 2


def match(
    src: np.ndarray, dst: np.ndarray, etype: np.ndarray, side: np.ndarray, eid: np.ndarray, part: np.ndarray, seed: int
) -> dict[str, np.ndarray]:
    """Decide each new row (``side == 1``) of a pair-closed set of base (``side == 0``, ``part`` set) and
    new rows.

    Returns the new rows' ``pos`` (index into the inputs), ``part`` (-1 for fresh), ``how`` (KEPT,
    ATTACHED, FRESH), ``rows`` (new rows of the pair: the room a fresh pair needs) and ``k`` (seeded hash
    of the pair as int64: the fresh rows are placed in (k, min, max, eid) order). ``rows`` and ``k`` are 0
    on rows that are not fresh: only the placement reads them, and the Spark path writes every new row, where
    a random 64-bit value per row was most of the match's output to encode.
    """
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    sub = ((src > dst).astype(np.int64) * (int(etype.max(initial=0)) + 1) + etype) * 2 + side
    order = _sort_order(lo, hi, sub, np.asarray(eid, np.int64))
    out_part, how, rows = _match_runs(lo, hi, sub, np.asarray(part, np.int32), order)
    pos = np.flatnonzero(side == 1)
    how, rows = how[pos], rows[pos]
    fresh = how == FRESH
    rows[~fresh] = 0
    k = np.zeros(len(pos), np.int64)
    k[fresh] = kernels.pair_hash(src[pos[fresh]], dst[pos[fresh]], seed).view(np.int64)
    return {"pos": pos, "part": out_part[pos], "how": how, "rows": rows, "k": k}


def _sort_order(lo: np.ndarray, hi: np.ndarray, sub: np.ndarray, eid: np.ndarray) -> np.ndarray:
    """Row order by (lo, hi, sub, eid). Where (lo, hi, sub) packs into one uint64 (vertex ids under 2^30), one
    unstable argsort of it (ten times a two-key lexsort's speed), the rows of a repeated key (a multi-edge's
    copies on one side) then put in eid order as :func:`kernels.canonical_order` does; else a lexsort of two
    packed keys, or of the four."""
    if len(lo) == 0 or lo.min() < 0 or sub.min() < 0:
        return np.lexsort((eid, sub, hi, lo))
    hb, sb = int(hi.max()).bit_length(), int(sub.max()).bit_length()
    if 2 * hb + sb <= 64:
        key = (lo.astype(np.uint64) << np.uint64(hb + sb)) | (hi.astype(np.uint64) << np.uint64(sb))
        key |= sub.astype(np.uint64)
        order = np.argsort(key)
        return kernels.ties_by_eid(key, eid, order)  # the pair order's own tie pass
    if hi.max() < 1 << 32 and eid.min() >= 0 and eid.max() < 1 << 40 and sub.max() < 1 << 23:
        pair = (lo.astype(np.uint64) << np.uint64(32)) | hi.astype(np.uint64)
        within = (sub.astype(np.uint64) << np.uint64(40)) | eid.astype(np.uint64)
        return np.lexsort((within, pair))
    return np.lexsort((eid, sub, hi, lo))


@njit(nogil=True, cache=True)
def _match_runs(lo, hi, sub, part, order):  # noqa: ANN001, ANN202
    """One pass over the rows in ``order``: per pair run, match its key runs, then attach what is left."""
    m = lo.shape[0]
    out = np.full(m, -1, np.int32)
    how = np.full(m, FRESH, np.int8)
    rows = np.zeros(m, np.int64)
    i = 0
    while i < m:
        a, b = lo[order[i]], hi[order[i]]
        j = i
        while j < m and lo[order[j]] == a and hi[order[j]] == b:
            j += 1
        kept_part, n_new = -1, 0
        s = i
        while s < j:  # key runs (direction, edge type) inside the pair run; base rows first
            key = sub[order[s]] >> 1
            e = s
            while e < j and sub[order[e]] >> 1 == key:
                e += 1
            nb = 0
            while s + nb < e and sub[order[s + nb]] & 1 == 0:
                nb += 1
            for t in range(s + nb, e):
                r = order[t]
                n_new += 1
                occ = t - s - nb
                if occ < nb:
                    out[r] = part[order[s + occ]]
                    how[r] = KEPT
                    if kept_part < 0:
                        kept_part = out[r]
            s = e
        for t in range(i, j):
            r = order[t]
            rows[r] = n_new
            if sub[r] & 1 == 1 and how[r] == FRESH and kept_part >= 0:
                out[r] = kept_part
                how[r] = ATTACHED
        i = j
    return out, how, rows
