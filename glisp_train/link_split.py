"""``glisp link-split DATASET --run RUN``: a training-only partition run for link prediction.

Link prediction must not let the sampler see the edges it is evaluated on. Rather than asking every
server to filter edge ids on every Gather, the held-out edges are removed from the graph the servers
load: this stage derives partition run ``<RUN>-lp`` from ``RUN`` by keeping every training edge in the
partition ``RUN`` gave it (same layout, no re-partitioning) and leaving the held-out edges out, then
serializes it. Serving ``<RUN>-lp`` serves exactly the training graph: sampling stays exact and uniform
over it, global degrees count only training edges, and nothing per request costs extra.

The split is a seeded hash of the *unordered* vertex pair: every edge between u and v (both directions
of an undirected edge, reverse edges of a directed graph, parallel edges) is held out together, so no
copy of a held-out edge leaks into training. A pair is a test edge with probability ``train.link_test``,
a validation edge with ``train.link_val``. The held-out edges are published in
``partition/<RUN>-lp/heldout/`` (eid, src, dst, etype, split 1 = val, 2 = test), and the servers of the
run stream them to trainers (RPC ``HeldOutEdges``). The split parameters are in the stage's params.
A split the user gives (``train.link_heldout``, :mod:`glisp_train.given_split`) replaces the hashed one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import DatasetVersion, check_name, resolve_dataset
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.publish import StagePublisher
from glisp_core.dataset.stages import run_of
from glisp_core.errors import ConfigError
from glisp_sampling.cluster_facts import HELDOUT_DIR
from glisp_spark.tables import read_parquet, write_parquet
from glisp_train.given_split import check_all_edges, given_pairs, pair_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_MASK53 = (1 << 53) - 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset version: <root>/<graph>/<version>, <graph>[/<version>]")
    p.add_argument("--run", help="partition run to derive from (default: the latest published)")
    p.add_argument("--name", help="the derived run's name (default <run>-lp)")
    p.add_argument(
        "--heldout",
        metavar="FILE",
        help="train.link_heldout: hold out exactly these edges (CSV or Parquet of src, dst in original ids and "
        "split val/test); nothing else is held out",
    )
    p.add_argument("--force", action="store_true", help="recompute even when published with these settings")


def run_link_split(
    spark: SparkSession, cfg: Config, dv: DatasetVersion, run: str, name: str | None = None, force: bool = False
) -> StageRecord:
    """Publish partition/<name> (training edges of ``run``) with heldout/, then serialize it."""
    from pyspark.sql import functions as F

    from spark_jobs.partition.metrics import write_outputs
    from spark_jobs.serialize.job import run_serialize

    tc = cfg.train
    if tc.link_val < 0 or tc.link_test < 0 or tc.link_val + tc.link_test >= 1:
        raise ConfigError(
            "train", "link_val/link_test", f"expected shares >= 0 summing below 1 (got {tc.link_val}, {tc.link_test})"
        )
    name = check_name("partition run", name or f"{run}-lp")
    base = read_manifest(dv).stage(f"partition/{run}")
    recorded: Any = base.counts.get("parts", base.params.get("parts"))  # manifest JSON
    parts = int(recorded)
    params = {
        "algorithm": "link-split",
        "derived_from": run,
        "parts": parts,
        "edge_subset": True,
        "val": tc.link_val,
        "test": tc.link_test,
        "seed": tc.seed,
        "pair": "unordered",
    }
    if tc.link_heldout:  # the user's split, nothing hidden besides: the shares and seed play no part
        params.update(val=None, test=None, seed=None, heldout=_fingerprint(tc.link_heldout))
    pub = StagePublisher(dv, f"partition/{name}", params, depends=["ingest", f"partition/{run}"])
    if force or not pub.is_current():
        with pub:
            edges = read_parquet(spark, dv.edges).select("eid", "src", "dst", "etype")
            if tc.link_heldout:
                tagged = _tag_given(spark, dv, edges, tc.link_heldout).persist()
            else:
                h = F.xxhash64(
                    F.least("src", "dst"), F.greatest("src", "dst"), F.lit(int(tc.seed)), F.lit("link-split")
                )
                u = h.bitwiseAND(F.lit(_MASK53)).cast("double") / F.lit(float(1 << 53))
                split = F.when(u < tc.link_test, 2).when(u < tc.link_test + tc.link_val, 1).otherwise(0)
                tagged = edges.withColumn("split", split.cast("byte")).persist()
            write_parquet(tagged.filter(F.col("split") > 0), pub.tmp / HELDOUT_DIR)
            assign = read_parquet(spark, dv.assignment(run)).select("eid", "part")
            train = tagged.filter(F.col("split") == 0).select("eid", "src", "dst").join(assign, "eid")
            counts_row = tagged.groupBy("split").count().collect()
            by = {int(r["split"]): int(r["count"]) for r in counts_row}
            counts, metrics = write_outputs(spark, train, pub.tmp, parts, by.get(0, 0))
            tagged.unpersist()
            counts.update(heldout_val=by.get(1, 0), heldout_test=by.get(2, 0))
            pub.commit(counts=counts, metrics=metrics)
    run_serialize(spark, cfg, dv, run=name, force=force)
    rec = pub.record()
    assert rec is not None
    return rec


def _tag_given(spark: SparkSession, dv: DatasetVersion, edges: DataFrame, path: str) -> DataFrame:
    """``edges`` with the split of the user's held-out file (0 for every edge it does not name)."""
    from pyspark.sql import functions as F

    given = given_pairs(spark, dv, path).persist()
    lo, hi = pair_key(F.col("src"), F.col("dst"))
    keyed = edges.withColumn("lo", lo).withColumn("hi", hi)
    tagged = keyed.join(given, ["lo", "hi"], "left")
    check_all_edges(given, tagged.filter(F.col("split").isNotNull()).select("lo", "hi").distinct(), path)
    given.unpersist()
    return tagged.select("eid", "src", "dst", "etype", F.coalesce("split", F.lit(0)).cast("byte").alias("split"))


def _fingerprint(path: str) -> list[dict[str, Any]]:
    """What identifies the user's held-out file (or directory of files): sizes and content hashes."""
    from glisp_core.dataset.publish import file_fingerprints
    from glisp_core.storage.store import store_for
    from glisp_core.storage.uri import parse_uri

    uri = parse_uri(path, "train.link_heldout")
    store = store_for(uri)
    files = [uri / rel for rel, _ in sorted(store.files(uri))] if store.is_dir(uri) else [uri]
    return file_fingerprints(files)


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import get_spark
    from spark_jobs.serialize.job import latest_partition_run

    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    run = args.run or latest_partition_run(read_manifest(dv))
    spark = get_spark(cfg.spark, checkpoint_dir=f"{cfg.dataset.root}/_checkpoints")
    if args.heldout:
        cfg = with_values(cfg, "train", link_heldout=args.heldout)
    rec = run_link_split(spark, cfg, dv, run, args.name, args.force)
    new = run_of(rec.name)
    c = rec.counts
    print(
        f"partition/{new}: {c['edges']:,} training edges, {c['heldout_val']:,} validation and "
        f"{c['heldout_test']:,} test edges held out; serialized"
    )
    print(f"serve it:  glisp serve-cluster {dv.path} --run {new} --cluster-file cluster.json")
    print("train:     glisp train --cluster cluster.json --task link")
    return 0
