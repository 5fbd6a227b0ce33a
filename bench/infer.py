"""Layerwise inference benchmark: layerwise (Spark, Zarr, two-level cache) against sample-wise inference.

The graphs go through the real batch stages in one Spark session (local[2]): R-MAT (scale 18, edge factor 8,
symmetrised, 128-d synthetic features, 8 classes), the built-ins cora and imdb (typed: R-GCN over its edge
types; lastfm has no vertex features, so layerwise inference, which starts from them, does not apply), and
tolokers from ../shared/data (10-d features); each symmetrised, partitioned with AdaDNE (--parts) and
serialized, with all four reorder tables. A model with random weights (``glisp_train.publish.publish_model``;
the cost does not depend on the weights) is published as a train stage: a 3-layer GraphSAGE, hidden 256,
fanouts [15, 10, 5] (R-GCN on imdb); --task node (class logits) or --task link (a --link-dim embedding, named
...-link<dim>, whose outputs stage writes the dot-product score of every edge, glisp_infer.outputs.edge_scores).

Per graph it runs ``run_infer`` once per order in --orders (every run computes all layers and publishes; the
first run also starts the Python workers, so the timed run is the last one, in --time-order, and when it
is the only order it runs twice), then sample-wise inference after one warm-up batch, in process over all
partitions (no RPC: the fastest sample-wise can be) and, with --samplewise-service, through a serve-cluster on
loopback, as training does:

- node: ``Samplewise.run`` over --samplewise-seeds random vertices in batches of --batch seeds; its total
  is the per-seed time times n;
- link: ``Samplewise.run_pairs`` over --samplewise-edges random edges of those layerwise scores (every edge
  once, read from the partitions), in batches of --batch edges: the trees of each batch's distinct endpoints,
  as link training computes them; its total is the per-edge time times the scored edges.

Sample-wise cost is linear in the seeds (edges). Both sides report wall seconds and CPU seconds (layerwise:
the driver, the JVM and the Python workers; sample-wise: its process and the cluster's). Prints:

1. speedup: layerwise (index + every layer, all Zarr I/O) and the whole stage with the Parquet outputs (for
   link, the scores are the product), against sample-wise;
2. the time split per layer: sampling, static-cache fill, reads through the dynamic cache, slice, writes;
3. chunk reads per order (distinct static-cache chunks per batch, see glisp_infer.cache) and hit ratios;
4. FIFO against LRU hit ratio at 1-20% of a task's chunks (the same reads replayed);
5. --sweep B[:C] ...: the batch size / cache chunk trade-off (reads against hits, and the Belady bound of
   the same reads) for one task of layer 1, in process;
6. --compare KEY A B (an ``[infer]`` key and two values, e.g. ``scratch_dir /tmp/x ""``) with --compare-runs N:
   N alternating pairs of --time-order runs, the medians per value (plan + layers, CPU, the time split's sums);
7. --halo-compare N: N pairs of --time-order runs without and with the halo exchange (infer.halo), each
   run's time split and the medians of fill/model and exchange/model.

Counts (chunk reads, hits) are deterministic; timings need the lock::

    .venv/bin/python bench/infer.py --root /tmp/glisp-bench-infer --build-only          # build, untimed
    flock /tmp/glisp-bench.lock .venv/bin/python bench/infer.py --root /tmp/glisp-bench-infer --graphs rmat
    .venv/bin/python bench/infer.py --root /tmp/glisp-bench-infer --graphs cora imdb tolokers
    flock /tmp/glisp-bench.lock .venv/bin/python bench/infer.py --root /tmp/glisp-bench-infer --graphs rmat \
        --orders pds --samplewise-seeds 0 --halo-compare 3
    flock /tmp/glisp-bench.lock .venv/bin/python bench/infer.py --root /tmp/glisp-bench-infer --graphs rmat \
        --task link --orders pds --samplewise-edges 4096 --samplewise-service
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from glisp_core.dataset.manifest import read_manifest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOLOKERS = Path("/work/shared/data/tolokers.npz")
ORDERS = ["pds", "ns", "ds", "ps"]


def _tolokers_config(root: Path):
    """tolokers.npz as an ingest config: an edge table, a vertex table with labels, features from .npy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glisp_core.config import EdgeSource, IngestConfig, VertexSource

    d = np.load(TOLOKERS)
    out = root / "tolokers-src"
    if not (out / "x.npy").exists():
        out.mkdir(parents=True, exist_ok=True)
        e = d["edges"]
        pq.write_table(pa.table({"src": e[:, 0], "dst": e[:, 1]}), out / "edges.parquet")
        n = len(d["node_labels"])
        split = np.where(d["train_masks"][0], "train", np.where(d["val_masks"][0], "val", "test"))
        pq.write_table(pa.table({"id": np.arange(n), "label": d["node_labels"], "split": split}), out / "nodes.parquet")
        np.save(out / "x.npy", d["node_features"].astype(np.float32))
    return IngestConfig(
        graph="tolokers",
        edges=[EdgeSource(path=str(out / "edges.parquet"))],
        vertices=[
            VertexSource(path=str(out / "nodes.parquet"), label="label", split="split", features_npy=str(out / "x.npy"))
        ],
    )


