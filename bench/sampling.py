"""Sampling-service benchmark: GLISP Gather-Apply over loopback servers against the in-process limit.

The graphs go through the real batch stages in ONE Spark session (local[2]):

- R-MAT: ``spark_jobs.generate.rmat.generate_rmat`` (edge factor 8, weights, 8-d features, 8 classes)
  -> ``run_ingest`` with ``directed = false`` (both directions stored, self-loops dropped);
- built-ins (``--graphs cora lastfm imdb``): ``builtin_config`` -> ``run_ingest``, also symmetrised;

then for P in --parts: ``run_partition`` with ``adadne`` (vertex-cut, ``replicas`` routing) and each
``--edge-cut`` algorithm (``owner`` routing): ``metis`` (METIS owner of the source: DistDGL's locality
layout) and ``edgecut`` (a seeded hash owner), plus a one-partition run (``random``, P=1) for the
in-process limit, and ``run_serialize`` of each. Stages are idempotent:
with ``--root`` a second run reuses what is published. Spark is stopped before anything is timed.

For every run it starts ``glisp serve-cluster`` (one process per partition, ``--threads`` each), samples
fanouts [15,10,5] at batch 1024 with the client loader (prefetch 2, features and labels included) and
prints seeds/s and sampled edges/s at the client, and the per-server load L_i = T_i / min_j T_j
(T_i: busy seconds the server spent in Gather/Lookup during the window) for uniform and weighted
sampling with balanced seeds (a random permutation of all vertices) and with every seed mastered by
partition 0 (for an edge-cut: owned by partition 0). Memory per server, from the Stats RPC after the workload: RSS, USS, PSS, the runtime
baseline (RSS after imports and kernel warm-up on a synthetic partition, before the real one was
opened), the partition-attributable RSS = RSS - baseline, the resident pages of the partition's
memmaps, and the anonymous growth; against the partition's file bytes. The limit is the same k-hop
code and kernels over the one-partition run in process, with no RPC.

    .venv/bin/python bench/sampling.py --root /tmp/glisp-bench-sampling                # rmat scale 18
    .venv/bin/python bench/sampling.py --root /tmp/glisp-bench-sampling --graphs cora lastfm imdb

``--edges FILE.tsv`` measures the service on a given undirected edge list instead (the graph the DistDGL
peer bench gets), with 1 and 2 client processes and CPU ms per batch; see ``bench/sampling_edges.py``:

    .venv/bin/python bench/sampling.py --edges /tmp/peer/graphs/rmat18.tsv --root /tmp/glisp-bench-edges \
        --peer-json /tmp/peer/results/dist_rmat18.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_serving.cluster.child import stop_cluster  # noqa: E402
from glisp_testing.servers import serve_in  # noqa: E402

MIB = 2**20


def build(args: argparse.Namespace, root: Path) -> dict[str, dict]:
    """Publish every graph's dataset, partition runs and serialized partitions; returns graph -> info."""
    from glisp_core.config import RmatConfig, load_config, with_values
    from glisp_core.dataset.manifest import read_manifest
    from glisp_spark.session import get_spark
    from spark_jobs.generate.builtin import builtin_config
    from spark_jobs.generate.rmat import generate_rmat
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.partition.registry import algorithms
    from spark_jobs.serialize.job import run_serialize

    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root / "data"))
    cfg = with_values(cfg, "spark", master="local[2]", driver_memory=args.driver_memory, ui=False, log_level="ERROR")
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    spark = get_spark(cfg.spark, checkpoint_dir=str(root / "_checkpoints"))
    vc_algo = args.vertex_cut
    missing = [a for a in args.edge_cut if a not in algorithms()]
    if missing:
        raise SystemExit(f"--edge-cut: unknown partitioner(s) {missing} (registered: {algorithms()})")
    out: dict[str, dict] = {}
    try:
        for g in args.graphs:
            t0 = time.perf_counter()
            timings: dict[str, float] = {}
            if g == "rmat":
                rc = RmatConfig(
                    scale=args.scale, edge_factor=args.edge_factor, seed=1, weights=True, features=8, classes=8
                )
                src_dir = root / "rmat-src" / f"s{args.scale}-ef{args.edge_factor}"
                name = f"rmat{args.scale}"
                if not (src_dir / "ingest.toml").exists():
                    t = time.perf_counter()
                    generate_rmat(spark, rc, src_dir, fmt="parquet", graph=name)
                    timings["generate"] = time.perf_counter() - t
                ing = load_config(src_dir / "ingest.toml", env={}).ingest
            else:
                name, ing = g, builtin_config(g)
            ing = _replace(ing, directed=False, self_loops="drop")
            t = time.perf_counter()
            dv = run_ingest(spark, cfg, ing, log=lambda s: None)
            timings["ingest"] = time.perf_counter() - t
            runs: dict[str, tuple[str, int, str]] = {"whole": ("random", 1, "whole-p1")}
            for p in args.parts:
                runs[f"vc{p}"] = (vc_algo, p, f"{vc_algo}-p{p}")
                for ec_algo in args.edge_cut:
                    runs[f"ec-{ec_algo}{p}"] = (ec_algo, p, f"{ec_algo}-p{p}")
            for algo, p, run in runs.values():
                c = with_values(cfg, "partition", algorithm=algo, parts=p, name=run, progress=False)
                t = time.perf_counter()
                run_partition(spark, c, dv)
                timings[f"partition {run}"] = time.perf_counter() - t
                t = time.perf_counter()
                run_serialize(spark, c, dv, run=run)
                timings[f"serialize {run}"] = time.perf_counter() - t
            man = read_manifest(dv)
            schema = man.schema
            metrics = {k: man.stage(f"partition/{r}").metrics for k, (_, _, r) in runs.items()}
            out[g] = {
                "dv": dv,
                "name": name,
                "runs": {k: r for k, (_, _, r) in runs.items()},
                "n": int(schema["num_vertices"]),
                "m": int(schema["num_edges"]),
                "weighted": bool(schema.get("weighted")),
                "partition_metrics": metrics,
                "build_s": {k: round(v, 1) for k, v in timings.items()},
            }
            print(
                f"built {g}: {out[g]['n']:,} vertices, {out[g]['m']:,} directed edges in "
                f"{time.perf_counter() - t0:.0f}s {out[g]['build_s']}",
                flush=True,
            )
    finally:
        spark.stop()
    return out


