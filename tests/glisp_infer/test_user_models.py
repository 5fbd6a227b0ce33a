"""User-defined models from a factory: layerwise inference is exact for one that follows the slice protocol, a
model without it is inferred sample-wise (and says so), and bad factories are clear errors."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from glisp_core.dataset.stages import run_of
from glisp_core.errors import GlispError
from glisp_core.models import ModelSpec, build_model, load_checkpoint
from tests.glisp_infer.conftest import infer_cfg

pytestmark = pytest.mark.usefixtures("spark")
MOD = "tests.glisp_infer.user_models"


def _user_model(factory: str):
    torch.manual_seed(0)
    spec = ModelSpec(arch="custom", factory=f"{MOD}:{factory}", in_dim=6, hidden=8, out_dim=3, layers=2)
    return build_model(spec).eval()


def _reference(g, model) -> np.ndarray:
    """The full-graph forward pass through the model's own per-layer function."""
    ei = torch.stack([torch.from_numpy(g.src), torch.from_numpy(g.dst)]).long()
    h = torch.from_numpy(g.features)
    with torch.no_grad():
        for i in range(2):
            h = model.one(i, h, ei, g.n)
    return h.numpy()


def _outputs(g, rec) -> np.ndarray:
    emb = pq.read_table(g.dv.path / rec.path / "embeddings").to_pandas().sort_values("vid")
    return np.stack(emb["embedding"].to_numpy())


@pytest.mark.parametrize(("factory", "layerwise"), [("sum_gnn", True), ("plain_sum_gnn", False)])
def test_user_model_inference_equals_the_full_graph_forward(spark, infer_graph, factory, layerwise, capsys):
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    g = infer_graph
    model = _user_model(factory)
    publish_model(g.dv, f"user-{factory}", model, g.run)
    _, doc = load_checkpoint(g.dv.train(f"user-{factory}"))
    assert doc["spec"]["factory"] == f"{MOD}:{factory}" and doc["spec"]["arch"] == "custom"
    rec = run_infer(spark, infer_cfg(model=f"user-{factory}", run=f"user-{factory}"), g.dv)
    np.testing.assert_allclose(_outputs(g, rec), _reference(g, model), rtol=1e-4, atol=1e-5)
    assert rec.metrics["layerwise"] is layerwise and ("samplewise" in rec.metrics) is not layerwise
    said = "has no slice protocol" in capsys.readouterr().out
    assert said is not layerwise
    assert run_of(rec.name) == f"user-{factory}"


def test_bad_factories_are_clear_errors():
    for factory, msg in (
        ("no.such.module:f", "cannot import 'no.such.module'"),
        (f"{MOD}:missing", f"module '{MOD}' has no 'missing'"),
        (f"{MOD}:not_a_module", "returned str, not a torch.nn.Module"),
        ("nocolon", "expected 'package.module:factory'"),
    ):
        with pytest.raises(GlispError, match=msg):
            from glisp_core.models import load_factory

            if ":" not in factory:
                load_factory(factory)
            build_model(ModelSpec(arch="custom", factory=factory, in_dim=2, hidden=2, out_dim=2, layers=1))
