"""A PyG ``BaseSampler`` on GLISP's Gather-Apply sampling: PyG's neighbour sampling, hop by hop through the service.

Each hop asks the backend for the in-neighbours of the nodes the previous hop added (the seeds at hop 0):
one Gather per server holding part of that frontier, merged by Apply, exactly the calls GLISP's own loader
makes (:meth:`~glisp_serving.client.sampling_client.RemoteBackend.gather`). The result is what PyG's
``NeighborSampler`` returns (``subgraph_type="directional"``, not disjoint): ``node`` holds the seeds first,
then each hop's new nodes in first-seen order; ``row``/``col`` index ``node`` (a message flows from
``row``, the sampled neighbour, to ``col``), grouped by destination; ``num_sampled_nodes`` and
``num_sampled_edges`` count per hop. GLISP's own blocks differ: there every hop samples the whole previous
node set again (one bipartite block per layer); here, as in PyG, a node is expanded once.

Typed graphs give a ``HeteroSamplerOutput``: per node type PyG ids (positions within the type), per edge
triple ``(source type, relation, destination type)`` edges. The service samples per destination vertex and
relation, so a hop sends one typed Gather per destination type in the frontier, with that type's fanout
per relation. Link sampling and its negatives (binary and triplet) are PyG's own ``edge_sample`` around
this node sampling.

Method: ``uniform_exact`` (PyG's: at most the fanout per node and relation, each subset equally likely),
``replace=True`` -> ``replace``, ``weight_attr`` -> ``weighted`` (the served edge weights), ``max_time`` -> the
service's time bound on every hop. ``method="uniform"`` asks for the service's quota method instead (what
``glisp train`` samples with: cheaper on a vertex-cut, the fanout exact only in expectation).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any

import numpy as np
import torch
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    NumNeighbors,
    SamplerOutput,
)
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from glisp_core.errors import GlispError
from glisp_sampling.apply import relabel
from glisp_sampling.khop import SCRATCH_LIMIT, HopRequest, check_seeds, hop_seed
from glisp_train.pyg.view import GraphView


class GlispSampler(BaseSampler):
    """PyG neighbour sampling through a GLISP backend (see the module docstring).

    ``data`` is what :func:`glisp_train.pyg.glisp_remote` returns (or any pair whose graph store is a
    :class:`~glisp_train.pyg.GlispGraphStore`), or a :class:`~glisp_train.pyg.view.GraphView`.
    ``num_neighbors`` as in PyG: one list for every edge type, or a dict per edge triple; -1 = every
    neighbour (up to the servers' ``serve.max_fanout``).
    """

    def __init__(
        self,
        data: Any,
        num_neighbors: Any,
        replace: bool = False,
        weight_attr: str | None = None,
        max_time: int | None = None,
        edge_ids: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        time_attr: str | None = None,
        method: str | None = None,
    ) -> None:
        self.view = _view_of(data)
        if str(getattr(subgraph_type, "value", subgraph_type)) != "directional":
            raise NotImplementedError(
                f"subgraph_type: the service samples directional subgraphs only (got {subgraph_type!r})"
            )
        if disjoint or time_attr is not None:
            raise NotImplementedError(
                "disjoint and per-seed temporal sampling (time_attr) are not served: the service bounds time "
                "per request; pass max_time=<timestamp> to sample only edges at or before it"
            )
        if weight_attr is not None and not self.view.weighted:
            raise GlispError(f"weight_attr={weight_attr!r}: the served dataset has no edge weights")
        if max_time is not None and not self.view.timestamped:
            raise GlispError(f"max_time={max_time}: the served dataset has no edge timestamps")
        self.method = method or ("replace" if replace else "weighted" if weight_attr is not None else "uniform_exact")
        self.max_time, self.edge_ids = max_time, edge_ids
        self.num_neighbors = num_neighbors if isinstance(num_neighbors, NumNeighbors) else NumNeighbors(num_neighbors)
        self._local = threading.local()
        self._base_seed = int(torch.randint(0, 2**62, (1,)).item())  # torch.manual_seed repeats a run's samples
        if self.view.hetero:
            self._plan = self._typed_plan()
            self.num_hops = len(next(iter(self._plan.values()))) if self._plan else 0
        else:
            self.hops = [self._fanout(f) for f in self.num_neighbors.get_values()]
            self.num_hops = len(self.hops)

    # ------------------------------------------------------------------ plan
    def _fanout(self, f: int) -> int:
        return self.view.max_fanout if int(f) < 0 else int(f)

    def _typed_plan(self) -> dict[int, list[tuple[tuple[str, int], ...]]]:
        """Per destination type code, per hop: the (relation, fanout) of every edge type, as one typed Gather asks.

        PyG fanouts are per triple; the service's per (destination, relation). Triples that share a
        relation and a destination type must then ask the same fanout (GlispError otherwise)."""
        v = self.view
        values = self.num_neighbors.get_values(v.triples)
        per: dict[tuple[int, str], list[int]] = {}
        for (s, rel, d), fans in values.items():
            key = (v.type_code(d), rel)
            fans = [self._fanout(f) for f in fans]
            if key in per and per[key] != fans:
                raise GlispError(
                    f"num_neighbors: the service samples per destination type and relation; edge types into "
                    f"{d!r} by {rel!r} ask different fanouts ({per[key]} and {fans} for source {s!r})"
                )
            per[key] = fans
        hops = {len(f) for f in per.values()}
        plan: dict[int, list[tuple[tuple[str, int], ...]]] = {}
        for d in sorted({k[0] for k in per}):
            plan[d] = [
                tuple((rel, per.get((d, rel), [0] * max(hops))[h]) for rel in v.edge_types) for h in range(max(hops))
            ]
        return plan

    # ------------------------------------------------------------------ PyG's entry points
    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs: Any) -> SamplerOutput | HeteroSamplerOutput:
        return node_sample(index, self._sample)

    def sample_from_edges(
        self, index: EdgeSamplerInput, neg_sampling: NegativeSampling | None = None
    ) -> SamplerOutput | HeteroSamplerOutput:
        num_nodes: Any = (
            {t: self.view.num_nodes(t) for t in self.view.vertex_types} if self.view.hetero else self.view.num_vertices
        )
        return edge_sample(index, self._sample, num_nodes, False, None, neg_sampling)

    @property
    def edge_permutation(self) -> None:
        return None

    def _sample(self, seed: Any, seed_time: Any = None) -> SamplerOutput | HeteroSamplerOutput:
        if seed_time is not None:
            raise NotImplementedError("per-seed times are not served; sample with max_time=<timestamp> instead")
        return self.view.submit(self.sample_async(seed, self._batch_seed(seed))).result()

    def _batch_seed(self, seed: Any) -> int:
        """The request seed of one batch: the sampler's seed (from torch's generator when it was made) mixed with
        the batch's seed nodes, so that batches prefetched by several threads are the same in any order."""
        h = hashlib.blake2b(self._base_seed.to_bytes(8, "little"), digest_size=8)
        for key, ids in sorted(seed.items()) if isinstance(seed, dict) else [("", seed)]:
            h.update(str(key).encode())
            h.update(np.ascontiguousarray(_np(ids), np.int64).tobytes())
        return int.from_bytes(h.digest(), "little") >> 2

    async def sample_async(self, seed: Any, batch_seed: int) -> SamplerOutput | HeteroSamplerOutput:
        """One batch on the backend's event loop: ``seed`` a tensor of node ids, or a dict per node type."""
        if isinstance(seed, dict):
            if not self.view.hetero:
                raise GlispError(f"seeds: the served graph is homogeneous (got seeds per node type {list(seed)})")
            return await self._hetero(seed, batch_seed)
        if self.view.hetero:
            raise GlispError(
                f"seeds: the served graph is typed ({self.view.vertex_types}); give input_nodes=(node_type, ids)"
            )
        return await self._homo(check_seeds(_np(seed), "input nodes"), batch_seed)

    # ------------------------------------------------------------------ sampling
    def _scratch(self) -> np.ndarray | None:
        """A relabel map over global ids (-1 everywhere between uses), one per thread."""
        n = self.view.num_vertices
        if n > SCRATCH_LIMIT:
            return None
        s = getattr(self._local, "scratch", None)
        if s is None or len(s) != n:
            s = self._local.scratch = np.full(n, -1, np.int32)
        return s

    def _request(self, h: int, batch_seed: int, **kw: Any) -> HopRequest:
        return HopRequest(
            method=self.method,
            direction="in",
            max_time=self.max_time,
            seed=hop_seed(batch_seed, h),
            edge_ids=self.edge_ids,
            **kw,
        )

    async def _homo(self, seeds: np.ndarray, batch_seed: int) -> SamplerOutput:
        nodes, start = seeds, 0
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        eids: list[np.ndarray] = []
        n_nodes, n_edges = [len(seeds)], []
        for h, f in enumerate(self.hops):
            frontier = nodes[start:]
            if len(frontier) == 0 or len(nodes) == 0:
                n_nodes.append(0)
                n_edges.append(0)
                continue
            hop = await self.view.backend.gather(frontier, self._request(h, batch_seed, fanout=f))
            src, local = relabel(nodes, hop.nbrs, self._scratch())
            rows.append(local)
            cols.append(np.repeat(np.arange(start, len(nodes), dtype=np.int64), hop.counts.sum(axis=1)))
            if hop.edge_ids is not None:
                eids.append(hop.edge_ids)
            n_nodes.append(len(src) - len(nodes))
            n_edges.append(len(local))
            start, nodes = len(nodes), src
        return SamplerOutput(
            node=torch.from_numpy(nodes),
            row=torch.from_numpy(_cat(rows)),
            col=torch.from_numpy(_cat(cols)),
            edge=torch.from_numpy(_cat(eids)) if self.edge_ids else None,
            num_sampled_nodes=n_nodes,
            num_sampled_edges=n_edges,
        )

    async def _typed_hop(self, frontier: np.ndarray, start: int, h: int, batch_seed: int) -> tuple[np.ndarray, ...]:
        """One hop of a typed frontier: (neighbour gids, destination positions, relation codes, edge ids)."""
        ftype = self.view.types_of(frontier)
        calls, where = [], []
        for d, hops in self._plan.items():
            idx = np.flatnonzero(ftype == d)
            fans = hops[h]
            if len(idx) and any(f for _, f in fans):
                calls.append(self.view.backend.gather(frontier[idx], self._request(h, batch_seed, type_fanouts=fans)))
                where.append(idx)
        answers = await asyncio.gather(*calls)
        nb, dst, rel, eid = [], [], [], []
        nrel = len(self.view.edge_types)
        for idx, hop in zip(where, answers, strict=True):
            counts = hop.counts.reshape(len(idx), nrel)
            nb.append(hop.nbrs)
            dst.append(np.repeat(start + idx, counts.sum(axis=1)))
            rel.append(np.repeat(np.tile(np.arange(nrel, dtype=np.int64), len(idx)), counts.reshape(-1)))
            if hop.edge_ids is not None:
                eid.append(hop.edge_ids)
        return _cat(nb), _cat(dst), _cat(rel), _cat(eid)

    async def _hetero(self, seed: dict[str, Any], batch_seed: int) -> HeteroSamplerOutput:
        v = self.view
        parts = [v.to_global(t, _np(s)) for t, s in seed.items()]
        nodes = check_seeds(np.concatenate(parts) if parts else np.empty(0, np.int64), "input nodes")
        start, hop_of_node = 0, [np.zeros(len(nodes), np.int64)]
        rows, cols, rels, eids, hop_of_edge = [], [], [], [], []
        for h in range(self.num_hops):
            frontier = nodes[start:]
            if len(frontier) == 0:
                continue
            nb, dst, rel, eid = await self._typed_hop(frontier, start, h, batch_seed)
            src, local = relabel(nodes, nb, self._scratch()) if len(nb) else (nodes, np.empty(0, np.int64))
            rows.append(local)
            cols.append(dst)
            rels.append(rel)
            eids.append(eid)
            hop_of_edge.append(np.full(len(local), h, np.int64))
            hop_of_node.append(np.full(len(src) - len(nodes), h + 1, np.int64))
            start, nodes = len(nodes), src
        return self._hetero_output(
            nodes, _cat(rows), _cat(cols), _cat(rels), _cat(eids), _cat(hop_of_node), _cat(hop_of_edge)
        )

    def _hetero_output(self, nodes, row, col, rel, eid, hop_node, hop_edge) -> HeteroSamplerOutput:
        """Split one global sample into PyG's per-type node ids and per-triple edges (positions within types)."""
        v = self.view
        vt = v.types_of(nodes)
        pos = np.empty(len(nodes), np.int64)
        node, n_nodes = {}, {}
        for code, name in enumerate(v.vertex_types):
            idx = np.flatnonzero(vt == code)
            pos[idx] = np.arange(len(idx))
            node[name] = torch.from_numpy(v.local_ids(nodes[idx]))
            n_nodes[name] = np.bincount(hop_node[idx], minlength=self.num_hops + 1).tolist()
        key = (vt[row] * len(v.edge_types) + rel) * len(v.vertex_types) + vt[col] if len(row) else row
        out_row, out_col, out_edge, n_edges = {}, {}, {}, {}
        nv, ne = len(v.vertex_types), len(v.edge_types)
        for (s, e, d), triple in zip(v.triple_codes.tolist(), v.triples, strict=True):
            m = np.flatnonzero(key == (s * ne + e) * nv + d)
            out_row[triple] = torch.from_numpy(pos[row[m]])
            out_col[triple] = torch.from_numpy(pos[col[m]])
            out_edge[triple] = torch.from_numpy(eid[m]) if self.edge_ids else None
            n_edges[triple] = np.bincount(hop_edge[m], minlength=self.num_hops).tolist()
        return HeteroSamplerOutput(
            node=node,
            row=out_row,
            col=out_col,
            edge=out_edge if self.edge_ids else None,
            num_sampled_nodes=n_nodes,
            num_sampled_edges=n_edges,
        )


def _view_of(data: Any) -> GraphView:
    if isinstance(data, GraphView):
        return data
    store = data[1] if isinstance(data, (tuple, list)) and len(data) == 2 else None
    view = getattr(store, "graph_view", None)
    if not isinstance(view, GraphView):
        raise TypeError(
            "GlispSampler: expected the (feature_store, graph_store) pair of glisp_train.pyg.glisp_remote "
            f"(got {type(data).__name__})"
        )
    return view


def _np(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs).astype(np.int64, copy=False) if xs else np.empty(0, np.int64)