def build(args: argparse.Namespace, root: Path, spark, cfg) -> dict[str, dict]:
    """Publish each graph's dataset, AdaDNE partition run, partitions and the four reorder tables."""
    from glisp_core.config import RmatConfig, load_config, with_values
    from glisp_core.dataset.manifest import read_manifest
    from spark_jobs.generate.builtin import builtin_config
    from spark_jobs.generate.rmat import generate_rmat
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorders

    out = {}
    for g in args.graphs:
        t0 = time.perf_counter()
        if g == "rmat":
            src_dir = root / "rmat-src" / f"s{args.scale}-ef{args.edge_factor}-f{args.features}"
            if not (src_dir / "ingest.toml").exists():
                rc = RmatConfig(
                    scale=args.scale, edge_factor=args.edge_factor, seed=1, features=args.features, classes=8
                )
                generate_rmat(spark, rc, src_dir, fmt="parquet", graph=f"rmat{args.scale}")
            ing = load_config(src_dir / "ingest.toml", env={}).ingest
        elif g == "tolokers":
            ing = _tolokers_config(root)
        else:
            ing = builtin_config(g)
        ing = dataclasses.replace(ing, directed=False, self_loops="drop")
        dv = run_ingest(spark, cfg, ing, log=lambda s: None)
        run = f"adadne-p{args.parts}"
        c = with_values(cfg, "partition", algorithm="adadne", parts=args.parts, name=run, progress=False)
        run_partition(spark, c, dv)
        run_serialize(spark, c, dv, run=run)
        run_reorders(spark, c, dv, ORDERS, run=run)
        schema = read_manifest(dv).schema
        out[g] = {
            "dv": dv,
            "run": run,
            "n": int(schema["num_vertices"]),
            "m": int(schema["num_edges"]),
            "feature_dim": int(schema.get("feature_dim", 0)),
            "edge_types": list(schema["edge_types"]),
            "classes": max(2, int(schema.get("num_classes") or 8)),
        }
        print(
            f"built {g}: {out[g]['n']:,} vertices, {out[g]['m']:,} directed edges, {out[g]['feature_dim']}-d "
            f"features, edge types {out[g]['edge_types']} ({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
    return out


def publish(info: dict, args: argparse.Namespace):
    """The benchmark model of a graph, published once as train/bench-<arch>-h<hidden>-l<layers> (node task:
    class logits) or ...-link<dim> (link task: a --link-dim embedding whose dot products are the scores)."""
    import torch

    from glisp_core.models import ModelSpec, build_model, load_checkpoint
    from glisp_train.publish import publish_model

    typed = len(info["edge_types"]) > 1
    arch = "rgcn" if typed else args.arch
    link = args.task == "link"
    name = f"bench-{arch}-h{args.hidden}-l{len(args.fanouts)}" + (f"-link{args.link_dim}" if link else "")
    dv = info["dv"]
    if read_manifest(dv).has_stage(f"train/{name}"):
        return name, load_checkpoint(dv.train(name).local)[0]
    torch.manual_seed(0)
    spec = ModelSpec(
        arch=arch,
        in_dim=info["feature_dim"],
        hidden=args.hidden,
        task=args.task,
        out_dim=args.link_dim if link else info["classes"],
        layers=len(args.fanouts),
        dropout=0.0,
        relations=tuple(info["edge_types"]) if typed else (),
    )
    model = build_model(spec).eval()
    publish_model(dv, name, model, info["run"])
    return name, model


def _tree_cpu(pid: int | None = None) -> float:
    """CPU seconds of a process (this one) and all its descendants (the JVM and its Python workers), with those
    of descendants that exited and were reaped (a Python worker that Spark retires mid-run keeps counting)."""
    import psutil

    total = 0.0
    me = psutil.Process(pid)
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def layerwise(
    spark,
    cfg,
    info: dict,
    model_run: str,
    args: argparse.Namespace,
    order: str,
    halo: bool = True,
    replays=False,
    extra: dict | None = None,
) -> dict:
    """One ``run_infer``; ``replays``: with the FIFO/LRU replays of its chunk reads (``infer.cache_replays``: the
    policy table; every run but the timed one)."""
    from glisp_core.config import with_values
    from glisp_infer.job import run_infer

    c = with_values(
        cfg,
        "infer",
        model=model_run,
        run=f"bench-{order}" + ("" if halo else "-nohalo"),
        order=order,
        fanouts=args.fanouts,
        chunk_rows=args.chunk_rows,
        cache_chunk_rows=args.cache_chunk_rows,
        batch_size=args.batch_size,
        cache_fraction=args.cache_fraction,
        cache_admit_window=args.cache_admit_window,
        halo=halo,
        cache_replays=replays,
        scratch_dir=args.scratch_dir,
    )
    c = with_values(c, "infer", **(extra or {}))
    cpu0, t0 = _tree_cpu(), time.perf_counter()
    rec = run_infer(spark, c, info["dv"], force=True, log=lambda s: None)
    wall, cpu = time.perf_counter() - t0, _tree_cpu() - cpu0
    t = rec.timings
    # plan + layers: everything before the outputs; the outputs and the scores (evaluation, read back from the
    # outputs) come after the last layer
    lw = t["total_s"] - t["outputs_s"] - t.get("scores_s", 0.0)
    m = rec.metrics
    print(
        f"  layerwise {order} (halo {'on' if halo else 'off'}): {wall:.1f}s wall ({lw:.1f}s plan + layers, "
        f"{t['outputs_s']:.1f}s Parquet outputs, {t.get('scores_s', 0.0):.1f}s scores), {cpu:.1f} CPU-s; "
        f"chunk reads {m['chunk_reads']:,}, hit ratio "
        f"{m['dynamic_hit_ratio']}, fill/model {m['fill_over_model']}, exchange/model {m['exchange_over_model']}",
        flush=True,
    )
    return {
        "order": order,
        "halo": halo,
        "wall_s": wall,
        "cpu_s": cpu,
        "layers_s": lw,
        "order_index_s": read_manifest(info["dv"]).stage(f"reorder/{info['run']}/{order}").timings.get("index_s"),
        "timings": t,
        "metrics": rec.metrics,
        "path": str(info["dv"].path / rec.path),
    }


@contextmanager
def _samplewise(info: dict, service: bool, scratch: Path) -> Iterator[tuple[Any, Any]]:
    """A Samplewise over all partitions in process, or through a serve-cluster on loopback (and its process)."""
    from glisp_infer.samplewise import Samplewise

    if not service:
        yield Samplewise.in_process(info["dv"], info["run"]), None
        return
    from glisp_serving.client.sampling_client import SamplingClient
    from glisp_serving.cluster.child import stop_cluster
    from glisp_testing.servers import serve_in

    proc, cluster = serve_in(info["dv"], info["run"], scratch, threads=1)
    client = None
    try:
        client = SamplingClient(cluster)
        yield Samplewise.service(client, info["dv"], info["run"]), proc
    finally:
        if client is not None:
            client.close()
        stop_cluster(proc)


def _timed(info: dict, args: argparse.Namespace, service: bool, call: Any) -> tuple[Any, float]:
    """``call(sw, items)`` once on the first --batch items (warm-up: kernels, pages), then timed on the rest;
    returns its result and the CPU seconds of this process plus, through the service, the servers'."""
    with _samplewise(info, service, args.scratch) as (sw, proc):
        call(sw, slice(0, args.batch))
        cpu0 = _tree_cpu(proc.pid) if proc else 0.0
        r = call(sw, slice(args.batch, None))
        cpu = r.cpu_s + ((_tree_cpu(proc.pid) - cpu0) if proc else 0.0)
    return r, cpu


def _summary(service: bool, unit: str, k: int, total: int, r: Any, cpu: float) -> dict:
    """Per-``unit`` (seed or edge) cost of ``k`` timed units, scaled to ``total``; printed and returned."""
    out = {
        "backend": "service" if service else "in-process",
        f"{unit}s": k,
        "wall_s": r.total_s,
        "cpu_s": cpu,
        "sample_s": r.sample_s,
        "model_s": r.model_s,
        f"per_{unit}_ms": 1000 * r.total_s / k,
        f"cpu_per_{unit}_ms": 1000 * cpu / k,
        f"input_vertices_per_{unit}": r.input_vertices / k,
        f"slice_rows_per_{unit}": r.slice_rows / k,
        "est_wall_s": r.total_s / k * total,
        "est_cpu_s": cpu / k * total,
    }
    print(
        f"  sample-wise{' pairs' if unit == 'edge' else ''} ({out['backend']}): {k} {unit}s in {r.total_s:.1f}s "
        f"({out[f'per_{unit}_ms']:.3f} ms/{unit}, {out[f'cpu_per_{unit}_ms']:.3f} CPU-ms/{unit}; sampling "
        f"{r.sample_s:.1f}s, model {r.model_s:.1f}s; {out[f'slice_rows_per_{unit}']:.1f} slice rows/{unit}); "
        f"all {total:,}: {out['est_wall_s']:.0f}s, {out['est_cpu_s']:.0f} CPU-s",
        flush=True,
    )
    return out


def samplewise(info: dict, model, args: argparse.Namespace, service: bool = False) -> dict:
    """Sample-wise over --samplewise-seeds random vertices after a warm-up batch; totals are per seed x n."""
    n = info["n"]
    seeds = np.random.default_rng(7).permutation(n)[: args.samplewise_seeds + args.batch]
    r, cpu = _timed(info, args, service, lambda sw, sl: sw.run(model, seeds[sl], args.fanouts, batch_size=args.batch))
    return _summary(service, "seed", len(seeds) - args.batch, n, r, cpu)


def scored_edges(info: dict) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) global ids of every edge the link outputs score, each once, as glisp_infer.outputs.edge_scores
    reads them: every partition's stored edges (a vertex-cut stores each edge in one partition)."""
    from glisp_core.partition_format import open_partition

    dv, run = info["dv"], info["run"]
    parts = int(read_manifest(dv).stage(f"partition/{run}").counts["parts"])
    src, dst = [], []
    for k in range(parts):
        r = open_partition(dv.partition_dir(run, k), verify=False)
        gid, eids = np.asarray(r.global_id, np.int64), np.arange(r.num_edges, dtype=np.int64)
        src.append(gid[r.edge_src(eids)])
        dst.append(gid[r.edge_dst(eids)])
    return np.concatenate(src), np.concatenate(dst)