def _replace(ing, **kw):
    import dataclasses

    return dataclasses.replace(ing, **kw)


def run_loader(sampler_like, seeds: np.ndarray, fanouts, batches: int, batch: int, **kw) -> dict:
    """Seeds/s and sampled edges/s over ``batches`` batches after two warm-up batches.

    A seed set smaller than that (a small graph, or partition 0's masters) is cycled."""
    seeds = np.resize(seeds, batch * (batches + 2))
    it = sampler_like.loader(seeds, batch, fanouts, shuffle=False, **kw)
    next(it)
    next(it)  # warm-up
    t0 = time.perf_counter()
    done, edges = 0, 0
    for b in it:
        done += len(b.seeds)
        edges += b.num_sampled_edges
    dt = time.perf_counter() - t0
    return {"seeds_s": round(done / dt), "edges_s": round(edges / dt), "seconds": round(dt, 3)}


def loads(before: list[dict], after: list[dict], key: str = "busy_seconds") -> list[float]:
    """L_i = T_i / min_j T_j with T_i the server's busy seconds (or another Stats counter) in the window."""
    t = np.array([float(a[key]) - float(b[key]) for a, b in zip(after, before, strict=True)])
    return (t / max(t.min(), 1e-9)).round(3).tolist()


def memory_row(s: dict) -> dict:
    """One server's memory from its Stats right after the workload."""
    attributable = s["rss_bytes"] - s["rss_baseline_bytes"]
    return {
        "part": s["part_id"],
        "file_mib": round(s["partition_bytes"] / MIB, 1),
        "rss_mib": round(s["rss_bytes"] / MIB, 1),
        "uss_mib": round(s["uss_bytes"] / MIB, 1),
        "pss_mib": round(s["pss_bytes"] / MIB, 1),
        "import_mib": round(s["rss_import_bytes"] / MIB, 1),
        "baseline_mib": round(s["rss_baseline_bytes"] / MIB, 1),
        "attributable_mib": round(attributable / MIB, 1),
        "mapped_resident_mib": round(s["partition_resident_bytes"] / MIB, 1),
        "anon_growth_mib": round((s["rss_anon_bytes"] - s["baseline_anon_bytes"]) / MIB, 1),
        "attributable_over_file": round(attributable / max(s["partition_bytes"], 1), 3),
        "rss_over_file": round(s["rss_bytes"] / max(s["partition_bytes"], 1), 3),
    }


