"""Incremental refresh benchmark: successive snapshots of an R-MAT graph with a fraction of edges changed
(half removed uniformly, half added with degree-proportional, i.e. power-law, endpoints), each one
partitioned by ``partition.incremental`` from the previous snapshot's run and, as the baseline in the
same run, from scratch. Prints RF / VB / EB, wall and CPU seconds (driver + Spark JVM + workers) of
both per refresh, then (``--pipeline``) the wall time of a full ``run_pipeline`` against an
incremental one on the same new snapshot.

    .venv/bin/python bench/incremental.py --scale 16 --parts 8 --refreshes 10 --change 0.01
    .venv/bin/python bench/incremental.py --scale 16 --refreshes 10 --pipeline --lock /tmp/glisp-bench.lock
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_seconds() -> float:
    """User + system CPU of this process and all its descendants (the Spark JVM and Python workers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for c in me.children(recursive=True):
        try:
            total += sum(c.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def change(src: np.ndarray, dst: np.ndarray, frac: float, rng: np.random.Generator):
    """Remove frac/2 of the rows uniformly; add as many with endpoints drawn in proportion to degree."""
    m = len(src)
    k = int(round(m * frac / 2))
    keep = np.ones(m, bool)
    keep[rng.choice(m, k, replace=False)] = False
    ends = np.concatenate([src, dst])  # a uniform endpoint occurrence = a degree-proportional vertex
    a, b = ends[rng.integers(0, 2 * m, k)], ends[rng.integers(0, 2 * m, k)]
    return np.concatenate([src[keep], a]), np.concatenate([dst[keep], b])


def write_snapshot(root: Path, i: int, src, dst, n: int, rng: np.random.Generator):
    """A dataset version whose vids are a fresh permutation of the original ids (as a new ingest gives)."""
    from glisp_testing.graphs import write_dataset

    perm = rng.permutation(n)  # original id -> vid
    orig = np.empty(n, np.int64)
    orig[perm] = np.arange(n)
    return write_dataset(
        root, "rmat", perm[src], perm[dst], num_vertices=n, orig_ids=[str(x) for x in orig], version=f"v{i:02d}"
    )


LOCK = ""  # --lock FILE: hold it (flock) around each timed measurement only, so others can run between


def timed(fn):
    import fcntl
    import os

    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o666) if LOCK else None
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        t, c = time.perf_counter(), cpu_seconds()
        out = fn()
        return out, time.perf_counter() - t, cpu_seconds() - c
    finally:
        if fd is not None:
            os.close(fd)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--algorithm", default="adadne")
    ap.add_argument("--refreshes", type=int, default=10)
    ap.add_argument("--change", type=float, default=0.01, help="fraction of edge rows changed per refresh")
    ap.add_argument("--pipeline", action="store_true", help="also time a full vs an incremental run_pipeline")
    ap.add_argument("--pipeline-only", action="store_true", help="only the --pipeline comparison (no refresh loop)")
    ap.add_argument("--local-finish-edges", type=int, default=0, help="partition.local_finish_edges (0: default)")
    ap.add_argument(
        "--incremental-local-edges",
        type=int,
        default=-1,
        help="partition.incremental_local_edges (-1: default; 0: the refresh always in Spark)",
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--root", default="")
    ap.add_argument("--lock", default="", help="flock this file around each timed run (e.g. /tmp/glisp-bench.lock)")
    return ap.parse_args()


def main() -> int:
    args = _parse_args()
    global LOCK
    LOCK = args.lock

    from glisp_core.config import SparkConfig, load_config, with_values
    from glisp_spark.session import get_spark
    from glisp_testing.graphs import rmat_edges
    from spark_jobs.partition.job import run_partition

    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-incremental-"))
    spark = get_spark(
        SparkConfig(master=args.master, log_level="ERROR", driver_memory="6g"), checkpoint_dir=str(root / "_ck")
    )
    rng = np.random.default_rng(1)
    n = 1 << args.scale
    src, dst = rmat_edges(args.scale, args.edge_factor, seed=1)
    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root))
    cfg = with_values(cfg, "partition", algorithm=args.algorithm, parts=args.parts, progress=False)
    if args.local_finish_edges:  # AdaDNE's in-process finish
        cfg = with_values(cfg, "partition", local_finish_edges=args.local_finish_edges)
    if args.incremental_local_edges >= 0:  # the refresh's in-process mode
        cfg = with_values(cfg, "partition", incremental_local_edges=args.incremental_local_edges)
    inc_cfg = lambda base: with_values(cfg, "partition", name="inc", incremental=True, incremental_base=base)  # noqa: E731
    fresh_cfg = with_values(cfg, "partition", name="fresh")

    if args.pipeline or args.pipeline_only:  # first, so that it is measured even when the loop is cut short
        pipeline_walls(spark, cfg, root, src, dst, args, np.random.default_rng(2))
    if args.pipeline_only:
        return 0
    dv = write_snapshot(root, 0, src, dst, n, rng)
    base = run_partition(spark, with_values(cfg, "partition", name="inc"), dv)
    print(
        f"rmat{args.scale} ef{args.edge_factor} p={args.parts} {args.algorithm}: |E| {len(src):,}; "
        f"v00 full: RF {base.metrics['rf']:.3f} VB {base.metrics['vb']:.3f} EB {base.metrics['eb']:.3f}"
    )
    hdr = (
        f"{'ver':>4s} {'path':>11s} {'RF inc':>7s} {'VB inc':>7s} {'EB inc':>7s} {'s inc':>6s} {'cpu inc':>7s}"
        f" | {'RF new':>7s} {'VB new':>7s} {'EB new':>7s} {'s new':>6s} {'cpu new':>7s} | {'kept':>9s} {'added':>7s}"
    )
    print(hdr)
    rows = []
    for i in range(1, args.refreshes + 1):
        src, dst = change(src, dst, args.change, rng)
        dv = write_snapshot(root, i, src, dst, n, rng)
        inc, t_inc, c_inc = timed(lambda: run_partition(spark, inc_cfg(f"v{i - 1:02d}"), dv))  # noqa: B023
        new, t_new, c_new = timed(lambda: run_partition(spark, fresh_cfg, dv))  # noqa: B023
        a, b, info = inc.metrics, new.metrics, inc.counts["incremental"]
        rows.append((t_inc, t_new, c_inc, c_new, a["rf"] / b["rf"]))
        print(
            f"v{i:02d} {info['path']:>11s} {a['rf']:7.3f} {a['vb']:7.3f} {a['eb']:7.3f} {t_inc:6.1f} {c_inc:7.1f}"
            f" | {b['rf']:7.3f} {b['vb']:7.3f} {b['eb']:7.3f} {t_new:6.1f} {c_new:7.1f}"
            f" | {info.get('kept', 0):9,d} {info.get('added', 0):7,d} {info.get('seconds')}",
            flush=True,
        )
        shutil.rmtree(root / "rmat" / f"v{i - 1:02d}", ignore_errors=True)  # only the newest base is needed
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(
        f"median over {len(rows)} refreshes: wall incremental/fresh {med(0) / med(1):.2f} "
        f"({med(0):.1f} s / {med(1):.1f} s), CPU incremental/fresh {med(2) / med(3):.2f}, "
        f"RF incremental/fresh {med(4):.3f}"
    )
    return 0


