"""PyG's ``FeatureStore`` and ``GraphStore`` over a GLISP sampling service (read-only).

- :class:`GlispFeatureStore` serves ``x`` (features) and ``y`` (labels, -1 = none) by PyG node id: features
  through the trainer-side feature cache (:class:`~glisp_train.cache.FeatureCache`: the hottest vertices held
  here, the rest looked up at their master servers), labels from one lookup of every vertex's label
  (8 bytes a vertex, on first use). Typed graphs list both per node type (``y`` only for types with a
  labelled vertex).
- :class:`GlispGraphStore` lists one COO edge attribute per edge triple served (one ``None`` edge type for
  a homogeneous graph); ``get_edge_index`` gathers every in-edge of every vertex through the service, in
  chunks: a whole-graph read, meant for small graphs and checks, never for sampling (the sampler asks the
  service per hop).

Writes (``put_tensor``, ``remove_tensor``, ``put_edge_index``, ``remove_edge_index``) raise
:class:`~glisp_train.pyg.view.ReadOnlyError`: the service serves a published dataset version.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from glisp_sampling.khop import HopRequest
from glisp_train.pyg.view import GraphView, ReadOnlyError

EDGE_CHUNK = 4_000_000  # in-edges per Gather of a whole-graph read (under serve.max_request_edges)


_STOCK_LOADER = (
    "torch_geometric.loader's NeighborLoader/LinkNeighborLoader would copy the whole served graph into this "
    "process (GraphStore.csc) and need pyg-lib or torch-sparse; on a GLISP cluster use "
    "'from glisp_train.pyg import NeighborLoader, LinkNeighborLoader' (the same arguments), which sample "
    "through the service. For the edge list itself: graph_store.get_edge_index(...)"
)


def _read_only(what: str) -> ReadOnlyError:
    return ReadOnlyError(
        f"{what}: the GLISP service is read-only (it serves a published dataset version); change the data with "
        "'glisp ingest' and the pipeline, then serve the new version"
    )


class GlispFeatureStore(FeatureStore):
    """Features and labels by PyG node id, through the feature cache and the servers' Lookup."""

    def __init__(self, view: GraphView, cache: Any, labels: Any) -> None:
        super().__init__()
        self.graph_view = view  # not `view`: FeatureStore.view() is PyG's
        self.cache = cache  # FeatureCache over graph_view.backend
        self._labels_fn = labels  # () -> int64 label per global id (-1 = none), fetched once
        self._labels: np.ndarray | None = None
        self._attrs: list[tuple[str | None, str]] | None = None

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:
            self._labels = np.asarray(self._labels_fn(), np.int64)
        return self._labels

    def _groups(self) -> list[str | None]:
        return list(self.graph_view.vertex_types) if self.graph_view.hetero else [None]

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """``x`` where the schema has features, ``y`` for each group with a labelled vertex (found once: PyG asks
        for every batch)."""
        if self._attrs is None:
            attrs: list[tuple[str | None, str]] = []
            for g in self._groups():
                if self.graph_view.feature_dim:
                    attrs.append((g, "x"))
                ids = self.graph_view.to_global(g, np.arange(self.graph_view.num_nodes(g)))
                if (self.labels[ids] >= 0).any():
                    attrs.append((g, "y"))
            self._attrs = attrs
        return [TensorAttr(g, name, None) for g, name in self._attrs]

    def _ids(self, attr: TensorAttr) -> np.ndarray:
        n = self.graph_view.num_nodes(attr.group_name)
        idx = attr.index
        if idx is None:
            return self.graph_view.to_global(attr.group_name, np.arange(n))
        if isinstance(idx, slice):
            return self.graph_view.to_global(attr.group_name, np.arange(n)[idx])
        if isinstance(idx, torch.Tensor):
            idx = idx.numpy()
        return self.graph_view.to_global(attr.group_name, np.asarray(idx, np.int64).reshape(-1))

    def _check(self, attr: TensorAttr) -> None:
        if attr.attr_name not in ("x", "y") or (attr.attr_name == "x" and not self.graph_view.feature_dim):
            raise KeyError(f"{attr.attr_name!r}: the service serves 'x' (features) and 'y' (labels) per node")

    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[torch.Tensor]:
        """Every requested feature matrix in one round of lookups (cache misses at their masters, in parallel)."""
        for a in attrs:
            self._check(a)
        ids = [self._ids(a) for a in attrs]
        feat = [i for i, a in enumerate(attrs) if a.attr_name == "x"]
        out: list[Any] = [None] * len(attrs)
        if feat:
            import asyncio

            async def plans() -> list[Any]:
                return await asyncio.gather(*[self.cache.plan(ids[i]) for i in feat])

            for i, plan in zip(feat, self.graph_view.submit(plans()).result(), strict=True):
                out[i] = self.cache.assemble(plan, torch.device("cpu"))
        for i, a in enumerate(attrs):
            if a.attr_name == "y":
                out[i] = torch.from_numpy(self.labels[ids[i]])
        return out

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check(attr)
        n = self.graph_view.num_nodes(attr.group_name)
        return (n, self.graph_view.feature_dim) if attr.attr_name == "x" else (n,)

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        raise _read_only(f"put_tensor({attr.group_name!r}, {attr.attr_name!r})")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only(f"remove_tensor({attr.group_name!r}, {attr.attr_name!r})")


