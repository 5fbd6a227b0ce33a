"""The Cora pipeline through training and inference with its root on ``gs://`` and ``abfs://`` (the GCS and
Azure emulators of tests/conftest.py on 127.0.0.1), as tests/test_pipeline_s3.py runs it on ``s3://``.

The built-in inputs are copied into the bucket first (as ``glisp pipeline --builtin cora --root gs://...``
does), so ingest reads them from the store; every stage publishes there; then a ``glisp serve`` process pulls
partition 0 from the store into its own cache and answers a sampling request.
"""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import read_latest

STAGES = ("ingest", "partition/adadne-p2", "serialize/adadne-p2", "reorder/adadne-p2/pds", "train/nightly")


def _config(root: str, cache: str):
    from glisp_core.config import load_config, with_values

    cfg = with_values(load_config(env={}), "dataset", root=root)
    cfg = with_values(cfg, "partition", parts=2, progress=False)
    cfg = with_values(cfg, "pipeline", train=True)
    cfg = with_values(
        cfg, "train", name="nightly", hidden=16, epochs=1, batch_size=256, max_batches=2, fanouts=[5, 5], layers=2
    )
    cfg = with_values(cfg, "serve", threads=1, cache_dir=cache)
    return with_values(cfg, "infer", fanouts=[5, 5])


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_cora_pipeline_trains_infers_and_serves_from_the_store(store, spark, request, tmp_path, server_processes):
    from glisp_app.pipeline import run_pipeline
    from glisp_serving.client.sampling_client import SamplingClient
    from tests.glisp_serving.conftest import Cluster

    root = request.getfixturevalue(f"{store}_root")
    scheme = {"gcs": "gs://", "azure": "abfs://"}[store]
    dv = run_pipeline(spark, _config(root.qualified, str(tmp_path / "cache")), builtin="cora")

    assert dv.path.qualified.startswith(scheme) and read_latest(dv.path.parent) == dv.version
    assert {"cora_rels", "cora_nodes"} <= {
        rel.split("/")[-1].split(".")[0] for rel, _ in dv.store.files(root / "_builtin")
    }
    m = read_manifest(dv)
    infer = next(s for s in m.stages if s.startswith("infer/"))
    for name in (*STAGES, infer):
        assert any(True for _ in dv.store.files(dv.path / m.stage(name).path)), f"{name} published nothing"
    assert m.schema["num_vertices"] == 2708 and m.stage(infer).counts["vertices"] == 2708
    assert any(p.endswith("zarr.json") for p, _ in dv.store.files(dv.path / m.stage(infer).path))
    assert m.stage("train/nightly").metrics["epochs"], "training ran no epoch"

    cache = tmp_path / "serve-cache"
    cluster = Cluster(dv, "adadne-p2", tmp_path, ["--set", f"serve.cache_dir='{cache}'"])
    try:
        with SamplingClient(cluster.cluster_file) as client:
            batch = client.sample(np.arange(0, 2708, 97, dtype=np.int64), [5, 5], seed=1)
            assert client.version == f"cora/{dv.version}"
    finally:
        assert cluster.stop() == 0, "".join(cluster.lines)
    assert batch.num_sampled_edges > 0 and tuple(batch.x.shape) == (len(batch.input_ids), 1433)
    pulled = [p for p in cache.rglob("part-*") if p.is_dir()]
    assert len(pulled) == 2, f"the servers did not pull their partitions into {cache}: {pulled}"
