"""A scheduled refresh with a configured model: the pipeline carries ``train/<model>`` from the version
``latest`` names into the new one, runs inference over the new partition run, and only then moves
``latest``. Real Spark, real stages on the built-in Cora."""

from __future__ import annotations

import pytest

from glisp_core.dataset.manifest import Manifest
from glisp_core.dataset.versions import read_latest

pytestmark = pytest.mark.slow


def test_refresh_carries_the_model_and_infers_before_latest_moves(spark, tmp_path):
    from glisp_core.config import load_config, with_values
    from glisp_core.errors import StageError
    from glisp_core.models import ModelSpec, build_model
    from glisp_train.publish import publish_model
    from spark_jobs.pipeline import run_pipeline

    cfg = with_values(load_config(env={}), "dataset", root=str(tmp_path))
    cfg = with_values(cfg, "partition", parts=2, progress=False)
    cfg = with_values(cfg, "ingest", version="v1")
    v1 = run_pipeline(spark, cfg, builtin="cora")
    run = next(k.split("/", 1)[1] for k in Manifest.read(v1.manifest_path).stages if k.startswith("serialize/"))
    model = build_model(ModelSpec(arch="sage", in_dim=1433, hidden=16, out_dim=7, layers=2, task="node"))
    publish_model(v1, "nightly", model, run)

    missing = with_values(with_values(cfg, "ingest", version="v2"), "infer", model="no-such-model", fanouts=[5, 5])
    with pytest.raises(StageError, match="pipeline stage 'infer' failed.*no version of graph"):
        run_pipeline(spark, missing, builtin="cora")
    assert read_latest(tmp_path / "cora") == "v1"  # a failed refresh leaves latest alone

    refresh = with_values(missing, "infer", model="nightly")
    v2 = run_pipeline(spark, refresh, builtin="cora")
    m = Manifest.read(v2.manifest_path)
    assert m.stages["train/nightly"].params["source"] == "external"
    infer = [k for k in m.stages if k.startswith("infer/")]
    assert infer and read_latest(tmp_path / "cora") == "v2"
    rec = m.stage(infer[0])
    assert rec.counts["vertices"] == 2708
    assert list((v2.path / rec.path).rglob("zarr.json")), "no Zarr store in the inference stage"
