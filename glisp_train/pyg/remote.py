"""``glisp_remote``: the (FeatureStore, GraphStore) pair of a GLISP sampling cluster, as PyG's loaders take it.

::

    from glisp_train.pyg import NeighborLoader, glisp_remote

    data = glisp_remote("cluster.json")                 # instead of: data = dataset[0]
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=train_idx, batch_size=128)

The pair is a tuple (PyG recognises it as a remote backend) that also carries what scripts read off a
``Data``: ``num_features``, ``num_classes``, ``metadata()`` for ``to_hetero``, and ``close()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from glisp_core.config import Config, load_config
from glisp_core.errors import GlispError
from glisp_train.cache import FeatureCache, hot_degree
from glisp_train.pyg.stores import GlispFeatureStore, GlispGraphStore
from glisp_train.pyg.view import GraphView, view_of_source


class GlispRemote(tuple):
    """``(feature_store, graph_store)`` over one GLISP graph source, closed with :meth:`close`."""

    source: Any
    _idmap: Any

    def __new__(cls, feature_store: GlispFeatureStore, graph_store: GlispGraphStore, source: Any) -> GlispRemote:
        obj = super().__new__(cls, (feature_store, graph_store))
        obj.source = source
        obj._idmap = None
        return obj

    @property
    def feature_store(self) -> GlispFeatureStore:
        return self[0]

    @property
    def graph_store(self) -> GlispGraphStore:
        return self[1]

    @property
    def graph_view(self) -> GraphView:
        return self[1].graph_view

    @property
    def num_features(self) -> int:
        return self.graph_view.feature_dim

    @property
    def num_nodes(self) -> int:
        """Every served vertex (all node types), as ``Data.num_nodes``/``HeteroData.num_nodes`` give it."""
        return int(self.graph_view.num_vertices)

    @property
    def x(self) -> torch.Tensor:
        """Every vertex's features, read whole through the service: what PyG's layer-wise
        ``model.inference(loader)`` holds (``x_all``); for graphs whose features fit in this process (at scale,
        ``glisp infer`` computes layer-wise embeddings with Spark instead)."""
        if self.graph_view.hetero:
            raise TypeError("x: the served graph is typed; read data[0][node_type, 'x', None] per node type")
        return self.feature_store.get_tensor(None, "x", None)

    @property
    def num_classes(self) -> int:
        labels = self.feature_store.labels
        return int(self.source.schema.get("num_classes") or (labels.max() + 1 if len(labels) else 0))

    def node_ids(self, ids: Any, node_type: str | None = None) -> torch.Tensor:
        """PyG node ids (``input_nodes``, indexes of ``data[0]``) of the user's own ids, through ingest's id map
        of the served dataset version (the cluster file names it; it must be readable here): an IdError names
        unknown ids, never a silent wrong node. The map is read once (a string or int per vertex)."""
        from glisp_core.dataset.idmap import IdMap

        dv = self.source.dv
        if dv is None:
            raise GlispError(
                "node_ids: the served dataset version is not readable from this machine (the cluster file's "
                "'dataset'); map the ids with glisp_core.dataset.idmap.IdMap where it is"
            )
        if self._idmap is None:
            self._idmap = IdMap.load(dv)
        vids = self._idmap.to_vids(ids, node_type)
        return torch.from_numpy(np.asarray(self.graph_view.local_ids(vids), np.int64))

    def metadata(self) -> tuple[list[str], list[tuple[str, str, str]]]:
        """(node types, edge triples), as ``HeteroData.metadata()`` gives them to ``to_hetero``."""
        return list(self.graph_view.vertex_types), self.graph_view.triples

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> GlispRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def glisp_remote(
    cluster: str | Path | Any, cfg: Config | None = None, *, feature_cache_mb: int | None = None
) -> GlispRemote:
    """The remote backend of the cluster file ``cluster`` (or of an open :class:`~glisp_train.source.GraphSource`).

    Routing, degrees, vertex types and edge type triples come from the servers; the feature cache holds the
    vertices most often drawn as in-neighbours (highest out-degree) within ``feature_cache_mb`` (default
    ``train.feature_cache_mb``), filled now. Labels are looked up once, when first asked for.
    """
    from glisp_train.source import open_cluster

    cfg = cfg or load_config()
    source: Any = cluster if hasattr(cluster, "backend") else open_cluster(cluster, cfg)
    try:
        view = view_of_source(source)
        out_deg, in_deg = source.info.degrees()
        budget = (cfg.train.feature_cache_mb if feature_cache_mb is None else feature_cache_mb) << 20
        cache = source.submit(
            FeatureCache.build(
                source.backend, hot_degree(out_deg, in_deg, "in"), budget, view.feature_dim, torch.device("cpu")
            )
        ).result()
    except BaseException:
        source.close()
        raise
    fs = GlispFeatureStore(view, cache, lambda: source.labels_and_split()[0])
    return GlispRemote(fs, GlispGraphStore(view), source)
