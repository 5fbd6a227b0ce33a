"""GLISP Apply: merge the partial one-hop samples of several servers, and relabel a hop into a block.

Partials come from the servers a frontier was routed to; server ``k`` was sent the frontier
positions ``pos_k`` (ascending) and returned, per task (position x slot), a count and that many
entries. ``concat`` and ``topk`` walk the frontier once with one cursor per server (and relabel the
hop into its block in the same walk); ``per_draw`` groups entries by task with a counting scatter.
All are O(entries), no sort:

- ``concat`` (quota uniform): keep everything;
- ``topk`` (keyed uniform, weighted A-ES): keep the ``f`` entries with the largest keys;
- ``per_draw`` (with replacement): each server sent exactly ``f`` draws; keep, per draw, the entry
  with the largest key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray


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
    # (src ids, (2, E) edge_index) when the merge also relabelled (merge_partials with dst and scratch)
    block: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def per_vertex(self) -> np.ndarray:
        per: np.ndarray = self.counts.sum(axis=1)
        return per


@njit(nogil=True, cache=True)
def _scatter(
    ntasks: int,
    tasks: NDArray[np.int64],
    cnts: NDArray[np.int64],
    nbrs: NDArray[np.int64],
    keys: NDArray[np.float32],
    eids: NDArray[np.int64],
    has_keys: bool,
    has_eids: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float32], NDArray[np.int64]]:
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
def _reduce_per_draw(
    offsets: NDArray[np.int64],
    fanouts: NDArray[np.int64],
    nslot: int,
    nbrs: NDArray[np.int64],
    keys: NDArray[np.float32],
    eids: NDArray[np.int64],
    has_eids: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
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


@njit(nogil=True, cache=True)
def _walk_block(
    topk: bool,
    n: int,
    nslot: int,
    dst: NDArray[np.int64],
    pos: NDArray[np.int64],
    cnts: np.ndarray,
    nbrs: np.ndarray,
    keys: NDArray[np.float32],
    eids: NDArray[np.int64],
    fanouts: NDArray[np.int64],
    rows: NDArray[np.int64],
    ents: NDArray[np.int64],
    has_eids: bool,
    scratch: np.ndarray,
    build: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Concat or top-f merge (and, with ``build``, relabel into a block) in one walk in frontier order.

    Server k's rows are ``rows[k]:rows[k+1]`` of ``pos`` (ascending frontier positions, as the router
    emits them) and ``cnts`` (row-major, ``nslot`` per row); its entries are ``ents[k]:ents[k+1]`` of
    ``nbrs``/``keys``/``eids``. Walking vertex i, slot j, server k keeps one sequential cursor per
    server, so the merged order is the task-grouped order of the scatter merge. ``topk``: per task only
    the ``fanouts[j]`` entries with the largest keys are kept, by descending key, ties in arrival order
    (an insertion sort: a task holds at most servers x f entries). Relabelling (``scratch``: -1 over
    every global id, restored on return) gives the block's source ids (the frontier first, then new
    neighbours in first-seen order) and edge_index ``[source local, destination local]``.
    """
    P = len(rows) - 1
    total = ents[P]
    counts = np.zeros((n, nslot), np.int64)
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if has_eids else 0, np.int64)
    src = np.empty(n + total if build else 0, np.int64)
    ei = np.empty((2, total if build else 0), np.int64)
    # the most entries one server sent for one task (a top-f merge keeps at most f of them)
    most: int | np.integer[Any] = 1
    for j in range(nslot):
        most = max(most, fanouts[j])
    for x in range(len(cnts)):
        most = max(most, np.int64(cnts[x]))
    cand = np.empty(P * most + 1, np.int64)  # entry indices of one task: arrival order, or best first
    if build:
        for i in range(n):
            src[i] = dst[i]
            scratch[dst[i]] = i
    nsrc = n
    row = rows[:-1].copy()
    ent = ents[:-1].copy()
    o = 0
    for i in range(n):
        for j in range(nslot):
            size = 0
            keep = fanouts[j]
            for k in range(P):
                r = row[k]
                if r >= rows[k + 1] or pos[r] != i:
                    continue
                e = ent[k]
                for jj in range(j):
                    e += cnts[r * nslot + jj]
                c = cnts[r * nslot + j]
                if not topk:
                    for q in range(e, e + c):
                        cand[size] = q
                        size += 1
                    continue
                for q in range(e, e + c):
                    kq = keys[q]
                    if size == keep and (keep == 0 or kq <= keys[cand[size - 1]]):
                        continue
                    y = size if size < keep else keep - 1
                    while y > 0 and keys[cand[y - 1]] < kq:
                        cand[y] = cand[y - 1]
                        y -= 1
                    cand[y] = q
                    if size < keep:
                        size += 1
            for x in range(size):  # emit the task's entries (relabelled when building the block)
                q = cand[x]
                u = np.int64(nbrs[q])
                out_n[o] = u
                if has_eids:
                    out_e[o] = eids[q]
                if build:
                    sl = scratch[u]
                    if sl < 0:
                        sl = nsrc
                        scratch[u] = nsrc
                        src[nsrc] = u
                        nsrc += 1
                    ei[0, o] = sl
                    ei[1, o] = i
                o += 1
            counts[i, j] = size
        for k in range(P):  # move past vertex i on every server that held it
            r = row[k]
            if r < rows[k + 1] and pos[r] == i:
                for jj in range(nslot):
                    ent[k] += cnts[r * nslot + jj]
                row[k] = r + 1
    if build:
        for x in range(nsrc):
            scratch[src[x]] = -1
    if o < total:  # top-f kept fewer than arrived
        out_n, out_e, ei = out_n[:o].copy(), out_e[: o if has_eids else 0].copy(), ei[:, :o].copy()
    return counts, out_n, out_e, src[:nsrc].copy(), ei


