"""Incremental inference refresh (``infer.incremental``) against a full run, at 0.1%, 1% and 5% changed edges.

A base snapshot (R-MAT, symmetrised, 128-d random features; or tolokers from ../shared/data, 10-d features) is
written as version v00 (``glisp_testing.graphs.write_dataset``, vids a fresh permutation of the original ids as
a new ingest gives), partitioned with AdaDNE (--parts), serialized, ordered (PDS), and inferred with
``infer.incremental`` (a full run with stable samples). Each change rate r makes a snapshot from the base: r/2 of
the undirected edges removed uniformly and as many added with degree-proportional endpoints (``bench/
incremental.change``), both directions; partitioned incrementally from v00 (``partition.incremental``),
serialized and ordered. Then, with LATEST on v00, timed (wall, CPU of this process and its Spark JVM and Python
workers; each run under --lock):

- ``incremental``: the refresh of ``infer/bench`` from v00's run;
- ``full``: a full run of the same version (``infer.incremental`` off: kernel samples, float32), what a refresh
  runs today; and ``full stable``: a full run with stable samples (the same work as the refresh minus the copy);

and prints the affected share per layer (the K-hop closure of the change), the recomputed share, the path
(incremental, or the fallback and its reason), the drift, and the floors the affected shares put under any
refresh, as a share of the full run (``floors``: what the graph allows, whatever the refresh's own costs).
A 2-layer GraphSAGE (hidden 256, fanouts 15,10, random weights); --layers 1 for a 1-layer model (fanout 15), --arch gat --hidden 1024 for one whose slices
dominate the run. Versions prepared by an earlier run under the same
--root are reused (the inference runs are redone). At the end, ``EmbeddingLookup`` ms per batch of
--lookup-batch random ids (the first batch after opening, then warm batches).

    flock /tmp/glisp-bench.lock ... is taken per timed run with --lock:
    .venv/bin/python bench/infer_incremental.py --graph rmat --scale 18 --lock /tmp/glisp-bench.lock
    .venv/bin/python bench/infer_incremental.py --graph rmat --scale 18 --layers 1 --lock /tmp/glisp-bench.lock
    .venv/bin/python bench/infer_incremental.py --graph tolokers --lock /tmp/glisp-bench.lock
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.incremental import change, cpu_seconds  # noqa: E402

TOLOKERS = Path("/work/shared/data/tolokers.npz")


def base_graph(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected pairs (each once) and the features by original id."""
    from glisp_testing.graphs import rmat_edges

    if args.graph == "tolokers":
        d = np.load(TOLOKERS)
        e = d["edges"].astype(np.int64)
        return e[:, 0], e[:, 1], d["node_features"].astype(np.float32)
    s, t = rmat_edges(args.scale, args.edge_factor, seed=1)
    ok = s != t
    feats = np.random.default_rng(7).normal(size=(1 << args.scale, args.features)).astype(np.float32)
    return s[ok], t[ok], feats


def snapshot(root: Path, version: str, src, dst, feats, rng):
    """A version holding both directions of the pairs, vids a fresh permutation of the original ids."""
    from glisp_testing.graphs import write_dataset

    n = len(feats)
    perm = rng.permutation(n)  # original id -> vid
    orig = np.empty(n, np.int64)
    orig[perm] = np.arange(n)
    s, d = np.concatenate([src, dst]), np.concatenate([dst, src])
    return write_dataset(
        root,
        "g",
        perm[s],
        perm[d],
        num_vertices=n,
        orig_ids=[str(x) for x in orig],
        features=feats[orig],
        version=version,
    )


def prepare(spark, cfg, dv, base: str | None):
    from glisp_core.config import with_values
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize
    from spark_jobs.serialize.reorder import run_reorders

    c = with_values(cfg, "partition", name="p", incremental=base is not None, incremental_base=base or "")
    rec = run_partition(spark, c, dv)
    run_serialize(spark, c, dv, run="p")
    run_reorders(spark, c, dv, ["pds"], run="p")
    return rec


