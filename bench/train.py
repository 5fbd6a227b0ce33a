"""Training benchmark: where the epoch goes (waiting for data vs computing), the feature cache, and accuracy.

The graphs go through the real batch stages in one Spark session (local[2]), all ingested undirected:

- R-MAT scale 18 (``--scale``), edge factor 8, 128-d synthetic features (label-dependent), 8 classes, a
  60/20/20 split, partitioned by AdaDNE into 2 (``adadne-p2``);
- Cora and IMDB (built-ins) and tolokers (``/work/shared/data/tolokers.npz``: features, labels, the first of
  its ten splits), each partitioned by AdaDNE into 2 and, for the in-process reference, into 1 (``whole``).

Phases (each a flag; ``--root`` keeps the datasets between runs):

``--timing``: 2 servers (``glisp serve-cluster``, 1 thread each) on R-MAT, a 3-layer GraphSAGE (hidden 256,
fanouts [15,10,5], batch 1024) trained for ``--batches`` batches per configuration: prefetch 0 or 2, the
feature cache off or holding 20% of the vertices. Configurations alternate, ``--repeats`` times; the table
shows medians of the epoch time, the time the trainer waited for data and computed, the waiting share,
the cache hit ratio, the feature bytes fetched per batch and the trainer's CPU seconds per batch.

``--hit-ratio``: the cache's hit ratio over the same batches with 5, 10, 20 and 40% of the vertices cached
(hottest by degree in the sampling direction), and 20% of the vertices chosen at random as the baseline.

``--accuracy``: test accuracy through 2 servers against the in-process reference (LocalSampler over the
one-partition run), same model, fanouts, epochs and seeds, for ``--seeds`` seeds: Cora (GraphSAGE), IMDB
(R-GCN, per-type fanouts) and tolokers (GraphSAGE).

    .venv/bin/python bench/train.py --root /tmp/glisp-bench-train --build-only
    flock /tmp/glisp-bench.lock .venv/bin/python bench/train.py --root /tmp/glisp-bench-train --timing
    .venv/bin/python bench/train.py --root /tmp/glisp-bench-train --hit-ratio --accuracy
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_serving.cluster.child import stop_cluster  # noqa: E402
from glisp_testing.servers import serve_in  # noqa: E402

TOLOKERS = Path("/work/shared/data/tolokers.npz")
VC, WHOLE = "adadne-p2", "whole"


# ---------------------------------------------------------------------------------------------- build
def tolokers_ingest(root: Path):
    """tolokers.npz as Parquet tables and the IngestConfig that reads them (split: the first of ten)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glisp_core.config import EdgeSource, IngestConfig, VertexSource

    out = root / "tolokers-src"
    if not (out / "vertices.parquet").exists():
        out.mkdir(parents=True, exist_ok=True)
        z = np.load(TOLOKERS)
        e = z["edges"]
        pq.write_table(pa.table({"src": e[:, 0], "dst": e[:, 1]}), out / "edges.parquet")
        n = len(z["node_labels"])
        split = np.full(n, "", object)
        split[z["train_masks"][0]] = "train"
        split[z["val_masks"][0]] = "val"
        split[z["test_masks"][0]] = "test"
        feats = z["node_features"].astype(np.float32)
        pq.write_table(
            pa.table(
                {
                    "id": np.arange(n),
                    "label": z["node_labels"],
                    "split": pa.array(split.tolist()).cast(pa.string()),
                    "feat": pa.FixedSizeListArray.from_arrays(pa.array(feats.ravel()), feats.shape[1]).cast(
                        pa.list_(pa.float32())
                    ),
                }
            ),
            out / "vertices.parquet",
        )
    return IngestConfig(
        graph="tolokers",
        edges=[EdgeSource(path=str(out / "edges.parquet"), format="parquet")],
        vertices=[
            VertexSource(
                path=str(out / "vertices.parquet"), format="parquet", label="label", split="split", features="feat"
            )
        ],
    )


