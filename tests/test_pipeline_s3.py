"""The whole refresh with its dataset root in an S3 bucket (moto's real S3 API on 127.0.0.1), twice.

Inputs live in the bucket too: Cora's edges as CSV, its vertex table as Parquet. Each snapshot runs ingest →
partition → serialize → reorder → train (through a serve-cluster the pipeline starts on the S3 dataset) →
infer (a Zarr store in the bucket) and only then moves ``LATEST``. A standing ``serve-cluster`` serves the
first snapshot from the bucket and ``glisp serve-reload`` moves it to the second. Nothing is on a local
path but the servers' partition caches.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import read_latest
from glisp_core.storage.store import Store

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("ingest", "partition/adadne-p2", "serialize/adadne-p2", "reorder/adadne-p2/pds", "train/nightly")


def _put(store: Store, uri, table: pa.Table, fmt: str) -> str:
    buf = io.BytesIO()
    if fmt == "csv":
        pacsv.write_csv(table, buf)
    else:
        pq.write_table(table, buf)
    store.write_bytes(uri, buf.getvalue())
    return uri.qualified


def _edges(rels: pa.Table, k: int) -> pa.Table:
    """Snapshot ``k`` of Cora's edge table: snapshot 2 drops 2% of the rows and adds as many random ones."""
    if k == 1:
        return rels
    rng = np.random.default_rng(k)
    keep = rng.random(rels.num_rows) >= 0.02
    ids = np.unique(rels.column("sourceNodeId").to_numpy())
    n = int((~keep).sum())
    added = pa.table({"sourceNodeId": rng.choice(ids, n), "targetNodeId": rng.choice(ids, n)})
    return pa.concat_tables([rels.filter(pa.array(keep)), added.cast(rels.schema)])


@pytest.fixture(scope="module")
def s3_refresh(spark, new_s3_root, tmp_path_factory):
    """Two snapshots refreshed on ``s3://glisp-test/pipeline-<uuid>``: (config, [dv1, dv2])."""
    from glisp_app.pipeline import run_pipeline
    from glisp_core.config import EdgeSource, load_config, with_values
    from spark_jobs.generate.builtin import builtin_config

    root = new_s3_root("pipeline")
    store = Store(root)
    base = builtin_config("cora")
    rels = pq.read_table(base.edges[0].path, columns=["sourceNodeId", "targetNodeId"])
    nodes = _put(store, root / "inputs" / "cora-nodes.parquet", pq.read_table(base.vertices[0].path), "parquet")
    cfg = with_values(load_config(env={}), "dataset", root=root.qualified, keep_versions=0)
    cfg = with_values(cfg, "partition", parts=2, progress=False)
    cfg = with_values(cfg, "pipeline", train=True)
    cfg = with_values(
        cfg, "train", name="nightly", hidden=16, epochs=1, batch_size=256, max_batches=2, fanouts=[5, 5], layers=2
    )
    cfg = with_values(cfg, "serve", threads=1, cache_dir=str(tmp_path_factory.mktemp("cache")))
    cfg = with_values(cfg, "infer", fanouts=[5, 5])
    dvs = []
    for k in (1, 2):
        edges = _put(store, root / "inputs" / f"cora-edges-{k}.csv", _edges(rels, k), "csv")
        ing = dataclasses.replace(
            base,
            graph="cora",
            version=f"s{k}",
            edges=[EdgeSource(path=edges, format="csv", src="sourceNodeId", dst="targetNodeId")],
            vertices=[dataclasses.replace(base.vertices[0], path=nodes)],
        )
        dvs.append(run_pipeline(spark, with_values(cfg, "", ingest=ing)))
    return cfg, dvs


def test_every_stage_of_both_snapshots_is_in_the_bucket(s3_refresh):
    cfg, (dv1, dv2) = s3_refresh
    assert dv1.path.qualified.startswith("s3://") and read_latest(dv2.path.parent) == "s2"
    for dv in (dv1, dv2):
        m = read_manifest(dv)
        for name in (*STAGES, next(s for s in m.stages if s.startswith("infer/"))):
            rec = m.stage(name)
            assert any(True for _ in dv.store.files(dv.path / rec.path)), f"{name} published nothing"
        assert m.schema["num_vertices"] == 2708
        infer = m.stage(next(s for s in m.stages if s.startswith("infer/")))
        assert infer.counts["vertices"] == 2708
        assert any(p.endswith("zarr.json") for p, _ in dv.store.files(dv.path / infer.path))
    assert read_manifest(dv2).stage("ingest").fingerprint != read_manifest(dv1).stage("ingest").fingerprint


def test_serve_cluster_serves_the_bucket_and_reloads_to_the_second_snapshot(s3_refresh, tmp_path, server_processes):
    from glisp_serving.client.sampling_client import SamplingClient

    cfg, (dv1, dv2) = s3_refresh
    cluster_file = tmp_path / "cluster.json"
    cmd = [sys.executable, "-m", "glisp_app.cli", "serve-cluster", dv1.path.qualified, "--run", "adadne-p2"]
    cmd += ["--cluster-file", str(cluster_file), "--threads", "1", "--set", f"serve.cache_dir='{tmp_path / 'cache'}'"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.time() + 180
        while not cluster_file.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the cluster did not come up"
            time.sleep(0.2)
        seeds = np.arange(0, 2708, 97, dtype=np.int64)
        with SamplingClient(cluster_file) as client:
            batch = client.sample(seeds, [10, 5], seed=3)
            assert batch.x is not None and tuple(batch.x.shape) == (len(batch.input_ids), 1433)
            assert client.version == "cora/s1"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "glisp_app.cli",
                "serve-reload",
                dv2.path.qualified,
                "--cluster-file",
                str(cluster_file),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(cluster_file.read_text())["dataset"] == dv2.path.qualified
        with SamplingClient(cluster_file) as client:
            again = client.sample(seeds, [10, 5], seed=3)
            assert client.version == "cora/s2" and again.num_sampled_edges > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
