"""Whole-component moves: the vertex balance that replica relocation cannot reach on graphs of many small
components.

The relocation (``relocate.Relocation``) moves one replica at a time and only where that removes a replica,
so a small connected component held whole by a vertex-heavy partition stays there: moving it a pair at a
time would first add replicas. Moving the whole component adds none (its vertices have no replica
elsewhere), so the replication factor stays exactly as it is while the vertex counts change. citeseer at
p = 64 (438 components, 71 pairs per partition) ends the relocation at VB 1.190: its vertex-heavy
partitions hold a dozen two-vertex components each, its light ones the giant component up to the edge
bound. The pass plans on the rows held in memory, or, in the Spark path's file rounds, on the rows that
touch a candidate vertex (``candidates``: one replica, fewer than ``SMALL`` pairs), read by one job:
both give the same components and so the same plan. The sharded state (``sharded_relocate``) reads the same
rows, each cell's candidates from its shards, and plans on them in compact vertex ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _root(parent: np.ndarray, x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]  # path halving
        x = parent[x]
    return x


@njit(nogil=True, cache=True)
def row_components(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """The connected component of every row (its smallest vertex id), by union-find over the rows."""
    parent = np.arange(n)
    for i in range(src.shape[0]):
        a, b = _root(parent, src[i]), _root(parent, dst[i])
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    out = np.empty(src.shape[0], np.int64)
    for i in range(src.shape[0]):
        out[i] = _root(parent, src[i])
    return out


def vertex_cap(vcount: np.ndarray, vb_max: float) -> int | None:
    """The vertex bound the pass works toward (``floor(vb_max x mean)``), or None where every partition is
    within it and the pass is not run (no job is spent on it)."""
    cap = int(np.floor(vb_max * vcount.mean()))
    return None if vcount.max() <= cap else cap


SMALL = 32  # a component moved whole has every vertex at fewer pairs than this (it bounds what is fetched)


def candidates(counts: np.ndarray) -> np.ndarray:
    """Vertices a whole-component move may carry: one replica, fewer than ``SMALL`` pairs (from the exact
    per-vertex pair counts [n, p] the relocation keeps)."""
    return ((counts > 0).sum(axis=1) == 1) & (counts.sum(axis=1) < SMALL)


@dataclass
class Whole:
    """The components held whole by one partition: id (smallest vertex), partition, rows, vertices."""

    comp: np.ndarray
    part: np.ndarray
    rows: np.ndarray
    verts: np.ndarray


def whole_components(
    src: np.ndarray,
    dst: np.ndarray,
    part: np.ndarray,
    comp: np.ndarray,
    cand: np.ndarray | None = None,
    vc: tuple[np.ndarray, np.ndarray] | None = None,
) -> Whole:
    """Every component whose rows all lie in one partition (so its vertices have no replica elsewhere) and,
    with ``cand``, whose vertices are all candidates. Rows given must hold every row of each candidate
    vertex; a component with a vertex outside ``cand`` may be cut short and is left out. ``vc``: the rows'
    ``vertex_components`` where the caller has them."""
    ids, inv, rows = np.unique(comp, return_inverse=True, return_counts=True)
    lo = np.full(len(ids), np.iinfo(np.int64).max)
    hi = np.full(len(ids), -1)
    np.minimum.at(lo, inv, part)
    np.maximum.at(hi, inv, part)
    v, vcomp = vc if vc is not None else vertex_components(src, dst, comp)
    at = np.searchsorted(ids, vcomp)
    verts = np.bincount(at, minlength=len(ids))
    keep = lo == hi
    if cand is not None:
        bad = np.zeros(len(ids), bool)
        bad[at[~cand[v]]] = True
        keep &= ~bad
    return Whole(ids[keep], lo[keep].astype(np.int64), rows[keep], verts[keep])


def vertex_components(src: np.ndarray, dst: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vertices of the rows (sorted) and the component of each (that of any of its rows: all agree)."""
    v = np.unique(np.concatenate([src, dst]))
    vcomp = np.empty(len(v), np.int64)
    vcomp[np.searchsorted(v, src)] = comp
    vcomp[np.searchsorted(v, dst)] = comp
    return v, vcomp


