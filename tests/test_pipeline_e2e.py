"""The main job end to end on a built-in graph, then the standing service on its output.

This is what `make demo` runs, plus what a trainer does next: start one server per partition and
sample mini-batches with features from them.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from glisp_app.pipeline import run_pipeline
from glisp_core.config import with_values
from glisp_core.dataset.manifest import read_manifest
from glisp_core.partition_format import open_partition


@pytest.fixture(scope="module")
def cora(spark, tmp_path_factory):
    from glisp_core.config import load_config

    root = tmp_path_factory.mktemp("pipeline")
    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root))
    cfg = with_values(cfg, "partition", parts=2, algorithm="adadne")
    dv = run_pipeline(spark, cfg, builtin="cora")
    return cfg, dv


def test_every_stage_published(cora):
    cfg, dv = cora
    m = read_manifest(dv)
    for name in ("ingest", "partition/adadne-p2", "serialize/adadne-p2", "reorder/adadne-p2/pds"):
        rec = m.stage(name)  # raises if missing or stale
        assert dv.store.exists(dv.path / rec.path)
    assert m.schema["num_vertices"] == 2708 and m.schema["num_edges"] == 5429
    p = m.stage("partition/adadne-p2")
    assert sum(p.counts["edges_per_part"]) == 5429
    assert 1.0 <= p.metrics["rf"] < 2.0
    # every vertex is mastered exactly once across the serialized partitions
    mastered = np.concatenate([open_partition(dv.partition_dir("adadne-p2", k)).master_gids for k in range(2)])
    assert np.array_equal(np.sort(mastered), np.arange(2708))


def test_rerun_is_a_noop(spark, cora):
    cfg, dv = cora
    before = {n: s.completed_at for n, s in read_manifest(dv).stages.items()}
    dv2 = run_pipeline(spark, cfg, builtin="cora")
    assert dv2 == dv
    after = {n: s.completed_at for n, s in read_manifest(dv).stages.items()}
    assert after == before


def test_changed_parameters_add_a_run(spark, cora):
    cfg, dv = cora
    cfg2 = with_values(cfg, "partition", algorithm="hdrf")
    cfg2 = dataclasses.replace(cfg2, reorder=dataclasses.replace(cfg2.reorder, order="ns"))
    run_pipeline(spark, cfg2, builtin="cora")
    m = read_manifest(dv)
    assert m.has_stage("partition/hdrf-p2") and m.has_stage("reorder/hdrf-p2/ns")
    assert m.has_stage("partition/adadne-p2")  # nothing already published is lost


def test_serve_cluster_and_sample(cora, tmp_path, server_processes):
    from glisp_serving.client.sampling_client import SamplingClient

    cfg, dv = cora
    cluster_file = tmp_path / "cluster.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glisp_app.cli",
            "serve-cluster",
            str(dv.path),
            "--run",
            "adadne-p2",
            "--cluster-file",
            str(cluster_file),
            "--threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.time() + 120
        while not cluster_file.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "cluster did not come up"
            time.sleep(0.2)
        with SamplingClient(cluster_file) as client:
            seeds = np.arange(0, 2708, 97, dtype=np.int64)
            batch = client.sample(seeds, [10, 5], seed=3)
            assert batch.x is not None and tuple(batch.x.shape) == (len(batch.input_ids), 1433)
            assert batch.y is not None and int(batch.y.min()) >= 0
            assert len(batch.blocks) == 2 and batch.num_sampled_edges > 0
            again = client.sample(seeds, [10, 5], seed=3)
            assert all(
                np.array_equal(a.edge_index.numpy(), b.edge_index.numpy())
                for a, b in zip(batch.blocks, again.blocks, strict=True)
            )
            stats = client.stats()
            assert len(stats) == 2 and all(s["requests"] > 0 for s in stats)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
