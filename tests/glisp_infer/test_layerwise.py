"""Layerwise inference end to end on real Spark, Zarr and Parquet: exact against an in-memory full-graph
forward pass at full fanout, and against sample-wise inference over the same neighbour samples."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.stages import run_of
from glisp_core.errors import GlispError
from tests.glisp_infer.conftest import infer_cfg, make_model

pytestmark = pytest.mark.usefixtures("spark")


def _infer(spark, g, arch, run, layers=2, task="node", out_dim=3, **infer):
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    model = make_model(arch, layers=layers, task=task, out_dim=out_dim)
    publish_model(g.dv, run, model, g.run)
    rec = run_infer(spark, infer_cfg(model=run, run=run, **infer), g.dv)
    return model, rec


def _rows_by_vid(g, rec, layer=-1):
    """Every vertex's row of a layer, by vertex id, through the Parquet index and the Zarr array."""
    from glisp_infer.read import InferenceRun

    r = InferenceRun(g.dv, run_of(rec.name))
    idx = pq.read_table(r.path / "index").to_pandas().sort_values("vid")
    return np.asarray(r.layer(layer)[:])[idx["row"].to_numpy()], idx, r


def test_full_fanout_equals_full_graph_forward_and_every_vertex_has_one_row(spark, infer_graph, tmp_path) -> None:
    """SAGE at full fanout, Zarr in an external store given as a file:// URL."""
    from glisp_infer.store import open_array

    g = infer_graph
    model, rec = _infer(spark, g, "sage", "sage-full", store=f"file://{tmp_path}/store")
    got, idx, r = _rows_by_vid(g, rec)
    np.testing.assert_allclose(got, g.reference(model).numpy(), rtol=1e-4, atol=1e-5)
    assert rec.metrics["layers"]["layer2"]["projected"] == 3  # 8 -> 3: from rows projected once (every task)
    # every vertex exactly one row, rows inside its partition's padded range; padding rows hold no vertex
    assert np.array_equal(idx["vid"].to_numpy(), np.arange(g.n)) and idx["row"].is_unique
    lay = rec.counts
    starts, counts = lay["row_start_per_part"], lay["vertices_per_part"]
    part, row = idx["part"].to_numpy(), idx["row"].to_numpy()
    assert ((row >= np.take(starts, part)) & (row < np.take(starts, part) + np.take(counts, part))).all()
    vid_of_row = np.asarray(open_array(r.url, "index/vid")[:])
    assert np.array_equal(np.sort(vid_of_row[vid_of_row >= 0]), np.arange(g.n))
    # the run's own index (layer 0's tasks write it from the order's arrays): row and position of every vertex
    row_of_vid = np.asarray(open_array(r.url, "index/row")[:])
    assert np.array_equal(row_of_vid[idx["vid"].to_numpy()], row) and np.array_equal(vid_of_row[row_of_vid], idx["vid"])
    order = pq.read_table(g.dv.reorder(g.run, "pds")).to_pandas().sort_values("vid")
    assert np.array_equal(np.asarray(open_array(r.url, "index/pos")[:]), order["pos"].to_numpy())
    assert starts[0] == 0 and all(s % 16 == 0 for s in starts)
    # own rows of every layer came from the local files the previous tasks wrote
    assert [rec.metrics["layers"][f"layer{i}"]["own_rows_local"] for i in (1, 2)] == [3, 3]
    # layer 0 is the features; the external store is what the stage points to
    np.testing.assert_array_equal(_rows_by_vid(g, rec, 0)[0], g.features)
    assert json.loads((r.path.local / "store.json").read_text())["url"].startswith(f"file://{tmp_path}/store/")
    assert not (r.path.local / "zarr").exists()
    # predictions and embeddings Parquet, with original ids
    pred = pq.read_table(r.path / "predictions").to_pandas().sort_values("vid")
    ref = g.reference(model).numpy()
    assert np.array_equal(pred["prediction"].to_numpy(), ref.argmax(1)) and len(pred) == g.n
    assert (pred["orig_id"].to_numpy() == np.arange(g.n).astype(str)).all()
    emb = pq.read_table(r.path / "embeddings").to_pandas().sort_values("vid")
    np.testing.assert_allclose(np.stack(emb["embedding"].to_numpy()), ref, rtol=1e-4, atol=1e-5)


