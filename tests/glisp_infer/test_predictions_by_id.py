"""Outputs keep the user's id type: a graph ingested with integer ids gets integer ``orig_id`` columns, so filtering
the predictions with integers finds them, and ``read_predictions`` takes them with the dataset root."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.usefixtures("spark")


def test_integer_ids_stay_integers_in_predictions_with_every_vertexs_label(spark, tmp_path):
    from glisp_core.config import EdgeSource, IngestConfig, VertexSource, load_config, with_values
    from glisp_core.dataset.layout import PREDICTION_COLUMNS
    from glisp_infer.job import run_infer
    from glisp_infer.read import read_predictions
    from glisp_train.publish import publish_model
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize
    from tests.glisp_infer.conftest import infer_cfg

    ids = [100 + 3 * i for i in range(20)]
    (tmp_path / "e.csv").write_text("src,dst\n" + "".join(f"{ids[i]},{ids[(i * 7 + 3) % 20]}\n" for i in range(20)))
    unlabelled = {ids[i] for i in (5, 11, 17)}  # an empty label cell: no label
    lab = {v: "" if v in unlabelled else str(v % 3) for v in ids}
    (tmp_path / "v.csv").write_text("id,lab,f0,f1\n" + "".join(f"{v},{lab[v]},{v % 5},{v % 7}\n" for v in ids))
    root = str(tmp_path / "root")
    cfg = with_values(load_config(env={}), "dataset", root=root)
    vs = VertexSource(path=str(tmp_path / "v.csv"), label="lab", feature_columns=["f0", "f1"])
    ing = IngestConfig(graph="ints", edges=[EdgeSource(path=str(tmp_path / "e.csv"))], vertices=[vs])
    dv = run_ingest(spark, cfg, ing)
    pc = with_values(cfg, "partition", algorithm="random", parts=2, name="r2", progress=False)
    run_partition(spark, pc, dv)
    run_serialize(spark, with_values(pc, "serialize", parquet_copy=False), dv, run="r2")
    from glisp_core.models import ModelSpec, build_model

    model = build_model(ModelSpec(arch="sage", in_dim=2, hidden=4, out_dim=3, layers=2)).eval()
    publish_model(dv, "m", model, "r2")
    rec = run_infer(spark, with_values(infer_cfg(model="m", run="m"), "dataset", root=root), dv)
    t = pq.read_table(dv.path / rec.path / "predictions")
    assert t.schema.field("orig_id").type == "int64" and t.column_names == list(PREDICTION_COLUMNS)
    df = t.to_pandas()
    assert len(df[df["orig_id"] == ids[4]]) == 1  # filtering with an integer finds it
    # every vertex's label is the dataset's (they come with the rows from the partitions), null where it has none
    got_labels = dict(zip(df["orig_id"], df["label"], strict=True))
    assert sorted(got_labels) == ids
    assert {v for v, x in got_labels.items() if x != x or x is None} == unlabelled  # NaN or None: null
    assert all(int(got_labels[v]) == v % 3 for v in ids if v not in unlabelled)
    got = read_predictions("ints", [ids[4], ids[0]], root=root)
    assert got["orig_id"].tolist() == [ids[4], ids[0]] and got["label"].tolist() == [ids[4] % 3, ids[0] % 3]
    assert rec.metrics["evaluation"]["labelled"] == 17
