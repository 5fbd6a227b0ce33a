"""Ingest on an ``s3://`` root (a real S3 API server), from inputs in the bucket: the same tables as on a local disk.

Every hand-off between tasks (staged Arrow files, degree slices, the written tables) and every input read goes
through the store, so each test runs the same ingest once on a local root from local files and once on an S3
root from copies of those files in the bucket, and compares what each published.
"""

from __future__ import annotations

import dataclasses
import gzip

import numpy as np
import pandas as pd
import pytest
from ingest_util import write

from glisp_app.cli import main as glisp
from glisp_core.config import EdgeSource, IngestConfig, RmatConfig, VertexSource, load_config, with_values
from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import BadInputError, ConfigError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_spark.tables import read_arrow_table
from spark_jobs.generate.builtin import builtin_config
from spark_jobs.generate.rmat import generate_rmat
from spark_jobs.ingest.job import run_ingest

TABLES = ("edges", "idmap", "vertices", "features")


def _ingest(spark, root: StoreURI, ing: IngestConfig) -> DatasetVersion:
    cfg = with_values(load_config(env={}), "dataset", root=str(root))
    return run_ingest(spark, cfg, ing, log=lambda _: None)


def _table(uri: StoreURI) -> pd.DataFrame:
    """A published table read through its store, in a stable row order."""
    df = read_arrow_table(uri).to_pandas()
    key = [c for c in ("eid", "vid") if c in df.columns] or list(df.columns)
    df = df.sort_values(key).reset_index(drop=True)
    return df.map(lambda x: x.tolist() if isinstance(x, np.ndarray) else x)


def _data_files(dv: DatasetVersion) -> dict[str, bytes]:
    """Every data file of the published tables, by path relative to the ingest output."""
    store = store_for(dv.ingest)
    return {
        rel: store.read_bytes(dv.ingest / rel)
        for rel, _ in store.files(dv.ingest)
        if rel.split("/")[0] in TABLES and not rel.split("/")[-1].startswith(("_", "."))
    }


def _assert_same_output(local: DatasetVersion, remote: DatasetVersion) -> None:
    ml, mr = read_manifest(local), read_manifest(remote)
    assert mr.schema == ml.schema
    assert mr.stages["ingest"].counts == ml.stages["ingest"].counts
    for t in TABLES:
        if t == "features" and not ml.schema["feature_dim"]:
            continue
        pd.testing.assert_frame_equal(_table(getattr(remote, t)), _table(getattr(local, t)))
    assert not store_for(remote.ingest).exists(remote.ingest / "_staging")  # the staged files are gone


def test_builtin_cora_on_s3_reads_its_inputs_from_the_bucket(spark, tmp_path, s3_root, capsys):
    local = _ingest(spark, parse_uri(tmp_path / "root"), builtin_config("cora"))
    rc = glisp(["ingest", "--builtin", "cora", "--version", "v1", "--root", str(s3_root)])
    assert rc == 0, capsys.readouterr().err
    remote = resolve_dataset("cora/v1", s3_root)
    _assert_same_output(local, remote)
    # the rank-map path writes every file itself: byte for byte the local files
    assert _data_files(remote) == _data_files(local) != {}
    inputs = [x["path"] for x in read_manifest(remote).inputs]
    assert inputs and all(p.startswith(f"{s3_root.qualified}/_builtin/cora/") for p in inputs)
    assert all(store_for(s3_root).exists(p) for p in inputs)


def _inputs(d) -> None:
    """Edge CSVs (one gzipped, a comment, a bad weight, a duplicate, an endpoint with no vertex) and vertex
    tables with features from columns, from an .npy by row order and from an .npy aligned by ids."""
    write(d / "edges" / "part-0.csv", "src,dst,w\n# exported\nu1,u2,1\nu2,i1,2\ni2,u1,0.5\nu1,u2,3\nu2,zz,1\n")
    (d / "edges" / "part-1.csv.gz").write_bytes(gzip.compress(b"src,dst,w\ni1,m1,1\nm1,u1,x\ni1,i1,2\n"))
    write(d / "edges" / "_SUCCESS", "")
    write(d / "users-a.csv", "id,f0,f1,lab\nu1,1,2,cat\n")
    write(d / "users-b.csv", "id,f0,f1,lab\nu2,3,4,dog\n")
    write(d / "items.csv", "id\ni1\ni2\n")
    np.save(d / "items.npy", np.array([[9, 8], [7, 6]], np.float64))
    write(d / "more.csv", "id\nm1\n")
    np.save(d / "more.npy", np.array([[5, 4]], np.float32))
    np.save(d / "more_ids.npy", np.array(["m1"]))