class GlispGraphStore(GraphStore):
    """The served edges' types; an edge index gathered through the service (a whole-graph read)."""

    def __init__(self, view: GraphView) -> None:
        super().__init__()
        self.graph_view = view  # not `view`: FeatureStore.view() is PyG's

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        v = self.graph_view
        if not v.hetero:
            return [EdgeAttr(None, EdgeLayout.COO, size=(v.num_vertices, v.num_vertices))]
        return [EdgeAttr(t, EdgeLayout.COO, size=(v.num_nodes(t[0]), v.num_nodes(t[2]))) for t in v.triples]

    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[torch.Tensor, torch.Tensor] | None:
        if edge_attr.layout != EdgeLayout.COO:
            return None  # GraphStore.csr()/csc() convert the COO index
        v = self.graph_view
        if v.hetero and edge_attr.edge_type not in v.triples:
            return None
        s, rel, d = edge_attr.edge_type if v.hetero else (None, None, None)
        dst_all = v.to_global(d, np.arange(v.num_nodes(d)))
        src, dst = v.submit(self._gather_all(dst_all, rel)).result()
        if v.hetero:
            keep = v.types_of(src) == v.type_code(s)
            src, dst = src[keep], dst[keep]
        return torch.from_numpy(v.local_ids(src)), torch.from_numpy(v.local_ids(dst))

    async def _gather_all(self, dst: np.ndarray, rel: str | None) -> tuple[np.ndarray, np.ndarray]:
        """Every in-edge of ``dst`` (of relation ``rel``), in chunks of about EDGE_CHUNK edges."""
        v = self.graph_view
        deg = v.in_degree[dst] if v.in_degree is not None else np.ones(len(dst), np.int64)
        if len(deg) and deg.max() > v.max_fanout:
            raise ReadOnlyError(
                f"get_edge_index: vertex {int(dst[deg.argmax()])} has {int(deg.max()):,} in-edges, more than one "
                f"Gather returns (serve.max_fanout={v.max_fanout:,})"
            )
        cum = np.cumsum(deg)
        srcs, dsts, a = [], [], 0
        while a < len(dst):
            base = int(cum[a - 1]) if a else 0
            b = max(a + 1, int(np.searchsorted(cum, base + EDGE_CHUNK, side="right")))
            f = max(1, int(deg[a:b].max()))
            kw: dict[str, Any] = {"type_fanouts": ((rel, f),)} if rel is not None else {"fanout": f}
            hop = await v.backend.gather(dst[a:b], HopRequest(method="uniform_exact", direction="in", **kw))
            srcs.append(hop.nbrs)
            dsts.append(np.repeat(dst[a:b], hop.counts.sum(axis=1)))
            a = b
        cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.empty(0, np.int64)  # noqa: E731
        return cat(srcs), cat(dsts)

    def csc(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: PyG's own ``NeighborSampler`` asks for this to copy the whole graph into the trainer (and
        then needs pyg-lib or torch-sparse); GLISP's loaders sample through the service instead."""
        raise ReadOnlyError(_STOCK_LOADER)

    def csr(self, *args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyError(_STOCK_LOADER)

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        raise _read_only(f"put_edge_index({edge_attr.edge_type!r})")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only(f"remove_edge_index({edge_attr.edge_type!r})")
