"""The partition stage on an ``s3://`` root (a real S3 API, moto): the inputs are built on a local root, copied
byte for byte into the bucket, and partitioned there; every output and measure equals the local run's.

Covers the hand-offs between the driver and Spark's tasks: the allocation the driver writes and Spark reads
(the in-process path), the row files the tasks write and the driver lists (the Spark rounds and the
relocation), the sorted streams the driver reads back (HDRF, the incremental placement), METIS's owner table,
and the incremental refresh reading its base version's assignment from the bucket.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glisp_core.config import load_config, with_values
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.errors import GlispError
from glisp_core.storage.uri import StoreURI
from glisp_testing.graphs import rmat_edges, write_dataset
from glisp_testing.partitions import publish_partition
from glisp_testing.stores import copy_version
from spark_jobs.partition.job import run_partition

P = 4
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> DatasetVersion:
    s, d = rmat_edges(8, 8, seed=3)
    return write_dataset(tmp_path_factory.mktemp("s3part"), "g", s, d)


def _cfg(root: StoreURI | str, **kw):
    cfg = with_values(load_config(env={}), "partition.adadne", starts=1)
    cfg = with_values(cfg, "dataset", root=str(root))
    return with_values(cfg, "partition", **{"parts": P, "seed": 7, "progress": False, **kw})


def _outputs(dv: DatasetVersion, rec: StageRecord) -> tuple[pd.DataFrame, pd.DataFrame]:
    """assignment/ and replicas/ of a published run, read from its store, in a canonical row order."""
    run = rec.name.split("/", 1)[1]
    a = dv.store.read_table(dv.assignment(run)).to_pandas().sort_values("eid").reset_index(drop=True)
    r = dv.store.read_table(dv.replicas(run)).to_pandas().sort_values("vid").reset_index(drop=True)
    return a, r.assign(parts=r.parts.map(list))


def assert_same_run(local: DatasetVersion, rec_l: StageRecord, s3: DatasetVersion, rec_s: StageRecord) -> None:
    """Same rows, replica sets, counts and metrics; the S3 run's attempt holds no scratch left over."""
    a_l, r_l = _outputs(local, rec_l)
    a_s, r_s = _outputs(s3, rec_s)
    assert len(a_l) == read_manifest(local).schema["num_edges"]
    assert a_l.equals(a_s) and r_l.equals(r_s)
    assert rec_s.metrics == rec_l.metrics
    for key in ("edges_per_part", "vertices_per_part", "vertices_with_edges"):
        assert rec_s.counts[key] == rec_l.counts[key], key
    out = s3.path / rec_s.path
    assert out.qualified.startswith("s3://") and s3.store.exists(out / "assignment")
    assert not s3.store.exists(out / "_staging")


@pytest.mark.parametrize("path", ["held", "spark"])
def test_adadne_on_s3_equals_the_local_run(spark, graph, s3_root, path):
    """held: the driver fetches the rows, runs AdaDNE in process and hands its allocation to Spark through
    the store; spark: the rounds and the relocation run as Spark jobs over row files in the bucket."""
    m = read_manifest(graph).schema["num_edges"]
    kw = {"algorithm": "adadne", "name": f"adadne-{path}"}
    if path == "spark":
        kw["local_finish_edges"] = m // 4
    rec_l = run_partition(spark, _cfg(graph.root, **kw), graph, force=True)
    s3 = copy_version(graph, s3_root)  # with the run just published locally: only force makes the bucket's run
    rec_s = run_partition(spark, _cfg(s3_root, **kw), s3, force=True)
    assert_same_run(graph, rec_l, s3, rec_s)
    assert rec_s.counts["spark_rounds"] == rec_l.counts["spark_rounds"]
    if path == "spark":
        assert rec_s.counts["spark_rounds"] >= 2 and rec_s.counts["local_rounds"] >= 1
        assert any(j["kind"] == "relocate" for j in rec_s.counts["spark_jobs"])
    else:
        assert rec_s.counts["spark_rounds"] == 0


