"""Soak: several client threads sample a replicated cluster for a while; one replica is SIGKILLed and
restarted (by ``serve-cluster``'s supervision) in the middle. Prints errors (must be 0), batches,
p50/p99 latency in steady state and during the failover window, and each server's RSS drift.

    .venv/bin/python bench/soak.py --duration 180 --threads 4          # builds a small R-MAT graph itself
    .venv/bin/python bench/soak.py --cluster glisp-cluster.json --serve-cluster-pid PID --duration 600

The failover window runs from the SIGKILL until the restarted server has answered for 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from glisp_testing.soak import report, soak  # noqa: E402


def _build(root: Path) -> tuple[str, str]:
    """A 2-partition R-MAT (scale 14) with features, through the real partition and serialize stages."""
    from glisp_core.config import load_config, with_values
    from glisp_spark.session import get_spark
    from glisp_testing.graphs import rmat_edges, write_dataset
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    src, dst = rmat_edges(14, edge_factor=8, seed=1)
    n = 1 << 14
    rng = np.random.default_rng(0)
    dv = write_dataset(
        root,
        "soak",
        src,
        dst,
        num_vertices=n,
        features=rng.normal(size=(n, 32)).astype(np.float32),
        labels=rng.integers(0, 8, n).astype(np.int64),
    )
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    cfg = with_values(cfg, "partition", algorithm="adadne", parts=2, name="soak-p2", progress=False)
    spark = get_spark(cfg.spark)
    run_partition(spark, cfg, dv)
    run_serialize(spark, cfg, dv, run="soak-p2")
    spark.stop()
    return str(dv.path), "soak-p2"


def main() -> int:
    from glisp_serving.cluster.child import start_cluster, stop_cluster

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=180.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--cluster", help="cluster file of a running serve-cluster (with --serve-cluster-pid)")
    ap.add_argument("--serve-cluster-pid", type=int)
    args = ap.parse_args()
    proc = None
    if args.cluster:
        cluster, pid = Path(args.cluster), args.serve_cluster_pid
    else:
        work = Path(tempfile.mkdtemp(prefix="glisp-soak-"))
        ds, run = _build(work)
        cluster = work / "cluster.json"
        proc = start_cluster(ds, run, cluster, replicas=2, threads=1, quiet=False)
        pid = proc.pid
    try:
        res = soak(cluster, pid, args.duration, args.threads)
        print(report(res, args.duration, args.threads))
        steady = res.window(False)
        print(f"median steady latency {statistics.median(steady) * 1e3:.1f} ms" if steady else "no batches")
    finally:
        if proc is not None:
            stop_cluster(proc)
    return 0 if not res.errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