def build(args: argparse.Namespace, root: Path) -> dict[str, object]:
    """Publish every graph's dataset, partition runs and serialized partitions; returns graph -> version."""
    import dataclasses

    from glisp_core.config import RmatConfig, load_config, with_values
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_spark.session import get_spark
    from spark_jobs.generate.builtin import builtin_config
    from spark_jobs.generate.rmat import generate_rmat
    from spark_jobs.ingest.job import run_ingest
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    done = root / "built.json"
    known = json.loads(done.read_text()) if done.exists() else {}
    if all(g in known for g in args.graphs):  # published earlier: no Spark at all (keeps locked runs short)
        return {g: resolve_dataset(known[g]) for g in args.graphs}
    cfg = load_config(env={})
    cfg = with_values(cfg, "dataset", root=str(root / "data"))
    cfg = with_values(cfg, "spark", master="local[2]", driver_memory="4g", ui=False, log_level="ERROR")
    cfg = with_values(cfg, "serialize", parquet_copy=False)
    spark = get_spark(cfg.spark, checkpoint_dir=str(root / "_checkpoints"))
    out = {}
    try:
        for g in args.graphs:
            t0 = time.perf_counter()
            if g == "rmat":
                rc = RmatConfig(
                    scale=args.scale, edge_factor=8, seed=1, features=128, classes=8, splits=[0.6, 0.2, 0.2]
                )
                src_dir = root / "rmat-src" / f"s{args.scale}-f128"
                if not (src_dir / "ingest.toml").exists():
                    generate_rmat(spark, rc, src_dir, fmt="parquet", graph=f"rmat{args.scale}f128")
                ing = load_config(src_dir / "ingest.toml", env={}).ingest
                runs = [("adadne", 2, VC)]
            else:
                ing = tolokers_ingest(root) if g == "tolokers" else builtin_config(g)
                runs = [("adadne", 2, VC), ("random", 1, WHOLE)]
            ing = dataclasses.replace(ing, directed=False, self_loops="drop")
            dv = run_ingest(spark, cfg, ing, log=lambda s: None)
            for algo, p, run in runs:
                c = with_values(cfg, "partition", algorithm=algo, parts=p, name=run, progress=False)
                run_partition(spark, c, dv)
                run_serialize(spark, c, dv, run=run)
            out[g] = dv
            known[g] = str(dv.path)
            done.write_text(json.dumps(known, indent=1))
            print(f"built {g} at {dv.path} in {time.perf_counter() - t0:.0f}s", flush=True)
    finally:
        spark.stop()
    return out


# ---------------------------------------------------------------------------------------------- timing
def _cfg(**train):
    from glisp_core.config import load_config, with_values

    return with_values(load_config(env={}), "train", **train)


@contextmanager
def serving(dv, cfg, workdir: Path) -> Iterator:
    """A GraphSource over 2 servers (serve-cluster, 1 thread each) of the vertex-cut run, stopped after."""
    from glisp_train.source import open_cluster

    proc, cf = serve_in(dv, VC, workdir, threads=1)
    try:
        source = open_cluster(cf, cfg)
        try:
            yield source
        finally:
            source.close()
    finally:
        stop_cluster(proc)


def timing(dv, args: argparse.Namespace, workdir: Path) -> list[dict]:
    import torch

    from glisp_train.cache import FeatureCache, hot_degree
    from glisp_train.dist import Dist
    from glisp_train.loader import Loader
    from glisp_train.progress import Progress
    from glisp_train.trainer import hop_fanouts, run_epoch, setup

    cfg = _cfg(
        model="sage",
        hidden=256,
        layers=3,
        fanouts=[15, 10, 5],
        batch_size=1024,
        max_batches=args.batches,
        feature_cache_mb=0,
        prefetch=0,
        dropout=0.5,
    )
    rows: list[dict] = []
    with serving(dv, cfg, workdir) as source:
        s = setup(cfg, source, Dist())
        n, d = source.num_vertices, source.feature_dim
        out_deg, in_deg = source.info.degrees()
        hot = hot_degree(out_deg, in_deg, cfg.train.direction)
        cached = source.submit(
            FeatureCache.build(source.backend, hot, int(0.2 * n) * 4 * d, d, torch.device("cpu"))
        ).result()
        loaders = {}
        for pf in (0, 2):
            for cache_on in (False, True):
                c = cached if cache_on else s.cache
                loaders[(pf, cache_on)] = Loader(source, hop_fanouts(cfg.train, source.edge_types), c, pf, "in")
        run_epoch(s.ctx, s.task, loaders[(2, False)], s.opt, 0, Progress(enabled=False))  # warm-up
        for rep in range(args.repeats):
            for (pf, cache_on), loader in loaders.items():
                s.ctx.cache = loader.cache
                cpu0 = time.process_time()
                rec = run_epoch(s.ctx, s.task, loader, s.opt, rep + 1, Progress(enabled=False))
                cpu = time.process_time() - cpu0
                rec.update(prefetch=pf, cache=cache_on, rep=rep, cpu_s_per_batch=cpu / rec["batches"])
                rows.append(rec)
                print(
                    f"[timing] rep {rep} prefetch {pf} cache {'20%' if cache_on else 'off'}: epoch "
                    f"{rec['epoch_s']:.1f}s waiting {rec['wait_s']:.1f}s ({100 * rec['wait_share']:.0f}%) "
                    f"computing {rec['compute_s']:.1f}s hits {100 * rec['cache_hit_ratio']:.0f}%",
                    flush=True,
                )
    return rows


