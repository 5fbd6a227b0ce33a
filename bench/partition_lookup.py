"""Id-to-row lookups by ``glisp_core.id_rows.IdRows``: its table against the binary search it falls back to, in
the same run, on the two shapes that use it at R-MAT 23:

- ``cell``: the sharded partition's cell at p = 8 (``CellView.local``): 5.6M sorted ids with edges out of
  8.4M, 8M endpoints in row order (random); the table built in each step, as a task builds it once per cell;
- ``cache``: the trainer's feature cache (``FeatureCache.plan``): the 2M hottest of 8.4M vertices (256 MB of
  32-float rows) by a power-law degree, and 200 batches of the distinct ids among 40k drawn by degree, in no
  order (a batch at fanouts 15,10 and batch 1024 has about 21k distinct inputs); the table built once, as the
  cache builds it.

Each timed step holds the benches' lock; medians of ``--repeat``.

    .venv/bin/python bench/partition_lookup.py
"""

from __future__ import annotations

import argparse
import fcntl
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_core.id_rows import IdRows  # noqa: E402
from spark_jobs.partition.shards import TABLE_SPAN  # noqa: E402


def timed(fn, arg: int, lock: str) -> float:
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        t = time.perf_counter()
        fn(arg)
        return time.perf_counter() - t


def cell(rng: np.random.Generator, n_ids: int, lookups: int):
    """A cell's ids and one task's endpoints; a step builds the rows and looks every endpoint up."""
    ids = np.sort(rng.choice(n_ids * 3 // 2, n_ids, replace=False)).astype(np.int64)
    v = ids[rng.integers(0, n_ids, lookups)]

    def step(span: int) -> None:
        assert (IdRows(ids, span).find(v) >= 0).all()

    return step, lookups


def cache(rng: np.random.Generator, n: int, rows: int, batches: int, inputs: int):
    """The hottest ``rows`` of ``n`` vertices by a power-law degree; a step looks up every batch's inputs."""
    deg = np.floor(rng.pareto(1.2, n) + 1).astype(np.int64)
    hot = np.sort(np.argsort(-deg, kind="stable")[:rows]).astype(np.int64)
    p = deg / deg.sum()
    batch = [rng.permutation(np.unique(rng.choice(n, inputs, p=p))) for _ in range(batches)]  # unsorted
    tables = {span: IdRows(hot, span) for span in (0, TABLE_SPAN)}
    hits = np.mean([np.isin(b, hot).mean() for b in batch[:5]])

    def step(span: int) -> None:
        for b in batch:
            tables[span].find(b)

    return step, sum(len(b) for b in batch), hits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=5_600_000, help="cell: the cell's vertices with edges")
    ap.add_argument("--lookups", type=int, default=8_000_000, help="cell: endpoints looked up")
    ap.add_argument("--vertices", type=int, default=8_388_608, help="cache: the graph's vertices")
    ap.add_argument("--cached", type=int, default=2_097_152, help="cache: the cached (hottest) vertices")
    ap.add_argument("--batches", type=int, default=200, help="cache: batches of input ids")
    ap.add_argument("--inputs", type=int, default=40_000, help="cache: input ids drawn per batch (before dedup)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    cstep, clook = cell(rng, args.ids, args.lookups)
    kstep, klook, hits = cache(rng, args.vertices, args.cached, args.batches, args.inputs)
    print(f"{'shape':<8} {'lookup':<26} {'median s':>9} {'ns/id':>7} {'vs search':>10}")
    for name, step, looked in (("cell", cstep, clook), ("cache", kstep, klook)):
        s = float(np.median([timed(step, 0, args.lock) for _ in range(args.repeat)]))
        t = float(np.median([timed(step, TABLE_SPAN, args.lock) for _ in range(args.repeat)]))
        print(f"{name:<8} {'binary search (baseline)':<26} {s:>9.2f} {1e9 * s / looked:>7.0f} {1.0:>10.2f}")
        print(f"{name:<8} {'table':<26} {t:>9.2f} {1e9 * t / looked:>7.0f} {s / t:>9.1f}x")
    print(f"(cell: {clook:,} lookups in {args.ids:,} ids; cache: {klook:,} lookups in {args.cached:,} of")
    print(f" {args.vertices:,} ids, {hits:.0%} hits; {args.repeat} repeats)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
