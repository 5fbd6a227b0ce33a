"""The service on a given undirected edge list, the exact graph the DistDGL peer bench samples.

``bench/sampling.py --edges FILE.tsv`` builds (once, with the real batch stages) and then measures:

- **Build.** The ``src<TAB>dst`` pairs are read by Spark and written to Parquet with three derived
  columns that uniform sampling never reads: a weight in [0.01, 1) and an edge type ("a"/"b"), each a
  seeded hash of the unordered pair (so both directions agree), plus a vertex table with a label and
  ``--feature-dim`` float32 features (seeded hashes of the id). ``run_ingest`` with ``directed =
  false``, ``self_loops = "drop"`` and ``duplicates = "drop"`` gives the graph DistDGL's
  ``load_edges`` gives (same vertices, same undirected pairs, both directions stored);
  ``run_partition`` (``--vertex-cut``, P = ``--parts``) and ``run_serialize`` follow.
- **Sampling.** ``glisp serve-cluster`` (``--threads`` per server) and 1 or 2 client *processes*
  (``--clients``), each a ``SamplingClient.loader`` over its own random permutation of the vertices,
  ``prefetch`` batches in flight, fanouts sampled seed-first (fanouts[0] at the seeds, as DistDGL's
  ``seedfirst`` phases do), batch 1024. Per window (at least ``--min-batches`` batches and
  ``--window-s`` seconds, after 2 warm-up batches, all clients started together): seeds/s and sampled
  edges/s summed over the clients (DistDGL's aggregate), and **CPU ms per batch**: CPU seconds of every
  server process plus every client process during the window, divided by the batches. CPU time does
  not depend on how loaded the machine is; throughput does.
- **Configurations:** uniform with 1 and 2 clients, no features (the DistDGL comparison); weighted
  (A-ES) and typed (per-type fanouts summing to the same totals); uniform with features and labels
  fetched. Windows of the configurations are interleaved, and each is reported as the median of
  ``--windows`` windows.

With ``--peer-json`` (DistDGL's ``dist_<graph>.json`` from ``run_all.sh``) the table also gives
DistDGL's seed-first aggregate (median of its windows), its CPU ms per batch, and the ratios.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WEIGHT_SEED, TYPE_SEED, FEATURE_SEED, LABEL_SEED = 7919, 104729, 1299709, 15485863
EDGE_TYPES = ("a", "b")
CLASSES = 8
MAX_BATCHES = 3000  # per client and window (a window stops at --window-s long before)


# ------------------------------------------------------------------------------------------ build
def derived_inputs(spark, tsv: Path, out: Path, feature_dim: int) -> tuple[Path, Path]:
    """Edge Parquet (src, dst, weight, etype) and vertex Parquet (id, label, feat) derived from ``tsv``."""
    from pyspark.sql import functions as F

    edges_dir, vertices_dir = out / "edges.parquet", out / "vertices.parquet"
    stamp = out / "_SOURCE"
    source = f"{tsv.resolve()} {tsv.stat().st_size} {tsv.stat().st_mtime_ns} d={feature_dim}"
    if stamp.exists() and stamp.read_text() == source:
        return edges_dir, vertices_dir
    df = spark.read.csv(str(tsv), sep="\t", comment="#", schema="src long, dst long")
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")

    def unit(*cols):  # a uniform in [0, 1) from a seeded hash
        return (F.xxhash64(*cols).bitwiseAND(F.lit(0xFFFFFF).cast("long"))).cast("double") / float(1 << 24)

    edges = df.select(
        "src",
        "dst",
        (F.lit(0.01) + F.lit(0.99) * unit(lo, hi, F.lit(WEIGHT_SEED))).cast("float").alias("weight"),
        F.when(unit(lo, hi, F.lit(TYPE_SEED)) < 0.5, F.lit(EDGE_TYPES[0]))
        .otherwise(F.lit(EDGE_TYPES[1]))
        .alias("etype"),
    )
    edges.write.mode("overwrite").parquet(str(edges_dir))
    ids = df.select(F.col("src").alias("id")).union(df.select(F.col("dst").alias("id"))).distinct()
    feat = F.array(*[(unit(F.col("id"), F.lit(FEATURE_SEED + k)) - 0.5).cast("float") for k in range(feature_dim)])
    verts = ids.select(
        "id", (F.xxhash64("id", F.lit(LABEL_SEED)) % CLASSES).cast("long").alias("label"), feat.alias("feat")
    )
    verts.write.mode("overwrite").parquet(str(vertices_dir))
    stamp.write_text(source)
    return edges_dir, vertices_dir


def build_edges(args, root: Path) -> dict:
    """Publish the edge list's dataset, its ``--vertex-cut`` run at P=``--parts`` and the serialized run."""
    from glisp_core.config import EdgeSource, IngestConfig, VertexSource, load_config, with_values
    from glisp_core.dataset.manifest import read_manifest
    from glisp_spark.session import get_spark
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    tsv = Path(args.edges)
    if not tsv.is_file():
        raise SystemExit(f"--edges: file not found (got {str(tsv)!r}); expected src<TAB>dst lines")
    name = args.edges_name or tsv.stem
    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root / "data"))
    cfg = with_values(cfg, "spark", master="local[2]", driver_memory=args.driver_memory, ui=False, log_level="ERROR")
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    spark = get_spark(cfg.spark, checkpoint_dir=str(root / "_checkpoints"))
    timings: dict[str, float] = {}
    try:
        t = time.perf_counter()
        edges_dir, vertices_dir = derived_inputs(spark, tsv, root / "src" / name, args.feature_dim)
        timings["derive"] = time.perf_counter() - t
        ing = IngestConfig(
            graph=name,
            directed=False,
            self_loops="drop",
            duplicates="drop",
            id_type="int",
            edges=[EdgeSource(path=str(edges_dir), format="parquet", weight="weight", etype="etype")],
            vertices=[VertexSource(path=str(vertices_dir), format="parquet", label="label", features="feat")],
        )
        t = time.perf_counter()
        dv = run_ingest(spark, cfg, ing, log=lambda s: None)
        timings["ingest"] = time.perf_counter() - t
        run = f"{args.vertex_cut}-p{args.parts[0]}"
        c = with_values(cfg, "partition", algorithm=args.vertex_cut, parts=args.parts[0], name=run, progress=False)
        t = time.perf_counter()
        run_partition(spark, c, dv)
        timings["partition"] = time.perf_counter() - t
        t = time.perf_counter()
        run_serialize(spark, c, dv, run=run)
        timings["serialize"] = time.perf_counter() - t
        man = read_manifest(dv)
    finally:
        spark.stop()
    info = {
        "dv": dv,
        "name": name,
        "run": run,
        "n": int(man.schema["num_vertices"]),
        "m": int(man.schema["num_edges"]),
        "rf": man.stage(f"partition/{run}").metrics.get("rf"),
        "build_s": {k: round(v, 1) for k, v in timings.items()},
    }
    print(
        f"built {name}: {info['n']:,} vertices, {info['m']:,} directed edges, run {run} RF {info['rf']} "
        f"{info['build_s']}",
        flush=True,
    )
    return info


