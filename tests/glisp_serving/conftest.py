"""A real served graph: ingest-contract dataset -> Spark partition runs -> Spark serialize -> servers.

The graph is a small R-MAT (hubs and leaves) with two edge types, weights, timestamps, features and
labels, published in the ingest contract by ``glisp_testing.graphs.write_dataset`` (ingest has its own tests).
Partitioning and serialization are the real stages (``run_partition``, ``run_serialize``) in the
session's one Spark JVM:

- ``vc-p3``: a vertex-cut (``random``: each unordered pair to a seeded hash, so hubs are replicated on
  all three partitions);
- ``ec-p2``: an edge-cut (``metis``: each edge to the METIS owner of its source, DistDGL's layout),
  served by the same server code for the owner-routing comparison. (The hash ``edgecut`` is the same
  routing over another owner rule; the partition tests cover it.)

Servers are real ``glisp serve-cluster`` subprocesses on 127.0.0.1, started once per test module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from glisp_testing.graphs import rmat_edges, write_dataset
from tests.tiers import needs

ROOT = Path(__file__).resolve().parents[2]
MAX_BATCH = 2000  # serve.max_batch of the test clusters (a bigger request must be INVALID_ARGUMENT)
VC_RUN, EC_RUN = "vc-p3", "ec-p2"


@dataclass
class Graph:
    dv: object
    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    weight: np.ndarray
    ts: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    n: int

    def out_edges(self, v: int) -> np.ndarray:
        return np.flatnonzero(self.src == v)

    def in_edges(self, v: int) -> np.ndarray:
        return np.flatnonzero(self.dst == v)


@pytest.fixture(scope="session")
def graph(spark, tmp_path_factory) -> Graph:
    from glisp_core.config import load_config, with_values
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    root = tmp_path_factory.mktemp("serving")
    src, dst = rmat_edges(9, edge_factor=12, seed=4)  # 512 vertices, 6144 edges, a few hubs
    n = 512
    rng = np.random.default_rng(0)
    m = len(src)
    etype = rng.integers(0, 2, m).astype(np.int32)
    weight = rng.uniform(0.1, 4.0, m).astype(np.float32)
    ts = rng.integers(0, 1000, m).astype(np.int64)
    feats = rng.normal(size=(n, 6)).astype(np.float32)
    labels = rng.integers(0, 4, n).astype(np.int64)
    dv = write_dataset(
        root,
        "rmat9",
        src,
        dst,
        num_vertices=n,
        etype=etype,
        edge_types=["cites", "likes"],
        weight=weight,
        ts=ts,
        features=feats,
        labels=labels,
        split=rng.integers(0, 3, n).astype(np.int8),
    )
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    runs = [("random", 3, VC_RUN), ("metis", 2, EC_RUN)]
    for algo, parts, run in runs:
        c = with_values(cfg, "partition", algorithm=algo, parts=parts, name=run, seed=3, progress=False)
        run_partition(spark, c, dv)
        run_serialize(spark, c, dv, run=run)
    return Graph(dv, src, dst, etype, weight, ts, feats, labels, n)


class Cluster:
    """A running ``glisp serve-cluster`` subprocess and its cluster file."""

    def __init__(self, dv, run: str, workdir: Path, extra: list[str] | None = None) -> None:
        self.cluster_file = workdir / f"{run}.cluster.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [
            sys.executable,
            "-m",
            "glisp_app.cli",
            "serve-cluster",
            str(dv.path),
            "--run",
            run,
            "--cluster-file",
            str(self.cluster_file),
            "--threads",
            "2",
            "--set",
            "serve.start_timeout_s=300",
            *(extra or []),
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []  # its output, read as it comes: a full pipe would stall every server
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()
        deadline = time.time() + 300  # generous: a shared 2-core machine under load starts servers slowly
        while not self.cluster_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve-cluster exited {self.proc.returncode}: {self.output()}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError("serve-cluster did not write its cluster file in 300 s")
            time.sleep(0.1)

    def stop(self) -> int:
        return stop_process(self.proc, 30)

    def output(self, last: int | None = None) -> str:
        """What the ended cluster printed (its servers' included), or its ``last`` lines: what a failure says."""
        self._reader.join(10)
        return "".join(self.lines[-last:] if last else self.lines)


def stop_process(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM, wait up to ``timeout`` s for a clean exit, else SIGKILL; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@pytest.fixture(scope="module")
@needs("servers")
def vc_cluster(graph, tmp_path_factory):
    c = Cluster(graph.dv, VC_RUN, tmp_path_factory.mktemp("vc"), ["--set", f"serve.max_batch={MAX_BATCH}"])
    yield c
    c.stop()


@pytest.fixture(scope="module")
@needs("servers")
def ec_cluster(graph, tmp_path_factory):
    c = Cluster(graph.dv, EC_RUN, tmp_path_factory.mktemp("ec"))
    yield c
    c.stop()


@pytest.fixture(scope="session")
def two_versions(spark, graph):
    """v2 of the served graph: 5% of the edges rewired, features + 1000, labels + 1 (mod 4); run ec-p2."""
    from glisp_core.config import load_config, with_values
    from glisp_testing.graphs import write_dataset
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    rng = np.random.default_rng(7)
    src, dst = graph.src.copy(), graph.dst.copy()
    pick = rng.choice(len(src), len(src) // 20, replace=False)
    dst[pick] = rng.integers(0, graph.n, len(pick))
    dv2 = write_dataset(
        graph.dv.root,
        graph.dv.graph,
        src,
        dst,
        num_vertices=graph.n,
        features=graph.features + 1000,
        labels=(graph.labels + 1) % 4,
        version="v2",
    )
    cfg = with_values(load_config(env={}), "serialize", parquet_copy=False)
    c = with_values(cfg, "partition", algorithm="metis", parts=2, name=EC_RUN, seed=3, progress=False)
    run_partition(spark, c, dv2)
    run_serialize(spark, c, dv2, run=EC_RUN)
    return graph.dv, dv2
