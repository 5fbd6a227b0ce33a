"""PyG's ``NeighborLoader`` and ``LinkNeighborLoader``, sampling through GLISP when given a GLISP remote pair.

They are PyG's classes with one change each: on the pair of :func:`~glisp_train.pyg.glisp_remote` they build a
:class:`~glisp_train.pyg.GlispSampler` (PyG's own ``NeighborSampler`` would read the whole graph out of the
graph store and sample locally), and they prefetch. On an in-memory ``Data``/``HeteroData`` they are PyG's
loaders, with PyG's sampler where pyg-lib or torch-sparse is installed and the numpy sampler of
:mod:`glisp_train.pyg.memory` otherwise. So one script runs on both with only its data line changed.

**Prefetch** (``prefetch``, default ``train.prefetch`` = 2): ``prefetch`` threads each sample a batch and fetch
its features (``loader(index)``, PyG's collate and filter), so that many batches are in flight on the
client's event loop while the caller computes; batches come back in order, the same as without prefetch
for a seeded run. PyG's worker processes (``num_workers > 0``) are refused on a GLISP pair: the client's
event loop, channels and feature cache live in this process and do not survive a fork.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkNeighborLoader as PygLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as PygNeighborLoader

from glisp_train.pyg.memory import memory_sampler, pyg_can_sample
from glisp_train.pyg.sampler import GlispSampler
from glisp_train.pyg.stores import GlispGraphStore

DEFAULT_PREFETCH = 2


def is_glisp(data: Any) -> bool:
    """Whether ``data`` is a (feature store, graph store) pair over a GLISP graph."""
    return isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[1], GlispGraphStore)


def _sampler_for(data: Any, num_neighbors: Any, kw: dict[str, Any]) -> Any:
    """GlispSampler for a GLISP pair, the numpy sampler for in-memory data PyG cannot sample, else None (PyG's)."""
    if is_glisp(data) and int(kw.get("num_workers", 0) or 0) > 0:
        raise ValueError(
            f"num_workers: a GLISP remote pair samples on its client's event loop, which worker processes cannot "
            f"share; use num_workers=0 and prefetch=N threads instead (got num_workers={kw['num_workers']})"
        )
    opts = {k: kw[k] for k in ("replace", "weight_attr", "subgraph_type", "disjoint", "time_attr") if k in kw}
    glisp_only = {k: kw.pop(k) for k in ("max_time", "method") if k in kw}
    if is_glisp(data):
        return GlispSampler(data, num_neighbors, **glisp_only, **opts)
    if isinstance(data, (Data, HeteroData)) and not pyg_can_sample():
        return memory_sampler(data, num_neighbors, replace=bool(kw.get("replace", False)))
    return None


class _Prefetching:
    """Batches made ``prefetch`` at a time by threads (see the module docstring)."""

    prefetch: int = 0
    num_workers: int
    _index_sampler: Any

    def _get_iterator(self) -> Iterator[Any]:
        if self.prefetch <= 0 or self.num_workers > 0:
            return super()._get_iterator()  # type: ignore[misc]
        # the draw torch's own iterator makes first, so a seeded run shuffles alike with and without prefetch
        torch.empty((), dtype=torch.int64).random_(generator=getattr(self, "generator", None))
        return _prefetched(self, self.prefetch)


def _prefetched(loader: Any, depth: int) -> Iterator[Any]:
    pool = ThreadPoolExecutor(depth, thread_name_prefix="glisp-pyg-prefetch")
    pending: deque[Future] = deque()
    try:
        for index in loader._index_sampler:
            pending.append(pool.submit(loader, index))  # NodeLoader/LinkLoader.__call__: sample, then features
            if len(pending) > depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)


class NeighborLoader(_Prefetching, PygNeighborLoader):
    """PyG's ``NeighborLoader``; on a GLISP pair it samples through the service, with ``prefetch`` batches ahead."""

    def __init__(self, data: Any, num_neighbors: Any, *args: Any, prefetch: int = DEFAULT_PREFETCH, **kw: Any) -> None:
        if kw.get("neighbor_sampler") is None:
            kw["neighbor_sampler"] = _sampler_for(data, num_neighbors, kw)
        sampler = kw["neighbor_sampler"]
        self.prefetch = prefetch if isinstance(sampler, GlispSampler) and is_glisp(data) else 0
        if is_glisp(data) and not args and kw.get("input_nodes") is None and not data[1].graph_view.hetero:
            # every vertex, as for an in-memory Data (PyG requires input_nodes of a remote pair)
            kw["input_nodes"] = torch.arange(data[1].graph_view.num_vertices)
        super().__init__(data, num_neighbors, *args, **kw)


def _homogeneous_edges(data: Any, edge_label_index: Any) -> Any:
    """PyG wants ``(edge type, index)`` from a remote backend; a homogeneous GLISP graph takes a bare index too
    (as an in-memory ``Data`` does), meaning ``(None, index)``."""
    if is_glisp(data) and not data[1].graph_view.hetero and not isinstance(edge_label_index, (tuple, list)):
        return (None, edge_label_index)
    return edge_label_index


class LinkNeighborLoader(_Prefetching, PygLinkNeighborLoader):
    """PyG's ``LinkNeighborLoader``; on a GLISP pair it samples through the service, with ``prefetch`` batches
    ahead. Negatives (``neg_sampling``, binary or triplet) are PyG's: uniform over the destination type."""

    def __init__(self, data: Any, num_neighbors: Any, *args: Any, prefetch: int = DEFAULT_PREFETCH, **kw: Any) -> None:
        if kw.get("neighbor_sampler") is None:
            kw["neighbor_sampler"] = _sampler_for(data, num_neighbors, kw)
        sampler = kw["neighbor_sampler"]
        self.prefetch = prefetch if isinstance(sampler, GlispSampler) and is_glisp(data) else 0
        if args:
            args = (_homogeneous_edges(data, args[0]), *args[1:])
        else:
            kw["edge_label_index"] = _homogeneous_edges(data, kw.get("edge_label_index"))
        super().__init__(data, num_neighbors, *args, **kw)
