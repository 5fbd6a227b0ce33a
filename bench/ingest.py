"""Ingest throughput: generate an R-MAT graph with Spark, ingest it, print edges/s per stage and per core.

    .venv/bin/python bench/ingest.py --scale 19            # 8.4M edges on local[2]
    .venv/bin/python bench/ingest.py --scale 16 --format parquet --master 'local[4]'

Everything lives in a temporary directory (removed afterwards unless --keep DIR is given). The ingest
sub-steps come from the timings the ingest stage records in the manifest.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_core.config import RmatConfig, SparkConfig, load_config, with_values  # noqa: E402


def cores_of(master: str, spark) -> int:
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if m:
        return os.cpu_count() or 1 if m.group(1) == "*" else int(m.group(1))
    if master == "local":
        return 1
    return int(spark.sparkContext.defaultParallelism)


def row(name: str, edges: int, seconds: float, cores: int) -> list[str]:
    rate = edges / seconds if seconds > 0 else float("inf")
    return [name, f"{edges:,}", f"{seconds:.2f}", f"{rate:,.0f}", f"{rate / cores:,.0f}"]


def print_table(rows: list[list[str]]) -> None:
    head = ["stage", "edges", "seconds", "edges/s", "edges/s/core"]
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(v.ljust(w[0]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(r))  # noqa: E731
    print(fmt(head))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print(fmt(r))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=19, help="R-MAT scale: 2^scale vertices (default 19)")
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--format", choices=["csv", "parquet"], default="csv", help="generated input format")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--no-warmup", action="store_true", help="measure generation including JVM warm-up")
    ap.add_argument("--keep", metavar="DIR", help="write into DIR and keep it (default: a temp dir, removed)")
    args = ap.parse_args(argv)

    try:
        from spark_jobs.ingest.job import run_ingest
    except ImportError as e:
        run_ingest = None
        print(f"note: the ingest job is not importable yet ({e}); only generation is measured", file=sys.stderr)

    from spark_jobs.generate.rmat import generate_rmat
    from spark_jobs.session import get_spark

    tmp = None
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="glisp-bench-ingest-")
        work = Path(tmp.name)
    try:
        sconf = SparkConfig(
            master=args.master,
            app_name="glisp-bench-ingest",
            driver_memory=args.driver_memory,
            log_level="ERROR",
            checkpoint_dir=str(work / "_checkpoints"),
        )
        t = time.perf_counter()
        spark = get_spark(sconf)
        startup = time.perf_counter() - t
        cores = cores_of(args.master, spark)
        rcfg = RmatConfig(scale=args.scale, edge_factor=args.edge_factor, seed=args.seed)
        m = rcfg.edge_factor << rcfg.scale
        print(
            f"R-MAT scale {args.scale}, edge factor {args.edge_factor}: {m:,} edges, {args.format}, "
            f"master {args.master} ({cores} cores); Spark started in {startup:.1f}s",
            flush=True,
        )
        if not args.no_warmup:  # JIT-compile the generator's code paths once, outside the measurement
            generate_rmat(spark, RmatConfig(scale=8, edge_factor=4), work / "warmup", fmt=args.format)
        gen = generate_rmat(spark, rcfg, work / "input", fmt=args.format)
        rows = [row("generate rmat", m, gen["seconds"], cores)]
        print(f"generate rmat: {m:,} edges in {gen['seconds']:.1f}s", flush=True)
        if run_ingest is not None:
            cfg = load_config(gen["config"], env={})
            cfg = with_values(cfg, "dataset", root=str(work / "data"))
            t = time.perf_counter()
            dv = run_ingest(spark, cfg, log=lambda s: print(s, flush=True))
            wall = time.perf_counter() - t
            from glisp_core.dataset.manifest import Manifest

            rec = Manifest.read(dv.manifest_path).stages["ingest"]
            n_edges = int(rec.counts.get("edges", m))
            for k, v in rec.timings.items():
                if k.endswith("_s") and "_per_" not in k and k != "total_s" and isinstance(v, (int, float)):
                    rows.append(row(f"  ingest: {k[:-2]}", n_edges, float(v), cores))
            rows.append(row("ingest (stage total)", n_edges, float(rec.timings.get("total_s", wall)), cores))
            rows.append(row("ingest (wall, incl. publish)", n_edges, wall, cores))
        print()
        print_table(rows)
        spark.stop()
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0 if run_ingest is not None else 2


if __name__ == "__main__":
    sys.exit(main())