def merge_partials(
    n: int,
    partials: Sequence[Partial],
    merge: str,
    fanouts: np.ndarray,
    want_eids: bool = False,
    dst: np.ndarray | None = None,
    scratch: np.ndarray | None = None,
) -> HopSample:
    """Apply: merge server partials for a frontier of ``n`` vertices into one HopSample.

    With the frontier ``dst`` and a relabel ``scratch`` (see :func:`relabel`) the HopSample also
    carries its block's source ids and edge_index (``block``); for ``concat`` that is the same walk.
    """
    fanouts = np.asarray(fanouts, np.int64)
    nslot = len(fanouts)
    if merge in ("concat", "topk"):
        return _merge_walk(merge == "topk", n, fanouts, partials, want_eids, dst, scratch)
    tasks, cnts, nbrs, keys, eids = [], [], [], [], []
    for p in partials:
        c = np.asarray(p.counts).reshape(len(p.pos), nslot)
        tasks.append((np.asarray(p.pos, np.int64)[:, None] * nslot + np.arange(nslot)).reshape(-1))
        cnts.append(c.reshape(-1).astype(np.int64, copy=False))
        nbrs.append(np.asarray(p.nbrs, np.int64))
        keys.append(np.asarray(p.keys, np.float32))
        if want_eids:
            eids.append(np.asarray(p.edge_ids, np.int64))
    cat = np.concatenate
    e64, ef = np.empty(0, np.int64), np.empty(0, np.float32)
    offsets, out_n, out_k, out_e = _scatter(
        n * nslot,
        cat(tasks) if tasks else e64,
        cat(cnts) if cnts else e64,
        cat(nbrs) if nbrs else e64,
        cat(keys) if keys else ef,
        cat(eids) if eids else e64,
        True,
        want_eids,
    )
    if merge == "per_draw":
        counts, out_n, out_e = _reduce_per_draw(offsets, fanouts, nslot, out_n, out_k, out_e, want_eids)
    else:
        raise ValueError(f"merge: expected concat, topk or per_draw (got {merge!r})")
    counts = counts.reshape(n, nslot)
    block = None
    if dst is not None and scratch is not None:
        block = relabel_edges(np.asarray(dst, np.int64), out_n, counts.sum(axis=1), scratch)
    return HopSample(counts=counts, nbrs=out_n, edge_ids=out_e if want_eids else None, block=block)


