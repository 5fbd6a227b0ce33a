"""Data-parallel training under torchrun (gloo), and a trainer that loses its servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_testing.servers import cluster_servers
from glisp_train.dist import Dist, rank_batches
from tests.glisp_serving.conftest import ROOT, Cluster
from tests.glisp_train.conftest import P2
from tests.tiers import needs


@pytest.mark.parametrize("n,world,batch", [(3, 2, 1), (101, 2, 50), (7, 3, 2), (0, 2, 4), (1000, 4, 64)])
def test_every_process_gets_the_same_number_of_batches(n, world, batch):
    order = np.random.default_rng(0).permutation(n)
    per_rank = [rank_batches(order, Dist(rank=r, world=world), batch) for r in range(world)]
    assert len({len(b) for b in per_rank}) == 1  # nobody waits on a collective another never joins
    sizes = [sum(len(x) for x in b) for b in per_rank]
    assert max(sizes) - min(sizes) <= 1  # balanced shares
    assert all(len(x) <= batch for b in per_rank for x in b)
    got = np.concatenate([x for b in per_rank for x in b]) if n else np.empty(0)
    assert np.array_equal(np.sort(got), np.arange(n))  # every seed exactly once


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def test_two_process_gloo_run_with_an_uneven_last_batch_completes(cora, cora_cluster):
    """3 training seeds over 2 processes at batch size 1: shares of 2 and 1, so the second process's last
    batch is empty; it still joins every gradient all-reduce and the run completes and publishes."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd = torchrun + [
        "-m",
        "glisp_app.cli",
        "train",
        "--cluster",
        str(cora_cluster.cluster_file),
        "--epochs",
        "2",
        "--batch-size",
        "1",
        "--name",
        "gloo-uneven",
        "--set",
        "train.hidden=16",
        "--set",
        "train.split=[0.0012, 0.05, 0.05]",
        "--set",
        "train.prefetch=1",
    ]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = read_manifest(cora.dv).stage("train/gloo-uneven")
    assert rec.params["world_size"] == 2 and rec.counts["train_vertices"] == 3
    for e in rec.metrics["epochs"]:
        assert e["examples"] == 3 and e["batches"] == 4  # 2 batches per process, one of them empty
    assert rec.metrics["test_acc"] >= 0


@pytest.fixture
@needs("servers")
def doomed_cluster(cora, tmp_path):
    c = Cluster(cora.dv, P2, tmp_path)
    yield c
    c.stop()


def test_killing_the_servers_mid_epoch_ends_training_with_an_error_naming_the_partition(doomed_cluster, tmp_path):
    deadline = 5.0
    cmd = [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "train",
        "--cluster",
        str(doomed_cluster.cluster_file),
        "--epochs",
        "1000",
        "--batch-size",
        "8",
        "--output",
        str(tmp_path / "out"),
        "--set",
        "train.hidden=16",
        "--set",
        f"client.deadline_s={deadline}",
    ]
    supervisor = psutil.Process(doomed_cluster.proc.pid)
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while True:  # one log line per epoch: the second epoch is under way once the first is reported
            line = p.stderr.readline()
            assert line or p.poll() is None, f"trainer exited early: {p.stderr.read()}"
            if line.startswith("epoch 1:"):
                break
        servers = list(cluster_servers(doomed_cluster.proc.pid).values())
        assert len(servers) == 2
        supervisor.suspend()  # no restarts: a forked restart is back within a second, inside the trainer's retries
        t0 = time.monotonic()
        for s in servers:
            s.send_signal(signal.SIGKILL)
        watchdog = threading.Timer(60, p.kill)  # a trainer that never gives up fails the test, not hangs it
        watchdog.start()
        err = ""
        while "glisp train: error:" not in err:  # the error, as the user sees it
            line = p.stderr.readline()
            if not line:
                break
            err += line
        elapsed = time.monotonic() - t0
        if "glisp train: error:" in err:  # it gave up; what is left is unwinding, which the watchdog must not cut
            watchdog.cancel()
        rc = p.wait(timeout=120)  # the interpreter unwinds (torch, numba, grpc: tens of seconds on a loaded machine)
        err += p.stderr.read()
        watchdog.cancel()
    finally:
        if p.poll() is None:
            p.kill()
        supervisor.resume()
    assert rc == 1
    assert "glisp train: error: partition " in err and ("UNAVAILABLE" in err or "DEADLINE_EXCEEDED" in err), err
    assert "Traceback" not in err
    assert elapsed < deadline, elapsed  # retries with backoff end well inside the RPC deadline


def test_trainers_as_spark_tasks_through_torch_distributor(spark, cora, cora_cluster, tmp_path):
    """``glisp train --cluster FILE --spark-processes 2``: pyspark's TorchDistributor runs two trainers as barrier
    tasks of the session (``local[2]``), each a torchrun process joining one gloo group; the cluster file's text
    is their only input. Rank 0 writes the run; both processes took part (world size 2, every training vertex
    seen once per epoch over the two shares)."""
    from glisp_train.spark_launch import train_on_spark
    from tests.glisp_train.conftest import train_cfg

    out = tmp_path / "spark-run"
    cfg = train_cfg(epochs=1, hidden=16, batch_size=256)
    assert train_on_spark(cfg, str(cora_cluster.cluster_file), 2, output=str(out), spark=spark) == 0
    doc = json.loads((out / "run.json").read_text())
    assert doc["params"]["world_size"] == 2 and doc["params"]["source"] == "cluster"
    assert doc["metrics"]["epochs"][0]["examples"] == doc["counts"]["train_vertices"]
    assert (out / "weights.pt").exists() and doc["metrics"]["test_acc"] > 0
