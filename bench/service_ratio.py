"""The sampling service's rate on two graphs, measured in turns: the ratio the scale ladder's target is about.

This machine's speed moves by a third between runs an hour apart (R-MAT 18's service alone: 1.06M and 0.71M
sampled edges/s in two ladder runs), so a ratio of two rungs measured at different times says little. Here both
rungs' ``serve-cluster`` run at once (each partition of ``--run``, one thread per server) and one client that
only samples (``bench/scale.py --service-rate``: fanouts 15,10, batch 1024, features and labels, three windows
of 8 s) runs against A, then B, ``--rounds`` times, each under the benches' lock. Per round: sampled edges/s and
distinct input vertices/s of each, and B / A; the medians over the rounds.

    .venv/bin/python bench/service_ratio.py /tmp/glisp-scale18:rmat-s18-ef16-seed1/<version> \\
        /tmp/glisp-scale:rmat-s23-ef16-seed1/<version> --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_core.dataset.layout import resolve_dataset  # noqa: E402
from glisp_serving.cluster.child import stop_cluster  # noqa: E402
from glisp_testing.servers import serve_in  # noqa: E402


def windows(cf: Path, lock: str) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "scale.py"), "--service-rate", str(cf)]
    out = subprocess.run((["flock", lock] if lock else []) + cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="ROOT:GRAPH/VERSION of the baseline graph")
    ap.add_argument("b", help="ROOT:GRAPH/VERSION of the graph compared with it")
    ap.add_argument("--run", default="adadne-p8", help="the partition run both serve")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lock", default="/tmp/glisp-bench.lock")
    args = ap.parse_args(argv)
    dvs = [resolve_dataset(x.split(":", 1)[1], x.split(":", 1)[0]) for x in (args.a, args.b)]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            cfs = []
            for dv in dvs:
                proc, cf = serve_in(dv, args.run, Path(tmp), 1)
                procs.append(proc)
                cfs.append(cf)
            rows = []
            for r in range(args.rounds):
                a, b = (windows(cf, args.lock) for cf in cfs)
                rows.append((a, b))
                print(
                    f"round {r + 1}: A {a['service_edges_per_s']:,.0f} edges/s {a['service_inputs_per_s']:,.0f} inputs/s;"
                    f" B {b['service_edges_per_s']:,.0f} edges/s {b['service_inputs_per_s']:,.0f} inputs/s",
                    flush=True,
                )
        finally:
            for proc in procs:
                stop_cluster(proc)
    print(f"\n{'graph':<44} {'edges/s':>11} {'inputs/s':>11} {'edges/batch':>12} {'inputs/batch':>13}")
    for i, dv in enumerate(dvs):
        med = {k: float(np.median([row[i][k] for row in rows])) for k in rows[0][i] if not k.endswith("windows")}
        name = f"{dv.graph}/{dv.version}"[:44]
        print(
            f"{name:<44} {med['service_edges_per_s']:>11,.0f} {med['service_inputs_per_s']:>11,.0f}"
            f" {med['edges_per_batch']:>12,.0f} {med['inputs_per_batch']:>13,.0f}"
        )
    for k, label in (("service_edges_per_s", "sampled edges/s"), ("service_inputs_per_s", "distinct inputs/s")):
        ratios = [row[1][k] / row[0][k] for row in rows]
        print(f"B / A, {label}: median {np.median(ratios):.2f} (rounds {', '.join(f'{x:.2f}' for x in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
