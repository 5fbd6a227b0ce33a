"""EmbeddingLookup latency: ms per batch of random original ids from a published inference run.

Opens the graph's run once (the id map and the array), then times 51 batches per batch size: the first
(its chunks decoded) and the median and p99 of the other 50 (warm); then the cost of re-checking LATEST.

    flock /tmp/glisp-bench.lock .venv/bin/python bench/infer_lookup.py /tmp/incr-bench-s18/g --run bench
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph", help="a graph directory (its LATEST is followed) or URI")
    ap.add_argument("--run", default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=[100, 1000, 10000])
    args = ap.parse_args()

    from glisp_infer.lookup import EmbeddingLookup

    t = time.perf_counter()
    lk = EmbeddingLookup(args.graph, run=args.run, recheck_s=1.0)
    t_open = time.perf_counter() - t
    ids_all = np.asarray(lk._state.by_id, object)
    rng = np.random.default_rng(3)
    for batch in args.batches:
        times = []
        for _ in range(51):
            ids = ids_all[rng.integers(0, len(ids_all), batch)].tolist()
            t = time.perf_counter()
            lk.get(ids)
            times.append(1000 * (time.perf_counter() - t))
        warm = times[1:]
        print(
            f"batch {batch}: first {times[0]:.2f} ms, warm median {np.median(warm):.2f} ms, "
            f"p99 {np.percentile(warm, 99):.2f} ms"
        )
    print(f"open (id map of {len(lk._state.rows):,} rows and the array): {t_open:.2f} s, version {lk.version}")
    t = time.perf_counter()
    for _ in range(100):
        lk.refresh()
    print(f"LATEST re-check: {(time.perf_counter() - t) * 10:.3f} ms each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
