"""Layerwise inference on an ``s3://`` dataset root (the moto server of tests/conftest.py).

A small dataset is serialized and reordered on a local root and copied byte for byte into the bucket
(``glisp_testing.stores.copy_version``); inference over the copy writes its Zarr group, halo exchange and
Parquet outputs into the bucket, from the tasks themselves, and gives exactly the local run's rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from glisp_core.errors import FormatError
from glisp_core.storage.uri import parse_uri
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition
from glisp_testing.stores import copy_version
from tests.glisp_infer.conftest import RELATIONS, InferGraph, infer_cfg, make_model

P = 2
N = 70  # R-MAT scale 6 (vids 0..63) plus isolated vertices 64..69


@dataclass
class Runs:
    g: InferGraph  # the local original
    s3: Any  # its copy in the bucket
    local: Any  # InferenceRun of the same run on each
    remote: Any
    cache: Any  # the tasks' partition copies (serve.cache_dir)


@pytest.fixture(scope="module")
def small(spark, tmp_path_factory) -> InferGraph:
    """A 70-vertex typed R-MAT graph in 2 partitions, serialized and in PDS order, on a local root."""
    from glisp_core.config import load_config, with_values
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorders

    src, dst = rmat_edges(6, edge_factor=5, seed=7)
    rng = np.random.default_rng(3)
    etype = rng.integers(0, 2, len(src)).astype(np.int32)
    feats = rng.normal(size=(N, 6)).astype(np.float32)
    dv = write_dataset(
        tmp_path_factory.mktemp("infer-s3"),
        "rmat6",
        src,
        dst,
        num_vertices=N,
        etype=etype,
        edge_types=list(RELATIONS),
        features=feats,
        labels=rng.integers(0, 3, N),
    )
    run = publish_partition(dv, (np.minimum(src, dst) * 31 + np.maximum(src, dst)) % P, P)
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    run_serialize(spark, cfg, dv, run=run)
    run_reorders(spark, cfg, dv, ["pds"], run=run)
    return InferGraph(dv, run, src, dst, etype, feats, N)


def _cfg(cache, **infer):
    from glisp_core.config import with_values

    return with_values(infer_cfg(**infer), "serve", cache_dir=str(cache))


@pytest.fixture(scope="module")
def runs(spark, small, new_s3_root, tmp_path_factory) -> Runs:
    """GAT at fanouts [4, 3] with the halo exchange, on the local root and on its S3 copy (same model, seed)."""
    from glisp_infer.job import run_infer
    from glisp_infer.read import InferenceRun
    from glisp_train.publish import publish_model

    g = small
    s3 = copy_version(g.dv, new_s3_root("infer"))
    model = make_model("gat")
    cache = tmp_path_factory.mktemp("partition-cache")
    cfg = _cfg(cache, model="gat", run="gat", fanouts=[4, 3], seed=5)
    for dv in (g.dv, s3):
        publish_model(dv, "gat", model, g.run)
        run_infer(spark, cfg, dv)
    return Runs(g, s3, InferenceRun(g.dv, "gat"), InferenceRun(s3, "gat"), cache)


def _table(run: Any, name: str) -> Any:
    uri = run.path / name
    return run.dv.store.read_table(uri).sort_by("vid")


def test_the_s3_run_equals_the_local_run_and_its_chunks_are_in_the_bucket(runs) -> None:
    from glisp_infer.store import INDEX_POS, INDEX_ROW, INDEX_VID, open_array

    loc, rem = runs.local, runs.remote
    assert rem.url == (rem.path / "zarr").qualified and rem.url.startswith(rem.dv.root.qualified + "/")
    for i in range(3):  # features, hidden layer, output: bit for bit
        np.testing.assert_array_equal(np.asarray(rem.layer(i)[:]), np.asarray(loc.layer(i)[:]))
    for name in (INDEX_VID, INDEX_ROW, INDEX_POS):
        np.testing.assert_array_equal(
            np.asarray(open_array(rem.url, name)[:]), np.asarray(open_array(loc.url, name)[:])
        )
    for name in ("index", "embeddings", "predictions"):
        assert _table(rem, name).equals(_table(loc, name)), name
    a, b = (json.loads(r.dv.store.read_bytes(r.path / "model.json")) for r in (rem, loc))
    assert a.pop("dataset") == runs.s3.path.qualified and b.pop("dataset") == str(runs.g.dv.path) and a == b
    lr, rr = loc.record, rem.record
    assert rr.counts == lr.counts
    for i in (1, 2):  # the same halo rows went through the bucket as through the local exchange directory
        a, b = rr.metrics["layers"][f"layer{i}"], lr.metrics["layers"][f"layer{i}"]
        assert a["halo_rows"] == b["halo_rows"] == a["static_foreign_rows"] > 0 and a["fill_chunks"] == 0
    # every chunk is an object of the bucket, under the attempt; the exchange is gone; the tasks mapped copies
    keys = {rel for rel, _ in rem.dv.store.files(rem.path)}
    chunks = rr.counts["chunks_per_layer"]
    assert {f"zarr/layers/2/c/{c}/0" for c in range(chunks)} <= keys
    assert not [k for k in keys if k.startswith("exchange/")]
    copies = sorted(p.name for p in runs.cache.glob("rmat6/*/*/part-*"))
    assert copies == ["part-00000", "part-00001"]


def test_read_embeddings_opens_the_s3_run(runs) -> None:
    from glisp_infer.read import read_embeddings

    ids = ["5", "0", "69", "17"]  # original ids; 69 is isolated
    got = read_embeddings(str(runs.s3.path), ids, run="gat")
    np.testing.assert_array_equal(got, read_embeddings(str(runs.g.dv.path), ids, run="gat"))
    np.testing.assert_array_equal(
        read_embeddings(runs.s3.path, ids, run="gat", layer=0), runs.g.features[[5, 0, 69, 17]]
    )


def test_a_link_run_in_an_external_s3_store_without_the_halo_matches_the_full_graph(spark, runs, new_s3_root) -> None:
    """Full fanout, foreign rows decoded from the bucket's chunks, the group under infer.store = s3://..., and the
    edge scores from partitions mapped in the tasks: equal to an in-memory forward pass."""
    from glisp_infer import job
    from glisp_infer.job import run_infer
    from glisp_infer.read import InferenceRun
    from glisp_train.publish import publish_model

    g, s3 = runs.g, runs.s3
    model = make_model("sage", task="link", out_dim=4)
    publish_model(s3, "link", model, g.run)
    ext = new_s3_root("ext").qualified
    run_infer(spark, _cfg(runs.cache, model="link", run="link", halo=False, store=ext), s3)
    r = InferenceRun(s3, "link")
    assert r.url.startswith(f"{ext}/rmat6/") and json.loads(s3.store.read_bytes(r.path / "store.json"))["url"] == r.url
    ref = g.reference(model).numpy()
    idx = _table(r, "index")
    got = np.asarray(r.layer(-1)[:])[idx["row"].to_numpy()]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert r.record.metrics["layers"]["layer2"]["fill_chunks"] > 0
    scores = s3.store.read_table(r.path / "scores").to_pandas()
    assert len(scores) == len(g.src) == r.record.counts["scores"]
    s, d = scores["src_vid"].to_numpy(), scores["dst_vid"].to_numpy()
    np.testing.assert_allclose(scores["score"].to_numpy(), (ref[s] * ref[d]).sum(1), rtol=1e-4, atol=1e-4)
    job._remove_store(r.url)  # what a superseding run does with its predecessor's external group
    assert not list(s3.store.files(parse_uri(r.url)))


def test_a_checkpoint_missing_in_the_bucket_names_its_uri(spark, runs) -> None:
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    s3 = runs.s3
    publish_model(s3, "broken", make_model("sage"), runs.g.run)
    weights = s3.train("broken") / "weights.pt"
    s3.store.delete(weights)
    with pytest.raises(FormatError, match=f"{weights.qualified}: not found"):
        run_infer(spark, _cfg(runs.cache, model="broken", run="broken"), s3)
