"""The dynamic cache's gather with chunk copies (a static cache on disk) against in place (one in memory).

A synthetic layer-3-like trace: a static cache of --rows rows of --dim floats on /dev/shm, batches of --batch
vertices (consecutive local ids, as PDS streams them) with --fanout neighbours each drawn with a power-law skew
toward low local ids (PDS puts the high-degree vertices first), 64-row cache chunks, a 5% FIFO with the
admission plan (window 1). ``ChunkCache(..., resident=False)`` copies each admitted chunk into its pool, as on a
disk; ``resident=True`` moves no chunk data. Both must give the same rows, hits, misses and bypasses (checked);
the table gives the medians of --repeats alternating passes (the first pass of each also compiles)::

    flock /tmp/glisp-bench.lock .venv/bin/python bench/infer_cache.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_infer.cache import ChunkCache, StaticCache, batch_chunks, capacity_of, reread_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=330_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--fanout", type=int, default=15)
    ap.add_argument("--batches", type=int, default=700)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.rows
    sc = StaticCache(Path(args.dir), np.arange(n), args.dim, 64)
    assert sc.mm is not None
    sc.mm[:] = rng.standard_normal((n, args.dim), dtype=np.float32)
    nb = (n * rng.power(0.3, size=(args.batches, args.batch * args.fanout))).astype(np.int64)
    own = [np.arange(k * args.batch, (k + 1) * args.batch) % n for k in range(args.batches)]
    needs = [np.concatenate([own[k], nb[k]]) for k in range(args.batches)]
    trace, bounds = batch_chunks(needs, 64)
    admit = reread_plan(trace, bounds, sc.num_chunks, 1)
    rows = sum(len(x) for x in needs)
    times: dict[bool, list[float]] = {False: [], True: []}
    seen: dict[bool, tuple] = {}
    for _ in range(args.repeats):
        for resident in (False, True):
            dyn = ChunkCache(sc, capacity_of(sc.num_chunks, 0.05), "fifo", resident=resident)
            t, sums = time.perf_counter(), []
            for k, x in enumerate(needs):
                out, _ = dyn.gather(x, admit[bounds[k] : bounds[k + 1]])
                sums.append(float(out[:: max(1, len(out) // 16)].sum()))
            times[resident].append(time.perf_counter() - t)
            seen[resident] = (dyn.hits, dyn.misses, dyn.bypassed, sums)
    sc.close()
    if seen[True] != seen[False]:
        raise SystemExit("in place and with copies differ: a bug")
    hits, misses, bypassed, _ = seen[True]
    print(f"{rows:,} rows in {args.batches} batches; hits {hits:,}, misses {misses:,} ({bypassed:,} not admitted)\n")
    print("| dynamic cache | s (median) | ns per row | ratio |\n|---|---|---|---|")
    base = float(np.median(times[False]))
    for resident, name in ((False, "chunk copies (static cache on disk)"), (True, "in place (static cache in memory)")):
        med = float(np.median(times[resident]))
        print(f"| {name} | {med:.2f} | {1e9 * med / rows:.0f} | {med / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
