"""The same sampler over an in-memory ``Data``/``HeteroData``, for machines without pyg-lib or torch-sparse.

PyG's own ``NeighborSampler`` needs one of those two compiled packages; without them an in-memory
``NeighborLoader`` cannot sample at all. :class:`MemoryBackend` answers the sampler's Gather with numpy over
the graph's in-edges (sorted by destination, relation, source, as a GLISP partition stores them): uniform
without replacement (every neighbour when the fanout covers the degree), or with replacement. It shares no
sampling code with the service: a script on in-memory ``Data`` is a reference for the same script on the
service. ``NeighborLoader`` of :mod:`glisp_train.pyg` uses it only when PyG's sampler cannot run.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
from torch_geometric.data import Data, HeteroData

from glisp_sampling.apply import HopSample
from glisp_sampling.khop import HopRequest
from glisp_train.pyg.view import GraphView


def pyg_can_sample() -> bool:
    """Whether PyG's in-memory NeighborSampler has its sampling kernels (pyg-lib or torch-sparse)."""
    import torch_geometric.typing as t

    return bool(t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE)


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(lo[i], hi[i])``."""
    n = hi - lo
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    return starts + np.arange(int(n.sum()), dtype=np.int64)


class MemoryBackend:
    """Gather over in-edges held in memory (global ids; ``rel`` codes; ``eid`` reported per edge)."""

    def __init__(
        self, src: np.ndarray, dst: np.ndarray, rel: np.ndarray, eid: np.ndarray, n: int, rel_names: list[str]
    ) -> None:
        order = np.lexsort((src, rel, dst))
        self.src, self.eid = src[order], eid[order]
        self.rel_names, self.nrel = list(rel_names), max(1, len(rel_names))
        self.key = dst[order] * self.nrel + rel[order]
        self.num_vertices = n

    def _slot(self, v: np.ndarray, r: int, f: int, rng: np.random.Generator, replace: bool) -> tuple[np.ndarray, ...]:
        """(count per vertex, picked edge positions grouped by vertex) for relation ``r`` and fanout ``f``."""
        lo = np.searchsorted(self.key, v * self.nrel + r, side="left")
        hi = np.searchsorted(self.key, v * self.nrel + r, side="right")
        deg = hi - lo
        if replace:
            cnt = np.where(deg > 0, f, 0)
            owner = np.repeat(np.arange(len(v)), cnt)
            return cnt, lo[owner] + (rng.random(len(owner)) * deg[owner]).astype(np.int64)
        pos = _ranges(lo, hi)
        owner = np.repeat(np.arange(len(v)), deg)
        order = np.lexsort((rng.random(len(pos)), owner))  # a random order within each vertex's edges
        first = np.concatenate([[0], np.cumsum(deg)[:-1]])
        rank = np.arange(len(pos)) - np.repeat(first, deg)
        keep = order[rank < f]  # positions in owner-major order, the first f of each shuffled range
        return np.minimum(deg, f), pos[keep]

    async def gather(self, frontier: np.ndarray, req: HopRequest, scratch: np.ndarray | None = None) -> HopSample:
        if req.direction != "in" or req.method not in ("uniform", "uniform_exact", "replace"):
            raise NotImplementedError(f"in-memory sampling: direction 'in', uniform or replace (got {req})")
        rng = np.random.default_rng(req.seed)
        v = np.asarray(frontier, np.int64)
        typed = req.type_fanouts or ()
        slots = [(self.rel_names.index(r), f) for r, f in typed] if typed else [(0, int(req.fanout or 0))]
        counts = np.zeros((len(v), len(slots)), np.int64)
        picked, slot_of, owner_of = [], [], []
        for j, (r, f) in enumerate(slots):
            cnt, pos = self._slot(v, r, f, rng, req.method == "replace")
            counts[:, j] = cnt
            picked.append(pos)
            slot_of.append(np.full(len(pos), j))
            owner_of.append(np.repeat(np.arange(len(v)), cnt))
        pos = np.concatenate(picked)
        order = np.lexsort((np.concatenate(slot_of), np.concatenate(owner_of)))  # grouped by (vertex, slot)
        pos = pos[order]
        return HopSample(counts=counts, nbrs=self.src[pos], edge_ids=self.eid[pos] if req.edge_ids else None)

    async def lookup(self, ids: np.ndarray, features: bool, labels: bool) -> dict[str, np.ndarray]:
        raise NotImplementedError("in-memory Data: PyG reads its features from the Data object")


_LOOPS = threading.local()


def _run_now(coro: Any) -> Future:
    """Run a sampler coroutine to completion in the calling thread, on that thread's own event loop (numpy
    only: nothing to overlap)."""
    loop = getattr(_LOOPS, "loop", None)
    if loop is None:
        loop = _LOOPS.loop = asyncio.new_event_loop()
    fut: Future = Future()
    fut.set_result(loop.run_until_complete(coro))
    return fut


def memory_view(data: Data | HeteroData) -> GraphView:
    """A GraphView of an in-memory graph (global ids: node types one after another, in ``data.node_types`` order)."""
    if isinstance(data, Data):
        ei = data.edge_index.numpy().astype(np.int64)
        n = int(data.num_nodes)
        backend = MemoryBackend(ei[0], ei[1], np.zeros(ei.shape[1], np.int64), np.arange(ei.shape[1]), n, ["e0"])
        return GraphView(backend, _run_now, n, ["v0"], ["e0"], np.zeros((1, 3), np.int64))
    ntypes = list(data.node_types)
    sizes = [int(data[t].num_nodes) for t in ntypes]
    offset = dict(zip(ntypes, np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist(), strict=True))
    rels = sorted({e[1] for e in data.edge_types})
    src, dst, rel, eid, codes = [], [], [], [], []
    for s, r, d in data.edge_types:
        ei = data[s, r, d].edge_index.numpy().astype(np.int64)
        src.append(ei[0] + offset[s])
        dst.append(ei[1] + offset[d])
        rel.append(np.full(ei.shape[1], rels.index(r)))
        eid.append(np.arange(ei.shape[1]))
        codes.append((ntypes.index(s), rels.index(r), ntypes.index(d)))
    n = sum(sizes)
    s_all, d_all, r_all, e_all = (np.concatenate(x).astype(np.int64) for x in (src, dst, rel, eid))
    backend = MemoryBackend(s_all, d_all, r_all, e_all, n, rels)
    vtype = np.repeat(np.arange(len(ntypes)), sizes).astype(np.int64)
    return GraphView(backend, _run_now, n, ntypes, rels, np.asarray(codes, np.int64).reshape(-1, 3), vtype=vtype)


def memory_sampler(data: Data | HeteroData, num_neighbors: Any, replace: bool = False) -> Any:
    """A GlispSampler over in-memory ``data`` (edge ids on, so PyG's ``e_id`` and edge attributes work)."""
    from glisp_train.pyg.sampler import GlispSampler

    return GlispSampler(memory_view(data), num_neighbors, replace=replace, edge_ids=True)