def reuse(root: Path, version: str):
    """A version an earlier run of this script prepared (through reorder), or None (a partial one is removed)."""
    import shutil

    from glisp_core.dataset.layout import DatasetVersion
    from glisp_core.dataset.manifest import read_manifest
    from glisp_core.storage.uri import parse_uri

    d = root / "g" / version
    if (d / "_version.json").exists():
        dv = DatasetVersion(parse_uri(str(root)), "g", version)
        if read_manifest(dv).has_stage("reorder/p/pds"):
            return dv
    shutil.rmtree(d, ignore_errors=True)
    return None


LOCK = ""


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


def infer(spark, cfg, dv, name: str, incremental: bool, fanouts: list[int]):
    from glisp_core.config import with_values
    from glisp_infer.job import run_infer

    c = with_values(cfg, "infer", model="m", run=name, incremental=incremental, fanouts=fanouts)
    return run_infer(spark, c, dv, force=True, log=lambda s: None)


def floors(t: dict[str, float], shares: list[float], total: float) -> tuple[float, float]:
    """The least a refresh computing only the affected rows could take, as a share of the full run ``t`` (its
    ``timings``) lasting ``total`` s: copies, signatures and stable samples free. ``complete``: only layers 1..K
    shrink (each to its affected share; a version's arrays and outputs are still whole); ``delta``: layer 0 free
    too and the outputs shrunk to the last layer's share (versions stored as deltas, not built)."""
    saved = sum((1 - a) * t.get(f"layer{i}_s", 0.0) for i, a in enumerate(shares, 1))
    delta = saved + t.get("layer0_s", 0.0) + (1 - shares[-1]) * t.get("outputs_s", 0.0)
    return 1 - saved / total, 1 - delta / total


def lookup_ms(dv, n: int, batch: int, batches: int) -> tuple[float, float]:
    """EmbeddingLookup: ms of the first batch after opening (chunks decoded), then the median warm batch."""
    from glisp_infer.lookup import EmbeddingLookup

    rng = np.random.default_rng(3)
    lk = EmbeddingLookup(dv.path.local, run="bench", recheck_s=1.0, follow=False)
    times = []
    for _ in range(batches + 1):
        ids = [str(x) for x in rng.integers(0, n, batch)]
        t = time.perf_counter()
        lk.get(ids)
        times.append(1000 * (time.perf_counter() - t))
    return times[0], float(np.median(times[1:]))


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", choices=["rmat", "tolokers"], default="rmat")
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=8)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--arch", choices=["sage", "gcn", "gat"], default="sage", help="gat: 4 heads in the hidden layers")
    ap.add_argument("--rates", type=float, nargs="+", default=[0.001, 0.01, 0.05])
    ap.add_argument("--max-share", type=float, default=1.0, help="infer.incremental_max_share (1: never fall back)")
    ap.add_argument("--lookup-batch", type=int, default=1000)
    ap.add_argument("--root", default="")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--lock", default="")
    ap.add_argument("--shares-only", action="store_true", help="only the refresh, untimed: affected shares, drift")
    return ap.parse_args()