@pytest.mark.parametrize("algo", ["hdrf", "metis"])
def test_streaming_and_owner_partitioners_on_s3(spark, graph, s3_root, algo):
    """HDRF streams a sorted scratch table through the driver; METIS writes its owner table from one task;
    neither hands the replica sets over as bitsets, so replicas/ is Spark's group-by written to the bucket."""
    kw = {"algorithm": algo, "parts": 2, "name": f"{algo}-p2"}
    rec_l = run_partition(spark, _cfg(graph.root, **kw), graph, force=True)
    s3 = copy_version(graph, s3_root)  # with the run just published locally: only force makes the bucket's run
    assert_same_run(graph, rec_l, s3, run_partition(spark, _cfg(s3_root, **kw), s3, force=True))


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """v1 with a published run (partitioned by min(src, dst) % P) and v2: 5% of its rows removed, 200 added."""
    rng = np.random.default_rng(2)
    root = tmp_path_factory.mktemp("s3inc")
    src, dst = rmat_edges(8, 8, seed=4)
    v1 = write_dataset(root, "g", src, dst, num_vertices=256)
    run = publish_partition(v1, np.minimum(src, dst) % P, P, algorithm="hdrf")
    keep = rng.random(len(src)) >= 0.05
    s2 = np.concatenate([src[keep], rng.integers(0, 256, 200)])
    d2 = np.concatenate([dst[keep], rng.integers(0, 256, 200)])
    v2 = write_dataset(root, "g", s2, d2, num_vertices=256, version="v2")
    return v1, v2, run


@pytest.mark.parametrize("mode", ["local", "spark", "spark-serialized"])
def test_incremental_refresh_on_s3_reads_its_base_from_the_bucket(spark, snapshots, s3_root, mode):
    """The refresh matches v2's rows to v1's published assignment (both read from the bucket) and places the
    added rows, in the driver or as Spark jobs: the same result as on the local root. With v1's run serialized
    in the bucket, the Spark jobs read the base's rows from serialize's Parquet copy there."""
    from spark_jobs.serialize.job import run_serialize

    v1, v2, run = snapshots
    kw = {
        "algorithm": "hdrf",
        "name": run,
        "incremental": True,
        "incremental_base": "v1",
        "incremental_local_edges": 1 << 30 if mode == "local" else 0,
        "incremental_max_vb": 9.0,
        "incremental_max_eb": 9.0,
        "incremental_max_rf_growth": 0.0,
    }
    rec_l = run_partition(spark, _cfg(v1.root, **kw), v2, force=True)
    s3_v1 = copy_version(v1, s3_root)
    if mode == "spark-serialized":
        run_serialize(spark, _cfg(s3_root, **kw), s3_v1, run=run)
    s3 = copy_version(v2, s3_root)  # with the run just published locally: only force makes the bucket's run
    rec_s = run_partition(spark, _cfg(s3_root, **kw), s3, force=True)
    inc_l, inc_s = rec_l.counts["incremental"], rec_s.counts["incremental"]
    assert inc_s["path"] == "incremental" and inc_s["mode"] == mode.split("-")[0], inc_s
    if mode != "local":
        assert inc_s["base_rows"] == (f"serialize/{run}" if mode == "spark-serialized" else "assignment"), inc_s
    for key in ("kept", "added", "attached", "placed", "removed", "capacity"):
        assert inc_s[key] == inc_l[key], key
    assert inc_s["added"] > 0 and inc_s["removed"] > 0
    assert_same_run(v2, rec_l, s3, rec_s)


def test_missing_edges_in_the_bucket_name_the_uri(spark, graph, s3_root):
    """A version whose edge table is gone from the bucket fails at once, naming the table's URI; nothing is
    published and the attempt is removed."""
    s3 = copy_version(graph, s3_root)
    s3.store.delete(s3.edges)
    with pytest.raises(GlispError, match=str(s3.edges).replace(".", r"\.")):
        run_partition(spark, _cfg(s3_root, algorithm="adadne", name="gone"), s3)
    assert "partition/gone" not in read_manifest(s3).stages
    assert not [n for n in s3.store.names(s3.stage_dir("partition/gone")) if n.startswith("@")]


def test_glisp_partition_on_an_s3_root_in_a_fresh_process(spark, graph, s3_root, jvm_processes):
    """``glisp partition --root s3://...`` end to end: its new Spark session gets no checkpoint directory in the
    bucket (the JVM has no s3 connector: setting one would fail the command before it starts), and the run
    is published there, equal to the same run on the local root."""
    s3 = copy_version(graph, s3_root)
    cmd = [sys.executable, "-m", "glisp_app.cli", "partition", "g", "-a", "dbh", "-p", "2", "--root", s3_root.qualified]
    cmd += ["--master", "local[1]", "--set", "spark.driver_memory=1g", "--set", "partition.progress=false"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rec_l = run_partition(spark, _cfg(graph.root, algorithm="dbh", parts=2, seed=1), graph, force=True)
    assert_same_run(graph, rec_l, s3, read_manifest(s3).stage("partition/dbh-p2"))