def test_an_order_without_its_lookup_arrays_is_named(spark, infer_graph) -> None:
    """The tasks read the reorder stage's ``_index``; a stage that lacks it fails in the driver, naming it."""
    from glisp_core.dataset.order_index import INDEX_DIR

    g = infer_graph
    d = g.dv.reorder(g.run, "pds").local / INDEX_DIR
    d.rename(d.with_name("_moved"))
    try:
        with pytest.raises(GlispError, match=r"_index: the reorder stage's lookup arrays are missing.*--force"):
            _infer(spark, g, "sage", "sage-no-index")
    finally:
        d.with_name("_moved").rename(d)


def test_typed_rgcn_at_full_fanout(spark, infer_graph) -> None:
    """R-GCN on out-edges (against the checkpoint's "in"); own rows read back from Zarr rather than kept locally."""
    g = infer_graph
    model, rec = _infer(spark, g, "rgcn", "rgcn-full", direction="out", local_own_rows=False)
    got, _, _ = _rows_by_vid(g, rec)
    np.testing.assert_allclose(got, g.reference(model, direction="out").numpy(), rtol=1e-4, atol=1e-5)
    assert rec.metrics["layers"]["layer2"]["own_rows_local"] == 0


@pytest.fixture(scope="module")
def sampled(spark, infer_graph):
    """GAT with fanouts [4, 3], in PDS and NS order."""
    g = infer_graph
    model, pds = _infer(spark, g, "gat", "gat-s", fanouts=[4, 3], seed=5, order="pds", cache_replays=True)
    _, ns = _infer(spark, g, "gat", "gat-s-ns", fanouts=[4, 3], seed=5, order="ns")
    return model, pds, ns


def test_the_halo_exchange_fills_exactly_the_foreign_rows_without_decoding_chunks(spark, infer_graph, sampled) -> None:
    """The same run without the exchange (foreign rows decoded from Zarr chunks) gives the same rows; with it,
    each task read exactly its foreign rows from the halo files and decoded no chunk."""
    g = infer_graph
    _, pds, _ = sampled
    _, off = _infer(spark, g, "gat", "gat-s-nohalo", fanouts=[4, 3], seed=5, order="pds", halo=False)
    np.testing.assert_array_equal(_rows_by_vid(g, off)[0], _rows_by_vid(g, pds)[0])
    for i in (1, 2):
        on, no = pds.metrics["layers"][f"layer{i}"], off.metrics["layers"][f"layer{i}"]
        assert on["halo_rows"] == on["static_foreign_rows"] == no["static_foreign_rows"] > 0
        assert on["fill_chunks"] == 0 < no["fill_chunks"] and no["halo_rows"] == 0
        assert on["own_rows_local"] == 3 and on["needs_s"] > 0
    assert pds.metrics["layers"]["layer0"]["halo_rows_written"] == pds.metrics["layers"]["layer1"]["halo_rows"]
    assert pds.params["halo"] and not off.params["halo"] and "plan" in pds.metrics
    assert not (g.dv.path.local / pds.path / "exchange").exists()  # the exchange is not published


def test_a_narrowing_sage_layer_projects_every_row_once_and_gives_the_batch_paths_rows(spark, infer_graph) -> None:
    """SAGE 6 -> 8 -> 3 with stable samples: layer 2 narrows, so each task multiplies its static rows once and
    averages 3 values an edge (``projected``); layer 1 widens and streams batch by batch. The rows are bit for bit
    those of every layer batch by batch (``infer.project_first = false``): float64 arithmetic, and a row depends
    on its own edges only, however the rows were grouped. (Kernel samples: the full-fanout test above compares a
    projected layer with the in-memory forward pass.)"""
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    g = infer_graph
    publish_model(g.dv, "sage-p", make_model("sage", out_dim=3), g.run)
    on_rec, off_rec = (
        run_infer(
            spark,
            infer_cfg(
                model="sage-p", run=f"sage-p-{first}", fanouts=[4, 3], seed=3, project_first=first, incremental=True
            ),
            g.dv,
        )
        for first in (True, False)
    )
    on, off = on_rec.metrics["layers"], off_rec.metrics["layers"]
    parts = len(on["layer2"]["attempts_per_part"])
    assert on["layer2"]["projected"] == parts and "projected" not in on["layer1"] and "projected" not in off["layer2"]
    # every static chunk read once, straight from the static cache; the batch path reads chunks per batch
    assert on["layer2"]["chunk_reads"] == on["layer2"]["not_admitted"] == sum(on["layer2"]["static_chunks_per_part"])
    assert on["layer2"]["dynamic_hits"] == 0 and off["layer2"]["chunk_reads"] > on["layer2"]["chunk_reads"]
    assert on["layer2"]["batches"] < off["layer2"]["batches"]
    assert all(on["layer1"][k] == off["layer1"][k] for k in ("chunk_reads", "dynamic_hits", "batches"))
    np.testing.assert_array_equal(_rows_by_vid(g, on_rec)[0], _rows_by_vid(g, off_rec)[0])
    assert on_rec.params["project_first"] and not off_rec.params["project_first"]


