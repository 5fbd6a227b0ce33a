"""In-process calibration sweep of the expansion partitioners (same kernels as the Spark rounds).

    .venv/bin/python bench/partition_sweep.py --graphs rmat15ef4 cora lastfm --parts 4 8 16 \
        --configs '{}' '{"algo": "dne"}' '{"step": 0.2}'

A graph is ``rmat<scale>[ef<edge factor>]`` (glisp_testing.graphs.rmat_edges, R-MAT seed 1) or the name of an
``.npz`` under ``--dir`` written by ``bench/real_graphs.py`` (the ingested rows of a real graph, reference
treatment). Each JSON config overrides [partition.<algo>] keys ("algo" picks the algorithm, default
adadne). Prints RF/VB/EB, rounds, the rounds a ``local_finish_edges`` finish would leave to Spark, and
the ratios to the reference DNE and HDRF of the same graph and p (reference_partitions.json).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_graph(name: str, directory: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(eid, src, dst, |V|) of an R-MAT spec or a dumped real graph."""
    from glisp_testing.graphs import rmat_edges

    m = re.fullmatch(r"rmat(\d+)(?:ef(\d+))?", name)
    if m:
        scale, ef = int(m.group(1)), int(m.group(2) or 16)
        s, d = rmat_edges(scale, ef, seed=1)
        return np.arange(len(s)), s, d, 1 << scale
    z = np.load(directory / f"{name}.npz")
    return z["eid"], z["src"], z["dst"], int(z["n"])


def metrics(src: np.ndarray, dst: np.ndarray, part: np.ndarray, p: int) -> dict:
    from spark_jobs.partition.metrics import quality

    epp = np.bincount(part, minlength=p)
    key = np.unique(np.concatenate([src * p + part, dst * p + part]))
    return quality(epp, np.bincount(key % p, minlength=p), len(np.unique(np.concatenate([src, dst]))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="+", required=True)
    ap.add_argument("--parts", type=int, nargs="+", default=[8])
    ap.add_argument("--configs", nargs="+", default=["{}"])
    ap.add_argument("--dir", default="/tmp/glisp-graphs", help="where bench/real_graphs.py wrote the .npz files")
    ap.add_argument("--rows", action="store_true", help="also print rows and vertices per partition")
    args = ap.parse_args()

    from bench.real_graphs import reference
    from glisp_core.config import load_config, with_values
    from spark_jobs.partition.registry import get_partitioner

    cfg = load_config(env={})
    print(
        f"{'graph':18s} {'p':>3s} {'config':34s} {'RF':>7s} {'VB':>6s} {'EB':>6s} {'rounds':>6s} {'spark':>5s} "
        f"{'/DNEref':>7s} {'/HDRF':>6s} {'sec':>6s}"
    )
    for gname in args.graphs:
        eid, s, d, n = load_graph(gname, Path(args.dir))
        for p in args.parts:
            ref = reference(gname, p)
            for arg in args.configs:
                sub = json.loads(arg)
                algo = sub.pop("algo", "adadne")
                top = {k[4:]: sub.pop(k) for k in list(sub) if k.startswith("top.")}
                c = with_values(cfg, "partition", algorithm=algo, parts=p, **top)
                if sub:
                    c = with_values(c, "partition." + algo, **sub)
                left: list[int] = []
                t = time.perf_counter()
                part, rounds = get_partitioner(c.partition).run_local(
                    s, d, n, eid=eid, on_round=lambda st, sel, left=left: left.append(st.remaining)
                )
                dt = time.perf_counter() - t
                cap = c.partition.local_finish_edges
                spark_rounds = sum(1 for r in left if r > cap)  # a round starting above the cap runs in Spark
                q = metrics(s, d, part, p)
                rd = q["rf"] / ref["dne"]["RF"] if "dne" in ref else float("nan")
                rh = q["rf"] / ref["hdrf"]["RF"] if "hdrf" in ref else float("nan")
                label = json.dumps({"algo": algo, **top, **sub}, separators=(",", ":"))[:34]
                print(
                    f"{gname:18s} {p:3d} {label:34s} {q['rf']:7.3f} {q['vb']:6.3f} {q['eb']:6.3f} {rounds:6d} "
                    f"{spark_rounds:5d} {rd:7.3f} {rh:6.3f} {dt:6.1f}",
                    flush=True,
                )
                if args.rows:
                    print("   rows", np.bincount(part, minlength=p).tolist())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
