"""Training through real servers: accuracy against the in-process reference, link prediction, the published run."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from glisp_app.cli import main as glisp
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import StageError
from glisp_core.models import load_checkpoint
from glisp_train.dist import Dist
from glisp_train.source import open_cluster, open_in_process
from glisp_train.tasks import mrr_auc
from glisp_train.trainer import train
from tests.glisp_train.conftest import LP, P2, WHOLE, train_cfg

SEEDS = (0, 1, 2)


def test_cluster_accuracy_matches_the_in_process_reference(cora, cora_cluster, capsys):
    """GraphSAGE on Cora through 2 servers vs the same model, fanouts, epochs and seeds over one whole-graph
    partition in process: mean test accuracy over three seeds within 1.5 points."""
    accs: dict[str, list[float]] = {"cluster": [], "in-process": []}
    cfg = train_cfg(epochs=8)
    sources = {
        "cluster": open_cluster(cora_cluster.cluster_file, cfg),
        "in-process": open_in_process(str(cora.dv.path), WHOLE, cfg),
    }
    try:
        for seed in SEEDS:
            for kind, src in sources.items():
                accs[kind].append(train(train_cfg(epochs=8, seed=seed), src, Dist()).test["acc"])
    finally:
        for src in sources.values():
            src.close()
    c, r = float(np.mean(accs["cluster"])), float(np.mean(accs["in-process"]))
    with capsys.disabled():
        print(
            f"\nCora test accuracy, mean of seeds {SEEDS}: 2 servers {c:.4f} {accs['cluster']}, "
            f"in process {r:.4f} {accs['in-process']}"
        )
    assert abs(c - r) <= 0.015, (accs, c, r)
    assert min(c, r) > 0.8  # a trained model: the largest class is 30% of Cora


def test_glisp_train_publishes_the_run_and_report_shows_the_curve(cora, cora_cluster, capsys):
    args = [
        "train",
        "--cluster",
        str(cora_cluster.cluster_file),
        "--task",
        "node",
        "--model",
        "gcn",
        "--epochs",
        "2",
        "--name",
        "gcn-test",
        "--set",
        "train.hidden=32",
        "--set",
        "train.batch_size=256",
    ]
    assert glisp(args) == 0
    out = capsys.readouterr()
    assert "epoch 1: loss" in out.err and "epoch 2: loss" in out.err  # one line per epoch off a terminal
    assert "(full neighbourhoods)" in out.err and "(full neighbourhoods); checkpoint" in out.out
    m = read_manifest(cora.dv)
    rec = m.stage("train/gcn-test")
    assert rec.depends == {f"serialize/{P2}": m.stages[f"serialize/{P2}"].fingerprint}
    assert rec.params["partition_fingerprint"] == m.stages[f"serialize/{P2}"].fingerprint
    assert [e["epoch"] for e in rec.metrics["epochs"]] == [1, 2]
    for e in rec.metrics["epochs"]:
        assert e["examples"] == rec.counts["train_vertices"] and 0 <= e["wait_share"] <= 1
        assert e["cache_hit_ratio"] == 1.0 and e["feature_bytes_fetched"] == 0  # Cora fits in the cache
    model, doc = load_checkpoint(cora.dv.train("gcn-test"))
    assert model.spec.arch == "gcn" and model.spec.out_dim == 7 and doc["partition_run"] == P2
    assert doc["partition_fingerprint"] == rec.params["partition_fingerprint"] and doc["direction"] == "in"
    pred = pq.read_table(cora.dv.train("gcn-test") / "predictions.parquet").to_pydict()
    assert len(pred["vid"]) == rec.counts["test_vertices"]
    assert pred["orig_id"][0] == f"paper-{cora.node_ids[pred['vid'][0]]}"  # original ids at the edges
    assert np.array_equal(cora.labels[pred["vid"]], pred["label"])
    assert list(pred) == ["orig_id", "vtype", "vid", "label", "prediction", "score"]  # as glisp infer writes them
    assert rec.metrics["evaluation"] == {"mode": "full"}
    split = pq.read_table(cora.dv.train("gcn-test") / "split.parquet").to_pydict()
    assert np.bincount(split["split"]).tolist() == [rec.counts[f"{k}_vertices"] for k in ("train", "val", "test")]
    # an unchanged run is a no-op
    assert glisp(args) == 0 and "up to date" in capsys.readouterr().err
    assert glisp(["report", str(cora.dv.path), "--no-plot"]) == 0
    rep = capsys.readouterr().out
    assert f"Training train/gcn-test: node / gcn on run {P2}" in rep
    curve = rep[rep.index("Training train/gcn-test") :].splitlines()
    assert "val acc" in curve[1] and "waiting %" in curve[1] and curve[3].split()[0] == "1"


def test_link_prediction_beats_a_random_scorer(cora, lp_cluster, cora_cluster, capsys):
    cfg = train_cfg(task="link", epochs=3, batch_size=512, eval_negatives=50)
    src = open_cluster(lp_cluster.cluster_file, cfg)
    try:
        held = src.heldout()
        res = train(cfg, src, Dist())
        # the held-out edges are invisible to the sampler: all out-neighbours of their sources, as served
        test = held["split"] == 2
        hop = src.submit(src.backend.gather(held["src"], _all_neighbours())).result()
    finally:
        src.close()
    served = set(zip(np.repeat(held["src"], hop.per_vertex).tolist(), hop.nbrs.tolist(), strict=True))
    assert not served & set(zip(held["src"].tolist(), held["dst"].tolist(), strict=True))
    assert set(zip(held["src"][test].tolist(), held["dst"][test].tolist(), strict=True)) <= set(
        zip(cora.src.tolist(), cora.dst.tolist(), strict=True)
    )
    rng = np.random.default_rng(0)
    k = int(test.sum())
    rand = mrr_auc(rng.random(k), rng.random((k, 50)))
    with capsys.disabled():
        print(
            f"\nCora link prediction, {k} test edges x 50 negatives: GraphSAGE MRR {res.test['mrr']:.4f} "
            f"AUC {res.test['auc']:.4f}; random scorer MRR {rand['mrr']:.4f} AUC {rand['auc']:.4f}"
        )
    assert res.test["mrr"] > 3 * rand["mrr"] and res.test["auc"] > rand["auc"] + 0.2
    # a run that serves every edge is refused for link prediction, naming what to do
    with pytest.raises(StageError, match="glisp link-split"):
        open_cluster(cora_cluster.cluster_file, cfg).heldout()


def _all_neighbours():
    from glisp_sampling.khop import HopRequest

    return HopRequest(fanout=100_000, method="uniform_exact", direction="out")


def test_link_split_holds_out_unordered_pairs(cora):
    m = read_manifest(cora.dv)
    rec = m.stage(f"partition/{LP}")
    assert rec.params["derived_from"] == P2 and rec.params["edge_subset"] is True
    held = pq.read_table(cora.dv.partition(LP) / "heldout").to_pydict()
    pairs = {(min(a, b), max(a, b)) for a, b in zip(held["src"], held["dst"], strict=True)}
    both = {(a, b) for a, b in zip(held["src"], held["dst"], strict=True)}
    assert all((b, a) in both for a, b in both)  # both directions of every held-out edge
    assert rec.counts["edges"] + rec.counts["heldout_val"] + rec.counts["heldout_test"] == len(cora.src)
    assert 0.1 < rec.counts["heldout_test"] / len(cora.src) < 0.2
    # every copy of a held-out pair (both directions, parallel citations) is held out
    in_pairs = [(min(a, b), max(a, b)) in pairs for a, b in zip(cora.src.tolist(), cora.dst.tolist(), strict=True)]
    assert sum(in_pairs) == len(held["src"])
    ser = m.stage(f"serialize/{LP}")
    assert sum(ser.counts["edges_per_part"]) == rec.counts["edges"]
    assert json.loads(cora.dv.store.read_bytes(cora.dv.partition_dir(LP, 0) / "meta.json"))["num_parts"] == 2


def test_a_given_held_out_split_is_held_out_exactly_and_bad_rows_are_named(spark, cora, tmp_path):
    """train.link_heldout: exactly the user's pairs are held out (both directions, every copy), with their split,
    and nothing else; unknown ids, values or pairs fail naming the file, the column and an example."""
    from glisp_core.config import load_config, with_values
    from glisp_core.errors import GlispError
    from glisp_train.link_split import run_link_split

    rng = np.random.default_rng(5)
    pick = rng.choice(len(cora.src), 60, replace=False)
    s, d = cora.src[pick], cora.dst[pick]
    name = lambda v: [f"paper-{cora.node_ids[i]}" for i in v]  # noqa: E731
    split = ["test"] * 40 + ["val"] * 20
    path = tmp_path / "heldout.csv"
    path.write_text(
        "src,dst,split\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(name(s), name(d), split, strict=True))
    )
    cfg = with_values(load_config(env={}), "train", link_heldout=str(path))
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    rec = run_link_split(spark, cfg, cora.dv, P2, name="given-lp")
    assert rec.params["heldout"][0]["sha256"] and rec.params["test"] is None
    held = pq.read_table(cora.dv.partition("given-lp") / "heldout").to_pydict()
    key = lambda a, b: (min(a, b), max(a, b))  # noqa: E731
    want = {key(a, b): (2 if c == "test" else 1) for a, b, c in zip(s.tolist(), d.tolist(), split, strict=True)}
    got = {key(a, b): c for a, b, c in zip(held["src"], held["dst"], held["split"], strict=True)}
    assert got == want  # those pairs, with their split, and no other
    copies = sum(key(a, b) in want for a, b in zip(cora.src.tolist(), cora.dst.tolist(), strict=True))
    assert len(held["src"]) == copies == rec.counts["heldout_val"] + rec.counts["heldout_test"]
    assert rec.counts["edges"] == len(cora.src) - copies
    bad = {
        "src,dst,split\npaper-nope,paper-{0},test\n": r"column 'src': 1 held-out rows have an id that is not a vertex.*paper-nope",
        "src,dst,split\npaper-{0},paper-{1},train\n": r"column 'split': 1 held-out rows have a value that is not one of.*'train'",
        "src,dst\npaper-{0},paper-{1}\n": r"need columns \['src', 'dst', 'split'\]; missing \['split'\]",
    }
    far = next(i for i in range(cora.n) if i not in set(cora.dst[cora.src == 0].tolist()) and i != 0)
    bad["src,dst,split\npaper-{0},paper-{2},test\n"] = (
        r"column 'src/dst': 1 held-out rows have a pair that is not an edge"
    )
    for text, match in bad.items():
        f = tmp_path / "bad.csv"
        f.write_text(text.format(cora.node_ids[0], cora.node_ids[cora.dst[cora.src == 0][0]], cora.node_ids[far]))
        with pytest.raises(GlispError, match=match) as e:
            run_link_split(spark, with_values(cfg, "train", link_heldout=str(f)), cora.dv, P2, name="bad-lp")
        assert str(f) in str(e.value)


def test_ranking_metrics():
    from glisp_train.tasks import roc_auc

    r = mrr_auc(np.array([1.0, 0.2]), np.array([[0.5, 2.0], [0.1, 0.1]]))
    assert r == {"mrr": 0.75, "auc": 0.625}  # ranks 2 and 1; 5 of 8 pairs ordered
    assert roc_auc([1, 2, 3], [0, 0.5]) == 1.0 and roc_auc([1], [1]) == 0.5 and roc_auc([0], [1]) == 0.0


def test_hop_fanouts_give_rgcn_every_relation_in_schema_order():
    from glisp_core.errors import ConfigError
    from glisp_train.trainer import hop_fanouts

    types = ["ACTED_IN", "DIRECTED_IN"]
    tc = train_cfg(model="rgcn", fanouts=[10, 5]).train
    assert hop_fanouts(tc, types) == [[("ACTED_IN", 10), ("DIRECTED_IN", 10)], [("ACTED_IN", 5), ("DIRECTED_IN", 5)]]
    tc = train_cfg(model="rgcn", type_fanouts=[{"DIRECTED_IN": 3}, {"ACTED_IN": 2, "DIRECTED_IN": 1}]).train
    assert hop_fanouts(tc, types) == [[("ACTED_IN", 0), ("DIRECTED_IN", 3)], [("ACTED_IN", 2), ("DIRECTED_IN", 1)]]
    assert hop_fanouts(train_cfg(fanouts=[7, 3], eval_fanouts=[20, 20]).train, types, evaluation=True) == [20, 20]
    with pytest.raises(ConfigError, match="one fanout per layer"):
        hop_fanouts(train_cfg(fanouts=[7, 3, 2]).train, types)
    with pytest.raises(ConfigError, match=r"unknown edge types \['WROTE'\]"):
        hop_fanouts(train_cfg(type_fanouts=[{"WROTE": 1}, {}]).train, types)


@pytest.mark.parametrize("model", ["rgcn", "gat"])
def test_typed_and_attention_models_train_in_process(cora, model):
    """R-GCN samples per edge type (Cora has one: relation 0 is every edge); GAT runs on the same blocks."""
    cfg = train_cfg(model=model, epochs=2, hidden=16, heads=2)
    src = open_in_process(str(cora.dv.path), WHOLE, cfg)
    try:
        res = train(cfg, src, Dist())
    finally:
        src.close()
    assert res.model.spec.arch == model and len(res.epochs) == 2
    assert res.model.spec.relations == (("e0",) if model == "rgcn" else ())
    assert res.test["acc"] > 0.5  # well above the largest class (30%)


def test_in_process_reference_creates_its_one_partition_run(cora, capsys):
    """``glisp train DATASET --in-process RUN`` on a dataset without RUN partitions (one partition) and
    serializes it first, saying so, then trains on it."""
    args = ["train", str(cora.dv.path), "--in-process", "one", "--epochs", "1", "--name", "ref-one"]
    assert glisp([*args, "--set", "train.hidden=16", "--set", "train.batch_size=512"]) == 0
    err = capsys.readouterr().err
    assert "has no run 'one'; creating it with one partition" in err
    m = read_manifest(cora.dv)
    assert m.stage("partition/one").counts["parts"] == 1 and m.has_stage("serialize/one")
    assert m.stage("train/ref-one").params["source"] == "in-process"