def test_sampled_equals_samplewise_over_the_same_samples(infer_graph, sampled) -> None:
    from glisp_infer.samplewise import Samplewise

    g = infer_graph
    model, pds, _ = sampled
    got, _, _ = _rows_by_vid(g, pds)
    sw = Samplewise.in_process(g.dv, g.run)
    seeds = np.random.default_rng(0).permutation(g.n)
    assert pds.params["direction"] == "in"  # the checkpoint's, as glisp train writes it
    res = sw.run(model, seeds, [4, 3], batch_size=50, seed=5, direction="in")
    np.testing.assert_allclose(res.embeddings, got[seeds], rtol=1e-4, atol=1e-5)
    # another seed, other samples
    other = sw.run(model, seeds[:60], [4, 3], batch_size=50, seed=6, direction="in").embeddings
    assert not np.allclose(other, got[seeds[:60]], atol=1e-3)
    assert not np.allclose(got, g.reference(model).numpy(), atol=1e-3)  # sampling changed the result


def test_sampled_link_scores_equal_samplewise_pair_scores(spark, infer_graph) -> None:
    """A link-task model at fanouts [4, 3]: the every-edge ``scores/`` of the layerwise run are the scores
    ``Samplewise.run_pairs`` computes per batch of edges from their endpoints' trees (the same samples), and
    those are link_scores of ``Samplewise.run``'s embeddings of the endpoints, pair by pair."""
    from glisp_core.models import link_scores
    from glisp_infer.samplewise import Samplewise

    g = infer_graph
    model, rec = _infer(spark, g, "sage", "sage-link-s", task="link", out_dim=4, fanouts=[4, 3], seed=5)
    t = pq.read_table(g.dv.path / rec.path / "scores").to_pandas()
    pick = np.random.default_rng(1).choice(len(t), 150)  # with repeats; vertices on both sides of pairs
    src, dst, want = (t[c].to_numpy()[pick] for c in ("src_vid", "dst_vid", "score"))
    sw = Samplewise.in_process(g.dv, g.run)
    res = sw.run_pairs(model, src, dst, [4, 3], batch_size=32, seed=5, direction="in")
    assert res.scores.dtype == np.float32 and res.batches == 5 and res.sampled_edges > 0
    np.testing.assert_allclose(res.scores, want, rtol=1e-4, atol=1e-5)
    ids = np.unique(np.concatenate([src, dst]))
    h = torch.from_numpy(sw.run(model, ids, [4, 3], batch_size=50, seed=5).embeddings)
    pairs = link_scores(h[np.searchsorted(ids, src)], h[np.searchsorted(ids, dst)]).numpy()
    np.testing.assert_allclose(res.scores, pairs, rtol=1e-4, atol=1e-5)
    assert not np.allclose(res.scores, np.roll(want, 1), atol=1e-3)  # pairs out of line would show
    other = sw.run_pairs(model, src, dst, [4, 3], batch_size=32, seed=6).scores
    assert not np.allclose(other, want, atol=1e-3)  # other samples, other scores


