"""Validation and test at full neighbourhoods (the default) equal the trained model's full-graph forward pass;
sampled evaluation is the option, and every score says which it is."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from glisp_train.dist import Dist
from glisp_train.source import open_cluster, open_in_process
from glisp_train.trainer import train
from tests.glisp_train.conftest import WHOLE, train_cfg


def full_graph_outputs(model, cora) -> np.ndarray:
    """The model's in-memory full-graph forward pass, one slice at a time (messages follow the edges)."""
    ei = torch.stack([torch.from_numpy(cora.src), torch.from_numpy(cora.dst)]).long()
    et = torch.zeros(ei.shape[1], dtype=torch.long)  # Cora has one edge type
    h = torch.from_numpy(cora.features)
    model = model.cpu().eval()
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer(i, h, ei, cora.n, et)
    return h.numpy()


@pytest.mark.parametrize(("where", "model"), [("cluster", "sage"), ("in-process", "rgcn")])
def test_full_evaluation_equals_the_full_graph_forward(cora, cora_cluster, where, model):
    cfg = train_cfg(model=model, epochs=2, hidden=16, eval_batch_size=300)
    src = (
        open_cluster(cora_cluster.cluster_file, cfg)
        if where == "cluster"
        else open_in_process(str(cora.dv.path), WHOLE, cfg)
    )
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    assert res.evaluation == {"mode": "full"} and all(e["evaluation"] == "full" for e in res.epochs)
    got, pred, _ = res.test["predictions"]
    ref = full_graph_outputs(res.model, cora)
    assert np.array_equal(pred, ref[got].argmax(1))
    test_ids = res.task.test_ids
    assert np.array_equal(np.sort(got), test_ids)
    assert res.test["acc"] == pytest.approx(float((ref[test_ids].argmax(1) == cora.labels[test_ids]).mean()))


def test_sampled_evaluation_is_the_option_and_says_so(cora, cora_cluster):
    """``train.evaluation = "sampled"`` scores on trees at ``eval_fanouts`` (here 1 neighbour per hop: other
    predictions than the full-graph pass), and the record names the fanouts."""
    cfg = train_cfg(epochs=1, hidden=16, evaluation="sampled", eval_fanouts=[1, 1])
    src = open_cluster(cora_cluster.cluster_file, cfg)
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    assert res.evaluation == {"mode": "sampled", "fanouts": [1, 1]}
    got, pred, _ = res.test["predictions"]
    assert not np.array_equal(pred, full_graph_outputs(res.model, cora)[got].argmax(1))


USER = "tests.glisp_infer.user_models"


def test_a_user_model_from_a_factory_trains_and_is_recorded(cora, tmp_path, capsys):
    """``glisp train --model package.module:factory``: the factory's module builds the model from the served schema;
    with the slice protocol it is evaluated at full neighbourhoods (equal to its full-graph pass); the checkpoint
    records the factory and ``load_checkpoint`` builds it again."""
    from glisp_app.cli import main as glisp
    from glisp_core.models import load_checkpoint

    args = ["train", str(cora.dv.path), "--in-process", WHOLE, "--model", f"{USER}:sum_gnn", "--epochs", "2"]
    assert glisp([*args, "--output", str(tmp_path / "run"), "--set", "train.hidden=16"]) == 0
    assert "(full neighbourhoods); checkpoint" in capsys.readouterr().out
    model, doc = load_checkpoint(tmp_path / "run")
    assert type(model).__name__ == "SlicedSum" and doc["spec"]["factory"] == f"{USER}:sum_gnn"
    assert doc["spec"]["in_dim"] == cora.features.shape[1] and doc["spec"]["out_dim"] == 7
    pred = pq.read_table(tmp_path / "run" / "predictions.parquet").to_pandas()
    ref = full_graph_outputs(model, cora)
    assert np.array_equal(pred["prediction"].to_numpy(), ref[pred["vid"].to_numpy()].argmax(1))
    assert (pred["prediction"] == pred["label"]).mean() > 0.5  # it learned something (7 classes)


def test_a_user_model_without_the_slice_protocol_is_evaluated_sampled_and_says_why(cora, capsys):
    cfg = train_cfg(model=f"{USER}:plain_sum_gnn", epochs=1, hidden=16)
    src = open_in_process(str(cora.dv.path), WHOLE, cfg)
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    assert res.evaluation["mode"] == "sampled" and "slice protocol" in res.evaluation["why"]
