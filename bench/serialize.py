"""Serialize benchmark: R-MAT graph -> partition (p=8) -> glisp serialize; bytes per edge and open time.

    .venv/bin/python bench/serialize.py --scale 19 --parts 8 --algorithm hash2d

Prints the footprint per directed edge by field (all partitions, replicas counted) and the median
time to open each partition (with and without checksum verification). Targets: a homogeneous
unweighted graph at scale 19, p=8 stays within 10 bytes per directed edge; opening a 1M-edge
partition takes well under a second.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def numpy_hash2d(src: np.ndarray, dst: np.ndarray, parts: int) -> np.ndarray:
    """Fallback 2D hash over unordered pairs when spark_jobs.partition is unavailable."""
    rows = int(np.sqrt(parts))
    while parts % rows:
        rows -= 1
    cols = parts // rows
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    h = lambda x, s: (x.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(s)) >> np.uint64(33)  # noqa: E731
    return ((h(lo, 1) % np.uint64(rows)) * np.uint64(cols) + h(hi, 2) % np.uint64(cols)).astype(np.int32)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--algorithm", default="hash2d", help="partition.algorithm (hash2d, random, adadne, ...)")
    ap.add_argument("--undirected", action="store_true", help="store every R-MAT edge in both directions")
    ap.add_argument("--opens", type=int, default=7, help="opens per partition for the median open time")
    ap.add_argument("--root", help="dataset root (default: a temp dir, removed afterwards)")
    ap.add_argument("--driver-memory", default="6g")
    return ap.parse_args()


def main() -> int:
    args = _parse_args()

    from glisp_core.config import load_config, with_values
    from glisp_core.dataset.stages import run_of
    from glisp_core.partition_format import open_partition
    from glisp_spark.session import get_spark
    from glisp_testing.graphs import rmat_edges, write_dataset
    from spark_jobs.serialize.job import run_serialize

    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="glisp-bench-ser-"))
    t = time.perf_counter()
    src, dst = rmat_edges(args.scale, args.edge_factor, seed=1)
    if args.undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    dv = write_dataset(root, f"rmat{args.scale}", src, dst, num_vertices=1 << args.scale, directed=not args.undirected)
    m = len(src)
    print(
        f"graph: R-MAT scale {args.scale}, {m:,} directed edges, {1 << args.scale:,} vertices "
        f"({time.perf_counter() - t:.1f} s to generate)"
    )

    cfg = load_config(env={})
    cfg = with_values(cfg, "spark", master="local[2]", driver_memory=args.driver_memory, ui=False, log_level="ERROR")
    cfg = with_values(cfg, "partition", algorithm=args.algorithm, parts=args.parts, progress=False)
    spark = get_spark(cfg.spark, checkpoint_dir=str(root / "_checkpoints"))
    t = time.perf_counter()
    try:
        from spark_jobs.partition.job import run_partition

        prec = run_partition(spark, cfg, dv)
        run = run_of(prec.name)
        how = f"spark_jobs.partition ({args.algorithm})"
    except ImportError:
        from glisp_testing.partitions import publish_partition

        run = publish_partition(dv, numpy_hash2d(src, dst, args.parts), args.parts, algorithm="hash2d")
        how = "numpy hash2d fallback"
    from glisp_core.dataset.manifest import read_manifest

    prec = read_manifest(dv).stage(f"partition/{run}")
    print(f"partition: {how}, run {run}, rf {prec.metrics.get('rf')}, {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    rec = run_serialize(spark, cfg, dv, run=run, force=True)
    ser_s = time.perf_counter() - t
    mt = rec.metrics
    print(
        f"serialize: {ser_s:.1f} s ({rec.timings}), replicas {rec.counts['replicas']:,}, "
        f"master balance {mt['master_balance']}"
    )
    print("bytes per directed edge by field (all partitions, replicas counted):")
    for k, v in mt["bytes_per_edge_by_field"].items():
        print(f"  {k:16s} {v:8.3f}")
    print(f"  {'TOTAL':16s} {mt['bytes_per_edge']:8.3f}   (structure {mt['structure_bytes_per_edge']:.3f})")
    print(f"  bytes per partition: {mt['bytes_per_part']}")

    print(f"open time per partition (median of {args.opens} opens):")
    for k in range(args.parts):
        d = dv.partition_dir(run, k)
        res = {}
        for verify in (False, True):
            ts = []
            for _ in range(args.opens):
                t = time.perf_counter()
                r = open_partition(d, verify=verify)
                ts.append(time.perf_counter() - t)
            res[verify] = statistics.median(ts)
        print(
            f"  part {k}: {r.num_edges:>10,} edges {r.num_vertices:>9,} vertices  "
            f"open {res[False] * 1e3:7.2f} ms   open+verify {res[True] * 1e3:8.1f} ms"
        )
    spark.stop()
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