def _config(base: str) -> IngestConfig:
    return IngestConfig(
        graph="mixed",
        edges=[EdgeSource(path=f"{base}/edges", weight="w", comment="#")],
        vertices=[
            VertexSource(path=f"{base}/users-*.csv", feature_columns=["f0", "f1"], label="lab"),
            VertexSource(path=f"{base}/items.csv", features_npy=f"{base}/items.npy"),
            VertexSource(
                path=f"{base}/more.csv", features_npy=f"{base}/more.npy", features_npy_ids=f"{base}/more_ids.npy"
            ),
        ],
        duplicates="merge",
        on_bad_input="quarantine",
    )


def _rejects(dv: DatasetVersion, kind: str) -> list[dict]:
    rows = read_arrow_table(dv.rejects(kind)).to_pylist()
    return sorted(({**r, "file": r["file"].rsplit("/", 1)[-1]} for r in rows), key=repr)


def test_csv_and_npy_inputs_in_the_bucket_ingest_like_local_files(spark, tmp_path, s3_root):
    src = tmp_path / "in"
    _inputs(src)
    store_for(s3_root).upload(src, s3_root / "in")
    local = _ingest(spark, parse_uri(tmp_path / "root"), _config(str(src)))
    remote = _ingest(spark, s3_root, _config((s3_root / "in").qualified))
    _assert_same_output(local, remote)
    m = read_manifest(remote)
    assert m.stages["ingest"].counts["id_map"] == "join" and m.schema["feature_dim"] == 2
    assert m.stages["ingest"].counts["rejects"] == {"edge_bad_weight": 1, "edge_missing_endpoint": 1}
    for kind in m.stages["ingest"].counts["rejects"]:
        assert _rejects(remote, kind) == _rejects(local, kind) != []
    inputs = [x["path"] for x in m.inputs]
    assert len(inputs) == 9 and all(p.startswith(f"{s3_root.qualified}/in/") for p in inputs)
    feats = _table(remote.features).merge(_table(remote.idmap), on="vid").set_index("orig_id")["feat"]
    assert feats.to_dict() == {"u1": [1, 2], "u2": [3, 4], "i1": [9, 8], "i2": [7, 6], "m1": [5, 4]}


def test_bad_or_missing_input_in_the_bucket_is_named_by_its_uri(spark, s3_root):
    bad = s3_root / "in" / "bad.csv"
    store_for(s3_root).write_bytes(bad, b"src,dst\n1,2\n3,x\n")
    ing = IngestConfig(graph="bad", edges=[EdgeSource(path=bad.qualified)], id_type="int")
    with pytest.raises(BadInputError) as e:
        _ingest(spark, s3_root, ing)
    assert f"{bad.qualified}, column 'dst': 1 of 2 rows" in str(e.value) and "dst='x'" in str(e.value)
    gone = (s3_root / "in" / "nothing-*.csv").qualified
    with pytest.raises(ConfigError, match="no input file matches it") as e2:
        _ingest(spark, s3_root, dataclasses.replace(ing, edges=[EdgeSource(path=gone)]))
    assert gone in str(e2.value)


def test_rmat_generated_into_the_bucket_ingests_like_a_local_one(spark, tmp_path, s3_root):
    cfg = RmatConfig(
        scale=7, edge_factor=8, seed=5, files=2, features=3, classes=2, splits=[0.5, 0.25, 0.25], weights=True
    )
    generate_rmat(spark, cfg, tmp_path / "gen", graph="r")
    res = generate_rmat(spark, cfg, (s3_root / "gen").qualified, graph="r")
    assert res["config"] == (s3_root / "gen" / "ingest.toml").qualified
    toml = write(tmp_path / "s3.toml", store_for(s3_root).read_text(s3_root / "gen" / "ingest.toml") or "")
    ing = load_config(toml, env={}).ingest
    assert ing.edges[0].path == (s3_root / "gen" / "edges").qualified
    local = _ingest(spark, parse_uri(tmp_path / "root"), load_config(tmp_path / "gen" / "ingest.toml", env={}).ingest)
    _assert_same_output(local, _ingest(spark, s3_root, ing))
