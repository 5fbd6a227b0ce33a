"""A small typed power-law graph through the real serialize and reorder stages, for inference tests.

R-MAT scale 8 (hubs and leaves) plus isolated vertices, two edge types, 6-d features, published in the
ingest contract by ``glisp_testing.graphs.write_dataset``; a vertex-cut assignment by unordered pair (so hubs are
replicated on every partition) through ``glisp_testing.partitions.publish_partition``; then the real Spark
``run_serialize`` and ``run_reorders`` (all four orders). Models are published as train stages with
``glisp_train.publish.publish_model`` (random weights: exactness does not need a trained model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition

P = 3
N = 262  # vids 256..261 are isolated
RELATIONS = ("cites", "likes")


@dataclass
class InferGraph:
    dv: object
    run: str
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    features: np.ndarray
    n: int
    labels: np.ndarray | None = None  # the vertex labels, where a test reads them

    def reference(self, model, direction: str = "in") -> torch.Tensor:
        """The model's in-memory full-graph forward pass (messages from the neighbours in ``direction``)."""
        s, d = torch.from_numpy(self.src), torch.from_numpy(self.dst)
        ei = torch.stack([d, s]) if direction == "out" else torch.stack([s, d])
        et = torch.from_numpy(self.etype.astype(np.int64))
        h = torch.from_numpy(self.features)
        with torch.no_grad():
            for i in range(model.num_layers):
                h = model.layer(i, h, ei, self.n, et)
        return h


@pytest.fixture(scope="session")
def infer_graph(spark, tmp_path_factory) -> InferGraph:
    from glisp_core.config import load_config, with_values
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import ORDERS, run_reorders

    root = tmp_path_factory.mktemp("infer")
    src, dst = rmat_edges(8, edge_factor=6, seed=3)
    rng = np.random.default_rng(11)
    etype = rng.integers(0, 2, len(src)).astype(np.int32)
    feats = rng.normal(size=(N, 6)).astype(np.float32)
    labels = rng.integers(0, 3, N)
    dv = write_dataset(
        root,
        "rmat8",
        src,
        dst,
        num_vertices=N,
        etype=etype,
        edge_types=list(RELATIONS),
        features=feats,
        labels=labels,
    )
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    run = publish_partition(dv, ((lo * 7919 + hi * 104729) % 1009) % P, P)
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    run_serialize(spark, cfg, dv, run=run)
    run_reorders(spark, cfg, dv, list(ORDERS), run=run)
    return InferGraph(dv, run, src, dst, etype, feats, N, labels)


def make_model(arch: str, layers: int = 2, task: str = "node", seed: int = 0, out_dim: int = 3):
    from glisp_core.models import ModelSpec, build_model

    torch.manual_seed(seed)
    rel = RELATIONS if arch == "rgcn" else ()
    spec = ModelSpec(
        arch=arch, in_dim=6, hidden=8, out_dim=out_dim, layers=layers, task=task, relations=rel, dropout=0.0
    )
    return build_model(spec).eval()


def infer_cfg(**infer):
    """Test defaults: tiny chunks so every partition owns several, small batches."""
    from glisp_core.config import load_config, with_values

    cfg = load_config(env={})
    base = {"chunk_rows": 16, "batch_size": 24, "cache_chunks": 2}
    return with_values(cfg, "infer", **{**base, **infer})