def test_admitting_no_chunk_changes_reads_not_embeddings(spark, infer_graph, sampled) -> None:
    """``infer.cache_admit_window = -1``: every read is served from the static cache (no dynamic-cache hit), with
    the same rows; below -1 is a config error that publishes nothing."""
    from glisp_infer.job import run_infer

    g = infer_graph
    _, pds, _ = sampled
    _, never = _infer(spark, g, "gat", "gat-s-never", fanouts=[4, 3], seed=5, order="pds", cache_admit_window=-1)
    np.testing.assert_array_equal(_rows_by_vid(g, never)[0], _rows_by_vid(g, pds)[0])
    for i in (1, 2):
        lay, ref = never.metrics["layers"][f"layer{i}"], pds.metrics["layers"][f"layer{i}"]
        assert lay["chunk_reads"] == ref["chunk_reads"] > 0 and ref["dynamic_hits"] > 0
        assert lay["dynamic_hits"] == 0 and lay["not_admitted"] == lay["dynamic_misses"] == lay["chunk_reads"]
    with pytest.raises(GlispError, match="cache_admit_window"):
        run_infer(spark, infer_cfg(model="gat-s", run="gat-s-bad", cache_admit_window=-2), g.dv)
    assert "infer/gat-s-bad" not in read_manifest(g.dv).stages


def test_order_changes_layout_and_reads_not_embeddings(infer_graph, sampled) -> None:
    g = infer_graph
    _, pds, ns = sampled
    a, ia, _ = _rows_by_vid(g, pds)
    b, ib, _ = _rows_by_vid(g, ns)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(ia["row"].to_numpy(), ib["row"].to_numpy())
    for rec in (pds, ns):
        m = rec.metrics
        lay = m["layers"]["layer1"]
        assert m["chunk_reads"] > 0 and lay["static_hits"] == lay["static_lookups"] > g.n
        assert lay["dynamic_hits"] + lay["dynamic_misses"] == lay["chunk_reads"]
        assert 0 < lay["bytes_written"] and lay["compression_ratio"] > 0
        assert set(lay["shadow_hit_ratio"]) == {"fifo", "lru", "fifo_all", "lru_all"}
        replayed = {"0.01", "0.02", "0.05", "0.1", "0.2"} if rec is pds else set()  # infer.cache_replays: pds only
        assert all(set(v) == replayed for v in lay["shadow_hit_ratio"].values())
        assert 0 <= lay["not_admitted"] <= lay["dynamic_misses"]
    man = read_manifest(g.dv)
    assert man.stage("infer/gat-s").params["order"] == "pds" and man.stage("infer/gat-s-ns").params["order"] == "ns"