def timing_table(rows: list[dict]) -> str:
    lines = [
        "| prefetch | feature cache | epoch s | waiting s | computing s | waiting % of the epoch | cache hit % | "
        "MiB fetched / batch | trainer CPU s / batch |",
        "|---" * 9 + "|",
    ]
    for pf in (0, 2):
        for cache_on in (False, True):
            rs = [r for r in rows if r["prefetch"] == pf and r["cache"] == cache_on]
            med = {
                k: float(np.median([r[k] for r in rs]))
                for k in ("epoch_s", "wait_s", "compute_s", "wait_share", "cache_hit_ratio", "cpu_s_per_batch")
            }
            mib = float(np.median([r["feature_bytes_fetched"] / r["batches"] for r in rs])) / 2**20
            lines.append(
                f"| {pf} | {'20% of vertices' if cache_on else 'off'} | {med['epoch_s']:.1f} | "
                f"{med['wait_s']:.1f} | {med['compute_s']:.1f} | {100 * med['wait_share']:.1f}% | "
                f"{100 * med['cache_hit_ratio']:.1f}% | {mib:.1f} | {med['cpu_s_per_batch']:.2f} |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- hit ratio
def hit_ratio(dv, args: argparse.Namespace, workdir: Path) -> list[dict]:
    import torch

    from glisp_train.cache import FeatureCache, hot_degree
    from glisp_train.dist import Dist, rank_batches
    from glisp_train.loader import Loader, LoaderTimes
    from glisp_train.trainer import hop_fanouts

    cfg = _cfg(layers=3, fanouts=[15, 10, 5], batch_size=1024)
    rows = []
    with serving(dv, cfg, workdir) as source:
        n, d = source.num_vertices, source.feature_dim
        out_deg, in_deg = source.info.degrees()
        hot = hot_degree(out_deg, in_deg, "in")
        labels, split = source.labels_and_split()
        train_ids = np.flatnonzero(split == 0)
        order = np.random.default_rng(0).permutation(train_ids)
        batches = rank_batches(order, Dist(), 1024, args.batches)
        rand = np.random.default_rng(1).random(n)  # a random 20% as the baseline ranking
        for label, pct, score in [(f"{p}% hottest", p, hot) for p in (5, 10, 20, 40)] + [("20% random", 20, rand)]:
            cache = source.submit(
                FeatureCache.build(source.backend, score, int(pct / 100 * n) * 4 * d, d, torch.device("cpu"))
            ).result()
            loader = Loader(source, hop_fanouts(cfg.train, source.edge_types), cache, 2, "in")
            times = LoaderTimes()
            for _ in loader.batches(batches, 11, times):
                pass
            c = cache.counters
            rows.append(
                {
                    "cache": label,
                    "vertices": len(cache.ids),
                    "cache_mib": cache.nbytes / 2**20,
                    "hit_ratio": c.hit_ratio,
                    "mib_fetched_per_batch": c.bytes_fetched / len(batches) / 2**20,
                    "rows_per_batch": c.rows / len(batches),
                }
            )
            print(f"[hit ratio] {rows[-1]}", flush=True)
    return rows


def hit_table(rows: list[dict]) -> str:
    lines = [
        "| cached | vertices | cache MiB | hit ratio | MiB fetched / batch | input rows / batch |",
        "|---" * 6 + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cache']} | {r['vertices']:,} | {r['cache_mib']:.1f} | {100 * r['hit_ratio']:.1f}% | "
            f"{r['mib_fetched_per_batch']:.1f} | {r['rows_per_batch']:,.0f} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- accuracy
ACCURACY = {  # graph -> [train] settings: the same for both sources
    "cora": {"model": "sage", "hidden": 128, "fanouts": [10, 10], "epochs": 10, "lr": 0.01, "batch_size": 128},
    "imdb": {"model": "rgcn", "hidden": 64, "fanouts": [10, 10], "epochs": 10, "lr": 0.005, "batch_size": 128},
    "tolokers": {"model": "sage", "hidden": 64, "fanouts": [10, 10], "epochs": 10, "lr": 0.005, "batch_size": 512},
}


def accuracy(g: str, dv, args: argparse.Namespace, workdir: Path) -> dict:
    from glisp_train.dist import Dist
    from glisp_train.source import open_in_process
    from glisp_train.trainer import train

    settings = dict(ACCURACY[g], layers=2)
    if g == "imdb":  # per-type fanouts: movies draw actors and directors separately
        from glisp_core.dataset.manifest import read_manifest

        types = read_manifest(dv).schema["edge_types"]
        settings["type_fanouts"] = [dict.fromkeys(types, 10), dict.fromkeys(types, 10)]
    res: dict = {"settings": settings, "cluster": [], "in-process": [], "cluster_auc": [], "in-process_auc": []}
    with serving(dv, _cfg(**settings), workdir) as cluster:
        local = open_in_process(str(dv.path), WHOLE, _cfg(**settings))
        try:
            for seed in range(args.seeds):
                cfg = _cfg(**settings, seed=seed)
                for kind, src in (("cluster", cluster), ("in-process", local)):
                    r = train(cfg, src, Dist())
                    res[kind].append(r.test["acc"])
                    if "auc" in r.test:  # binary labels: ROC-AUC too
                        res[f"{kind}_auc"].append(r.test["auc"])
                    print(
                        f"[accuracy] {g} seed {seed} {kind}: test acc {r.test['acc']:.4f} (best epoch {r.best_epoch})",
                        flush=True,
                    )
        finally:
            local.close()
    return res


def accuracy_table(results: dict) -> str:
    lines = [
        "| graph | model (fanouts) | seeds | 2 servers: test acc mean ± std | in process | difference (points) |",
        "|---" * 6 + "|",
    ]
    for g, r in results.items():
        c, p = np.array(r["cluster"]), np.array(r["in-process"])
        s = r["settings"]
        lines.append(
            f"| {g} | {s['model']} ({s['fanouts']}) | {len(c)} | {c.mean():.4f} ± {c.std():.4f} | "
            f"{p.mean():.4f} ± {p.std():.4f} | {100 * (c.mean() - p.mean()):+.2f} |"
        )
        if r.get("cluster_auc"):
            ca, pa = np.array(r["cluster_auc"]), np.array(r["in-process_auc"])
            lines.append(
                f"| {g} (ROC-AUC) | | {len(ca)} | {ca.mean():.4f} ± {ca.std():.4f} | "
                f"{pa.mean():.4f} ± {pa.std():.4f} | {100 * (ca.mean() - pa.mean()):+.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="/tmp/glisp-bench-train", help="work directory, reused across runs")
    ap.add_argument("--graphs", nargs="+", default=["rmat", "cora", "imdb", "tolokers"])
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--timing", action="store_true", help="run under flock /tmp/glisp-bench.lock")
    ap.add_argument("--hit-ratio", action="store_true")
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--batches", type=int, default=8, help="batches per timed epoch / hit-ratio pass")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    print(f"load before: {os.getloadavg()}", flush=True)
    dvs = build(args, root)
    results: dict = {}
    if args.timing and "rmat" in dvs:
        results["timing"] = timing(dvs["rmat"], args, root)
        print(timing_table(results["timing"]), flush=True)
    if args.hit_ratio and "rmat" in dvs:
        results["hit_ratio"] = hit_ratio(dvs["rmat"], args, root)
        print(hit_table(results["hit_ratio"]), flush=True)
    if args.accuracy:
        results["accuracy"] = {g: accuracy(g, dvs[g], args, root) for g in dvs if g in ACCURACY}
        print(accuracy_table(results["accuracy"]), flush=True)
    print(f"load after: {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
