"""glisp serialize and glisp reorder on an ``s3://`` root (moto's S3 server) give what they give on a local root.

The inputs (ingest and a partition run) are built on a local root and copied byte for byte to the bucket before
either stage runs there, so both runs start from the same published inputs. On S3 the stages read the tables
with pyarrow inside the tasks, and each partition task streams its objects into the bucket itself; the
driver only lists the attempt and reads the small meta.json objects back.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from glisp_core.config import ServeConfig, load_config
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import GlispError, StageError
from glisp_core.partition_format import open_partition
from glisp_core.storage.uri import StoreURI
from glisp_serving.server.partition_cache import local_partition
from glisp_spark.tables import read_arrow_table
from glisp_testing.graphs import write_dataset
from glisp_testing.partitions import publish_partition
from glisp_testing.stores import copy_version

P = 3
N = 64  # vids 58..63 are isolated
ORDERS = ["pds", "ds"]  # a partition-major order, and the one whose positions go through dense_positions


def _inputs(root: Path) -> tuple[DatasetVersion, str]:
    """Two edge types, weights, timestamps, features, labels and splits: every field a partition can hold."""
    rng = np.random.default_rng(5)
    m = 400
    src, dst = rng.integers(0, 58, m), rng.integers(0, 58, m)
    dv = write_dataset(
        root,
        "g",
        src,
        dst,
        num_vertices=N,
        etype=rng.integers(0, 2, m),
        edge_types=["a", "b"],
        weight=rng.random(m).astype(np.float32),
        ts=rng.integers(0, 2**40, m),
        labels=rng.integers(0, 3, N),
        split=rng.integers(-1, 3, N).astype(np.int8),
        features=rng.random((N, 4)).astype(np.float32),
    )
    part = (np.minimum(src, dst) * 31 + np.maximum(src, dst)) % P  # both directions of a pair share a partition
    return dv, publish_partition(dv, part, P)


def _run_both(spark, cfg, dv: DatasetVersion, run: str) -> dict[str, object]:
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorders

    return {
        "serialize": run_serialize(spark, cfg, dv, run=run),
        **dict(zip(ORDERS, run_reorders(spark, cfg, dv, ORDERS, run=run), strict=True)),
    }


@pytest.fixture(scope="module")
def both(tmp_path_factory, spark, new_s3_root):
    """(local version, its S3 copy, run, local records, S3 records): each stage run once on each root."""
    cfg = load_config(env={})
    local, run = _inputs(tmp_path_factory.mktemp("ser-store"))
    remote = copy_version(local, new_s3_root("ser-store"))
    return local, remote, run, _run_both(spark, cfg, local, run), _run_both(spark, cfg, remote, run)


def _objects(dv: DatasetVersion, prefix: StoreURI) -> dict[str, bytes]:
    return {rel: dv.store.read_bytes(prefix / rel) for rel, _ in dv.store.files(prefix) if not rel.startswith("_")}


def test_partitions_are_byte_identical(both) -> None:
    local, remote, run, lrec, rrec = both
    assert remote.serialized(run).qualified.startswith("s3://")
    for k in range(P):
        want, got = _objects(local, local.partition_dir(run, k)), _objects(remote, remote.partition_dir(run, k))
        assert "meta.json" in want and "features.bin" in want and "out_type_ids.bin" in want
        assert sorted(got) == sorted(want)
        for name in want:
            assert got[name] == want[name], f"part {k}: {name}"
    ls, rs = lrec["serialize"], rrec["serialize"]
    assert rs.counts == ls.counts and rs.metrics == ls.metrics


def test_parquet_copies_and_reorder_tables_are_equal(both) -> None:
    local, remote, run, lrec, rrec = both
    for kind, keys in (("edges", ["part", "leid"]), ("vertices", ["part", "lid"])):
        want = read_arrow_table(local.serialized(run) / "parquet" / kind)
        got = read_arrow_table(remote.serialized(run) / "parquet" / kind)
        assert want.num_rows > 0 and got.sort_by([(c, "ascending") for c in keys]).equals(
            want.sort_by([(c, "ascending") for c in keys])
        )
    for o in ORDERS:
        want = read_arrow_table(local.reorder(run, o)).sort_by("pos")
        got = read_arrow_table(remote.reorder(run, o)).sort_by("pos")
        assert want.num_rows == N and got.equals(want), o
        assert rrec[o].counts == lrec[o].counts
        assert remote.store.exists(remote.reorder(run, o) / "_SUCCESS")
        assert not remote.store.exists(remote.reorder(run, o) / "_lease.json")  # dropped once published


def test_a_server_opens_the_s3_partition(both, tmp_path: Path) -> None:
    """The serving path: the partition cache downloads the S3 partition and checks it against its meta.json."""
    local, remote, run, _, _ = both
    entry, verified = local_partition(remote, run, 1, ServeConfig(cache_dir=str(tmp_path / "cache")))
    assert verified and entry.is_relative_to(tmp_path)
    got, want = open_partition(entry, verify=True), open_partition(local.partition_dir(run, 1), verify=True)
    assert got.num_edges == want.num_edges > 0 and got.meta == want.meta
    assert np.array_equal(got.global_id, want.global_id) and np.array_equal(got.features, want.features)


def test_cli_finds_the_s3_stages_current(both, capsys) -> None:
    from glisp_app.cli import main

    _, remote, run, _, rrec = both
    assert main(["serialize", remote.path.qualified, "--partition", run]) == 0
    assert f"serialize/{run}: up to date" in capsys.readouterr().out
    assert read_manifest(remote).stages[f"serialize/{run}"].completed_at == rrec["serialize"].completed_at


def test_the_driver_checks_the_store_against_the_tasks(both) -> None:
    """check_written refuses an attempt whose meta.json is not the task's, or whose field object or masters file
    is missing."""
    from spark_jobs.serialize.job import check_written

    _, remote, run, _, rrec = both
    store, src = remote.store, remote.serialized(run)
    scratch = remote.path / "_scratch" / uuid.uuid4().hex[:8]
    pafs.copy_files(store.at(src), store.at(scratch), store.fs, store.fs)
    summaries = []
    for k in range(P):
        raw = store.read_bytes(scratch / f"part-{k:05d}" / "meta.json")
        meta = json.loads(raw)
        summaries.append(
            {
                "edges": meta["num_edges"],
                "vertices": meta["num_vertices"],
                "meta_sha256": hashlib.sha256(raw).hexdigest(),
            }
        )
    edges = sum(rrec["serialize"].counts["edges_per_part"])
    check_written(store, scratch, run, summaries, edges, parquet=True)  # the published output passes
    wrong = [dict(s) for s in summaries]
    wrong[2]["meta_sha256"] = "0" * 64
    with pytest.raises(StageError, match=r"part-00002/meta\.json is not the one partition 2's task wrote"):
        check_written(store, scratch, run, wrong, edges, parquet=True)
    store.delete(scratch / "part-00001" / "in_eid.bin")
    with pytest.raises(StageError, match=r"partition 1 is not complete in the store: s3://\S+/part-00001/in_eid\.bin"):
        check_written(store, scratch, run, summaries, edges, parquet=True)
    store.delete(scratch / "masters" / "part-00000.parquet")  # checked before partition 1's fields
    with pytest.raises(StageError, match=r"the masters of partition 0 are missing \(masters/part-00000\.parquet\)"):
        check_written(store, scratch, run, summaries, edges, parquet=True)
    store.delete(scratch)


def test_a_missing_input_names_its_uri(both, spark, s3_root) -> None:
    """The assignment gone from the bucket: the stage stops naming it, publishes nothing, leaves no attempt."""
    from spark_jobs.serialize.job import run_serialize

    local, _, run, _, _ = both
    dv = copy_version(local, s3_root)
    before = read_manifest(dv).stages[f"serialize/{run}"]
    dv.store.delete(dv.assignment(run))
    with pytest.raises(GlispError, match=rf"{dv.assignment(run).qualified}: no Parquet files to read"):
        run_serialize(spark, load_config(env={}), dv, run=run, force=True)
    assert read_manifest(dv).stages[f"serialize/{run}"].completed_at == before.completed_at
    assert dv.store.names(dv.stage_dir(f"serialize/{run}")) == [before.path.rsplit("/", 1)[-1]]
