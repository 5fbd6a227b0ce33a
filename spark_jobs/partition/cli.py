"""``glisp partition DATASET --algorithm adadne --parts 8``: vertex-cut partitioning of an ingested graph."""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import resolve_dataset


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="graph, graph/version or a version directory")
    p.add_argument(
        "--algorithm", "-a", help="adadne, dne, random, hash2d, dbh, hdrf, edgecut, metis (partition.algorithm)"
    )
    p.add_argument("--parts", "-p", type=int, help="number of partitions (partition.parts)")
    p.add_argument("--seed", type=int, help="random seed (partition.seed)")
    p.add_argument("--name", help="run name; default <algorithm>-p<parts> (partition.name)")
    p.add_argument("--force", action="store_true", help="recompute even when the published run is up to date")
    p.add_argument(
        "--incremental",
        action="store_true",
        default=None,
        help="refresh from the previous version's run (partition.incremental)",
    )


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import lazy_spark
    from spark_jobs.partition.job import run_partition

    cfg = with_values(
        cfg,
        "partition",
        algorithm=args.algorithm,
        parts=args.parts,
        seed=args.seed,
        name=args.name,
        incremental=args.incremental,
    )
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    spark = lazy_spark(cfg.spark, checkpoint_dir=f"{cfg.dataset.root}/_checkpoints")  # none when up to date
    run_partition(spark, cfg, dv, force=args.force)
    return 0