# ------------------------------------------------------------------------------------------ measure
def configurations(fanouts: list[int]) -> dict[str, dict]:
    """Loader keyword arguments of each measured configuration."""
    typed = [{EDGE_TYPES[0]: f - f // 2, EDGE_TYPES[1]: f // 2} for f in fanouts]
    return {
        "uniform": {"fanouts": fanouts, "method": "uniform", "features": False, "labels": False},
        "weighted": {"fanouts": fanouts, "method": "weighted", "features": False, "labels": False},
        "typed": {"fanouts": typed, "method": "uniform", "features": False, "labels": False},
        "uniform+features": {"fanouts": fanouts, "method": "uniform", "features": True, "labels": True},
        # the same, with every feature and label row through Lookup RPCs (client.local_reads = "never")
        "uniform+features-rpc": {"fanouts": fanouts, "method": "uniform", "features": True, "labels": True},
    }


RPC_ONLY = {"uniform+features-rpc"}  # configurations whose client never reads co-located partition files


def _cpu_s(pids: list[int]) -> float:
    import psutil

    tot = 0.0
    for p in pids:
        try:
            c = psutil.Process(p).cpu_times()
            tot += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return tot


def wait_quiet(own: list[int], max_wait: float, threshold: float = 0.15) -> tuple[float, float]:
    """Wait (bounded) until other processes use less than ``threshold`` cores, as DistDGL's bench does."""
    t0 = time.time()
    while True:
        start = _busy(own)
        time.sleep(1.0)
        f = _foreign_since(start, own, 1.0)
        if f < threshold or time.time() - t0 >= max_wait:
            return time.time() - t0, f


def client_worker(cluster_file: str, idx: int, n: int, plan: list[str], spec: dict, barrier, queue) -> None:
    """One client process: per planned window, warm up, wait for the others, sample, report."""
    from glisp_core.config import ClientConfig
    from glisp_serving.client.sampling_client import SamplingClient

    confs = configurations(spec["fanouts"])
    seeds = np.random.default_rng(1000 + idx).permutation(n)
    pos = 0
    clients = {}
    for reads in {"never" if name in RPC_ONLY else "auto" for name in plan}:
        clients[reads] = SamplingClient(cluster_file, ClientConfig(prefetch=spec["prefetch"], local_reads=reads))
    try:
        for w, name in enumerate(plan):
            client = clients["never" if name in RPC_ONLY else "auto"]
            kw = dict(confs[name])
            fan = kw.pop("fanouts")
            order = np.roll(seeds, -pos)[: spec["batch"] * MAX_BATCHES]  # a loader's seeds are distinct
            it = client.loader(order, spec["batch"], fan, shuffle=False, seed=w * 7919 + idx, **kw)
            next(it)
            next(it)  # warm-up: every kernel and code path of this configuration has run once
            barrier.wait()
            cpu0, t0 = time.process_time(), time.perf_counter()
            batches = edges = nseeds = 0
            for b in it:
                batches += 1
                nseeds += len(b.seeds)
                edges += b.num_sampled_edges
                if batches >= spec["min_batches"] and time.perf_counter() - t0 >= spec["window_s"]:
                    break
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            it.close()  # cancels what is still prefetched
            pos += nseeds
            queue.put(
                {
                    "client": idx,
                    "window": w,
                    "config": name,
                    "batches": batches,
                    "seeds": nseeds,
                    "edges": edges,
                    "wall_s": wall,
                    "client_cpu_s": cpu,
                }
            )
            barrier.wait()
    finally:
        for c in clients.values():
            c.close()


def measure_clients(cf: Path, server_pids: list[int], nclients: int, plan: list[str], n: int, args) -> list[dict]:
    """Run ``plan`` (one configuration name per window) on ``nclients`` client processes; one row per window."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(nclients + 1)
    queue = ctx.Queue()
    spec = {
        "fanouts": args.fanouts,
        "batch": args.batch_size,
        "prefetch": args.prefetch,
        "min_batches": args.min_batches,
        "window_s": args.window_s,
    }
    procs = [
        ctx.Process(target=client_worker, args=(str(cf), i, n, plan, spec, barrier, queue)) for i in range(nclients)
    ]
    for p in procs:
        p.start()
    own = server_pids + [p.pid for p in procs] + [os.getpid()]
    rows = []
    try:
        for w, name in enumerate(plan):
            waited, foreign_before = wait_quiet(own, args.max_quiet_wait)
            barrier.wait(timeout=600)  # every client warmed up
            s0, busy0, t0 = _cpu_s(server_pids), _busy(own), time.perf_counter()
            barrier.wait(timeout=600)  # every client done with its window
            s1, wall = _cpu_s(server_pids), time.perf_counter() - t0
            foreign = _foreign_since(busy0, own, wall)
            got = [queue.get(timeout=60) for _ in procs]
            batches = sum(g["batches"] for g in got)
            cpu = (s1 - s0) + sum(g["client_cpu_s"] for g in got)
            rows.append(
                {
                    "config": name,
                    "clients": nclients,
                    "window": w,
                    "seeds_s": sum(g["seeds"] / g["wall_s"] for g in got),
                    "edges_s": sum(g["edges"] / g["wall_s"] for g in got),
                    "edges_per_seed": sum(g["edges"] for g in got) / max(1, sum(g["seeds"] for g in got)),
                    "batches": batches,
                    "server_cpu_s": s1 - s0,
                    "client_cpu_s": sum(g["client_cpu_s"] for g in got),
                    "cpu_ms_per_batch": 1e3 * cpu / max(1, batches),
                    "server_cpu_ms_per_batch": 1e3 * (s1 - s0) / max(1, batches),
                    "foreign_cores": foreign,
                    "quiet_wait_s": round(waited, 1),
                    "foreign_before": round(foreign_before, 2),
                }
            )
            r = rows[-1]
            print(
                f"  {name:17s} clients={nclients} window {w}: {r['seeds_s']:,.0f} seeds/s "
                f"{r['edges_s'] / 1e6:.2f}M edges/s, {r['cpu_ms_per_batch']:.1f} CPU ms/batch "
                f"(servers {r['server_cpu_ms_per_batch']:.1f}), foreign {r['foreign_cores']:.2f} cores",
                flush=True,
            )
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return rows


def _busy(own: list[int]) -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of ``own``)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0), _cpu_s(own)


def _foreign_since(start: tuple[float, float], own: list[int], wall: float) -> float:
    """Cores used by other processes since ``start`` (a ``_busy`` reading ``wall`` seconds ago)."""
    b1, o1 = _busy(own)
    return round(max(0.0, (b1 - start[0]) - (o1 - start[1])) / max(wall, 1e-9), 2)


def bench_edges(info: dict, args, workdir: Path) -> dict:
    """Every configuration with 2 clients (interleaved windows), then uniform with 1 client."""
    import psutil

    from glisp_serving.cluster.child import stop_cluster
    from glisp_testing.servers import serve_in

    proc, cf = serve_in(info["dv"], info["run"], workdir, args.threads)
    try:
        pids = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        rows = []
        for k in sorted(args.clients, reverse=True):
            names = list(configurations(args.fanouts)) if k == max(args.clients) else ["uniform"]
            names = [x for x in names if x in args.configs]
            rows += measure_clients(cf, pids, k, names * args.windows, info["n"], args)
    finally:
        stop_cluster(proc)
    return {
        "graph": info["name"],
        "run": info["run"],
        "rf": info["rf"],
        "n": info["n"],
        "m": info["m"],
        "build_s": info["build_s"],
        "rows": rows,
        "load_after": os.getloadavg(),
    }


# ------------------------------------------------------------------------------------------ report
def _med(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def peer_summary(path: Path, phase: str = "balanced:seedfirst") -> dict | None:
    """DistDGL's aggregate over the ``phase`` windows of ``dist_<graph>.json`` (run_all.sh)."""
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    clients = sorted(d.get("clients", []), key=lambda c: c["part"])
    if not d.get("ok") or not clients:
        return {"ok": False}
    idx = [i for i, ph in enumerate(clients[0]["phases"]) if ph["phase"] == phase]
    agg, edges, cpu, fc = [], [], [], []
    for i in idx:
        phs = [c["phases"][i] for c in clients]
        agg.append(sum(x["seeds_per_s"] for x in phs))
        edges.append(sum(x["edges_per_s"] for x in phs))
        total = sum(phs[0]["server_cpu_s"]) + sum(x["client_cpu_s"] for x in phs)
        cpu.append(1e3 * total / sum(x["batches"] for x in phs))
        fc.append(max(x["foreign_cores"] for x in phs))
    return {
        "ok": True,
        "windows": agg,
        "seeds_s": _med(agg),
        "edges_s": _med(edges),
        "cpu_ms_per_batch": _med(cpu),
        "cpu_windows": cpu,
        "foreign_cores": fc,
        "edges_per_seed": _med([e / s for e, s in zip(edges, agg, strict=True)]),
    }


def markdown_edges(res: dict, peer: dict | None) -> str:
    head = (
        "| configuration | clients | seeds/s (median; windows) | sampled edges/s | edges/seed | CPU ms/batch "
        "(servers + clients; servers) | vs DistDGL seeds/s | vs DistDGL CPU/batch |\n" + "|---" * 8 + "|\n"
    )
    lines = []
    if peer and peer.get("ok"):
        w = ", ".join(f"{x:,.0f}" for x in peer["windows"])
        lines.append(
            f"| DistDGL 2.1, uniform seed-first, no features | 2 | **{peer['seeds_s']:,.0f}** ({w}) | "
            f"{peer['edges_s'] / 1e6:.2f}M | {peer['edges_per_seed']:.0f} | {peer['cpu_ms_per_batch']:.1f} | "
            f"1.00 | 1.00 |"
        )
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in res["rows"]:
        groups.setdefault((r["config"], r["clients"]), []).append(r)
    for (name, k), rs in groups.items():
        s = _med([r["seeds_s"] for r in rs])
        cpu = _med([r["cpu_ms_per_batch"] for r in rs])
        scpu = _med([r["server_cpu_ms_per_batch"] for r in rs])
        w = ", ".join(f"{r['seeds_s']:,.0f}" for r in rs)
        vs = vc = "–"
        if peer and peer.get("ok"):
            vs, vc = f"{s / peer['seeds_s']:.2f}", f"{cpu / peer['cpu_ms_per_batch']:.2f}"
        lines.append(
            f"| GLISP {name} | {k} | **{s:,.0f}** ({w}) | {_med([r['edges_s'] for r in rs]) / 1e6:.2f}M | "
            f"{_med([r['edges_per_seed'] for r in rs]):.0f} | {cpu:.1f} ({scpu:.1f}) | {vs} | {vc} |"
        )
    return head + "\n".join(lines) + "\n"