def samplewise_pairs(info: dict, model, args: argparse.Namespace, service: bool = False) -> dict:
    """Sample-wise link scores of --samplewise-edges random scored edges in batches of --batch edges (each batch:
    the trees of its distinct endpoints, as link training), after a warm-up batch; totals are per edge x m."""
    src, dst = scored_edges(info)
    m = len(src)
    pick = np.random.default_rng(7).permutation(m)[: args.samplewise_edges + args.batch]
    s, d, w = src[pick], dst[pick], args.batch
    r, cpu = _timed(info, args, service, lambda sw, sl: sw.run_pairs(model, s[sl], d[sl], args.fanouts, batch_size=w))
    out = _summary(service, "edge", len(pick) - w, m, r, cpu)
    out["scored_edges"] = m
    return out


def sweep(info: dict, timed: dict, args: argparse.Namespace) -> list[dict]:
    """Layer 1 of partition 0, in process on a copy of the timed run's store, per order and per --sweep setting
    (``B`` or ``B:C``: batch size B, cache chunk rows C), with the offline optimum of the same reads."""
    from glisp_core.dataset.order_index import index_url
    from glisp_infer import task as T
    from glisp_infer.plan import InferPlan
    from glisp_infer.store import Codec, RowLayout

    dv = info["dv"]
    rows = []
    for order in ("pds", "ns"):
        rec = read_manifest(dv).stage(f"infer/bench-{order}")
        tmp = Path(tempfile.mkdtemp(prefix="glisp-sweep-", dir=args.scratch))
        shutil.copytree(dv.path.local / rec.path / "zarr", tmp / "zarr")
        p = rec.params
        plan = InferPlan(
            store=str(tmp / "zarr"),
            parts_dir=str(dv.serialized(p["partition"])),
            order_url=index_url(dv.reorder(p["partition"], order)),
            num_parts=p["parts"],
            layout=RowLayout(p["chunk_rows"], tuple(rec.counts["vertices_per_part"])),
            codec=Codec(),
            order=order,
            dims=tuple(p["dims"]),
            fanouts=tuple(p["fanouts"]),
            seed=p["seed"],
            direction=p["direction"],
            relations=(),
            checkpoint=str(dv.train(p["model"])),
            task=p["task"],
            cache_chunk_rows=p["cache_chunk_rows"],
            cache_fraction=p["cache_fraction"],
            cache_admit_window=p.get("cache_admit_window", 1),
            scratch_dir=str(args.scratch),
        )
        for setting in args.sweep:
            b, _, c = str(setting).partition(":")
            q = dataclasses.replace(plan, batch_size=int(b), cache_chunk_rows=int(c or plan.cache_chunk_rows))
            m, bound = _layer_with_bound(T, q)
            reads = max(m["chunk_reads"], 1)
            rows.append(
                {
                    "order": order,
                    "batch": q.batch_size,
                    "cache_rows": q.cache_chunk_rows,
                    "chunk_reads": m["chunk_reads"],
                    "hit_ratio": m["dynamic_hits"] / reads,
                    "every_miss": m["shadow_hits"]["fifo_all"]["0.05"] / reads,
                    "belady": bound / reads,
                    "lru": m["shadow_hits"]["lru"]["0.05"] / reads,
                    "model_s": m["model_s"],
                    "cache": m["cache_capacity"],
                    "chunks": m["static_chunks"],
                }
            )
        shutil.rmtree(tmp, ignore_errors=True)
    ns = {(r["batch"], r["cache_rows"]): r["chunk_reads"] for r in rows if r["order"] == "ns"}
    for r in rows:
        r["vs_ns"] = r["chunk_reads"] / ns[(r["batch"], r["cache_rows"])]
    return rows


