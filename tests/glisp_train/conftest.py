"""Cora through the real batch stages, served by real ``glisp serve-cluster`` subprocesses, for training tests.

Cora's citation graph (2,708 papers, 1,433-d bag-of-words features, 7 subjects) is read from the
``graphdatascience`` wheel and published in the ingest contract, undirected (both directions stored),
with original ids ``paper-<nodeId>`` (ingest has its own tests; this keeps the test run short). Then the
real Spark stages: ``random`` vertex-cut partition runs with 2 partitions (``rnd-p2``, served) and with 1
(``whole``, sampled in process as the accuracy reference), their serialization, and ``glisp link-split``
of ``rnd-p2`` (``rnd-p2-lp``: the training-only run for link prediction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest

from glisp_testing.graphs import write_dataset
from tests.glisp_serving.conftest import Cluster
from tests.tiers import needs

P2, WHOLE, LP = "rnd-p2", "whole", "rnd-p2-lp"


@dataclass
class Cora:
    dv: object
    src: np.ndarray  # both directions
    dst: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    node_ids: np.ndarray  # original nodeId per vid

    @property
    def n(self) -> int:
        return len(self.labels)


def cora_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from spark_jobs.generate.builtin import resources_dir

    r = resources_dir() / "cora"
    nodes = pq.read_table(r / "cora_nodes.parquet.gzip").sort_by("nodeId")
    rels = pq.read_table(r / "cora_rels.parquet.gzip")
    ids = nodes["nodeId"].to_numpy()
    src = np.searchsorted(ids, rels["sourceNodeId"].to_numpy())
    dst = np.searchsorted(ids, rels["targetNodeId"].to_numpy())
    feats = np.asarray(nodes["features"].to_pylist(), np.float32)
    return src, dst, feats, nodes["subject"].to_numpy().astype(np.int64), ids


@pytest.fixture(scope="session")
def cora(spark, tmp_path_factory) -> Cora:
    from glisp_core.config import load_config, with_values
    from glisp_train.link_split import run_link_split
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    src, dst, feats, labels, ids = cora_arrays()
    s2, d2 = np.concatenate([src, dst]), np.concatenate([dst, src])
    dv = write_dataset(
        tmp_path_factory.mktemp("train"),
        "cora",
        s2,
        d2,
        num_vertices=len(ids),
        features=feats,
        labels=labels,
        directed=False,
        orig_ids=[f"paper-{i}" for i in ids],
    )
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    for parts, run in ((2, P2), (1, WHOLE)):
        c = with_values(cfg, "partition", algorithm="random", parts=parts, name=run, seed=1, progress=False)
        run_partition(spark, c, dv)
        run_serialize(spark, c, dv, run=run)
    run_link_split(spark, cfg, dv, P2)
    return Cora(dv, s2, d2, feats, labels, ids)


@pytest.fixture(scope="module")
@needs("servers")
def cora_cluster(cora, tmp_path_factory):
    c = Cluster(cora.dv, P2, tmp_path_factory.mktemp("cora-p2"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
@needs("servers")
def lp_cluster(cora, tmp_path_factory):
    c = Cluster(cora.dv, LP, tmp_path_factory.mktemp("cora-lp"))
    yield c
    c.stop()


def train_cfg(**train):
    """Defaults with a small, quick model; ``train`` overrides [train] keys."""
    from glisp_core.config import load_config, with_values

    base = {"hidden": 64, "batch_size": 128, "epochs": 3, "lr": 0.01, "fanouts": [10, 10], "layers": 2}
    return with_values(load_config(env={}), "train", **{**base, **train})
