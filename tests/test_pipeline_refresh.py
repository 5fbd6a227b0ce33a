"""A scheduled refresh with a configured model: the pipeline carries ``train/<model>`` from the version
``latest`` names into the new one, runs inference over the new partition run, and only then moves
``latest``. Real Spark, real stages on the built-in Cora."""

from __future__ import annotations

import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import read_latest


def test_refresh_carries_the_model_and_infers_before_latest_moves(spark, tmp_path):
    from glisp_app.pipeline import run_pipeline
    from glisp_core.config import load_config, with_values
    from glisp_core.errors import StageError
    from glisp_core.models import ModelSpec, build_model
    from glisp_train.publish import publish_model

    cfg = with_values(load_config(env={}), "dataset", root=str(tmp_path))
    cfg = with_values(cfg, "partition", parts=2, progress=False)
    cfg = with_values(cfg, "ingest", version="v1")
    v1 = run_pipeline(spark, cfg, builtin="cora")
    run = next(k.split("/", 1)[1] for k in read_manifest(v1).stages if k.startswith("serialize/"))
    model = build_model(ModelSpec(arch="sage", in_dim=1433, hidden=16, out_dim=7, layers=2, task="node"))
    publish_model(v1, "nightly", model, run)

    missing = with_values(with_values(cfg, "ingest", version="v2"), "infer", model="no-such-model", fanouts=[5, 5])
    with pytest.raises(StageError, match="pipeline stage 'infer' failed.*no version of graph"):
        run_pipeline(spark, missing, builtin="cora")
    assert read_latest(tmp_path / "cora") == "v1"  # a failed refresh leaves latest alone

    refresh = with_values(missing, "infer", model="nightly")
    v2 = run_pipeline(spark, refresh, builtin="cora")
    m = read_manifest(v2)
    assert m.stages["train/nightly"].params["source"] == "external"
    infer = [k for k in m.stages if k.startswith("infer/")]
    assert infer and read_latest(tmp_path / "cora") == "v2"
    rec = m.stage(infer[0])
    assert rec.counts["vertices"] == 2708
    assert list((v2.path.local / rec.path).rglob("zarr.json")), "no Zarr store in the inference stage"


def _snapshot(rels, rng, path) -> int:
    """Cora's edge table with 2% of its rows removed and as many random rows added, written to ``path``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    keep = rng.random(rels.num_rows) >= 0.02
    ids = np.unique(rels.column("sourceNodeId").to_numpy())
    k = int((~keep).sum())
    added = pa.table(
        {
            "sourceNodeId": rng.choice(ids, k),
            "targetNodeId": rng.choice(ids, k),
            "relationshipType": pa.array(["CITES"] * k),
        }
    )
    table = pa.concat_tables([rels.filter(pa.array(keep)), added.cast(rels.schema)])
    pq.write_table(table, path)
    return table.num_rows


def test_three_snapshot_refresh_trains_infers_and_retains(spark, tmp_path):
    """Three snapshots of Cora, edges changed each time: every refresh partitions incrementally, trains
    through a serve-cluster it starts, infers, then moves latest; retention keeps two; a re-run reuses
    every stage (no retraining); a re-run whose training fails leaves latest and the published model alone."""
    import dataclasses

    import numpy as np
    import pyarrow.parquet as pq

    from glisp_app.pipeline import run_pipeline
    from glisp_core.config import load_config, with_values
    from glisp_core.dataset.layout import list_versions
    from glisp_core.errors import StageError
    from spark_jobs.generate.builtin import builtin_config

    cfg = with_values(load_config(env={}), "dataset", root=str(tmp_path / "data"), keep_versions=2)
    cfg = with_values(cfg, "partition", parts=2, progress=False, incremental=True)
    cfg = with_values(cfg, "pipeline", train=True)
    cfg = with_values(
        cfg,
        "train",
        name="nightly",
        hidden=16,
        epochs=1,
        batch_size=256,
        max_batches=2,
        fanouts=[5, 5],
        layers=2,
        feature_cache_mb=0,
    )
    cfg = with_values(cfg, "serve", threads=1)
    cfg = with_values(cfg, "infer", fanouts=[5, 5])
    base = builtin_config("cora", cfg.ingest)
    rels = pq.read_table(base.edges[0].path)
    rng = np.random.default_rng(5)
    versions, edge_rows = [], []
    for k in (1, 2, 3):
        path = tmp_path / f"cora-rels-{k}.parquet"
        edge_rows.append(_snapshot(rels, rng, path))
        ing = dataclasses.replace(base, version=f"s{k}", edges=[dataclasses.replace(base.edges[0], path=str(path))])
        snap = with_values(cfg, "", ingest=ing)
        dv = run_pipeline(spark, snap)
        m = read_manifest(dv)
        run = next(s.split("/", 1)[1] for s in m.stages if s.startswith("serialize/"))
        assert m.stage("ingest").counts["input_edge_rows"] == edge_rows[-1]
        train = m.stage("train/nightly")
        assert train.params["source"] == "cluster" and train.params["partition_run"] == run  # trained here
        assert m.stage("infer/nightly-pds").counts["vertices"] == 2708
        inc = m.stage(f"partition/{run}").counts["incremental"]
        assert inc["path"] == ("full" if k == 1 else "incremental"), inc
        assert read_latest(tmp_path / "data" / "cora") == f"s{k}"
        versions.append((dv, snap))
    assert list_versions(tmp_path / "data", "cora") == ["s2", "s3"]  # keep_versions = 2

    dv3, snap3 = versions[-1]
    before = read_manifest(dv3).stages
    run_pipeline(spark, snap3)  # the same snapshot again: every stage is current, nothing is redone
    after = read_manifest(dv3).stages
    assert {k: v.completed_at for k, v in after.items()} == {k: v.completed_at for k, v in before.items()}

    broken = with_values(snap3, "train", fanouts=[5, 5, 5])  # 3 fanouts for 2 layers: training must fail
    with pytest.raises(StageError, match="pipeline stage 'train' failed"):
        run_pipeline(spark, broken)
    assert read_latest(tmp_path / "data" / "cora") == "s3"
    assert read_manifest(dv3).stages["train/nightly"] == after["train/nightly"]  # nothing lost
