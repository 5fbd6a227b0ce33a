"""Scores of an inference run on the vertices and edges the dataset holds answers for, recorded with the stage.

- node task: accuracy of ``predictions/`` on the labelled vertices, overall and per split (the training run's
  ``split.parquet`` when it wrote one, else the dataset's split column); one Spark aggregation, nothing but
  counts reaches the driver;
- link task: MRR and AUC of the held-out test edges of the link-split run the model was trained on, each ranked
  against ``eval_negatives`` uniform negatives of its source (the training run's setting and seed), scored from
  the last layer as ``glisp train`` scores them, and recall@20 / NDCG@20 ranking every vertex of the target type
  (glisp_infer.rank_eval), when inference ran over that training-only run (over the full
  run, the embeddings have seen the held-out edges: the scores are skipped, saying why).

Inference computes every neighbour at every layer by default, so these are full-neighbourhood scores
(``fanouts`` says otherwise when sampled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import LABEL, SPLIT, VID, DatasetVersion
from glisp_core.dataset.manifest import StageRecord
from glisp_core.metrics import mrr_auc
from glisp_core.storage.uri import StoreURI
from glisp_infer.plan import InferPlan
from glisp_spark.tables import read_parquet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPLIT_FILE = "split.parquet"  # glisp train's split of the labelled vertices (glisp_train.publish)


def node_scores(spark: SparkSession, dv: DatasetVersion, predictions: StoreURI, checkpoint: StoreURI) -> dict[str, Any]:
    """Accuracy on the labelled vertices: ``acc`` over all of them, ``acc_<split>`` per split, with counts."""
    from pyspark.sql import functions as F

    verts = read_parquet(spark, dv.vertices).select(VID, LABEL, SPLIT).where(F.col(LABEL).isNotNull())
    source = "dataset"
    if dv.store.exists(checkpoint / SPLIT_FILE):  # the split the model was selected and tested on
        split = read_parquet(spark, checkpoint / SPLIT_FILE).select(VID, F.col(SPLIT).cast("int").alias(SPLIT))
        verts, source = verts.drop(SPLIT).join(split, VID, "left"), "train run"
    pred = read_parquet(spark, predictions).select(VID, "prediction")
    rows = (
        pred.join(verts, VID)
        .groupBy(SPLIT)
        .agg(F.count("*").alias("n"), F.sum((F.col("prediction") == F.col(LABEL)).cast("long")).alias("ok"))
        .collect()
    )
    n = sum(int(r["n"]) for r in rows)
    out: dict[str, Any] = {"labelled": n, "acc": _ratio(sum(int(r["ok"]) for r in rows), n), "split_from": source}
    for name, code in (("train", 0), ("val", 1), ("test", 2)):
        got = [r for r in rows if r[SPLIT] is not None and int(r[SPLIT]) == code]
        if got:
            out[f"{name}_vertices"] = int(got[0]["n"])
            out[f"acc_{name}"] = _ratio(int(got[0]["ok"]), int(got[0]["n"]))
    return out


def link_scores_of(
    spark: SparkSession, plan: InferPlan, dv: DatasetVersion, train: StageRecord, inferred_on: str, out: StoreURI
) -> dict[str, Any]:
    """MRR and AUC of the held-out test edges of the model's link-split run (empty when it has none).

    Only from embeddings computed over that training-only run: embeddings over a graph that holds the held-out
    edges (the full run inference serves by default) have seen them, and would score them too well. Then the
    scores are skipped, and the record says why and how to get them."""
    from glisp_infer.outputs import pair_scores
    from glisp_sampling.cluster_facts import read_heldout

    run = str(train.params.get("partition_run") or "")
    if not run or not dv.store.is_dir(dv.partition(run) / "heldout"):
        return {}
    if inferred_on != run:
        return {
            "skipped": (
                f"held-out test edges not scored: these embeddings were computed over partition run "
                f"{inferred_on!r}, which holds the held-out edges of {run!r} (the scores would leak); "
                f"'glisp infer --set infer.partition={run}' computes them over the training graph and scores them"
            )
        }
    held = read_heldout(dv, run)
    test = held["split"] == 2
    src, dst = held["src"][test], held["dst"][test]
    tc = train.params.get("train") or {}
    k, seed = int(tc.get("eval_negatives", 100)), int(tc.get("seed", 0))
    neg = np.random.default_rng([seed, 2]).integers(0, int(plan.layout.num_vertices), (len(src), k))
    pos_s = pair_scores(plan, src, dst) if len(src) else np.empty(0, np.float32)
    neg_s = pair_scores(plan, np.repeat(src, k), neg.ravel()) if len(src) else np.empty(0, np.float32)
    from glisp_infer.rank_eval import ranking_scores

    ranked = ranking_scores(spark, dv, out, held, seed)  # every candidate of the target type, top k
    return {**mrr_auc(pos_s, neg_s.reshape(len(src), k)), "test_edges": int(len(src)), "negatives": k, **ranked}


def _ratio(a: int, b: int) -> float:
    return round(a / b, 6) if b else 0.0
