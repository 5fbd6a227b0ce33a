"""What PySpark's per-task garbage collection costs a Python worker, with and without ``freeze_worker_heap``.

    .venv/bin/python bench/worker_gc.py --jobs 30 --modules numpy zarr torch glisp_infer.task

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker; its cost grows with what the
worker has imported (``glisp_spark.worker_heap``). Per module, in one local[2] session, the same jobs of two tasks
run alternately without the freeze (the task unfreezes the heap first) and with it; the table gives the workers'
CPU (from /proc, summed over the worker processes) per task, the medians of --repeats alternations, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _cpu(pid: int) -> float:
    import os

    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _task(module: str, freeze: bool):
    def run(_: int, it):
        import gc
        import importlib
        import os

        importlib.import_module(module)
        if freeze:
            from glisp_spark.worker_heap import freeze_worker_heap

            freeze_worker_heap()
        else:
            gc.unfreeze()  # what a worker without the freeze collects
        list(it)
        yield os.getpid()

    return run


def measure(sc, module: str, freeze: bool, jobs: int, tasks: int = 2) -> tuple[float, float]:
    """Worker CPU ms and wall ms per task over ``jobs`` jobs (after one job that imports the module)."""
    pids = set(sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(_task(module, freeze)).collect())
    c0, t0 = {p: _cpu(p) for p in pids}, time.perf_counter()
    for _ in range(jobs):
        pids |= set(sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(_task(module, freeze)).collect())
    wall = time.perf_counter() - t0
    cpu = sum(_cpu(p) - c0.get(p, 0.0) for p in pids)
    n = jobs * tasks
    return 1000 * cpu / n, 1000 * wall / n


def main() -> int:
    from glisp_core.config import SparkConfig
    from glisp_spark.session import get_spark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modules", nargs="+", default=["numpy", "zarr", "torch", "glisp_infer.task"])
    args = ap.parse_args()
    sc = get_spark(SparkConfig(master="local[2]")).sparkContext
    print(
        "| module imported | worker CPU ms per task: no freeze | with freeze | ratio | wall ms per task: no freeze | with freeze |"
    )
    print("|---|---|---|---|---|---|")
    for m in args.modules:
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.repeats):
            for freeze in (False, True):
                runs[freeze].append(measure(sc, m, freeze, args.jobs))
        med = {f: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for f, r in runs.items()}
        ratio = med[True][0] / med[False][0] if med[False][0] else float("nan")
        print(
            f"| {m} | {med[False][0]:.1f} | {med[True][0]:.1f} | {ratio:.2f} | {med[False][1]:.1f} | {med[True][1]:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