def _layer_with_bound(T, plan) -> tuple[dict, int]:
    """``T.infer_layer(plan, 1, 0)``'s metrics and the Belady hits of the chunk reads it made (its trace is
    taken where the task hands it to ``_cache_metrics``)."""
    seen = {}
    real = T._cache_metrics

    def keep(plan, dyn, num_chunks, trace, bounds, admit):
        seen["hits"] = belady_hits(trace, bounds, max(num_chunks, 1), dyn.capacity)
        return real(plan, dyn, num_chunks, trace, bounds, admit)

    T._cache_metrics = keep
    try:
        m = T.infer_layer(plan, 1, 0)
    finally:
        T._cache_metrics = real
    return m, int(seen["hits"])


@njit(nogil=True, cache=True)
def belady_hits(trace, bounds, num_chunks, capacity):  # pragma: no cover - compiled
    """Hits of the offline optimum (Belady's MIN, a miss may bypass the cache) on a chunk trace: batch ``b``
    reads ``trace[bounds[b]:bounds[b + 1]]``; on a miss the resident chunk read again latest is evicted if it
    is read later than the missed one, else the missed chunk bypasses. The bound for every eviction and
    admission policy of ``glisp_infer.cache``."""
    far = np.iinfo(np.int64).max
    nxt_of = np.full(num_chunks, far, np.int64)
    nxt = np.empty(len(trace), np.int64)  # the next batch after this access that reads the same chunk
    for b in range(len(bounds) - 2, -1, -1):
        for i in range(bounds[b], bounds[b + 1]):
            nxt[i] = nxt_of[trace[i]]
        for i in range(bounds[b], bounds[b + 1]):
            nxt_of[trace[i]] = b
    slot_of = np.full(num_chunks, -1, np.int64)
    chunk = np.full(capacity, -1, np.int64)
    due = np.full(capacity, far, np.int64)
    used, hits = 0, 0
    for b in range(len(bounds) - 1):
        for i in range(bounds[b], bounds[b + 1]):  # hits first: a batch's own misses cannot evict them
            s = slot_of[trace[i]]
            if s >= 0:
                hits += 1
                due[s] = nxt[i]
        for i in range(bounds[b], bounds[b + 1]):
            c = trace[i]
            if slot_of[c] >= 0:
                continue
            if used < capacity:
                s = used
                used += 1
            else:
                s = 0
                for j in range(1, capacity):
                    if due[j] > due[s]:
                        s = j
                if due[s] <= nxt[i]:
                    continue  # bypass: every resident chunk is read again before this one
                slot_of[chunk[s]] = -1
            chunk[s], due[s], slot_of[c] = c, nxt[i], s
    return hits


