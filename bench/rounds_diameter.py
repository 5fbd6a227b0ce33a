"""AdaDNE's rounds and seconds against a graph's diameter: grids with a few shortcuts (a road network's
shape, diameter about 2 x side) partitioned through Spark (``run_partition``, the published stage), with the
round budget (``partition.adadne.round_budget``, the default) and, as the baseline in the same run, without
it (``round_budget = 0``); the reference DNE's RF (``../shared/tools/reference_partition.py``, in process) up
to ``--ref-max-side``. Prints one table: side, rows, rounds (Spark + driver), Spark jobs, seconds, RF / VB /
EB, RF against the reference DNE.

    .venv/bin/python bench/rounds_diameter.py --sides 200 400 800 1600 --baseline-max-side 800 \
        --lock /tmp/glisp-bench.lock
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TOOLS = Path("/work/shared/tools")
HEADER = "| side | diameter ~ | rows | round_budget | rounds (spark+driver) | Spark jobs | seconds | RF | VB | EB | RF/DNE_ref |"


def reference_dne(src: np.ndarray, dst: np.ndarray, p: int) -> tuple[float, int] | None:
    """(RF, rounds) of the reference DNE (a lock-step DistributedNE simulation) on the undirected pairs, or
    None without the tool."""
    if not (TOOLS / "reference_partition.py").exists():
        return None
    sys.path.insert(0, str(TOOLS))
    import reference_partition as ref

    keep = src < dst
    res = ref.run_algo(ref.build_graph(src[keep], dst[keep]), "dne", p)
    return float(res["RF"]), int(res["rounds"])


def locked(lock: str):  # noqa: ANN201 - a context manager from a generator
    """``flock`` on ``lock`` around one timed run (nothing when empty)."""
    from contextlib import contextmanager

    @contextmanager
    def hold():
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666) if lock else None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    return hold()


def run_one(spark, cfg, dv, p: int, budget: int, lock: str) -> dict:
    """One published partition run of ``dv`` with ``round_budget = budget``; its counts, metrics and seconds."""
    from glisp_core.config import with_values
    from glisp_core.dataset.manifest import read_manifest
    from spark_jobs.partition.job import run_partition

    name = f"adadne-p{p}-b{budget}"
    c = with_values(cfg, "partition", algorithm="adadne", parts=p, progress=False, name=name)
    c = with_values(c, "partition.adadne", round_budget=budget)
    with locked(lock):
        t = time.perf_counter()
        rec = run_partition(spark, c, dv, force=True)
        secs = time.perf_counter() - t
    counts = read_manifest(dv).stage(f"partition/{name}").counts
    return {"counts": counts, "metrics": rec.metrics, "seconds": secs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sides", type=int, nargs="+", default=[200, 400, 800])
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--shortcuts", type=float, default=0.001)
    ap.add_argument("--baseline-max-side", type=int, default=800, help="largest side also run without the bound")
    ap.add_argument("--ref-max-side", type=int, default=400, help="largest side the reference DNE runs on")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--root", default="")
    ap.add_argument("--lock", default="", help="flock this file around each timed run (e.g. /tmp/glisp-bench.lock)")
    args = ap.parse_args()

    from glisp_core.config import SparkConfig, load_config
    from glisp_spark.session import get_spark
    from glisp_testing.graphs import grid_edges, write_dataset

    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-diameter-"))
    spark = get_spark(SparkConfig(master=args.master, log_level="ERROR", driver_memory="6g"), str(root / "_ck"))
    cfg = load_config(env={})
    default_budget = cfg.partition.adadne.round_budget
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.master}; p = {args.parts}")
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for side in args.sides:
        (src, dst), n = grid_edges(side, args.shortcuts, seed=1)
        dv = write_dataset(root / f"grid{side}", "g", src, dst, num_vertices=n)
        ref = reference_dne(src, dst, args.parts) if side <= args.ref_max_side else None
        if ref:
            print(
                f"| {side} | {2 * side} | {len(src):,} | reference DNE | {ref[1]} | - | - | {ref[0]:.3f} | - | - | 1 |"
            )
        budgets = [default_budget] + ([0] if side <= args.baseline_max_side else [])
        for budget in budgets:
            r = run_one(spark, cfg, dv, args.parts, budget, args.lock)
            c, m = r["counts"], r["metrics"]
            ratio = f"{m['rf'] / ref[0]:.3f}" if ref else "-"
            print(
                f"| {side} | {2 * side} | {len(src):,} | {budget or 'off'} | {c.get('spark_rounds', 0)}+"
                f"{c.get('local_rounds', 0)} | {len(c.get('spark_jobs', []))} | {r['seconds']:.1f} | {m['rf']:.3f} | "
                f"{m['vb']:.3f} | {m['eb']:.3f} | {ratio} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
