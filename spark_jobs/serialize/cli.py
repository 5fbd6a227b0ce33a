"""``glisp serialize DATASET [--partition RUN] [--force]``."""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.dataset.layout import resolve_dataset


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="graph, graph/version or a version directory")
    p.add_argument("--partition", help="partition run to serialize (default: the latest published)")
    p.add_argument("--master-rule", choices=["least_loaded", "hash"], help="serialize.master_rule")
    p.add_argument("--no-parquet", action="store_true", help="skip the Parquet copies (serialize.parquet_copy=false)")
    p.add_argument("--force", action="store_true", help="rebuild even if the published stage is current")


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_spark.session import lazy_spark, started
    from spark_jobs.serialize.job import run_serialize

    cfg = with_values(
        cfg,
        "serialize",
        partition=args.partition,
        master_rule=args.master_rule,
        parquet_copy=False if args.no_parquet else None,
    )
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    # no checkpoint directory: the stage checkpoints nothing reliably, and the JVM cannot open one under s3://
    spark = lazy_spark(cfg.spark)  # started only when the stage runs
    rec = run_serialize(spark, cfg, dv, force=args.force)
    if not started(spark):
        return 0  # up to date: run_serialize said so
    m = rec.metrics
    print(f"{rec.name}: {rec.counts.get('parts')} partitions at {dv.path / rec.path}")
    print(
        f"  {m.get('bytes_total', 0):,} bytes, {m.get('bytes_per_edge')} bytes per directed edge "
        f"(structure {m.get('structure_bytes_per_edge')}), master balance {m.get('master_balance')}"
    )
    for k, v in (m.get("bytes_per_edge_by_field") or {}).items():
        print(f"    {k:16s} {v:8.3f} B/edge")
    print(f"  {rec.timings.get('total_s')} s")
    return 0