def time_split(t: dict, what: str) -> str:
    """The per-layer time split of one run (task seconds summed over partitions)."""
    m = t["metrics"]
    out = [
        f"\nTime split of {what} ({t['layers_s']:.1f}s plan + layers; task seconds summed over partitions; "
        f"fill/model {m['fill_over_model']}, exchange/model {m['exchange_over_model']}, sampling/model "
        f"{m['sample_over_model']}):\n",
        "| layer | sample | needs | fill | read | slice | write | halo write | fill/model | exchange/model | "
        "fill chunks | halo rows | task CPU s | wall |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, d in m["layers"].items():
        hw = f"{d.get('halo_write_s', 0):.2f}"
        if "fill_s" in d:
            out.append(
                f"| {k} | {d['sample_s']:.2f} | {d.get('needs_s', 0):.2f} | {d['fill_s']:.2f} | {d['read_s']:.2f} "
                f"| {d['compute_s']:.2f} | {d['write_s']:.2f} | {hw} | {d['fill_over_model']} | "
                f"{d['exchange_over_model']} | {d['fill_chunks']} | {d.get('halo_rows', 0):,} | {d['cpu_s']:.1f} "
                f"| {d['wall_s']:.1f} |"
            )
        else:
            out.append(
                f"| {k} (features) | | | | | | {d['write_s']:.2f} | {hw} | | | | | {d['cpu_s']:.1f} | {d['wall_s']:.1f} |"
            )
    if "plan" in m:
        out.append(
            f"\nPlan job (samples, needs): {t['timings'].get('plan_s', 0):.1f}s wall, {m['plan']['cpu_s']:.1f} "
            "task CPU s (its sampling and needs seconds are in the layers' columns)."
        )
    return "\n".join(out)


def compare(spark, cfg, info: dict, model_run: str, args: argparse.Namespace) -> list[dict]:
    """--compare KEY A B: alternating runs of the timed order with ``infer.KEY`` = A, then B (values parsed as
    JSON where they parse: numbers, booleans, "")."""
    key, *vals = args.compare
    parsed = []
    for v in vals:
        try:
            parsed.append(json.loads(v))
        except json.JSONDecodeError:
            parsed.append(v)
    runs = []
    for _ in range(args.compare_runs):
        for v in parsed:
            x = layerwise(spark, cfg, info, model_run, args, args.time_order, extra={key: v})
            runs.append({**x, "setting": f"{key}={v!r}"})
    return runs


def compare_table(runs: list[dict]) -> str:
    """Medians per setting of --compare, and the ratio of B's plan + layers to A's."""
    out = ["\n| setting | runs | plan + layers s | CPU s | read | slice | write |\n|---|---|---|---|---|---|---|"]
    meds = []
    for setting in dict.fromkeys(x["setting"] for x in runs):
        xs = [x for x in runs if x["setting"] == setting]

        def med(f, xs=xs) -> float:
            return float(np.median([f(x) for x in xs]))

        def total(x, col) -> float:
            return sum(d.get(col, 0) for d in x["metrics"]["layers"].values())

        meds.append(med(lambda x: x["layers_s"]))
        out.append(
            f"| {setting} | {len(xs)} | {meds[-1]:.1f} | {med(lambda x: x['cpu_s']):.1f} | "
            f"{med(lambda x: total(x, 'read_s')):.2f} | {med(lambda x: total(x, 'compute_s')):.2f} | "
            f"{med(lambda x: total(x, 'write_s')):.2f} |"
        )
    if len(meds) == 2:
        out.append(f"\nplan + layers, second setting against the first: {meds[1] / meds[0]:.2f}x (medians)")
    return "\n".join(out)


def halo_table(runs: list[dict]) -> str:
    """Medians of the alternating halo off / on runs."""
    out = [
        "\n| halo | runs | fill/model | exchange/model | fill s | model s | plan + layers s | CPU s |\n"
        "|---|---|---|---|---|---|---|---|"
    ]
    for h in (False, True):
        xs = [x for x in runs if x["halo"] == h]

        def med(f, xs=xs) -> float:
            return float(np.median([f(x) for x in xs]))

        out.append(
            f"| {'on' if h else 'off'} | {len(xs)} | {med(lambda x: x['metrics']['fill_over_model']):.3f} | "
            f"{med(lambda x: x['metrics']['exchange_over_model']):.3f} | {med(lambda x: x['metrics']['fill_s']):.2f} | "
            f"{med(lambda x: x['metrics']['model_s']):.2f} | {med(lambda x: x['layers_s']):.1f} | "
            f"{med(lambda x: x['cpu_s']):.1f} |"
        )
    return "\n".join(out)


def _samplewise_row(sw: dict, layers: int, n: int) -> str:
    """The sample-wise row's label: its per-seed (node) or per-edge (link) cost and slice rows against layerwise's."""
    if "per_edge_ms" in sw:
        m = sw["scored_edges"]
        return (
            f"sample-wise pairs ({sw['backend']}), all {m:,} edges: {sw['per_edge_ms']:.3f} ms, "
            f"{sw['cpu_per_edge_ms']:.3f} CPU-ms per edge over {sw['edges']:,} edges; {sw['slice_rows_per_edge']:.1f} "
            f"slice rows per edge (layerwise {layers * n / m:.2f})"
        )
    return (
        f"sample-wise ({sw['backend']}), all vertices: {sw['per_seed_ms']:.2f} ms, {sw['cpu_per_seed_ms']:.2f} "
        f"CPU-ms per seed over {sw['seeds']:,} seeds; {sw['slice_rows_per_seed'] / layers:.1f}x layerwise's "
        "slice rows"
    )


def per_row_table(r: dict) -> str:
    """Where a layerwise row's time goes (the timed run): each item's seconds, summed over tasks and layers, per
    row computed (vertices x layers), beside the sample-wise run's CPU per slice row."""
    t, n = r["timed"], r["n"]
    lay = {k: d for k, d in t["metrics"]["layers"].items() if "compute_s" in d}
    rows = n * len(lay)

    def total(col: str, layers=None) -> float:
        return sum(d.get(col, 0.0) for d in (layers or t["metrics"]["layers"]).values())

    items = [
        ("sample (plan job)", total("sample_s")),
        ("halo needs (plan job)", total("needs_s")),
        ("fill (static cache from the halo)", total("fill_s")),
        ("read (batch rows through the two-level cache)", total("read_s")),
        ("slice (the model)", total("compute_s")),
        ("write (Zarr chunks: copy + waits; layer 0 included)", total("write_s")),
        ("halo write", total("halo_write_s")),
    ]
    out = [
        f"\nPer layerwise row ({rows:,} rows: {n:,} vertices x {len(lay)} layers):\n",
        "| item | s | us per row |",
        "|---|---|---|",
    ]
    for name, sec in items:
        out.append(f"| {name} | {sec:.2f} | {1e6 * sec / rows:.2f} |")
    listed = sum(sec for _, sec in items)
    out.append(f"| everything in the tasks (task CPU s) | {total('cpu_s'):.2f} | {1e6 * total('cpu_s') / rows:.2f} |")
    out.append(f"| listed task items | {listed:.2f} | {1e6 * listed / rows:.2f} |")
    sw = r.get("samplewise")
    if sw:
        per = sw["est_cpu_s"] / (sw["slice_rows_per_seed"] * n)
        out.append(f"| sample-wise: CPU per slice row (its sampling, gathers and slices) | | {1e6 * per:.2f} |")
    return "\n".join(out)


def bound_line(r: dict) -> str:
    """The node task's last line, for scripts: layerwise's speedup (plan + layers, wall) over the in-process
    sample-wise run of the same session, the bound of that speedup (the sample-wise slice rows per seed over
    layerwise's rows per vertex, one per layer) and their ratio; "" without a sample-wise run."""
    sw = r.get("samplewise")
    if r.get("task", "node") != "node" or not sw:
        return ""
    t = r["timed"]
    layers = len(t["metrics"]["layers"]) - 1
    bound = sw["slice_rows_per_seed"] / layers
    s_wall = sw["est_wall_s"] / t["layers_s"]
    s_cpu = sw["est_cpu_s"] / (t["cpu_s"] * t["layers_s"] / t["wall_s"])
    return (
        f"\nCPU: node speedup {s_cpu:.2f} of bound {bound:.2f} (ratio {s_cpu / bound:.2f})\n"
        f"node speedup {s_wall:.2f} of bound {bound:.2f} (ratio {s_wall / bound:.2f})"
    )


def _speedup_table(r: dict) -> list[str]:
    """Layerwise against the sample-wise runs (in process, and through the service): wall, CPU and speedups."""
    sws = [x for x in (r.get("samplewise"), r.get("samplewise_service")) if x]
    if not sws:
        return []
    t, cold = r["timed"], r["cold"]
    layers = len(t["metrics"]["layers"]) - 1
    out = ["\n| | wall s | CPU s | speedup (wall) | speedup (CPU) |\n|---|---|---|---|---|"]
    for sw in sws:
        out.append(
            f"| {_samplewise_row(sw, layers, r['n'])} | {sw['est_wall_s']:.0f} | {sw['est_cpu_s']:.0f} | 1 | 1 |"
        )
    rows = [
        ("layerwise: plan + layers, all Zarr I/O", t["layers_s"], t["cpu_s"] * t["layers_s"] / t["wall_s"]),
        ("layerwise: the whole stage, with Parquet outputs", t["wall_s"], t["cpu_s"]),
        (
            f"layerwise: the first run of the session ({cold['order']}), cold Python workers",
            cold["wall_s"],
            cold["cpu_s"],
        ),
    ]
    for name, wall, cpu in rows:
        speed_wall = " / ".join(f"{x['est_wall_s'] / wall:.1f}x" for x in sws)
        speed_cpu = " / ".join(f"{x['est_cpu_s'] / cpu:.1f}x" for x in sws)
        out.append(f"| {name} | {wall:.1f} | {cpu:.0f} | {speed_wall} | {speed_cpu} |")
    return out


def _order_tables(r: dict) -> list[str]:
    """Chunk reads and hits per order, the cache replays' hit ratios, and the --sweep's trade-off."""
    out = []
    runs = r["orders"]
    ns = next((x for x in runs if x["order"] == "ns"), None)
    out.append("\n| order | chunk reads | vs NS | hit ratio | fill chunks | cache share |\n|---|---|---|---|---|---|")
    for x in runs:
        mm = x["metrics"]
        vs = f"{mm['chunk_reads'] / ns['metrics']['chunk_reads']:.3f}" if ns else "-"
        out.append(
            f"| {x['order']} | {mm['chunk_reads']:,} | {vs} | {mm['dynamic_hit_ratio']} | "
            f"{mm['fill_chunks']:,} | {mm['cache_share_max']} |"
        )
    replayed = [x for x in [r["cold"], *runs] if x["metrics"]["shadow_hit_ratio"].get("fifo")]
    replayed = [x for k, x in enumerate(replayed) if x["order"] not in {y["order"] for y in replayed[:k]}]
    if replayed:  # the timed run does not replay (infer.cache_replays): the other runs' reads, same counts
        fracs = replayed[0]["metrics"]["shadow_hit_ratio"]["fifo"]
        out.append("\n| order | policy | " + " | ".join(f"{f}" for f in fracs) + " |\n|---|---|" + "---|" * len(fracs))
        for x in replayed:
            for pol, v in x["metrics"]["shadow_hit_ratio"].items():
                out.append(f"| {x['order']} | {pol} | " + " | ".join(f"{h:.3f}" for h in v.values()) + " |")
    if r.get("sweep"):
        out.append(
            "\n| order | batch | cache chunk rows | chunk reads | vs NS | FIFO hit ratio | every miss admitted "
            "| LRU | Belady bound | cache/chunks | read+slice s |\n|---|---|---|---|---|---|---|---|---|---|---|"
        )
        for x in r["sweep"]:
            out.append(
                f"| {x['order']} | {x['batch']} | {x['cache_rows']} | {x['chunk_reads']:,} | {x['vs_ns']:.3f} | "
                f"{x['hit_ratio']:.3f} | {x['every_miss']:.3f} | {x['lru']:.3f} | {x['belady']:.3f} | "
                f"{x['cache']}/{x['chunks']} | {x['model_s']:.2f} |"
            )
    return out


def markdown(res: dict) -> str:
    out = []
    for g, r in res["graphs"].items():
        if "skipped" in r:
            out.append(f"\n### {g}: skipped ({r['skipped']})")
            continue
        t = r["timed"]
        task = r.get("task", "node")
        out.append(f"\n### {g}: {r['n']:,} vertices, {r['m']:,} directed edges, model {r['model']} ({task} task)")
        out += _speedup_table(r)
        m = t["metrics"]
        out.append(time_split(t, f"the timed {t['order']} run"))
        for k, x in enumerate(r.get("halo_compare", [])):
            out.append(time_split(x, f"comparison run {k + 1}, {x['order']}, halo {'on' if x['halo'] else 'off'}"))
        if r.get("halo_compare"):
            out.append(halo_table(r["halo_compare"]))
        if r.get("compare"):
            out.append(compare_table(r["compare"]))
        out.append(
            f"\nNo index job (the reorder stage wrote the order's lookup arrays once: "
            f"{t.get('order_index_s') or 0:.1f}s), layer 0 (features) {t['timings']['layer0_s']:.1f}s, "
            f"Parquet outputs with the id index {t['timings']['outputs_s']:.1f}s; {m['bytes_written']:,} bytes written, "
            f"compression {m['compression_ratio']}."
        )
        out += _order_tables(r)
        if r.get("task", "node") == "node":
            out.append(per_row_table(r))
        if line := bound_line(r):
            out.append(line)
    return "\n".join(out)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="+", default=["rmat"], help="rmat, cora, imdb, lastfm, tolokers")
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=8, help="R-MAT edges per vertex before symmetrising")
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--arch", default="sage")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    ap.add_argument("--orders", nargs="+", default=ORDERS, help="one layerwise run each")
    ap.add_argument("--time-order", default="pds", help="the order of the timed run (run last)")
    ap.add_argument("--chunk-rows", type=int, default=32768)
    ap.add_argument("--cache-chunk-rows", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256, help="layerwise vertices per slice call")
    ap.add_argument("--cache-fraction", type=float, default=0.05)
    ap.add_argument(
        "--cache-admit-window", type=int, default=1, help="infer.cache_admit_window (0: admit every miss, -1: none)"
    )
    ap.add_argument("--batch", type=int, default=1024, help="sample-wise seeds (link: edges) per batch")
    ap.add_argument("--task", choices=["node", "link"], default="node", help="the benchmark model's task")
    ap.add_argument("--link-dim", type=int, default=64, help="link task: the embedding's dimension")
    ap.add_argument("--samplewise-seeds", type=int, default=4096, help="node task; 0 = no sample-wise run")
    ap.add_argument("--samplewise-edges", type=int, default=4096, help="link task; 0 = no sample-wise run")
    ap.add_argument(
        "--samplewise-service",
        action="store_true",
        help="also sample-wise through a sampling cluster on loopback, as training does",
    )
    ap.add_argument(
        "--sweep",
        nargs="*",
        default=[],
        help="B or B:C (batch size, cache chunk rows) settings for the reads/hits trade-off, with the offline optimum",
    )
    ap.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="time the first run (cold Python workers) when the timed order is the only one",
    )
    ap.add_argument(
        "--halo-compare",
        type=int,
        default=0,
        help="after the order runs, this many pairs of --time-order runs without and with the halo exchange",
    )
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--root", default="/tmp/glisp-bench-infer")
    ap.add_argument("--scratch-dir", default="", help="infer.scratch_dir of the runs (default: the config's)")
    ap.add_argument("--compare", nargs=3, metavar=("KEY", "A", "B"), help="an [infer] key and two values to alternate")
    ap.add_argument("--compare-runs", type=int, default=3, help="pairs of runs for --compare")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--json", help="also write the results here")
    return ap.parse_args()


