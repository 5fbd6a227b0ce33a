"""The sharded partition's id lookup: a cell's rows of its edges' endpoints by binary search (the baseline) and
by the table ``spark_jobs.partition.shards.CellView`` builds (the cell's ids dense enough), in the same run.

A cell shaped as R-MAT 23's at p = 8 (three shards): two shards' vertices with edges, 5.6M sorted ids out of
8.4M, and 8M endpoints in row order (random). Each timed step holds the benches' lock; medians of ``--repeat``.

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

from spark_jobs.partition.shards import TABLE_SPAN  # noqa: E402


def timed(fn, lock: str) -> float:
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=int, default=5_600_000, help="the cell's vertices with edges")
    ap.add_argument("--lookups", type=int, default=8_000_000, help="endpoints looked up")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(args.ids * 3 // 2, args.ids, replace=False)).astype(np.int64)
    v = ids[rng.integers(0, args.ids, args.lookups)]
    assert ids[-1] - ids[0] + 1 <= TABLE_SPAN * len(ids)  # the table path's condition

    def search() -> None:
        loc = np.searchsorted(ids, v)
        assert np.array_equal(ids[loc], v)

    def table() -> None:  # built in each step, as a task builds it once per cell
        rows = np.full(int(ids[-1] - ids[0]) + 1, -1, np.int32)
        rows[ids - ids[0]] = np.arange(len(ids), dtype=np.int32)
        assert (rows[v - ids[0]] >= 0).all()

    s = float(np.median([timed(search, args.lock) for _ in range(args.repeat)]))
    t = float(np.median([timed(table, args.lock) for _ in range(args.repeat)]))
    print(f"{'lookup':<28} {'median s':>9} {'vs search':>10}")
    print(f"{'binary search (baseline)':<28} {s:>9.2f} {1.0:>10.2f}")
    print(f"{'table':<28} {t:>9.2f} {s / t:>10.1f}x")
    print(f"({args.lookups:,} lookups in {args.ids:,} ids, {args.repeat} repeats)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
