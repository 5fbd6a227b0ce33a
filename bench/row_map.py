"""The inference refresh's start on a snapshot whose vids moved: the keys' job first, in vain, then the join
(what a refresh does when nothing says the vids moved: the baseline), against the join alone writing the keys
(what it does when the partition record says so: ``same_ids`` false), in the same run.

The costs do not depend on whether the vids really moved (each job reads and shuffles the same rows whatever
it finds), so any version with a previous run serves: ``--dataset`` and the run ``--run`` in an earlier
version. Each variant runs in a fresh driver process (a local Spark session, ``--master``) under the benches'
lock; medians of ``--repeat``, the variants in turns. The maps and keys of both are compared at the end.

    .venv/bin/python bench/row_map.py --root /tmp/glisp-scale22 rmat-s22-ef16-seed1/<v2> --run node-sage-adadne-p8
"""

from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VARIANTS = {"kept-then-join": "the keys' job, then the join (baseline)", "join-with-keys": "the join alone, with keys"}


def child(variant: str, root: str, dataset: str, run: str, out: str, master: str) -> None:
    from glisp_core.config import SparkConfig
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_core.dataset.manifest import read_manifest
    from glisp_core.storage.zarr_arrays import open_group
    from glisp_infer.keys import key_type_names
    from glisp_infer.refresh import find_previous
    from glisp_infer.row_map import write_kept_rows, write_prev_rows
    from glisp_infer.store import INDEX_CHUNK, INDEX_KEY, store_url
    from glisp_spark.session import get_spark

    dv = resolve_dataset(dataset, root)
    n = int(read_manifest(dv).schema["num_vertices"])
    found = find_previous(dv, run)
    assert found is not None, f"no earlier version of {dataset} holds infer/{run}"
    pdv, rec = found
    prev_url = store_url(pdv, pdv.path / rec.path)
    url = str(Path(out) / "run.zarr")
    open_group(url, mode="w").create_array(
        INDEX_KEY, shape=(n,), chunks=(min(INDEX_CHUNK, n),), dtype="uint64", fill_value=0
    )
    spark = get_spark(SparkConfig(master=master, ui=False, log_level="ERROR"))
    spark.range(1).collect()  # the session is up before the clock starts
    types, index = key_type_names(dv), pdv.path / rec.path / "index"
    t0 = time.perf_counter()
    if variant == "kept-then-join":
        write_kept_rows(spark, dv, (url, INDEX_KEY), prev_url, str(Path(out) / "refresh"), n)
        t1 = time.perf_counter()
        matched = write_prev_rows(spark, dv, types, index, False, str(Path(out) / "refresh"), n)
    else:
        t1 = t0
        matched = write_prev_rows(spark, dv, types, index, False, str(Path(out) / "refresh"), n, (url, INDEX_KEY))
    t2 = time.perf_counter()
    print(json.dumps({"seconds": t2 - t0, "keys_job_s": t1 - t0, "join_s": t2 - t1, "matched": matched}))


def measure(args: argparse.Namespace, variant: str, out: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", variant, "--root", args.root, "--run", args.run, "--out", str(out)]
    cmd += ["--master", args.master, args.dataset]
    with open("/tmp/glisp-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"{variant} failed:\n{r.stderr[-3000:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="graph/version (a version after the one holding --run)")
    p.add_argument("--root", required=True)
    p.add_argument("--run", required=True, help="the inference run (infer/<run>) in an earlier version")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.root, args.dataset, args.run, args.out, args.master)
        return
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="glisp-rowmap-", dir="/var/tmp") as tmp:
        for i in range(args.repeat):
            for v in VARIANTS:
                out = Path(tmp) / f"{v}-{i}"
                runs[v].append(measure(args, v, out))
                print(f"{v} {i + 1}: {runs[v][-1]}", flush=True)
        _same_results(Path(tmp), args.repeat)
    base = statistics.median(r["seconds"] for r in runs["kept-then-join"])
    print(f"\n{'variant':<16} {'median s':>9} {'keys job s':>11} {'join s':>8} {'ratio':>6}  runs")
    for v, rs in runs.items():
        med = statistics.median(r["seconds"] for r in rs)
        keys = statistics.median(r["keys_job_s"] for r in rs)
        join = statistics.median(r["join_s"] for r in rs)
        each = ", ".join(f"{r['seconds']:.1f}" for r in rs)
        print(f"{v:<16} {med:9.1f} {keys:11.1f} {join:8.1f} {med / base:6.2f}  {each}   ({VARIANTS[v]})")


def _same_results(tmp: Path, repeat: int) -> None:
    """Both variants wrote the same row map and the same keys."""
    from glisp_core.storage.zarr_arrays import open_array
    from glisp_infer import incremental as I
    from glisp_infer.store import INDEX_KEY

    got = []
    for v in VARIANTS:
        d = tmp / f"{v}-{repeat - 1}"
        got.append(
            (
                np.asarray(open_array(I.prev_row_url(str(d / "refresh")), I.PREV_ROW)[:]),
                np.asarray(open_array(str(d / "run.zarr"), INDEX_KEY)[:]),
            )
        )
    for a, b in zip(got[0], got[1], strict=True):
        assert np.array_equal(a, b), "the variants wrote different arrays"
    print("maps and keys: equal in both variants")


if __name__ == "__main__":
    main()