def _run_graph(spark: Any, cfg: Any, info: dict, args: argparse.Namespace, orders: list[str]) -> dict:
    """One graph's runs: every order (the timed one last), --compare, the halo pairs, sample-wise and --sweep."""
    name, model = publish(info, args)
    runs = [layerwise(spark, cfg, info, name, args, o, replays=k < len(orders) - 1) for k, o in enumerate(orders)]
    r = {
        "n": info["n"],
        "m": info["m"],
        "model": name,
        "task": args.task,
        "orders": runs[len(runs) - len(set(orders)) :],
        "timed": runs[-1],
        "cold": runs[0],
    }
    if args.compare:
        r["compare"] = compare(spark, cfg, info, name, args)
    if args.halo_compare:
        r["halo_compare"] = [
            layerwise(spark, cfg, info, name, args, args.time_order, halo=h)
            for _ in range(args.halo_compare)
            for h in (False, True)
        ]
    sw_fn, sw_count = (
        (samplewise_pairs, args.samplewise_edges) if args.task == "link" else (samplewise, args.samplewise_seeds)
    )
    if sw_count:
        r["samplewise"] = sw_fn(info, model, args)
        if args.samplewise_service:
            r["samplewise_service"] = sw_fn(info, model, args, service=True)
    if args.sweep:
        r["sweep"] = sweep(info, runs[-1], args)
    return r