def bench_graph(g: str, info: dict, args: argparse.Namespace, workdir: Path) -> dict:
    from glisp_core.config import ClientConfig
    from glisp_core.partition_format import open_partition
    from glisp_sampling.gather import PartitionSampler
    from glisp_sampling.inprocess import LocalSampler
    from glisp_serving.client.sampling_client import SamplingClient

    dv, n, runs = info["dv"], info["n"], info["runs"]
    fan, bs, nb = args.fanouts, args.batch_size, args.batches
    methods = ["uniform"] + (["weighted"] if info["weighted"] else [])
    rng = np.random.default_rng(5)
    seeds = rng.permutation(n)
    res: dict = {
        "n": n,
        "m": info["m"],
        "batches": nb,
        "build_s": info["build_s"],
        "partition_metrics": info["partition_metrics"],
    }
    eng = PartitionSampler(open_partition(dv.partition_dir(runs["whole"], 0), verify=False), threads=1)
    local = LocalSampler(eng, n)
    res["inprocess"] = {m: run_loader(local, seeds, fan, nb, bs, method=m) for m in methods}
    local.close()
    eng.close()
    print(f"[{g}] in-process limit: {json.dumps(res['inprocess'])}", flush=True)
    cfg = ClientConfig(prefetch=2)
    for key, run in runs.items():
        if key == "whole" and not args.serve_whole:
            continue
        routing = "owner" if key.startswith("ec") else "replicas"
        proc, cf = serve_in(dv, run, workdir, args.threads)
        try:
            with SamplingClient(cf, cfg, routing=routing) as c:
                r: dict = {"run": run, "routing": routing, "parts": c.spec.num_parts}
                # "all seeds from partition 0": its masters (vertex-cut) or the vertices it owns (edge-cut)
                home = c.routing.owner if routing == "owner" else c.routing.master
                part0 = np.flatnonzero(np.asarray(home) == 0)
                rng.shuffle(part0)
                for m in methods:
                    for label, s in (("balanced", seeds), ("part0", part0)):
                        before = c.stats()
                        x = run_loader(c, s, fan, nb, bs, method=m)
                        after = c.stats()
                        x["load"] = loads(before, after)
                        x["load_edges"] = loads(before, after, "edges_served")
                        r[f"{m}_{label}"] = x
                r["memory"] = [memory_row(s) for s in c.stats()]
                r["routing_table_mib"] = round(c.routing.nbytes / MIB, 2)
        finally:
            stop_cluster(proc)
        res[key] = r
        print_run(g, r, res)
    return res


def print_run(g: str, r: dict, res: dict) -> None:
    """Progress: the run's rows of both tables as soon as it is measured."""
    print(run_row(g, r, res), flush=True)
    for m in r["memory"]:
        print(memory_md(g, r["run"], m), flush=True)


def _li(x: dict) -> str:
    return f"{_fmt(x['load'])} (edges {_fmt(x['load_edges'])})"


def _fmt(v: list[float]) -> str:
    return "[" + ", ".join(f"{a:.2f}" for a in v) + "]"


RUN_HEAD = (
    "| graph | P | run (routing) | RF | uniform seeds/s | % of in-process | edges/s | L_i uniform balanced "
    "| L_i uniform part0 | weighted seeds/s (% in-proc) | L_i weighted balanced | L_i weighted part0 |\n"
    + "|---" * 12
    + "|\n"
)
MEM_HEAD = (
    "| graph | run | server | file MiB | RSS | RSS ÷ file | USS | PSS | baseline (imports) | "
    "attributable = RSS − baseline | ÷ file | memmap pages | anon growth |\n" + "|---" * 13 + "|\n"
)


def run_row(g: str, r: dict, res: dict) -> str:
    """One served run: throughput against the in-process limit, and L_i (busy time, and edges served)."""
    ip = res["inprocess"]
    key = next((k for k, v in res.items() if v is r), "")
    rf = res["partition_metrics"].get(key, {}).get("rf", float("nan"))
    u = r["uniform_balanced"]
    line = (
        f"| {g} | {r['parts']} | {r['run']} ({r['routing']}) | {rf:.2f} | {u['seeds_s']:,} | "
        f"{u['seeds_s'] / ip['uniform']['seeds_s']:.0%} | {u['edges_s'] / 1e6:.2f}M | {_li(u)} | "
        f"{_li(r['uniform_part0'])} |"
    )
    if "weighted_balanced" not in r:
        return line + " – | – | – |"
    wb = r["weighted_balanced"]
    return line + (
        f" {wb['seeds_s']:,} ({wb['seeds_s'] / ip['weighted']['seeds_s']:.0%}) | {_li(wb)} | "
        f"{_li(r['weighted_part0'])} |"
    )


def memory_md(g: str, run: str, m: dict) -> str:
    return (
        f"| {g} | {run} | {m['part']} | {m['file_mib']} | {m['rss_mib']} | {m['rss_over_file']:.2f} | "
        f"{m['uss_mib']} | {m['pss_mib']} | {m['baseline_mib']} ({m['import_mib']}) | {m['attributable_mib']} | "
        f"{m['attributable_over_file']:.2f} | {m['mapped_resident_mib']} | {m['anon_growth_mib']} |"
    )