def test_glisp_train_then_glisp_infer_equals_the_full_graph_forward(
    infer_graph, tmp_path, capsys, server_processes
) -> None:
    """The real chain: ``glisp train`` through a served cluster publishes train/<name>; ``glisp infer`` reads
    that checkpoint and its partition run and writes every vertex's output, equal to the trained model's
    in-memory full-graph forward pass (along the in-edges the model was trained on: the graph is directed)."""
    from glisp_app.cli import main as glisp
    from glisp_core.models import load_checkpoint
    from tests.glisp_serving.conftest import Cluster

    g = infer_graph
    cluster = Cluster(g.dv, g.run, tmp_path)
    try:
        args = [
            "train",
            "--cluster",
            str(cluster.cluster_file),
            "--task",
            "node",
            "--model",
            "sage",
            "--epochs",
            "2",
            "--fanouts",
            "4,3",
            "--name",
            "trained",
            "--set",
            "train.hidden=8",
            "--set",
            "train.batch_size=64",
        ]
        assert glisp(args) == 0
    finally:
        assert cluster.stop() == 0
    trained, doc = load_checkpoint(g.dv.train("trained"))
    assert doc["partition_run"] == g.run and doc["direction"] == "in"
    args = ["infer", str(g.dv.path), "--model", "trained", "--fanouts", "full", "--set", "infer.chunk_rows=16"]
    assert glisp(args) == 0
    out = capsys.readouterr().out
    assert "infer/trained-pds: 262 vertices x 2 layers" in out
    rec = read_manifest(g.dv).stage("infer/trained-pds")
    assert rec.params["direction"] == "in" and rec.params["partition"] == g.run
    got, _, r = _rows_by_vid(g, rec)
    ref = g.reference(trained.eval()).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got, g.reference(trained, direction="out").numpy(), atol=1e-3)
    pred = pq.read_table(r.path / "predictions").to_pandas().sort_values("vid")
    assert np.array_equal(pred["prediction"].to_numpy(), ref.argmax(1))
    # accuracy on the labelled vertices, per split of the training run, at full neighbourhoods
    ev = rec.metrics["evaluation"]
    right = ref.argmax(1) == g.labels
    split = pq.read_table(g.dv.train("trained") / "split.parquet").to_pandas()
    test = split["vid"].to_numpy()[split["split"].to_numpy() == 2]
    assert ev["labelled"] == g.n and ev["acc"] == pytest.approx(right.mean(), abs=1e-6)
    assert ev["acc_test"] == pytest.approx(right[test].mean(), abs=1e-6) and ev["test_vertices"] == len(test)
    assert ev["neighbourhoods"] == "full" and ev["split_from"] == "train run"
    assert f"infer/trained-pds: accuracy on 262 labelled vertices {right.mean():.4f}" in out
    # predictions by original id (int or str), with the schema glisp train writes
    from glisp_core.dataset.layout import PREDICTION_COLUMNS
    from glisp_infer.read import read_predictions

    got = read_predictions(g.dv.graph, [7, "5"], run="trained-pds", root=str(g.dv.root))
    assert list(got.columns) == list(PREDICTION_COLUMNS) and got["vid"].tolist() == [7, 5]
    assert got["label"].tolist() == g.labels[[7, 5]].tolist()
    assert got["prediction"].tolist() == ref.argmax(1)[[7, 5]].tolist()
    trained_pred = pq.read_table(g.dv.train("trained") / "predictions.parquet")
    assert trained_pred.column_names == list(PREDICTION_COLUMNS)
    infer_pred = pq.read_table(r.path / "predictions").select(list(PREDICTION_COLUMNS))
    assert [(f.name, f.type) for f in trained_pred.schema] == [(f.name, f.type) for f in infer_pred.schema]