def main() -> int:
    args = _parse_args()
    root = Path(args.root)
    args.scratch = root / "scratch"
    args.scratch.mkdir(parents=True, exist_ok=True)

    from glisp_core.config import load_config, with_values
    from glisp_spark.session import get_spark

    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root / "data"))
    cfg = with_values(cfg, "spark", master="local[2]", driver_memory=args.driver_memory, ui=False, log_level="ERROR")
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    spark = get_spark(cfg.spark, checkpoint_dir=str(root / "_checkpoints"))
    t0 = time.perf_counter()
    print(f"load before: {os.getloadavg()}", flush=True)
    graphs = [g for g in args.graphs if g != "lastfm"]
    infos = build(_with(args, graphs), root, spark, cfg)
    if args.build_only:
        spark.stop()
        return 0
    res: dict = {"args": {k: v for k, v in vars(args).items() if k != "scratch"}, "graphs": {}}
    if "lastfm" in args.graphs:
        res["graphs"]["lastfm"] = {"skipped": "no vertex features: layerwise inference starts from them"}
    orders = [o for o in args.orders if o != args.time_order] + [args.time_order]
    if args.warmup and orders[0] == args.time_order:
        orders = [args.time_order] + orders  # the first run starts the Python workers; time the second
    for g, info in infos.items():
        print(f"[{g}] load {os.getloadavg()}", flush=True)
        r = _run_graph(spark, cfg, info, args, orders)
        r["load_after"] = os.getloadavg()
        res["graphs"][g] = r
    spark.stop()
    res["total_s"] = time.perf_counter() - t0
    print(f"total {res['total_s']:.0f}s; load after {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    print(markdown(res), flush=True)
    return 0


def _with(args: argparse.Namespace, graphs: list[str]) -> argparse.Namespace:
    a = argparse.Namespace(**vars(args))
    a.graphs = graphs
    return a


if __name__ == "__main__":
    sys.exit(main())
