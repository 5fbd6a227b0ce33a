"""Where the pipeline's time and bytes go by store and by cluster: an S3 root against a local root, and a
standalone two-worker cluster against ``local[2]``, on the same R-MAT input (default scale 18, p = 4).

    flock /tmp/glisp-bench.lock .venv/bin/python bench/storage.py --scale 18 --parts 4

Every run is a real ``glisp pipeline`` subprocess (ingest, partition, serialize, reorder) with its own JVM:
- ``local[2]``, root on the local disk, input a local Parquet file (the baseline of both comparisons);
- ``local[2]``, root ``s3://`` on a moto S3 server on 127.0.0.1, input in the bucket;
- a standalone master + 2 workers (``glisp_testing.standalone``: own mount namespace, private /tmp, the
  driver's virtualenv hidden), root on the local disk under /var/tmp (the one thing the workers share).

Per stage it prints the wall time (the pipeline's own ``stage=... seconds=`` line), the bytes of the
published output (sizes listed from the store), and the bytes moved: to and from the store for S3 (a
counting TCP proxy in front of moto carries every request of the driver, the JVM and the Python workers,
HTTP headers included), and read from / written to the local disk for the local runs (the kernel's
``read_bytes``/``write_bytes`` of the driver's process tree, sampled when the stage ends; Spark's shuffle
and spill files count too, and reads served from the page cache do not).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from glisp_core.dataset.layout import DatasetVersion, list_versions  # noqa: E402
from glisp_core.dataset.manifest import read_manifest  # noqa: E402
from glisp_core.storage.store import Store  # noqa: E402
from glisp_core.storage.uri import StoreURI, parse_uri  # noqa: E402
from glisp_testing.s3server import CountingProxy, MotoServer, use_only  # noqa: E402
from glisp_testing.standalone import EXECUTOR_CONF, Standalone, driver_env, unavailable  # noqa: E402

BUCKET = "glisp-bench"
DONE = re.compile(r"glisp pipeline: stage=(\w+) status=done seconds=([\d.]+)")
MB = 1e6


@dataclass
class StageRow:
    seconds: float
    moved: tuple[int, int]  # (written, read) bytes while the stage ran
    published: int = 0


@dataclass
class Run:
    name: str
    stages: dict[str, StageRow] = field(default_factory=dict)
    total_s: float = 0.0


_SEEN_IO: dict[tuple[int, float], tuple[int, int]] = {}  # (pid, start time) -> its last (write, read) bytes


def _tree_io(pid: int) -> tuple[int, int]:
    """(write_bytes, read_bytes) of ``pid`` and every descendant seen so far: one that has exited counts with
    its last sample, so the totals only grow (a live-only sum fell when a stage's Python workers exited)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            io = p.io_counters()
            _SEEN_IO[(p.pid, p.create_time())] = (io.write_bytes, io.read_bytes)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return sum(w for w, _ in _SEEN_IO.values()), sum(r for _, r in _SEEN_IO.values())


def run_pipeline(
    name: str,
    args: argparse.Namespace,
    root: StoreURI,
    edges: str,
    master: str,
    conf: dict[str, str],
    env: dict[str, str],
    proxy: CountingProxy | None,
) -> Run:
    """One ``glisp pipeline`` subprocess; the per-stage rows, read from its progress lines as they come."""
    sets = ", ".join(f'"{k}" = "{v}"' for k, v in {"spark.driver.memory": args.driver_memory, **conf}.items())
    cmd = [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "pipeline",
        "--edges",
        edges,
        "--graph",
        "g",
        "--root",
        root.qualified,
        "--parts",
        str(args.parts),
        "--master",
        master,
        "--set",
        f"spark.conf={{{sets}}}",
        "--set",
        "partition.progress=false",
        "--set",
        "ingest.version=v1",
    ]
    run, t0 = Run(name), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    last = proxy.counts() if proxy else _tree_io(proc.pid)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        m = DONE.search(line)
        if m:
            now = proxy.counts() if proxy else _tree_io(proc.pid)
            run.stages[m.group(1)] = StageRow(float(m.group(2)), (now[0] - last[0], now[1] - last[1]))
            last = now
    if proc.wait() != 0:
        raise RuntimeError(f"{name}: glisp pipeline failed:\n{''.join(tail)}")
    run.total_s = time.perf_counter() - t0
    _published(run, root)
    return run


def _published(run: Run, root: StoreURI) -> None:
    """The bytes of each stage's published output, listed from the store."""
    (version,) = list_versions(root, "g")
    dv = DatasetVersion(root, "g", version)
    for stage, rec in read_manifest(dv).stages.items():
        key = stage.split("/", 1)[0]
        if key in run.stages:
            run.stages[key].published += sum(size for _, size in dv.store.files(dv.path / rec.path))


def _write_input(args: argparse.Namespace, work: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glisp_testing.graphs import rmat_edges

    src, dst = rmat_edges(args.scale, args.edge_factor, seed=1)
    path = work / "edges.parquet"
    pq.write_table(pa.table({"src": src, "dst": dst}), path)
    print(f"input: R-MAT scale {args.scale}, {len(src):,} edges, p = {args.parts}, {path.stat().st_size / MB:.1f} MB")
    return path


def _table(title: str, base: Run, other: Run, moved: tuple[str, str]) -> None:
    print(f"\n{title}")
    head = f"{'stage':<10} {base.name + ' s':>12} {other.name + ' s':>14} {'ratio':>6}   "
    head += f"{'published MB':>13} {moved[0]:>22} {moved[1]:>22}"
    print(head)
    ratios = []
    for stage, a in base.stages.items():
        b = other.stages.get(stage)
        if b is None:
            continue
        ratios.append(b.seconds / a.seconds if a.seconds else float("nan"))
        pub = f"{a.published / MB:.1f}/{b.published / MB:.1f}"
        ma = f"{a.moved[0] / MB:.0f}w {a.moved[1] / MB:.0f}r"
        mb = f"{b.moved[0] / MB:.0f}w {b.moved[1] / MB:.0f}r"
        print(f"{stage:<10} {a.seconds:>12.1f} {b.seconds:>14.1f} {ratios[-1]:>6.2f}   {pub:>13} {ma:>22} {mb:>22}")
    print(
        f"{'all':<10} {base.total_s:>12.1f} {other.total_s:>14.1f} {other.total_s / base.total_s:>6.2f}   "
        f"(median stage ratio {statistics.median(ratios):.2f}; totals include each run's JVM start)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=18)
    ap.add_argument("--edge-factor", type=int, default=8)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--executor-memory", default="1500m", help="per standalone executor (within --worker-memory)")
    ap.add_argument("--worker-memory", default="2g", help="what each standalone worker offers its executors")
    ap.add_argument("--worker-tmp", default="4g", help="each worker's private /tmp (a tmpfs: shuffle files, spill)")
    ap.add_argument("--skip", choices=["s3", "standalone"], action="append", default=[])
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="glisp-bench-storage-", dir="/var/tmp"))  # the workers see /var/tmp
    moto = proxy = cluster = None
    try:
        edges = _write_input(args, work)
        env = driver_env()
        base = run_pipeline("local", args, parse_uri(work / "local"), str(edges), "local[2]", {}, env, None)
        if "s3" not in args.skip:
            moto = MotoServer().start()
            proxy = CountingProxy(moto.port)
            use_only(proxy.endpoint, os.environ)  # this process lists the published sizes through it too
            use_only(proxy.endpoint, env)
            moto.create_bucket(BUCKET)
            s3 = parse_uri(f"s3://{BUCKET}/root")
            Store(s3).write_bytes(f"s3://{BUCKET}/in/edges.parquet", edges.read_bytes())
            other = run_pipeline("s3", args, s3, f"s3://{BUCKET}/in/edges.parquet", "local[2]", {}, env, proxy)
            _table(
                "S3 root (moto on 127.0.0.1) against the local root, local[2]",
                base,
                other,
                ("local disk (driver tree)", "S3 wire (up w, down r)"),
            )
        if "standalone" not in args.skip:
            reason = unavailable()
            if reason:
                print(f"\nstandalone cluster skipped: {reason}")
                return 0
            import pyspark

            (work / "logs").mkdir()
            cluster = Standalone(
                work / "logs",
                str(Path(pyspark.__file__).parent),
                worker_memory=args.worker_memory,
                worker_tmp=args.worker_tmp,
            )
            cluster.start()
            conf = {**EXECUTOR_CONF, "spark.executor.memory": args.executor_memory}
            other = run_pipeline(
                "standalone", args, parse_uri(work / "cluster"), str(edges), cluster.url, conf, driver_env(), None
            )
            _table(
                "standalone master + 2 workers against local[2], local root",
                base,
                other,
                ("local disk (driver tree)", "local disk (driver tree)"),
            )
    finally:
        for c in (cluster, proxy, moto):
            if c is not None:
                c.stop() if hasattr(c, "stop") else c.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