def test_a_link_model_scores_the_held_out_test_edges_only_from_the_training_graph(spark, infer_graph) -> None:
    """A link model trained on a link-split run. Inference over the full run (what it serves by default) has seen
    the held-out edges: it records no held-out scores and says why. Over the training-only run it records the
    MRR and AUC of the held-out test edges against the training run's uniform negatives (seed 0, 100 of them),
    equal to an in-memory forward pass over the training edges alone, and unequal to one over every edge (the
    leak this guards against)."""
    from glisp_core.config import load_config
    from glisp_core.metrics import mrr_auc
    from glisp_infer.job import run_infer
    from glisp_sampling.cluster_facts import read_heldout
    from glisp_train.link_split import run_link_split
    from glisp_train.publish import publish_model

    g = infer_graph
    lp = run_of(run_link_split(spark, load_config(env={}), g.dv, g.run).name)
    model = make_model("sage", task="link", out_dim=4)
    publish_model(g.dv, "sage-lp", model, lp)
    rec = run_infer(spark, infer_cfg(model="sage-lp", run="sage-lp"), g.dv)
    assert rec.params["partition"] == g.run  # the full run the link-split run was derived from
    ev = rec.metrics["evaluation"]
    assert "mrr" not in ev and "would leak" in ev["skipped"] and f"infer.partition={lp}" in ev["skipped"]

    rec = run_infer(spark, infer_cfg(model="sage-lp", run="sage-lp-train", partition=lp), g.dv)
    assert rec.params["partition"] == lp
    # the training run's partitions hold no held-out edge, so their degrees are not the graph's: serialize wrote
    # the masters alone, and reorder counted the degrees over every edge itself
    assert g.dv.store.read_table(g.dv.serialized(lp) / "masters").column_names == ["vid", "master"]
    order = g.dv.store.read_table(g.dv.reorder(lp, "pds")).sort_by("vid")
    deg = np.bincount(g.src, minlength=g.n) + np.bincount(g.dst, minlength=g.n)
    assert np.array_equal(order.column("degree").to_numpy(), deg[order.column("vid").to_numpy()])
    assert read_manifest(g.dv).stages[f"reorder/{lp}/pds"].counts["masters_from"] == f"serialize/{lp}"
    held = read_heldout(g.dv, lp)
    src, dst = held["src"][held["split"] == 2], held["dst"][held["split"] == 2]
    pair = lambda a, b: np.minimum(a, b).astype(np.int64) * g.n + np.maximum(a, b)  # noqa: E731 (unordered)
    keep = ~np.isin(pair(g.src, g.dst), pair(held["src"], held["dst"]))  # the training graph: no held-out pair
    assert 0 < (~keep).sum() < len(keep)
    neg = np.random.default_rng([0, 2]).integers(0, g.n, (len(src), 100))

    def scores(h):
        return mrr_auc((h[src] * h[dst]).sum(1), (h[src][:, None, :] * h[neg]).sum(-1))

    want, leaked = scores(g.reference(model, keep=keep).numpy()), scores(g.reference(model).numpy())
    assert want["mrr"] != pytest.approx(leaked["mrr"], abs=1e-4)  # the test can tell a leak
    ev = rec.metrics["evaluation"]
    assert ev["test_edges"] == len(src) > 0 and ev["negatives"] == 100
    assert ev["mrr"] == pytest.approx(want["mrr"], abs=1e-4) and ev["auc"] == pytest.approx(want["auc"], abs=1e-4)
    # recall@20 / NDCG@20 ranking every vertex, each source's training out-neighbours left out: the whole matrix
    h = g.reference(model, keep=keep).numpy()
    users = np.unique(src)
    s = h[users] @ h.T
    for i, u in enumerate(users):
        s[i, g.dst[keep & (g.src == u)]] = -np.inf
    top = np.argsort(-s, axis=1, kind="stable")[:, :20]
    rec, ndcg = [], []
    for i, u in enumerate(users):
        truth = np.unique(dst[src == u])
        hit = np.isin(top[i], truth)
        rec.append(hit.sum() / len(truth))
        ndcg.append(
            (hit / np.log2(np.arange(2, 22))).sum() / (1 / np.log2(np.arange(2, 2 + min(20, len(truth))))).sum()
        )
    assert ev["ranked_users"] == len(users)
    # the left-out items are each source's out-neighbours in the training graph (the ranking's exclusion itself
    # is tested in tests/glisp_core/test_ranking.py: random weights rarely rank them in the top 20 here)
    from glisp_infer.rank_eval import _training_items

    indptr, items = _training_items(spark, g.dv, users, held)
    for i, u in enumerate(users):
        assert items[indptr[i] : indptr[i + 1]].tolist() == np.unique(g.dst[keep & (g.src == u)]).tolist()
    assert ev["recall@20"] == pytest.approx(np.mean(rec), abs=1e-4) and ev["ndcg@20"] == pytest.approx(
        np.mean(ndcg), abs=1e-4
    )


def test_node_embeddings_are_layer_zero_after_the_features_and_lightgcn_equals_the_full_graph_forward(
    spark, infer_graph
) -> None:
    """A checkpoint with learnable rows (train.node_embeddings): layer 0 is [features, rows] by vertex, and LightGCN
    at full fanout over them equals the in-memory forward pass."""
    from glisp_core.models import ModelSpec, build_model
    from glisp_infer.job import run_infer
    from glisp_train.publish import publish_model

    g = infer_graph
    learnt = np.random.default_rng(4).normal(size=(g.n, 4)).astype(np.float32)
    d = g.features.shape[1] + 4
    model = build_model(ModelSpec(arch="lightgcn", in_dim=d, hidden=d, out_dim=d, layers=2, task="link"))
    publish_model(g.dv, "lightgcn-ne", model, g.run, node_embeddings=learnt)
    rec = run_infer(spark, infer_cfg(model="lightgcn-ne", run="lightgcn-ne"), g.dv)
    inputs = np.concatenate([g.features, learnt], axis=1)
    np.testing.assert_array_equal(_rows_by_vid(g, rec, 0)[0], inputs)
    h = torch.from_numpy(inputs)
    ei = torch.stack([torch.from_numpy(g.src), torch.from_numpy(g.dst)])
    with torch.no_grad():
        for i in range(model.num_layers):
            h = model.layer(i, h, ei, g.n)
    np.testing.assert_allclose(_rows_by_vid(g, rec)[0], h.numpy(), rtol=1e-4, atol=1e-5)