def plan_moves(w: Whole, vcount: np.ndarray, ecount: np.ndarray, vcap: int, ecap: int) -> dict[int, int]:
    """Component -> new partition, greedily: while the most vertex-heavy partition is above ``vcap``, move out
    its component of most vertices per row that a partition can take within ``vcap`` and ``ecap``; failing
    that, swap it for a component of fewer vertices whose partition can take the difference. Each step
    lowers the vertices above ``vcap`` summed over partitions, so the loop ends."""
    v, e = vcount.astype(np.int64).copy(), ecount.astype(np.int64).copy()
    where = dict(zip(w.comp.tolist(), w.part.tolist(), strict=True))
    size = {c: (int(r), int(x)) for c, r, x in zip(w.comp.tolist(), w.rows.tolist(), w.verts.tolist(), strict=True)}
    held: dict[int, list[int]] = {}
    for c in sorted(size, key=lambda c: (-size[c][1] / size[c][0], c)):
        held.setdefault(where[c], []).append(c)
    moves: dict[int, int] = {}

    def put(c: int, a: int, b: int) -> None:
        r, x = size[c]
        v[a], e[a], v[b], e[b] = v[a] - x, e[a] - r, v[b] + x, e[b] + r
        held[a].remove(c)
        held.setdefault(b, []).append(c)
        where[c] = moves[c] = b

    while True:
        a = int(np.argmax(v))
        if v[a] <= vcap:
            return moves
        step = _move(held.get(a, []), size, a, v, e, vcap, ecap) or _swap(held, size, a, v, e, vcap, ecap)
        if step is None:
            return moves
        for c, src_part, dst_part in step:
            put(c, src_part, dst_part)


def _move(cands: list[int], size: dict, a: int, v: np.ndarray, e: np.ndarray, vcap: int, ecap: int) -> list | None:
    """One component out of ``a`` into the lightest partition with room for it (vertices and rows)."""
    for c in cands:
        r, x = size[c]
        room = (v + x <= vcap) & (e + r <= ecap)
        room[a] = False
        if room.any():
            return [(c, a, int(np.argmin(np.where(room, v, np.iinfo(np.int64).max))))]
    return None


def _swap(held: dict, size: dict, a: int, v: np.ndarray, e: np.ndarray, vcap: int, ecap: int) -> list | None:
    """``a``'s component c for a component d of another partition b with fewer vertices, both within the
    bounds after the exchange; the pair that takes most vertices off ``a`` (one candidate per shape)."""
    mine = {size[c]: c for c in reversed(held.get(a, []))}  # the first of each shape in held order
    best: tuple | None = None
    for b, theirs in held.items():
        if b == a:
            continue
        for (r2, x2), d in {size[d]: d for d in reversed(theirs)}.items():
            for (r, x), c in mine.items():
                gain = x - x2
                if gain <= 0 or (best is not None and gain <= best[0]):
                    continue
                if v[b] + gain <= vcap and e[b] + r - r2 <= ecap and e[a] - r + r2 <= ecap:
                    best = (gain, c, d, b)
    if best is None:
        return None
    _, c, d, b = best
    return [(c, a, b), (d, b, a)]


def plan_components(
    src: np.ndarray,
    dst: np.ndarray,
    part: np.ndarray,
    cand: np.ndarray,
    vcount: np.ndarray,
    ecount: np.ndarray,
    vcap: int,
    ecap: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The vertices to move (sorted) and their new partitions, toward ``vcount <= vcap`` with rows within
    ``ecap``, over the components of candidate vertices (``candidates``) held whole. The rows are every row
    of the graph, or (the file rounds) every row that touches a candidate: the plan is the same."""
    none = np.empty(0, np.int64)
    if vcount.max() <= vcap or len(src) == 0:
        return none, none
    comp = row_components(src, dst, len(cand))
    v, vcomp = vertex_components(src, dst, comp)
    moves = plan_moves(whole_components(src, dst, part, comp, cand, (v, vcomp)), vcount, ecount, vcap, ecap)
    if not moves:
        return none, none
    ids = np.fromiter(moves, np.int64, len(moves))
    dest = np.fromiter(moves.values(), np.int64, len(moves))
    o = np.argsort(ids)
    ids, dest = ids[o], dest[o]
    hit = np.searchsorted(ids, vcomp).clip(0, len(ids) - 1)
    sel = ids[hit] == vcomp
    return v[sel], dest[hit[sel]]


def reassign(src: np.ndarray, part: np.ndarray, vertices: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """The rows' partitions with every row of a moved component (its source is one of ``vertices``, sorted)
    sent to that vertex's ``dest``."""
    if len(vertices) == 0:
        return part
    at = np.searchsorted(vertices, src).clip(0, len(vertices) - 1)
    sel = vertices[at] == src
    out = part.copy()
    out[sel] = dest[at[sel]].astype(part.dtype)
    return out
