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

    def reference(self, model, direction: str = "in", keep: np.ndarray | None = None) -> torch.Tensor:
        """The model's in-memory full-graph forward pass (messages from the neighbours in ``direction``), over
        the edges ``keep`` selects (all by default)."""
        keep = np.ones(len(self.src), bool) if keep is None else keep
        s, d = torch.from_numpy(self.src[keep]), torch.from_numpy(self.dst[keep])
        ei = torch.stack([d, s]) if direction == "out" else torch.stack([s, d])
        et = torch.from_numpy(self.etype[keep].astype(np.int64))
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


@pytest.fixture
def make_infer_cfg():
    """:func:`infer_cfg`, for tests that take helpers as fixtures."""
    return infer_cfg


@pytest.fixture
def new_model():
    """:func:`make_model`, for tests that take helpers as fixtures."""
    return make_model


@dataclass
class Versions:
    old: object
    new: object
    old_run: str
    new_run: str
    changed_features: list[str]  # original ids


def _publish_version(spark, root, version, orig, src, dst, etype, feats, salt, partition_counts=None):
    """One version: ingest contract, a pair-hash partition of its own vids (``partition_counts`` added to its
    record), serialize and the PDS order."""
    from glisp_core.config import load_config, with_values
    from glisp_testing.graphs import write_dataset
    from glisp_testing.partitions import publish_partition
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorders

    dv = write_dataset(
        root,
        "g",
        src,
        dst,
        num_vertices=len(orig),
        etype=etype,
        edge_types=list(RELATIONS),
        features=feats,
        version=version,
        orig_ids=list(orig),
    )
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    run = publish_partition(dv, ((lo * 7919 + hi * 104729 + salt) % 1009) % P, P, counts=partition_counts)
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    run_serialize(spark, cfg, dv, run=run)
    run_reorders(spark, cfg, dv, ["pds"], run=run)
    return dv, run


def first_version(rng: np.random.Generator):
    """The refresh tests' first version: R-MAT scale 8 (edge factor 6) with 6 isolated vertices, random edge
    types (2) and features (6-d), ids ``u<vid>``: (src, dst, etype, features, ids)."""
    from glisp_testing.graphs import rmat_edges

    src, dst = rmat_edges(8, edge_factor=6, seed=3)
    n = 262
    et = rng.integers(0, 2, len(src)).astype(np.int32)
    feats = rng.normal(size=(n, 6)).astype(np.float32)
    return src, dst, et, feats, np.array([f"u{i}" for i in range(n)], object)


@pytest.fixture(scope="session")
def two_versions(spark, tmp_path_factory) -> Versions:
    """v1, and v2 = v1 with 6 vertices removed (with their edges), 5 added (with edges), 4% of the edges
    removed and 4% added, 3 feature rows changed, every vid renumbered and a different partition."""
    root = tmp_path_factory.mktemp("incr")
    rng = np.random.default_rng(5)
    src, dst, et, feats, ids = first_version(rng)
    n = len(ids)
    old, old_run = _publish_version(spark, root, "v1", ids, src, dst, et, feats, 0)
    gone = rng.choice(n, 6, replace=False)
    keep_e = ~np.isin(src, gone) & ~np.isin(dst, gone) & (rng.random(len(src)) > 0.04)
    s2, d2, e2 = [src[keep_e]], [dst[keep_e]], [et[keep_e]]
    k = int(0.04 * len(src))
    s2.append(rng.integers(0, n + 5, k))
    d2.append(rng.integers(0, n + 5, k))
    e2.append(rng.integers(0, 2, k).astype(np.int32))
    s, d, e = np.concatenate(s2), np.concatenate(d2), np.concatenate(e2)
    ok = ~np.isin(s, gone) & ~np.isin(d, gone) & (s != d)
    s, d, e = s[ok], d[ok], e[ok]
    ids2 = np.concatenate([ids, np.array([f"new{i}" for i in range(5)], object)])
    f2 = np.concatenate([feats, rng.normal(size=(5, 6)).astype(np.float32)])
    changed = rng.choice(np.setdiff1d(np.arange(n), gone), 3, replace=False)
    f2[changed] += 1.0
    new, new_run = publish_renumbered(spark, root, rng, ids2, f2, gone, (s, d, e))
    return Versions(old, new, old_run, new_run, [str(x) for x in ids[changed]])


def publish_renumbered(spark, root, rng, ids, feats, gone, edges):
    """Version v2 of the vertices ``ids`` (features ``feats``) but ``gone``, every vid renumbered by a fresh
    permutation; ``edges`` = (src, dst, etype) in the old indices, none touching a removed vertex."""
    s, d, e = edges
    alive = np.setdiff1d(np.arange(len(ids)), gone)
    perm = rng.permutation(len(alive))
    new_vid = np.full(len(ids), -1, np.int64)
    new_vid[alive] = perm
    order = np.argsort(perm)
    return _publish_version(spark, root, "v2", ids[alive][order], new_vid[s], new_vid[d], e, feats[alive][order], 17)