def test_a_task_gathers_every_neighbour_past_the_servers_fanout_bound(infer_graph):
    """Inference's own engines answer a fanout above serve.max_fanout (R-MAT 22 has a vertex with 108,889
    neighbours in one partition) and more seeds than serve.max_batch (R-MAT 23's partitions at p = 8): every
    edge comes back, where a server's engine refuses the request."""
    from glisp_infer.sampling import task_engine
    from glisp_sampling.gather import PartitionSampler, RequestError
    from glisp_testing.partitions import open_all

    g = infer_graph
    from tests.glisp_infer.conftest import P

    reader = open_all(g.dv.serialized(g.run), P, verify=False)[0]
    seeds = np.asarray(reader.master_gids)[:50]
    with pytest.raises(RequestError, match="serve.max_fanout"):
        PartitionSampler(reader).gather(seeds, 200_000, method="uniform_exact", direction="in")
    res = task_engine(reader).gather(seeds, 200_000, method="uniform_exact", direction="in")
    lids = reader.to_local(seeds)
    deg = np.asarray(reader.in_indptr)[lids + 1] - np.asarray(reader.in_indptr)[lids]
    assert np.array_equal(np.asarray(res.counts).reshape(len(seeds), -1).sum(axis=1), deg)
    many = np.resize(seeds, 1_000_001)  # past serve.max_batch: a plan gathers all of its partition's vertices
    with pytest.raises(RequestError, match="serve.max_batch"):
        PartitionSampler(reader).gather(many, 1, method="uniform_exact", direction="in")
    res = task_engine(reader).gather(many, 1, method="uniform_exact", direction="in")
    assert np.asarray(res.counts).sum() == np.resize(np.minimum(deg, 1), len(many)).sum()


def test_a_plain_plan_takes_every_neighbour_once_for_its_layers_of_full_fanout(infer_graph):
    """A plain run of an untyped graph whose layers take every neighbour gathers them once
    (``task.every_neighbour``) and hands the same sample to each such layer: the edges, their order and the counts
    the kernels draw for each hop's own request, so the run's rows do not change. Per relation the kernels
    order every neighbour by the hop's seed, so a typed graph's layers keep their own draws."""
    from types import SimpleNamespace

    from glisp_infer import task as T
    from glisp_infer.sampling import FULL
    from glisp_testing.partitions import open_all
    from tests.glisp_infer.conftest import P

    readers = open_all(infer_graph.dv.serialized(infer_graph.run), P, verify=False)
    plan = SimpleNamespace(
        fanouts=(FULL, FULL, 3), layers=3, stable=False, relations=(), seed=7, direction="in",
        open_partition=lambda k: readers[k],
    )  # fmt: skip
    assert T.gathers_every_neighbour(plan) and not T.profile_capped(plan)
    for reader in readers:
        vids = np.asarray(reader.master_gids)
        engines = T._Engines(plan, reader)
        whole = T.every_neighbour(plan, reader, vids, engines)
        for layer in (1, 2, 3):
            drawn, interior, fanout = T.layer_sample(plan, reader, vids, layer, engines)  # the hop's own request
            got, got_interior, got_fanout = T.layer_sample(plan, reader, vids, layer, engines, whole)
            assert np.array_equal(got.counts, drawn.counts) and np.array_equal(got.nbrs, drawn.nbrs), layer
            assert np.array_equal(got_interior, interior) and got_fanout == fanout
            assert (got is whole[0]) == (layer > 1)  # layers 2 and 3 take every neighbour: not drawn again
    plan.fanouts = (FULL, 3, 3)  # one layer of full fanout: nothing to gather once for; layer 1 draws 3
    assert not T.gathers_every_neighbour(plan) and T.profile_capped(plan)
    plan.fanouts, plan.relations = (FULL, FULL, 3), ("cites", "likes")
    assert not T.gathers_every_neighbour(plan)
    reader = readers[0]
    vids, engines = np.asarray(reader.master_gids), T._Engines(plan, reader)
    one, two = (T.layer_sample(plan, reader, vids, layer, engines)[0] for layer in (2, 3))
    assert np.array_equal(one.counts, two.counts) and not np.array_equal(one.nbrs, two.nbrs)  # why: the order
