"""Training on an ``s3://`` dataset root (the moto server of tests/conftest.py).

A small labelled graph is serialized as one whole-graph partition on a local root and copied byte for byte into
the bucket (``glisp_testing.stores.copy_version``). In-process training over the copy maps the trainer's verified
local copy of the partition and publishes ``train/<name>`` into the bucket: the same weights, split and
predictions as the run over the local original with the same seed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_core.models import load_checkpoint
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition
from glisp_testing.stores import copy_version
from tests.glisp_train.conftest import train_cfg

RUN = "whole"
FILES = ("weights.pt", "split.parquet", "predictions.parquet")


@pytest.fixture(scope="module")
def graphs(spark, new_s3_root, tmp_path_factory):
    """(local version, its S3 copy): 128 vertices with 8-d features and 3 labels, one serialized partition."""
    from glisp_core.config import load_config, with_values
    from spark_jobs.serialize.job import run_serialize

    src, dst = rmat_edges(7, edge_factor=6, seed=5)
    n = 128
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, n)
    feats = (rng.normal(size=(n, 8)) + labels[:, None]).astype(np.float32)
    s2, d2 = np.concatenate([src, dst]), np.concatenate([dst, src])
    dv = write_dataset(
        tmp_path_factory.mktemp("train-s3"),
        "rmat7",
        s2,
        d2,
        num_vertices=n,
        features=feats,
        labels=labels,
        directed=False,
        orig_ids=[f"n{i}" for i in range(n)],
    )
    publish_partition(dv, np.zeros(len(s2), np.int32), 1, run=RUN)
    run_serialize(spark, with_values(load_config(env={}), "serialize", parquet_copy=False), dv, run=RUN)
    return dv, copy_version(dv, new_s3_root("train"))


def _cfg(tmp_path):
    from glisp_core.config import with_values

    cfg = train_cfg(epochs=2, hidden=16, batch_size=32, fanouts=[5, 5], name="sage-os", seed=3, threads=1)
    return with_values(cfg, "serve", cache_dir=str(tmp_path / "partition-cache"))


def test_in_process_training_on_s3_publishes_the_local_runs_checkpoint_in_the_bucket(graphs, tmp_path) -> None:
    from glisp_train.run import train_in_process

    local, s3 = graphs
    cfg = _cfg(tmp_path)
    for dv in (local, s3):
        assert train_in_process(cfg, str(dv.path), RUN) == 0
    a, b = local.train("sage-os"), s3.train("sage-os")
    assert b.qualified.startswith(s3.root.qualified + "/")
    assert {rel for rel, _ in s3.store.files(b)} == {"model.json", *FILES}
    for name in FILES:  # the same bytes, written through the store
        assert s3.store.read_bytes(b / name) == local.store.read_bytes(a / name), name
    model, doc = load_checkpoint(b)  # read back from the bucket
    assert doc["dataset"] == s3.path.qualified and doc["partition_run"] == RUN
    ref, ref_doc = load_checkpoint(a)
    assert {k: v for k, v in doc.items() if k != "dataset"} == {k: v for k, v in ref_doc.items() if k != "dataset"}
    ra, rb = read_manifest(local).stage("train/sage-os"), read_manifest(s3).stage("train/sage-os")
    assert rb.counts == ra.counts and rb.metrics["test_acc"] == ra.metrics["test_acc"]
    assert [e["loss"] for e in rb.metrics["epochs"]] == [e["loss"] for e in ra.metrics["epochs"]]
    pred = s3.store.read_table(b / "predictions.parquet").to_pydict()
    assert pred["orig_id"][0] == f"n{pred['vid'][0]}"  # original ids from the bucket's id map
    assert list((tmp_path / "partition-cache" / "rmat7").glob("*/*/part-00000/meta.json"))  # the trainer's copy
    assert not list(s3.store.files(s3.path / "_leases"))  # the trainer's lease on the version was released


def test_output_may_be_an_s3_prefix(graphs, new_s3_root, tmp_path) -> None:
    """--output s3://...: the run's files and run.json go to the bucket, nothing into the dataset."""
    from glisp_train.run import train_in_process

    local, s3 = graphs
    out = new_s3_root("runs") / "sage"
    assert train_in_process(_cfg(tmp_path), str(local.path), RUN, output=out.qualified) == 0
    assert {rel for rel, _ in s3.store.files(out)} == {"model.json", "run.json", *FILES}
    run = json.loads(s3.store.read_bytes(out / "run.json"))
    assert run["params"]["partition_run"] == RUN and run["counts"]["train_vertices"] > 0


def test_a_cluster_trainer_publishes_into_a_bucket_it_reaches(graphs, new_s3_root) -> None:
    """The version a cluster serves from a bucket is where the trainer publishes, when its credentials reach it."""
    from glisp_train.source import _dataset_of

    _, s3 = graphs
    found = _dataset_of(s3.path.qualified)
    assert found is not None and found.path == s3.path
    assert _dataset_of((new_s3_root("nothing") / "rmat7/v1").qualified) is None  # not a version
    assert _dataset_of("/nonexistent/rmat7/v1") is None