def markdown(results: dict) -> str:
    """The throughput/balance table and the memory table of docs/serving.md, from a results dict."""
    rows, mrows = [], []
    for g, res in results["graphs"].items():
        ip = res["inprocess"]
        w = f"{ip['weighted']['seeds_s']:,} (100%)" if "weighted" in ip else "–"
        rows.append(
            f"| {g} | 1 | in-process, no RPC | – | {ip['uniform']['seeds_s']:,} | 100% | "
            f"{ip['uniform']['edges_s'] / 1e6:.2f}M | | | {w} | | |"
        )
        for r in res.values():
            if isinstance(r, dict) and "routing" in r:
                rows.append(run_row(g, r, res))
                mrows += [memory_md(g, r["run"], m) for m in r["memory"]]
    return RUN_HEAD + "\n".join(rows) + "\n\n" + MEM_HEAD + "\n".join(mrows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="+", default=["rmat"], help="rmat and/or built-ins: cora lastfm imdb")
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=8, help="R-MAT edges per vertex before symmetrising")
    ap.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--vertex-cut", default="adadne", help="vertex-cut partition.algorithm")
    ap.add_argument(
        "--edge-cut",
        nargs="*",
        default=["metis", "edgecut"],
        help="edge-cut partition.algorithm(s) served with owner routing (metis: locality, "
        "DistDGL's; edgecut: seeded hash of the source)",
    )
    ap.add_argument(
        "--serve-whole",
        action="store_true",
        help="also serve the one-partition run (P=1): the RPC cost alone, and memory at 1 server",
    )
    ap.add_argument("--build-only", action="store_true", help="publish the datasets and runs, then stop")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    ap.add_argument("--threads", type=int, default=1, help="threads per server")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--root", help="work directory, reused across runs (default: a new temp dir)")
    ap.add_argument("--json", help="also write the results here")
    g = ap.add_argument_group("--edges: the service on a given undirected edge list (bench/sampling_edges.py)")
    g.add_argument("--edges", help="src<TAB>dst undirected pairs, e.g. /tmp/peer/graphs/rmat18.tsv")
    g.add_argument("--edges-name", help="graph name (default: the file's stem)")
    g.add_argument("--feature-dim", type=int, default=128, help="float32 features per vertex (derived)")
    g.add_argument("--clients", type=int, nargs="+", default=[1, 2], help="client process counts")
    g.add_argument(
        "--configs", nargs="+", default=["uniform", "weighted", "typed", "uniform+features", "uniform+features-rpc"]
    )
    g.add_argument("--windows", type=int, default=3, help="windows per configuration (the median is reported)")
    g.add_argument("--window-s", type=float, default=8.0, help="at least this long per window")
    g.add_argument("--min-batches", type=int, default=20, help="and at least this many batches per client")
    g.add_argument("--prefetch", type=int, default=2, help="batches in flight per client")
    g.add_argument(
        "--max-quiet-wait",
        type=float,
        default=30.0,
        help="before a window, wait at most this long for other processes to go quiet",
    )
    g.add_argument("--peer-json", help="DistDGL's dist_<graph>.json from run_all.sh, for the ratios")
    args = ap.parse_args()
    if args.edges:
        return main_edges(args)
    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-sampling-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"load before: {os.getloadavg()}", flush=True)
    infos = build(args, root)
    t_build = time.perf_counter() - t0
    print(f"build {t_build:.0f}s; load now {os.getloadavg()}", flush=True)
    if args.build_only:
        return 0
    results: dict = {
        "fanouts": args.fanouts,
        "batch": args.batch_size,
        "threads": args.threads,
        "build_s": round(t_build, 1),
        "graphs": {},
    }
    for g, info in infos.items():
        results["graphs"][g] = bench_graph(g, info, args, root)
        results["graphs"][g]["load_after"] = os.getloadavg()
    results["total_s"] = round(time.perf_counter() - t0, 1)
    print(f"total {results['total_s']}s; load after: {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print(markdown(results), flush=True)
    return 0


def main_edges(args: argparse.Namespace) -> int:
    from bench.sampling_edges import bench_edges, build_edges, markdown_edges, peer_summary

    if args.parts == [2, 4]:
        args.parts = [2]
    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-edges-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"load before: {os.getloadavg()}", flush=True)
    info = build_edges(args, root)
    if args.build_only:
        return 0
    res = bench_edges(info, args, root)
    peer = peer_summary(Path(args.peer_json)) if args.peer_json else None
    res["peer"] = peer
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    print(f"load after: {os.getloadavg()}", flush=True)
    print(markdown_edges(res, peer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
