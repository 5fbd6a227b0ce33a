"""Where a batch's CPU goes, server and client: per-stage CPU timers over a window of real batches.

Starts ``glisp serve-cluster`` and a client in this process, both with ``GLISP_PROFILE=1``
(:mod:`glisp_sampling.profile`), samples ``--batches`` batches after two warm-up batches (loader,
``--prefetch`` in flight, seed-first fanouts), and prints per stage the CPU milliseconds per batch:
the servers' stages (summed over servers, from the ``Stats`` RPC before and after the window) and the
client's. "not in a stage" is the process's CPU minus its stages: gRPC's C-core threads, asyncio and
the Python between stages. With ``--py-spy`` the client and servers are also sampled by py-spy
(``pip install py-spy``) and the top functions (own time) are printed.

    .venv/bin/python bench/sampling_profile.py --dataset /tmp/glisp-bench-edges/data/rmat18/<version> \\
        --run adadne-p2 --batches 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["GLISP_PROFILE"] = "1"  # before glisp_sampling.profile is imported, here and in the servers

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIGS = {
    "uniform": {"method": "uniform", "features": False, "labels": False},
    "weighted": {"method": "weighted", "features": False, "labels": False},
    "uniform+features": {"method": "uniform", "features": True, "labels": True},
    "typed": {"method": "uniform", "features": False, "labels": False, "typed": True},
}


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def profile_config(client, seeds: np.ndarray, name: str, args) -> dict:
    from glisp_sampling import profile

    kw = dict(CONFIGS[name])
    fanouts = args.fanouts
    if kw.pop("typed", False):  # the edge list bench's two derived types, the same totals
        from sampling_edges import configurations

        fanouts = configurations(args.fanouts)["typed"]["fanouts"]
    order = np.resize(seeds, args.batch_size * (args.batches + 2))
    it = client.loader(order, args.batch_size, fanouts, shuffle=False, prefetch=args.prefetch, **kw)
    next(it)
    next(it)
    s0, c0, t0 = client.stats(), profile.snapshot(), time.perf_counter()
    n = edges = 0
    for b in it:
        n += 1
        edges += b.num_sampled_edges
    wall = time.perf_counter() - t0
    s1, c1 = client.stats(), profile.snapshot()
    server_stages: dict[str, float] = {}
    server_cpu = 0.0
    for a, b in zip(s0, s1, strict=True):
        for k, v in diff(dict(b["stage_cpu_seconds"]), dict(a["stage_cpu_seconds"])).items():
            server_stages[k] = server_stages.get(k, 0.0) + v
        server_cpu += b["process_cpu_seconds"] - a["process_cpu_seconds"]
    client_stages = diff(c1["stages_s"], c0["stages_s"])
    client_cpu = c1["process_cpu_s"] - c0["process_cpu_s"]
    return {
        "config": name,
        "batches": n,
        "edges_per_batch": edges / n,
        "wall_s": wall,
        "server_cpu_ms": 1e3 * server_cpu / n,
        "client_cpu_ms": 1e3 * client_cpu / n,
        "server_stages_ms": {k: 1e3 * v / n for k, v in server_stages.items()},
        "client_stages_ms": {k: 1e3 * v / n for k, v in client_stages.items()},
    }


NESTED = {"client.block": ["client.relabel"]}  # stage -> stages timed inside it


def table(r: dict) -> str:
    lines = [
        f"**{r['config']}**: {r['batches']} batches, {r['edges_per_batch']:.0f} sampled edges per batch, "
        f"CPU per batch {r['server_cpu_ms'] + r['client_cpu_ms']:.1f} ms = servers "
        f"{r['server_cpu_ms']:.1f} + client {r['client_cpu_ms']:.1f}",
        "",
        "| side | stage | CPU ms per batch | share of the side |",
        "|---|---|---|---|",
    ]
    for side, stages, total in (
        ("servers", r["server_stages_ms"], r["server_cpu_ms"]),
        ("client", r["client_stages_ms"], r["client_cpu_ms"]),
    ):
        own = dict(stages)
        for outer, inner in NESTED.items():
            if outer in own:
                own[outer] -= sum(stages.get(i, 0.0) for i in inner)
        for k, v in sorted(own.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {side} | {k.split('.', 1)[1]} | {v:.2f} | {v / total:.0%} |")
        rest = total - sum(own.values())
        lines.append(f"| {side} | not in a stage (gRPC core, asyncio, glue) | {rest:.2f} | {rest / total:.0%} |")
    return "\n".join(lines) + "\n"


def py_spy(pids: list[int], seconds: float, out: Path) -> list[subprocess.Popen]:
    exe = Path(sys.executable).parent / "py-spy"
    procs = []
    for p in pids:
        cmd = [
            str(exe),
            "record",
            "--pid",
            str(p),
            "--duration",
            str(int(seconds)),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out / f"{p}.txt"),
            "--nonblocking",
            "--threads",
        ]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def top_functions(path: Path, k: int = 15) -> list[tuple[str, float]]:
    """Leaf (own-time) functions of a py-spy raw (collapsed stacks) file, as shares of the samples."""
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        leaf = stack.split(";")[-1]
        own[leaf] = own.get(leaf, 0) + n
        total += n
    return [(f, n / max(total, 1)) for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:k]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="dataset version directory")
    ap.add_argument("--run", required=True)
    ap.add_argument("--configs", nargs="+", default=["uniform", "uniform+features"], choices=list(CONFIGS))
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="kernel threads per server")
    ap.add_argument("--py-spy", action="store_true", help="also sample every process with py-spy")
    ap.add_argument("--unary", action="store_true", help="unary Gather calls, no Gather stream (client.gather_streams)")
    ap.add_argument("--rpc-lookups", action="store_true", help="no co-located reads (client.local_reads = never)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    import tempfile

    from glisp_core.config import ClientConfig
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_serving.client.sampling_client import SamplingClient
    from glisp_serving.cluster.child import stop_cluster
    from glisp_testing.servers import cluster_servers, serve_in

    dv = resolve_dataset(args.dataset)
    work = Path(tempfile.mkdtemp(prefix="glisp-profile-"))
    proc, cf = serve_in(dv, args.run, work, args.threads)
    results = []
    try:
        servers = [p.pid for p in cluster_servers(proc.pid).values()]
        cfg = ClientConfig(
            prefetch=args.prefetch, gather_streams=not args.unary, local_reads="never" if args.rpc_lookups else "auto"
        )
        with SamplingClient(cf, cfg) as client:
            seeds = np.random.default_rng(1).permutation(client.routing.num_vertices)
            for name in args.configs:
                spies = py_spy(servers + [os.getpid()], 8, work) if args.py_spy else []
                r = profile_config(client, seeds, name, args)
                for s in spies:
                    s.wait(timeout=120)
                if spies:
                    r["py_spy"] = {
                        str(p): top_functions(work / f"{p}.txt")
                        for p in servers + [os.getpid()]
                        if (work / f"{p}.txt").exists()
                    }
                results.append(r)
                print(table(r), flush=True)
                for p, top in r.get("py_spy", {}).items():
                    role = "client" if int(p) == os.getpid() else "server"
                    print(f"py-spy {role} {p}: " + "; ".join(f"{f} {s:.0%}" for f, s in top), flush=True)
    finally:
        stop_cluster(proc)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
