"""``glisp reorder DATASET --order pds|ns|ds|ps [--partition RUN] [--force]``."""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import resolve_dataset


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="graph, graph/version or a version directory")
    p.add_argument("--order", help="pds, ns, ds or ps (reorder.order, default pds); a comma list runs several")
    p.add_argument("--partition", help="partition run (default: the latest published)")
    p.add_argument("--force", action="store_true", help="rebuild even if the published stage is current")


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import lazy_spark, started
    from spark_jobs.serialize.reorder import check_order, run_reorders

    orders = [o.strip() for o in args.order.split(",")] if args.order else [cfg.reorder.order]
    for o in orders:
        check_order(o)  # fail on a bad name before starting Spark
    cfg = with_values(cfg, "reorder", order=orders[0])
    cfg = with_values(cfg, "serialize", partition=args.partition)
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    # no checkpoint directory: the stage checkpoints nothing reliably, and the JVM cannot open one under s3://
    spark = lazy_spark(cfg.spark)  # started only when an order needs building
    recs = run_reorders(spark, cfg, dv, orders, force=args.force)
    for rec in recs if started(spark) else []:
        print(
            f"{rec.name}: {rec.counts.get('vertices'):,} vertices at {dv.path / rec.path}; per partition "
            f"{rec.counts.get('vertices_per_part')} ({rec.timings.get('total_s')} s)"
        )
    return 0