def _merge_walk(
    topk: bool,
    n: int,
    fanouts: np.ndarray,
    partials: Sequence[Partial],
    want_eids: bool,
    dst: np.ndarray | None,
    scratch: np.ndarray | None,
) -> HopSample:
    """Concat or top-f merge of partials whose ``pos`` ascend (the router's order); see :func:`_walk_block`."""
    nslot = len(fanouts)
    ps = list(partials)
    for p in ps:
        if len(p.pos) > 1 and not (np.diff(p.pos) > 0).all():
            raise ValueError("merge: partial positions must be strictly ascending")
    rows = np.zeros(len(ps) + 1, np.int64)
    ents = np.zeros(len(ps) + 1, np.int64)
    np.cumsum([len(p.pos) for p in ps], out=rows[1:])
    np.cumsum([len(p.nbrs) for p in ps], out=ents[1:])

    def cat(xs: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(xs) if len(xs) > 1 else (xs[0] if xs else np.empty(0, dtype))

    build = dst is not None and scratch is not None
    counts, out_n, out_e, src, ei = _walk_block(
        topk,
        n,
        nslot,
        np.asarray(dst, np.int64) if build else np.empty(0, np.int64),
        cat([np.asarray(p.pos, np.int64) for p in ps], np.int64),
        cat([np.asarray(p.counts).reshape(-1) for p in ps], np.int32),
        cat([np.asarray(p.nbrs) for p in ps], np.int64),
        cat([np.asarray(p.keys, np.float32) for p in ps], np.float32) if topk else np.empty(0, np.float32),
        cat([np.asarray(p.edge_ids, np.int64) for p in ps], np.int64) if want_eids else np.empty(0, np.int64),
        fanouts,
        rows,
        ents,
        want_eids,
        scratch if build and scratch is not None else np.empty(0, np.int32),  # build: scratch is set
        build,
    )
    return HopSample(
        counts=counts, nbrs=out_n, edge_ids=out_e if want_eids else None, block=(src, ei) if build else None
    )


# ---------------------------------------------------------------------------------------- relabel
def relabel_edges(
    dst: np.ndarray, nbrs: np.ndarray, per_vertex: np.ndarray, scratch: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Relabel a merged hop straight into (src ids, (2, E) edge_index); ``scratch`` as in relabel."""
    n = len(dst)
    one = np.array([0, n], np.int64), np.array([0, len(nbrs)], np.int64)  # a single partial in frontier order
    _, _, _, src, ei = _walk_block(
        False,
        n,
        1,
        np.asarray(dst, np.int64),
        np.arange(n, dtype=np.int64),
        np.asarray(per_vertex, np.int64),
        np.asarray(nbrs, np.int64),
        np.empty(0, np.float32),
        np.empty(0, np.int64),
        np.ones(1, np.int64),
        *one,
        False,
        scratch,
        True,
    )
    return src, ei


def relabel(dst: np.ndarray, nbrs: np.ndarray, scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Relabel a hop: (src ids = dst ids then new neighbours in first-seen order, local index of each nbr).

    With a scratch map over global ids (``np.full(num_vertices, -1)``) this is O(entries); without
    one it falls back to sorting.
    """
    dst = np.asarray(dst, np.int64)
    nbrs = np.asarray(nbrs, np.int64)
    if scratch is not None and len(dst):
        per_vertex = np.zeros(len(dst), np.int64)
        per_vertex[0] = len(nbrs)  # the grouping does not change the labels
        src, ei = relabel_edges(dst, nbrs, per_vertex, scratch)
        return src, ei[0]
    allv = np.concatenate([dst, nbrs])
    uniq, first, inv = np.unique(allv, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # unique ids in first-seen order (dst first)
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    return uniq[order], rank[inv[len(dst) :]]
