"""Partition benchmark: the algorithms on R-MAT graphs and on the real graphs (reference treatment:
undirected, duplicates merged, self-loops dropped), through the real ``run_partition`` on Spark.

Every run prints RF, VB, EB, the ratios to the reference partitioner's DNE and HDRF on the same graph
and p (``/work/shared/tools/reference_partitions.json``, or ``--run-reference`` to compute them with
``reference_partition.py`` for graphs it lacks), the rounds (Spark + driver + relocation) of the kept
start and, for a graph the driver holds, the number of starts (``partition.adadne.starts``; seconds cover
them all), the Spark jobs the run started, seconds and edges/s per core.

    .venv/bin/python bench/partition.py --scales --parts 4 8 16 --algorithms adadne dne      # real graphs
    .venv/bin/python bench/partition.py --scales 19 --parts 8 --algorithms adadne dne --real --phases
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.proc_memory import PeakRSS  # noqa: E402
from bench.real_graphs import REAL, REFERENCE_JSON, ingest_real  # noqa: E402

REFERENCE_SCRIPT = Path("/work/shared/tools/reference_partition.py")
HEADER = (
    "| graph | algo | p | RF | VB | EB | RF/DNE_ref | RF/HDRF_ref | rounds (spark+driver+relocation) x starts "
    "| Spark jobs | seconds | edges/s/core |"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", type=int, nargs="*", default=[16, 17], help="R-MAT scales (R-MAT seed 1)")
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument(
        "--vertex-ids",
        type=int,
        default=0,
        help="spread each R-MAT graph's ids over this many vertex ids (isolated vertices in between): a graph "
        "whose vertex count dominates, to see what the driver holds per vertex",
    )
    ap.add_argument("--parts", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--algorithms", nargs="+", default=None, help="default: every registered algorithm")
    ap.add_argument("--real", nargs="*", default=REAL, help=f"real graphs (default: {' '.join(REAL)})")
    ap.add_argument("--data", default="/work/shared/data", help="where the file graphs live")
    ap.add_argument("--reference", default=str(REFERENCE_JSON), help="reference_partition.py results (JSON)")
    ap.add_argument("--run-reference", action="store_true", help="compute missing references (HDRF, DNE)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--root", default="", help="dataset root (default: a temporary directory)")
    ap.add_argument("--phases", action="store_true", help="also print each run's timings, jobs and memory")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="configuration override, as glisp's --set (e.g. partition.local_finish_edges=20000: the Spark path)",
    )
    ap.add_argument("--references", nargs="*", default=[], help="more reference_partition.py JSON files")
    args = ap.parse_args()

    from glisp_core.config import SparkConfig, load_config, with_values
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_spark.session import get_spark
    from spark_jobs.partition.registry import algorithms

    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-partition-"))
    graphs = []
    for s in args.scales:  # written by a forked child before Spark starts: the driver's peak RSS is the runs'
        name = f"rmat{s}" if args.vertex_ids <= 1 << s else f"rmat{s}-ids{args.vertex_ids:.0e}"
        child = multiprocessing.get_context("fork").Process(target=_write_rmat, args=(root, name, s, args))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"writing {name} failed (exit {child.exitcode})")
        graphs.append((name, resolve_dataset(root / name)))
    spark = get_spark(
        SparkConfig(master=args.master, log_level="ERROR", driver_memory="6g", ui=True),
        checkpoint_dir=str(root / "_ck"),
    )
    cores = int(spark.sparkContext.defaultParallelism)
    cfg = load_config(overrides=args.set, env={})
    algos = args.algorithms or algorithms()
    graphs += ingest_real(spark, cfg, root, args.real, Path(args.data))
    refs = _load_references(Path(args.reference))
    for extra in args.references:
        refs.update(_load_references(Path(extra)))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine); {args.master}")
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for gname, dv in graphs:
        if args.run_reference and not any(k[0] == gname for k in refs):
            refs.update(_run_reference(dv, gname, args.parts, root))
        for p in args.parts:
            for a in algos:
                c = with_values(cfg, "partition", algorithm=a, parts=p, progress=False)
                before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the graph's own share
                shuffled = _shuffle_bytes(spark)
                with PeakRSS() as peak:
                    rec, dt, jobs = _timed_run(spark, c, dv)
                _print_row(gname, a, p, rec, dt, jobs, cores, refs)
                if args.phases:
                    _print_phases(rec, before)
                    _print_resources(rec, peak, _shuffle_bytes(spark) - shuffled)
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _write_rmat(root: Path, name: str, scale: int, args: argparse.Namespace) -> None:
    """R-MAT ``scale`` (seed 1), its ids spread over ``--vertex-ids`` when that is more (the writer's id map
    and vertex table, 2 GB at 10^8 ids, must not count as the partition's)."""
    from glisp_testing.graphs import rmat_edges, write_dataset

    src, dst = rmat_edges(scale, args.edge_factor, seed=1)
    n = 1 << scale
    if args.vertex_ids > n:
        stride, n = args.vertex_ids // n, args.vertex_ids
        src, dst = src * stride, dst * stride
    write_dataset(root, name, src, dst, num_vertices=n)


def _timed_run(spark, c, dv):
    """run_partition under its own job group: (record, seconds, Spark jobs it started)."""
    from spark_jobs.partition.job import run_partition

    before = _probe_job_id(spark)
    t = time.perf_counter()
    rec = run_partition(spark, c, dv, force=True)
    dt = time.perf_counter() - t
    return rec, dt, _probe_job_id(spark) - before - 1


def _probe_job_id(spark) -> int:
    """The id of a one-task probe job: Spark numbers jobs in order, so the ids of two probes bracket the
    jobs in between, whichever thread or job group started them (tasks run from a thread pool)."""
    sc = spark.sparkContext
    group = f"bench-probe-{time.monotonic_ns()}"
    sc.setJobGroup(group, "bench/partition.py job-count probe")
    sc.parallelize([0], 1).count()
    sc.setLocalProperty("spark.jobGroup.id", None)
    return max(sc.statusTracker().getJobIdsForGroup(group))


def _print_row(gname, a, p, rec, dt, jobs, cores, refs) -> None:
    m, k = rec.metrics, rec.counts
    ref = refs.get((gname, p), {})
    rd = f"{m['rf'] / ref['dne']:.3f}" if "dne" in ref else "-"
    rh = f"{m['rf'] / ref['hdrf']:.3f}" if "hdrf" in ref else "-"
    if "rounds" in k:
        rounds = f"{k['rounds']} ({k.get('spark_rounds', 0)}+{k.get('local_rounds', 0)}+{k.get('refine_rounds', 0)})"
        rounds += f" x {len(k['starts'])}" if len(k.get("starts", [])) > 1 else ""
    else:
        rounds = "-"
    name = f"**{a}**" if a == "adadne" else a
    print(
        f"| {gname} | {name} | {p} | {m['rf']:.3f} | {m['vb']:.3f} | {m['eb']:.3f} | {rd} | {rh} | {rounds} "
        f"| {jobs} | {dt:.1f} | {k['edges'] / dt / cores:,.0f} |",
        flush=True,
    )


def _print_phases(rec, before: float) -> None:
    k = rec.counts
    spark_jobs = k.get("spark_jobs", [])
    per_round = [j["s"] for j in spark_jobs if j["kind"] == "round"]
    bc = max((j["broadcast_bytes"] for j in spark_jobs), default=0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    phases = {x: v for x, v in rec.timings.items() if x != "total_s"}
    print(
        f"    phases {phases}; Spark round s {per_round}; broadcast max {bc / 1e6:.1f} MB; "
        f"driver state {k.get('driver_state_bytes', 0) / 1e6:.1f} MB; driver peak RSS {rss:.0f} MB (before the run {before:.0f} MB); "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def _shuffle_bytes(spark) -> int:
    """Shuffle bytes written by every stage so far (Spark's REST API; -1 without the UI)."""
    import urllib.request

    sc = spark.sparkContext
    if not sc.uiWebUrl:
        return -1
    with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages", timeout=30) as r:
        return sum(int(st.get("shuffleWriteBytes", 0)) for st in json.load(r))


def _print_resources(rec, peak: PeakRSS, shuffled: int) -> None:
    """What item 4 of issue 26 asks per run: the executors' peak memory, the bytes moved per round."""
    import numpy as np

    jobs = rec.counts.get("spark_jobs", [])
    by: dict[str, list[int]] = {}
    for j in jobs:
        by.setdefault(j["kind"], []).append(j.get("staged_bytes", 0))
    staged = "; ".join(
        f"{k} x{len(v)}: median {np.median(v) / 1e6:.0f} MB, max {max(v) / 1e6:.0f} MB" for k, v in by.items()
    )
    bc = [j["broadcast_bytes"] for j in jobs] or [0]
    print(
        f"    executor side: JVM peak RSS {peak.jvm_mb:,.0f} MB, Python workers peak {peak.workers_mb:,.0f} MB "
        f"(one worker {peak.worker_mb:,.0f} MB); Spark shuffle {shuffled / 1e6:,.1f} MB; broadcast per job median "
        f"{np.median(bc) / 1e6:.1f} MB, max {max(bc) / 1e6:.1f} MB; rows staged per job ({staged})",
        flush=True,
    )


def _load_references(path: Path) -> dict:
    """{(graph, p): {algo: RF}} from reference_partition.py's JSON (graph names as in bench/real_graphs.py)."""
    out: dict = {}
    if path.exists():
        for r in json.loads(path.read_text()):
            name = Path(r["graph"]).name.removesuffix(".tsv")  # a file's stem when run on files
            out.setdefault((name, r["p"]), {})[r["algo"]] = r["RF"]
    return out


def _run_reference(dv, gname: str, parts: list[int], root: Path) -> dict:
    """Run reference_partition.py (HDRF, DNE) on a dataset's edges; the script makes them simple."""
    import numpy as np
    import pyarrow.parquet as pq

    if not REFERENCE_SCRIPT.exists():
        print(f"reference for {gname} skipped: {REFERENCE_SCRIPT} is missing")
        return {}
    t = pq.read_table(str(dv.edges), columns=["src", "dst"])
    tsv, out = root / "_ref" / f"{gname}.tsv", root / "_ref" / f"{gname}.json"
    tsv.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(tsv, np.stack([t.column("src").to_numpy(), t.column("dst").to_numpy()], 1), fmt="%d", delimiter="\t")
    cmd = [sys.executable, str(REFERENCE_SCRIPT), str(tsv), "--parts", *map(str, parts), "--algos", "hdrf", "dne"]
    subprocess.run([*cmd, "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
    return _load_references(out)


if __name__ == "__main__":
    raise SystemExit(main())
