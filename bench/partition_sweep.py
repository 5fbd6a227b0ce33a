"""In-process calibration sweep of the expansion partitioners (same kernels as the Spark rounds).

    .venv/bin/python bench/partition_sweep.py SCALE P EDGE_FACTOR '{}' '{"step": 0.2}' '{"algo": "dne"}'

Each JSON argument overrides [partition.<algo>] keys ("algo" picks the algorithm, default adadne).
Prints RF/VB/EB, rounds, and how many rounds a 2M-row local finish would leave to Spark.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    import numpy as np

    from glisp_core.config import load_config, with_values
    from spark_jobs.partition.base import get_partitioner
    from spark_jobs.partition.metrics import quality
    from tests.graphs import rmat_edges

    scale, p, ef = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    s, d = rmat_edges(scale, ef, seed=1)
    n = 1 << scale
    cfg = load_config(env={})
    for arg in sys.argv[4:] or ["{}"]:
        sub = json.loads(arg)
        algo = sub.pop("algo", "adadne")
        c = with_values(cfg, "partition", algorithm=algo, parts=p)
        if sub:
            c = with_values(c, "partition." + algo, **sub)
        left: list[int] = []
        t = time.perf_counter()
        part, rounds = get_partitioner(c.partition).run_local(
            s, d, n, log=lambda st, sel, left=left: left.append(st.remaining)
        )
        dt = time.perf_counter() - t
        cap = c.partition.local_finish_edges
        spark_rounds = 1 + sum(1 for r in left if r > cap) if len(s) > cap else 0
        epp = np.bincount(part, minlength=p)
        key = np.unique(np.concatenate([s * p + part, d * p + part]))
        q = quality(epp, np.bincount(key % p, minlength=p), len(np.unique(np.concatenate([s, d]))))
        print(
            f"rmat{scale} ef{ef} p={p} {algo} {sub} {q} rounds {rounds} spark_rounds {spark_rounds} {dt:.1f}s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
