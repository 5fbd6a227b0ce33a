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


def test_full_evaluation_past_serve_max_fanout_takes_the_cap_and_says_so(cora):
    """A hub with more neighbours than one Gather returns (serve.max_fanout; R-MAT 22's hubs have 250,000) no
    longer fails the run: it gets the cap's neighbours, and the record counts the vertices that did."""
    from glisp_core.config import with_values

    cap = 8
    cfg = with_values(train_cfg(epochs=1, hidden=16, fanouts=[4, 4]), "serve", max_fanout=cap)
    src = open_in_process(str(cora.dv.path), WHOLE, cfg)
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    deg = np.bincount(cora.dst, minlength=cora.n)  # messages follow the edges: a vertex gathers its in-edges
    assert int(deg.max()) > cap
    ev = res.evaluation
    assert ev["mode"] == "full" and ev["capped_at"] == cap and ev["capped_vertices"] > 0, ev
    got, pred, _ = res.test["predictions"]
    assert np.array_equal(np.sort(got), res.task.test_ids)
    assert not np.array_equal(pred, full_graph_outputs(res.model, cora)[got].argmax(1))  # hubs were capped


def test_full_evaluation_batches_by_degree_and_asks_every_neighbour():
    from glisp_sampling.degree_batches import degree_batches

    rng = np.random.default_rng(3)
    deg = np.concatenate([rng.integers(0, 5, 1000), rng.integers(5, 300, 60), [5000, 70_000]])
    batches = degree_batches(deg, batch=256, budget=4096, cap=10_000)
    pos = np.concatenate([p for p, _ in batches])
    assert np.array_equal(np.sort(pos), np.arange(len(deg)))  # every vertex once
    for p, fanout in batches:
        assert len(p) <= 256 and (fanout & (fanout - 1) == 0 or fanout == 10_000)  # a power of two, or the cap
        assert fanout >= min(10_000, max(1, int(deg[p].max())))  # every neighbour (up to the cap)
        assert len(p) == 1 or len(p) * fanout <= 2 * 4096  # the budget, with the power of two's slack
    assert batches[0][1] <= 8 and len(batches[0][0]) == 256  # low degrees first, full batches
    assert batches[-1] == (np.array([len(deg) - 1]), 10_000)  # the hub past the cap, alone, at the cap


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


def test_a_full_evaluation_past_eval_memory_mb_runs_sampled_and_says_why(cora):
    """R-MAT 23's validation set would hold about 12 GB at full neighbourhoods: a set whose bound from the
    degrees passes ``train.eval_memory_mb`` is scored on sampled trees, and the record and each epoch say so."""
    cfg = train_cfg(epochs=2, hidden=16, eval_memory_mb=1, eval_fanouts=[1, 1])  # Cora's input rows alone: 6 MB
    src = open_in_process(str(cora.dv.path), WHOLE, cfg)
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    ev = res.evaluation
    assert ev["mode"] == "sampled" and ev["fanouts"] == [1, 1] and "train.eval_memory_mb = 1" in ev["why"], ev
    assert all(e["evaluation"] == "sampled" for e in res.epochs)
    got, pred, _ = res.test["predictions"]
    assert np.array_equal(np.sort(got), res.task.test_ids)
    assert not np.array_equal(pred, full_graph_outputs(res.model, cora)[got].argmax(1))  # one neighbour per hop


def test_the_full_plan_bound_holds_every_set_it_would_build():
    """``plan_bytes`` bounds the blocks, input rows and hidden rows of the exact L-hop sets of any vertex set
    (power-law degrees, hubs capped), and is not looser than the whole graph's worth."""
    from glisp_train.full_eval import BLOCK_EDGES, EDGE_BYTES, plan_bytes, top_degrees

    rng = np.random.default_rng(5)
    n, m, cap, in_dim, hidden = 3000, 40_000, 50, 24, 64
    src, dst = rng.zipf(1.7, m) % n, rng.integers(0, n, m)
    src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.lexsort((src, dst))
    src, dst = src[order], dst[order]
    ptr = np.searchsorted(dst, np.arange(n + 1))
    deg = np.minimum(np.diff(ptr), cap)  # a vertex gathers at most cap of its in-neighbours
    top = top_degrees(deg)
    for size in (1, 10, 300, n):
        for layers in (1, 2, 3):
            ids = np.sort(rng.choice(n, size, replace=False))
            sets, edges = [ids], []
            for _ in range(layers):
                s = sets[-1]
                nb = np.concatenate([src[ptr[v] : ptr[v] + deg[v]] for v in s])
                edges.append(len(nb))
                sets.append(np.union1d(s, nb))
            rows_in, hidden_rows = len(sets[-1]), max((len(x) for x in sets[1:-1]), default=0)
            exact = EDGE_BYTES * sum(edges) + 4 * (rows_in * in_dim + hidden_rows * hidden)
            exact += 4 * min(BLOCK_EDGES, max(edges)) * max(in_dim, hidden)
            bound = plan_bytes(deg, ids, layers, in_dim, hidden, top)
            assert exact <= bound, (size, layers)
            whole = EDGE_BYTES * layers * int(deg.sum()) + 4 * n * (in_dim + hidden)
            assert bound <= whole + 4 * min(BLOCK_EDGES, int(deg.sum())) * max(in_dim, hidden)


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


def test_the_validation_plan_is_freed_before_the_test(cora):
    """A full plan holds its set's L-hop neighbourhood (most of a large graph): after the last epoch only the
    test set's is built and kept, not the validation set's beside it."""
    from glisp_train.progress import Progress
    from glisp_train.trainer import _fit, setup

    cfg = train_cfg(epochs=2, hidden=16, fanouts=[4, 4])
    src = open_in_process(str(cora.dv.path), WHOLE, cfg)
    try:
        s = setup(cfg, src, Dist())
        res = _fit(cfg, s, Progress(enabled=False))
    finally:
        src.close()
    assert res.evaluation == {"mode": "full"}
    test_key = np.unique(res.task.test_ids).tobytes()
    assert list(s.evaluator._plans) == [test_key]
