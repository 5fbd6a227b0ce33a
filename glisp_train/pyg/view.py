"""What PyG's remote backend needs to know about a graph: its vertex and edge types, ids and a sampling backend.

PyG numbers the nodes of each node type from 0 and keys edges by ``(source type, relation, destination type)``.
GLISP numbers every vertex with one dense global id and names edge types alone (an undirected ``ACTED_IN``
joins actors to movies and movies to actors). A :class:`GraphView` holds the translation: the vertex type
of every global id, the sorted global ids of each type (a node's PyG id is its position there) and the edge
type triples present in the served edges. A graph with one vertex type and one edge type is homogeneous:
PyG ids are the global ids and there is no translation at all.

The view is built from a trainer's :class:`~glisp_train.source.GraphSource` (the service) or, by
:mod:`glisp_train.pyg.memory`, from an in-memory ``Data``; the sampler runs on either.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glisp_core.errors import GlispError

EdgeTriple = tuple[str, str, str]


class ReadOnlyError(GlispError):
    """A write to the GLISP remote backend: the service serves a published dataset version and never changes it."""


@dataclass
class GraphView:
    """Types and ids of one graph in PyG's terms, and the Gather backend its samples come from."""

    backend: Any  # GatherBackend: gather / lookup / num_vertices
    submit: Callable[[Any], Future]  # run a coroutine of the backend; a Future of its result
    num_vertices: int
    vertex_types: list[str]
    edge_types: list[str]
    triple_codes: np.ndarray  # (k, 3) int64 (src vtype, etype, dst vtype) codes present in the edges
    vtype: np.ndarray | None = None  # vertex type code per global id (None: one vertex type)
    feature_dim: int = 0
    weighted: bool = False
    timestamped: bool = False
    max_fanout: int = 100_000  # what "all neighbours" (-1) asks for: the servers' serve.max_fanout
    in_degree: np.ndarray | None = None  # global in-degree per vertex (chunks whole-graph edge gathers)
    _type_vids: list[np.ndarray] = field(default_factory=list, repr=False)
    _local: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.vtype is not None and len(self.vertex_types) > 1:
            order = np.argsort(self.vtype, kind="stable")
            counts = np.bincount(self.vtype, minlength=len(self.vertex_types))
            self._type_vids = list(np.split(order.astype(np.int64), np.cumsum(counts)[:-1]))
            self._local = np.empty(self.num_vertices, np.int64)
            for ids in self._type_vids:
                self._local[ids] = np.arange(len(ids), dtype=np.int64)
        else:
            self.vtype = None
            self._type_vids = [np.arange(self.num_vertices, dtype=np.int64)]

    @property
    def hetero(self) -> bool:
        """PyG's heterogeneous view: several vertex types or several edge types."""
        return len(self.vertex_types) > 1 or len(self.edge_types) > 1

    @property
    def triples(self) -> list[EdgeTriple]:
        vt, et = self.vertex_types, self.edge_types
        return [(vt[s], et[e], vt[d]) for s, e, d in self.triple_codes.tolist()]

    def type_code(self, node_type: str | None) -> int:
        if node_type is None and not self.hetero:
            return 0
        if node_type not in self.vertex_types:
            raise KeyError(f"node type {node_type!r} is not served (the graph has {self.vertex_types})")
        return self.vertex_types.index(node_type)

    def num_nodes(self, node_type: str | None = None) -> int:
        return len(self._type_vids[self.type_code(node_type)]) if self.hetero else self.num_vertices

    def to_global(self, node_type: str | None, ids: np.ndarray) -> np.ndarray:
        """Global ids of PyG node ids of ``node_type`` (IndexError naming the type for one out of range)."""
        ids = np.asarray(ids, np.int64)
        n = self.num_nodes(node_type)
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)]
            raise IndexError(
                f"node ids of {node_type or 'the graph'!r}: {len(bad)} outside [0, {n}) (got e.g. {bad[:3]})"
            )
        if not self.hetero:
            return ids
        return self._type_vids[self.type_code(node_type)][ids]

    def local_ids(self, gids: np.ndarray) -> np.ndarray:
        """PyG node ids (positions within their type) of global ids."""
        return np.asarray(gids, np.int64) if self._local is None else self._local[gids]

    def types_of(self, gids: np.ndarray) -> np.ndarray:
        if self.vtype is None:
            return np.zeros(len(gids), np.int64)
        return np.asarray(self.vtype[gids], np.int64)


def view_of_source(source: Any) -> GraphView:
    """A GraphView over a trainer's GraphSource: types, triples and vertex types from the servers' Routing."""
    schema = source.schema
    info = source.info
    vertex_types = list(schema.get("vertex_types") or ["v0"])
    edge_types = list(schema.get("edge_types") or ["e0"])
    typed = len(vertex_types) > 1 or len(edge_types) > 1
    _, in_deg = info.degrees()
    return GraphView(
        backend=source.backend,
        submit=source.submit,
        num_vertices=source.num_vertices,
        vertex_types=vertex_types,
        edge_types=edge_types,
        triple_codes=info.edge_triples() if typed else np.zeros((1, 3), np.int64),
        vtype=info.vertex_types() if len(vertex_types) > 1 else None,
        feature_dim=source.feature_dim,
        weighted=bool(schema.get("weighted")),
        timestamped=bool(schema.get("timestamped")),
        in_degree=in_deg,
    )
