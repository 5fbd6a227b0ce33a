"""Incremental inference's vertex keys (``index/key``): computed on the driver from the id map through pandas
(the baseline, as builds before 2026-11-30 did) and by Spark tasks chunk by chunk (``glisp_infer.keys``), in
the same run, on a published dataset version.

Each variant runs in a fresh driver process of its own (a local Spark session, ``--master``), which writes the
keys into a new Zarr array and reports its seconds and its peak RSS (``ru_maxrss``: the driver's Python
process only, not the JVM or the workers). Each step holds the benches' lock; medians of ``--repeat``. Both
variants' arrays are compared at the end.

    .venv/bin/python bench/infer_keys.py --root /tmp/glisp-scale rmat-s23-ef16-seed1/<version>
"""

from __future__ import annotations

import argparse
import fcntl
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def driver_keys(dv, url: str) -> None:
    """The baseline: the id map as a pandas frame of text ids on the driver, hashed by pandas, written whole."""
    import pandas as pd

    from glisp_core.dataset.manifest import read_manifest
    from glisp_core.storage.zarr_arrays import open_array

    t = dv.store.read_table(dv.idmap, columns=["vid", "orig_id", "vtype"]).to_pandas()
    names = np.asarray(read_manifest(dv).schema.get("vertex_types") or ["v0"], dtype=object)
    text = pd.Series(names[t["vtype"].to_numpy()], dtype=object).astype(str) + "\x1f" + t["orig_id"].astype(str)
    keys = np.zeros(len(t), np.uint64)
    keys[t["vid"].to_numpy()] = pd.util.hash_array(text.to_numpy(object), categorize=False)
    open_array(url, "key", mode="r+")[:] = keys


def child(variant: str, root: str, dataset: str, url: str, master: str) -> None:
    from glisp_core.config import SparkConfig
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_core.storage.zarr_arrays import open_group
    from glisp_infer.keys import write_keys
    from glisp_infer.store import INDEX_CHUNK
    from glisp_spark.session import get_spark

    dv = resolve_dataset(dataset, root)
    n = int(dv.store.read_table(dv.idmap, columns=["vid"]).num_rows)
    g = open_group(url, mode="w")
    g.create_array("key", shape=(n,), chunks=(min(INDEX_CHUNK, n),), dtype="uint64", fill_value=0)
    spark = get_spark(SparkConfig(master=master, ui=False, log_level="ERROR"))
    spark.range(1).collect()  # the session is up before the clock starts
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    if variant == "driver":
        driver_keys(dv, url)
    else:
        write_keys(spark, dv, url, "key")
    took = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": took, "peak_mb": peak / 1024, "before_mb": base / 1024, "n": n}))


def step(variant: str, args: argparse.Namespace, url: str) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--root", args.root, "--master", args.master, args.dataset]
    with open(args.lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        r = subprocess.run([*cmd, "--url", url], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="graph/version under --root")
    ap.add_argument("--root", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock")
    ap.add_argument("--child", choices=["driver", "tasks"])
    ap.add_argument("--url")
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.root, args.dataset, args.url, args.master)
        return 0
    from glisp_core.storage.zarr_arrays import open_array

    with tempfile.TemporaryDirectory(prefix="glisp-keys-") as tmp:
        runs = {v: [step(v, args, f"{tmp}/{v}") for _ in range(args.repeat)] for v in ("driver", "tasks")}
        same = np.array_equal(np.asarray(open_array(f"{tmp}/driver", "key")[:]), open_array(f"{tmp}/tasks", "key")[:])
    med = {
        v: {k: float(np.median([r[k] for r in rs])) for k in ("seconds", "peak_mb", "before_mb")}
        for v, rs in runs.items()
    }
    d = med["driver"]
    print(
        f"{'keys of ' + args.dataset:<48} {'median s':>9} {'driver peak MB':>15} {'before MB':>10} {'peak vs driver':>15}"
    )
    for v, label in (("driver", "pandas on the driver (baseline)"), ("tasks", "Spark tasks by chunk")):
        m = med[v]
        print(
            f"{label:<48} {m['seconds']:>9.1f} {m['peak_mb']:>15,.0f} {m['before_mb']:>10,.0f} {m['peak_mb'] / d['peak_mb']:>14.2f}x"
        )
    print(f"({runs['tasks'][0]['n']:,} vertices, {args.repeat} repeats, master {args.master}; equal keys: {same})")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
