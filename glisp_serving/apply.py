"""GLISP Apply: merge the partial one-hop samples of several servers, and relabel a hop into a block.

Partials come from the servers a frontier was routed to; server ``k`` was sent the frontier
positions ``pos_k`` and returned, per task (position x slot), a count and that many entries. The
merge groups every entry under its task in O(entries) (a counting scatter, no sort), then reduces:

- ``concat`` (quota uniform): keep everything;
- ``topk`` (keyed uniform, weighted A-ES): keep the ``f`` entries with the largest keys;
- ``per_draw`` (with replacement): each server sent exactly ``f`` draws; keep, per draw, the entry
  with the largest key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass
class Partial:
    """One server's answer for the frontier positions ``pos`` (what Gather returned, decoded)."""

    pos: np.ndarray  # int64 frontier positions sent to this server
    counts: np.ndarray  # (len(pos),) or (len(pos), T)
    nbrs: np.ndarray  # neighbour global ids
    keys: np.ndarray | None = None
    edge_ids: np.ndarray | None = None


@dataclass
class HopSample:
    """Merged one-hop sample of a frontier: ``counts[i, j]`` entries for vertex i, slot (type) j."""

    counts: np.ndarray  # (n, T) int64
    nbrs: np.ndarray  # int64 global ids, grouped by (vertex, slot)
    edge_ids: np.ndarray | None = None

    @property
    def per_vertex(self) -> np.ndarray:
        return self.counts.sum(axis=1)


@njit(nogil=True, cache=True)
def _scatter(ntasks, tasks, cnts, nbrs, keys, eids, has_keys, has_eids):
    """Group entries (server order, task order within server) by task id, preserving order."""
    merged = np.zeros(ntasks + 1, np.int64)
    for i in range(len(tasks)):
        merged[tasks[i] + 1] += cnts[i]
    for t in range(ntasks):
        merged[t + 1] += merged[t]
    total = merged[ntasks]
    cursor = merged[:-1].copy()
    out_n = np.empty(total, np.int64)
    out_k = np.empty(total if has_keys else 0, np.float32)
    out_e = np.empty(total if has_eids else 0, np.int64)
    src = 0
    for i in range(len(tasks)):
        t = tasks[i]
        c = cursor[t]
        for _ in range(cnts[i]):
            out_n[c] = nbrs[src]
            if has_keys:
                out_k[c] = keys[src]
            if has_eids:
                out_e[c] = eids[src]
            c += 1
            src += 1
        cursor[t] = c
    return merged, out_n, out_k, out_e


@njit(nogil=True, cache=True)
def _reduce_topk(offsets, fanouts, nslot, nbrs, keys, eids, has_eids):
    """Per task keep the fanout entries with the largest keys (order: descending key)."""
    nt = len(offsets) - 1
    counts = np.empty(nt, np.int64)
    for t in range(nt):
        g = offsets[t + 1] - offsets[t]
        f = fanouts[t % nslot]
        counts[t] = g if g < f else f
    total = counts.sum()
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if has_eids else 0, np.int64)
    o = 0
    for t in range(nt):
        a = offsets[t]
        g = offsets[t + 1] - a
        if g == 0 or counts[t] == 0:
            continue
        order = np.argsort(-keys[a : a + g], kind="mergesort")
        for j in range(counts[t]):
            out_n[o] = nbrs[a + order[j]]
            if has_eids:
                out_e[o] = eids[a + order[j]]
            o += 1
    return counts, out_n, out_e


@njit(nogil=True, cache=True)
def _reduce_per_draw(offsets, fanouts, nslot, nbrs, keys, eids, has_eids):
    """Each server block of a task holds f draws in draw order; keep the max key per draw."""
    nt = len(offsets) - 1
    counts = np.zeros(nt, np.int64)
    for t in range(nt):
        if offsets[t + 1] > offsets[t]:
            counts[t] = fanouts[t % nslot]
    total = counts.sum()
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if has_eids else 0, np.int64)
    o = 0
    for t in range(nt):
        a = offsets[t]
        g = offsets[t + 1] - a
        f = counts[t]
        if f == 0:
            continue
        for d in range(f):
            best = a + d
            j = a + d + f
            while j < a + g:
                if keys[j] > keys[best]:
                    best = j
                j += f
            out_n[o] = nbrs[best]
            if has_eids:
                out_e[o] = eids[best]
            o += 1
    return counts, out_n, out_e