def pipeline_walls(spark, cfg, root: Path, src, dst, args, rng) -> None:
    """Wall time of run_pipeline on a new snapshot: from scratch against refreshing the previous one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glisp_app.pipeline import run_pipeline
    from glisp_core.config import EdgeSource, with_values

    def snap(tag: str, s, d) -> Path:
        p = root / f"snap-{tag}.parquet"
        pq.write_table(pa.table({"src": s, "dst": d}), p)
        return p

    from glisp_core.dataset.manifest import read_manifest

    def pipe(root_dir: Path, edges: Path, incremental: bool) -> float:
        c = with_values(cfg, "dataset", root=str(root_dir))
        c = with_values(c, "partition", name="", incremental=incremental)
        c = dataclasses.replace(
            c, ingest=dataclasses.replace(c.ingest, graph="rmat", edges=[EdgeSource(path=str(edges))])
        )
        dv, wall, cpu = timed(lambda: run_pipeline(spark, c))
        stages = read_manifest(dv).stages
        per = ", ".join(f"{k} {r.timings.get('total_s', 0):.1f}" for k, r in stages.items())
        inc = next((r.counts.get("incremental") for k, r in stages.items() if k.startswith("partition/")), None) or {}
        print(
            f"  {'incremental' if incremental else 'full':>11s} {edges.name}: wall {wall:.1f} s, CPU {cpu:.1f} s; "
            f"stage seconds: {per}; partition path {inc.get('path', '-')} {inc.get('mode', '')} "
            f"{inc.get('seconds', '')}",
            flush=True,
        )
        return wall

    e0 = snap("0", src, dst)
    s1, d1 = change(src, dst, args.change, rng)
    e1 = snap("1", s1, d1)
    t0 = pipe(root / "pipe-inc", e0, True)  # first snapshot: nothing to refresh from, a full run
    t_inc = pipe(root / "pipe-inc", e1, True)
    t_full = pipe(root / "pipe-full", e1, False)
    print(
        f"pipeline wall (ingest, partition, serialize, reorder) on snapshot 2: full {t_full:.1f} s, "
        f"incremental {t_inc:.1f} s, ratio {t_inc / t_full:.2f} (snapshot 1 full: {t0:.1f} s)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
