"""Sampling-service benchmark: GLISP Gather-Apply over loopback servers against the in-process limit.

For an R-MAT graph (symmetrised, so every vertex has out-edges to sample) it publishes a dataset,
partition runs and their serialized partitions, then for P in --parts:

- vertex-cut (hash2d on the unordered pair: hubs spread over servers; ``--vertex-cut-run`` to use a
  published run, e.g. adadne-pP from 'glisp partition' + 'glisp serialize') with ``replicas`` routing,
- edge-cut (every edge on the partition of its source) with ``owner`` routing,

starts ``glisp serve-cluster``, samples fanouts [15,10,5] at batch 1024 with the client loader
(prefetch 2), and prints seeds/s, sampled edges/s, the per-server load L_i = T_i / min_j T_j (T_i:
server busy seconds) for uniform and weighted sampling with balanced seeds and with every seed
mastered by partition 0, and server RSS against partition file bytes. The limit is the same k-hop
code with the same kernels over one whole-graph partition, in process, with no RPC.

    .venv/bin/python bench/sampling.py                 # scale 18
    .venv/bin/python bench/sampling.py --scale 19
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from glisp_core.config import ClientConfig  # noqa: E402
from glisp_core.partition_format import open_partition  # noqa: E402
from glisp_serving.client import SamplingClient  # noqa: E402
from glisp_serving.engine import PartitionSampler  # noqa: E402
from glisp_serving.local import LocalSampler  # noqa: E402
from tests.glisp_serving.serialize_np import serialize_numpy  # noqa: E402
from tests.graphs import rmat_edges, write_dataset  # noqa: E402
from tests.partitions import publish_partition  # noqa: E402


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    x = (x.astype(np.uint64) + np.uint64(salt)) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(31)
    return x * np.uint64(0xBF58476D1CE4E5B9)


def hash2d(src: np.ndarray, dst: np.ndarray, p: int) -> np.ndarray:
    """2D hash of the unordered pair onto a rows x cols grid of p partitions."""
    rows = int(np.floor(np.sqrt(p)))
    while p % rows:
        rows -= 1
    cols = p // rows
    a, b = np.minimum(src, dst), np.maximum(src, dst)
    return ((_mix(a, 1) % np.uint64(rows)) * np.uint64(cols) + _mix(b, 2) % np.uint64(cols)).astype(np.int32)


def build(root: Path, scale: int, edge_factor: int, parts: list[int]):
    s, d = rmat_edges(scale, edge_factor=edge_factor, seed=1)
    keep = s != d
    s, d = s[keep], d[keep]
    src, dst = np.concatenate([s, d]), np.concatenate([d, s])  # undirected: both directions
    n = 1 << scale
    rng = np.random.default_rng(0)
    w = rng.uniform(0.1, 4.0, len(src)).astype(np.float32)
    feats = rng.normal(size=(n, 16)).astype(np.float32)
    labels = rng.integers(0, 8, n)
    t = time.perf_counter()
    dv = write_dataset(root, f"rmat{scale}", src, dst, num_vertices=n, weight=w, features=feats, labels=labels,
                       directed=False)  # fmt: skip
    publish_partition(dv, np.zeros(len(src), np.int32), 1, run="single-p1", algorithm="single")
    runs = {"single": "single-p1"}
    for p in parts:
        runs[f"vc{p}"] = publish_partition(dv, hash2d(src, dst, p), p, run=f"hash2d-p{p}", algorithm="hash2d")
        runs[f"ec{p}"] = publish_partition(dv, (_mix(src, 7) % np.uint64(p)).astype(np.int32), p, run=f"edgecut-p{p}",
                                           algorithm="edgecut")  # fmt: skip
    for r in runs.values():
        serialize_numpy(dv, r)
    print(f"built rmat{scale}: {n:,} vertices, {len(src):,} directed edges in {time.perf_counter() - t:.0f}s")
    return dv, runs, n


def start_cluster(dv, run: str, workdir: Path, threads: int) -> tuple[subprocess.Popen, Path]:
    cf = workdir / f"{run}.json"
    cmd = [sys.executable, "-m", "glisp_core.cli", "serve-cluster", str(dv.path), "--run", run, "--cluster-file",
           str(cf), "--threads", str(threads)]  # fmt: skip
    p = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL)
    while not cf.exists():
        if p.poll() is not None:
            raise RuntimeError(f"serve-cluster for {run} exited with {p.returncode}")
        time.sleep(0.1)
    return p, cf


def run_loader(sampler_like, seeds: np.ndarray, fanouts, batches: int, batch: int, **kw) -> dict:
    it = sampler_like.loader(seeds[: batch * (batches + 2)], batch, fanouts, shuffle=False, **kw)
    next(it)
    next(it)  # warm-up
    t0 = time.perf_counter()
    done, edges = 0, 0
    for b in it:
        done += len(b.seeds)
        edges += b.num_sampled_edges
    dt = time.perf_counter() - t0
    return {"seeds_s": done / dt, "edges_s": edges / dt, "seconds": dt}


def loads(before: list[dict], after: list[dict], key: str = "busy_seconds") -> list[float]:
    """L_i = T_i / min_j T_j with T_i the server's busy seconds (or another Stats counter) in the window."""
    t = np.array([float(a[key]) - float(b[key]) for a, b in zip(after, before, strict=True)])
    return (t / max(t.min(), 1e-9)).round(3).tolist()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=8, help="R-MAT edges per vertex before symmetrising")
    ap.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    ap.add_argument("--threads", type=int, default=1, help="threads per server")
    ap.add_argument("--root", help="work directory (default: a temp dir)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-"))
    dv, runs, n = build(root, args.scale, args.edge_factor, args.parts)
    fan, bs, nb = args.fanouts, args.batch_size, args.batches
    rng = np.random.default_rng(5)
    seeds = rng.permutation(n)
    results: dict = {"scale": args.scale, "fanouts": fan, "batch": bs, "batches": nb}

    eng = PartitionSampler(open_partition(dv.partition_dir("single-p1", 0), verify=False), threads=1)
    local = LocalSampler(eng, n)
    results["inprocess"] = {m: run_loader(local, seeds, fan, nb, bs, method=m) for m in ("uniform", "weighted")}
    print("in-process limit:", json.dumps(results["inprocess"]))
    results["inprocess_bytes"] = int(sum(eng.r.file_bytes().values()))
    cfg = ClientConfig(prefetch=2)
    for p in args.parts:
        for kind, routing in (("vc", "replicas"), ("ec", "owner")):
            run = runs[f"{kind}{p}"]
            proc, cf = start_cluster(dv, run, root, args.threads)
            try:
                with SamplingClient(cf, cfg, routing=routing) as c:
                    res: dict = {"run": run, "routing": routing}
                    part0 = np.flatnonzero(c.routing.master == 0)
                    rng.shuffle(part0)
                    for m in ("uniform", "weighted"):
                        for label, s in (("balanced", seeds), ("part0", part0)):
                            before = c.stats()
                            r = run_loader(c, s, fan, nb, bs, method=m)
                            after = c.stats()
                            r["load"] = loads(before, after)
                            r["load_edges"] = loads(before, after, "edges_served")  # CPU-contention free
                            res[f"{m}_{label}"] = r
                    st = c.stats()
                    res["servers"] = [{k: s[k] for k in ("part_id", "rss_bytes", "rss_baseline_bytes",
                                                          "partition_bytes", "num_edges")} for s in st]  # fmt: skip
                    res["routing_table_bytes"] = c.routing.nbytes
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            results[f"{kind}{p}"] = res
            lim = results["inprocess"]["uniform"]["seeds_s"]
            u = res["uniform_balanced"]
            print(f"P={p} {routing:8s} {run:14s} uniform {u['seeds_s']:9.0f} seeds/s ({u['seeds_s'] / lim:.0%} of "
                  f"in-process) {u['edges_s'] / 1e6:6.2f}M edges/s  load balanced {u['load']} part0 "
                  f"{res['uniform_part0']['load']} (by edges served {u['load_edges']}); weighted {res['weighted_balanced']['seeds_s']:.0f} seeds/s "
                  f"load {res['weighted_balanced']['load']} part0 {res['weighted_part0']['load']}")  # fmt: skip
            for s in res["servers"]:
                print(f"    server {s['part_id']}: RSS {s['rss_bytes'] / 2**20:.0f} MiB (before opening the "
                      f"partition {s['rss_baseline_bytes'] / 2**20:.0f} MiB, delta "
                      f"{(s['rss_bytes'] - s['rss_baseline_bytes']) / 2**20:.0f} MiB), partition files "
                      f"{s['partition_bytes'] / 2**20:.0f} MiB")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