def main() -> int:
    args = _parse_args()
    global LOCK
    LOCK = args.lock

    import torch

    from glisp_core.config import SparkConfig, load_config, with_values
    from glisp_core.dataset.versions import set_latest
    from glisp_core.models import ModelSpec, build_model
    from glisp_spark.session import get_spark
    from glisp_train.publish import publish_model

    root = Path(args.root or tempfile.mkdtemp(prefix="glisp-bench-infer-incr-"))
    spark = get_spark(
        SparkConfig(master=args.master, log_level="ERROR", driver_memory="6g"), checkpoint_dir=str(root / "_ck")
    )
    cfg = with_values(load_config(env={}), "dataset", root=str(root))
    cfg = with_values(cfg, "partition", algorithm="adadne", parts=args.parts, progress=False)
    cfg = with_values(cfg, "infer", incremental_max_share=args.max_share)
    fanouts = [15, 10, 5][: args.layers]
    src, dst, feats = base_graph(args)
    torch.manual_seed(0)
    model = build_model(
        ModelSpec(arch=args.arch, in_dim=feats.shape[1], hidden=args.hidden, out_dim=8, layers=args.layers, dropout=0.0)
    ).eval()
    rng = np.random.default_rng(1)
    base = reuse(root, "v00")
    if base is None:
        base = snapshot(root, "v00", src, dst, feats, rng)
        prepare(spark, cfg, base, None)
    publish_model(base, "m", model, "p")
    from glisp_core.dataset.manifest import read_manifest
    from glisp_infer.refresh import model_digest

    man = read_manifest(base)  # the previous run every refresh starts from, redone when made with another model
    digest = model_digest(base.train("m"))
    if not man.has_stage("infer/bench") or man.stage("infer/bench").counts.get("model_digest") != digest:
        infer(spark, cfg, base, "bench", True, fanouts)
    shape = f"{args.layers} layers {fanouts}, {args.arch} hidden {args.hidden}"
    print(f"{args.graph}: {len(feats):,} vertices, {2 * len(src):,} directed edges, {shape}")
    hdr = "| changed edges | path | affected share per layer | incremental s (CPU) | full s (CPU) | full stable s (CPU) | incr/full wall (CPU) | floor complete / delta | cos p50/p99 | kNN changed | predictions changed |"
    print(hdr + "\n|" + "---|" * (hdr.count("|") - 1))
    for i, r in enumerate(args.rates, 1):
        name = f"v01-{round(r * 1e5):06d}"  # the change rate names the snapshot (in 1e-5): reused only for its rate
        rng = np.random.default_rng([1, round(r * 1e5)])
        s2, d2 = change(src, dst, r, rng)
        dv = reuse(root, name)
        if dv is None:
            dv = snapshot(root, name, s2, d2, feats, rng)
            prepare(spark, cfg, dv, "v00")
        publish_model(dv, "m", model, "p")
        set_latest(base)
        inc, t_i, c_i = timed(lambda dv=dv: infer(spark, cfg, dv, "bench", True, fanouts))
        if args.shares_only:  # the affected shares and the drift; the seconds are untimed (no lock, no baseline)
            t_f = c_f = t_s = c_s = float("nan")
            full = stable = None
        else:
            full, t_f, c_f = timed(lambda dv=dv: infer(spark, cfg, dv, "full", False, fanouts))
            stable, t_s, c_s = timed(lambda dv=dv: infer(spark, cfg, dv, "full-stable", True, fanouts))
        ic, dr = inc.counts["incremental"], inc.metrics.get("drift", {})
        fl = floors(full.timings, ic["affected_share"], t_f) if full is not None else (float("nan"),) * 2
        path = ic["path"] + (f" (from layer {ic['full_from_layer']})" if ic.get("full_from_layer") else "")
        print(
            f"| {r:.1%} | {path} | {', '.join(f'{x:.3f}' for x in ic.get('affected_share', []))} "
            f"| {t_i:.1f} ({c_i:.1f}) | {t_f:.1f} ({c_f:.1f}) | {t_s:.1f} ({c_s:.1f}) | {t_i / t_f:.2f} ({c_i / c_f:.2f}) "
            f"| {fl[0]:.2f} / {fl[1]:.2f} | {dr.get('cos_p50', 0):.2g}/{dr.get('cos_p99', 0):.2g} | {dr.get('knn_changed_share', 0):.3f} "
            f"| {dr.get('predictions_changed_share', 0):.4f} |",
            flush=True,
        )
        print(f"    timings incremental: {inc.timings}; recomputed {ic.get('recomputed_share')}; {ic.get('reason')}")
        for what, rec in (("full", full), ("full stable", stable)):
            if rec is not None:
                print(f"    timings {what}: {rec.timings}")
        if i == len(args.rates) and not args.shares_only:
            first, warm = lookup_ms(dv, len(feats), args.lookup_batch, 50)
            print(f"EmbeddingLookup, {args.lookup_batch} random ids a batch: first {first:.1f} ms, then {warm:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