def merge_partials(
    n: int, partials: Sequence[Partial], merge: str, fanouts: np.ndarray, want_eids: bool = False
) -> HopSample:
    """Apply: merge server partials for a frontier of ``n`` vertices into one HopSample."""
    fanouts = np.asarray(fanouts, np.int64)
    nslot = len(fanouts)
    tasks, cnts, nbrs, keys, eids = [], [], [], [], []
    for p in partials:
        c = np.asarray(p.counts).reshape(len(p.pos), nslot)
        tasks.append((np.asarray(p.pos, np.int64)[:, None] * nslot + np.arange(nslot)).reshape(-1))
        cnts.append(c.reshape(-1).astype(np.int64, copy=False))
        nbrs.append(np.asarray(p.nbrs, np.int64))
        if merge != "concat":
            keys.append(np.asarray(p.keys, np.float32))
        if want_eids:
            eids.append(np.asarray(p.edge_ids, np.int64))
    cat = np.concatenate
    e64, ef = np.empty(0, np.int64), np.empty(0, np.float32)
    has_keys = merge != "concat"
    offsets, out_n, out_k, out_e = _scatter(
        n * nslot,
        cat(tasks) if tasks else e64,
        cat(cnts) if cnts else e64,
        cat(nbrs) if nbrs else e64,
        cat(keys) if keys else ef,
        cat(eids) if eids else e64,
        has_keys,
        want_eids,
    )
    if merge == "concat":
        counts = np.diff(offsets)
    elif merge == "topk":
        counts, out_n, out_e = _reduce_topk(offsets, fanouts, nslot, out_n, out_k, out_e, want_eids)
    elif merge == "per_draw":
        counts, out_n, out_e = _reduce_per_draw(offsets, fanouts, nslot, out_n, out_k, out_e, want_eids)
    else:
        raise ValueError(f"merge: expected concat, topk or per_draw (got {merge!r})")
    return HopSample(counts=counts.reshape(n, nslot), nbrs=out_n, edge_ids=out_e if want_eids else None)


# ---------------------------------------------------------------------------------------- relabel
@njit(nogil=True, cache=True)
def _relabel_scratch(dst, nbrs, scratch):
    """src ids (dst first, then new neighbours in first-seen order) and local index of each nbr.

    ``scratch`` is an int32/int64 array over all global ids holding -1; it is restored on return.
    """
    nd = len(dst)
    src = np.empty(nd + len(nbrs), np.int64)
    for i in range(nd):
        src[i] = dst[i]
        scratch[dst[i]] = i
    k = nd
    local = np.empty(len(nbrs), np.int64)
    for j in range(len(nbrs)):
        u = nbrs[j]
        s = scratch[u]
        if s < 0:
            s = k
            scratch[u] = k
            src[k] = u
            k += 1
        local[j] = s
    for i in range(k):
        scratch[src[i]] = -1
    return src[:k].copy(), local


def relabel(dst: np.ndarray, nbrs: np.ndarray, scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Relabel a hop: (src ids = dst ids then new neighbours in first-seen order, local index of each nbr).

    With a scratch map over global ids (``np.full(num_vertices, -1)``) this is O(entries); without
    one it falls back to sorting.
    """
    dst = np.asarray(dst, np.int64)
    nbrs = np.asarray(nbrs, np.int64)
    if scratch is not None:
        return _relabel_scratch(dst, nbrs, scratch)
    allv = np.concatenate([dst, nbrs])
    uniq, first, inv = np.unique(allv, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # unique ids in first-seen order (dst first)
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    return uniq[order], rank[inv[len(dst) :]]
