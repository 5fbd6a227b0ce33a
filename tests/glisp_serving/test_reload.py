"""Hot reload: a running ``serve-cluster`` moves to a new version under client load.

The second version changes 5% of the edges and shifts every feature by +1000 and every label by +1
(mod 4), so each batch shows which version its rows came from: a batch that mixed versions would
show both. Real ``serve-cluster`` and ``glisp serve-reload`` subprocesses; real partitions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from glisp_core.config import ClientConfig
from glisp_serving.client.sampling_client import SamplingClient
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_testing.client_load import ClientLoad, noise
from glisp_testing.servers import cluster_servers
from tests.glisp_serving.conftest import EC_RUN, ROOT, VC_RUN, Cluster


def _serve_reload(cluster_file, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "glisp_app.cli", "serve-reload", *args, "--cluster-file", str(cluster_file)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _stats(addr: str) -> pb.StatsResponse:
    with grpc.insecure_channel(addr) as ch:
        return pb_grpc.SamplingStub(ch).Stats(pb.StatsRequest(), timeout=5)


def _version_of(batch, graph) -> set[str]:
    """Which version(s) a batch's rows came from, told by labels and features."""
    seeds = batch.seeds.numpy()
    y, x = batch.y.numpy(), batch.x.numpy()
    out = set()
    out |= {"v1"} if np.array_equal(y, graph.labels[seeds]) else set()
    out |= {"v2"} if np.array_equal(y, (graph.labels[seeds] + 1) % 4) else set()
    out |= {"x2"} if (x > 500).all() else ({"x1"} if (x < 500).all() else {"x-mixed"})
    return out


def test_hot_reload_under_load_loses_no_request_and_mixes_no_versions(two_versions, graph, tmp_path, server_processes):
    dv1, dv2 = two_versions
    cluster = Cluster(dv1, EC_RUN, tmp_path, ["--threads", "1"])
    try:
        addrs = [a for p in json.loads(cluster.cluster_file.read_text())["addresses"] for a in p]
        servers = list(cluster_servers(cluster.proc.pid).values())
        stop, lock = threading.Event(), threading.Lock()
        batches, errors = [], []

        def load(seed: int) -> None:
            rng = np.random.default_rng(seed)
            cfg = ClientConfig(deadline_s=10.0, local_reads="never")
            with SamplingClient(cluster.cluster_file, cfg) as c:
                while not stop.is_set():
                    t = time.monotonic()
                    try:
                        b = c.sample(rng.choice(graph.n, 48, replace=False), [4, 3], seed=int(rng.integers(1 << 30)))
                        with lock:
                            batches.append((t, time.monotonic() - t, _version_of(b, graph), c.version))
                    except Exception as e:  # noqa: BLE001 - every failure is a lost request
                        with lock:
                            errors.append(repr(e))

        workers = [threading.Thread(target=load, args=(i,)) for i in range(2)]
        for w in workers:
            w.start()
        time.sleep(3)
        t_reload = time.monotonic()
        r = _serve_reload(cluster.cluster_file, str(dv2.path))
        t_done = time.monotonic()
        assert r.returncode == 0, r.stdout + r.stderr
        time.sleep(3)
        stop.set()
        for w in workers:
            w.join()
        assert errors == [], errors[:3]
        kinds = [k for _, _, k, _ in batches]
        assert all(k in ({"v1", "x1"}, {"v2", "x2"}) for k in kinds), [k for k in kinds if len(k) != 2][:3]
        assert {"v1", "x1"} in kinds and {"v2", "x2"} in kinds
        after = [(k, v) for t, _, k, v in batches if t > t_done + 0.5]
        assert after and all(k == {"v2", "x2"} and v == f"{dv2.graph}/v2" for k, v in after)
        spec = json.loads(cluster.cluster_file.read_text())
        assert spec["dataset"] == str(dv2.path) and all(_stats(a).dataset == f"{dv2.graph}/v2" for a in addrs)
        steady = [d for t, d, _, _ in batches if t < t_reload]
        switch = [d for t, d, _, _ in batches if t_reload <= t <= t_done + 0.5]
        print(
            f"reload gap: p99 {np.percentile(switch, 99) * 1e3:.1f} ms during the switch ({len(switch)} batches) "
            f"vs {np.percentile(steady, 99) * 1e3:.1f} ms steady ({len(steady)})"
        )
        deadline = time.time() + 30  # the old version's files are unmapped once its requests finished
        old = str(dv1.path / "serialize" / EC_RUN)
        while any(old in m.path for s in servers for m in s.memory_maps()):
            assert time.time() < deadline, "the old version is still mapped after the switch"
            time.sleep(0.2)

        with grpc.insecure_channel(addrs[0]) as ch:  # Reload is an admin call: not over the network without a token
            with pytest.raises(grpc.RpcError) as ei:
                pb_grpc.SamplingStub(ch).Reload(pb.ReloadRequest(dataset=str(dv1.path), run=EC_RUN), timeout=60)
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        r = _serve_reload(cluster.cluster_file, str(dv1.path), "--run", VC_RUN)  # another partition count
        assert r.returncode == 1 and "3 partitions" in r.stderr and "serves 2" in r.stderr, r.stdout + r.stderr
        assert all(_stats(a).dataset == f"{dv2.graph}/v2" for a in addrs)  # nothing moved

        from glisp_core.dataset.versions import set_latest

        set_latest(dv1)  # SIGHUP: serve-cluster follows the graph's latest
        cluster.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 120
        while json.loads(cluster.cluster_file.read_text())["dataset"] != str(dv1.path):
            assert time.time() < deadline, "SIGHUP did not move the cluster to latest"
            time.sleep(0.2)
        assert all(_stats(a).dataset == f"{dv1.graph}/v1" for a in addrs)
    finally:
        assert cluster.stop() == 0


def test_a_hot_reload_under_load_is_followed_quietly(two_versions, tmp_path, server_processes):
    """A client process sampling through ``serve-reload``: every request succeeds, its stderr holds no
    traceback, and each client says once, at INFO, which version it follows (counted in its metrics)."""
    dv1, dv2 = two_versions
    cluster = Cluster(dv1, EC_RUN, tmp_path, ["--threads", "1"])
    try:
        load = ClientLoad(cluster.cluster_file, tmp_path, ROOT, threads=4, clients=2)
        load.wait_ready()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "glisp_app.cli",
                "serve-reload",
                str(dv2.path),
                "--cluster-file",
                str(cluster.cluster_file),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        time.sleep(0.5)
        res = load.finish("stop")
    finally:
        assert cluster.stop() == 0
    err = load.stderr()
    assert noise(err) == [], err[-4000:]
    assert res["errors"] == [] and res["hung"] == 0 and res["batches"] > 0, res
    assert res["metrics"]["version_changes"] == 2 and res["metrics"]["failed"] == 0, res["metrics"]  # one per client
    moved = [line for line in err.splitlines() if "the servers moved" in line]
    assert len(moved) == 2 and all(
        line.startswith("INFO glisp.client: ") and f"from {dv1.graph}/v1 to {dv2.graph}/v2" in line for line in moved
    ), err


def test_servers_follow_latest(two_versions, tmp_path, server_processes):
    """serve.follow_latest_s: every server polls the graph's latest and hot-reloads when it moves."""
    from glisp_core.dataset.versions import set_latest

    dv1, dv2 = two_versions
    set_latest(dv1)
    cluster = Cluster(dv1, EC_RUN, tmp_path, ["--threads", "1", "--set", "serve.follow_latest_s=0.2"])
    try:
        addrs = [a for p in json.loads(cluster.cluster_file.read_text())["addresses"] for a in p]
        time.sleep(1.0)  # several polls: latest names the served version, nothing moves
        assert all(_stats(a).dataset == f"{dv1.graph}/v1" for a in addrs)
        set_latest(dv2)
        deadline = time.time() + 120
        while not all(_stats(a).dataset == f"{dv2.graph}/v2" for a in addrs):
            assert time.time() < deadline, "the servers did not follow latest to v2"
            time.sleep(0.2)
    finally:
        assert cluster.stop() == 0


def test_servers_restarted_after_a_reload_serve_the_new_version(two_versions, tmp_path, server_processes):
    """serve-reload moves the supervisor's record with the servers: every replica of a partition killed after
    the reload comes back on the version the cluster serves, and clients keep sampling it."""
    dv1, dv2 = two_versions
    cluster = Cluster(dv1, EC_RUN, tmp_path, ["--replicas", "2", "--threads", "1"])
    try:
        spec = json.loads(cluster.cluster_file.read_text())
        r = _serve_reload(cluster.cluster_file, str(dv2.path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(cluster.cluster_file.read_text())["dataset"] == str(dv2.path)
        victims = [p for (part, _), p in cluster_servers(cluster.proc.pid).items() if part == 1]
        assert len(victims) == 2
        for v in victims:
            v.kill()
        deadline = time.time() + 120
        while True:
            try:
                if all(_stats(a).restarts == 1 for a in spec["addresses"][1]):
                    break
            except grpc.RpcError:
                pass
            assert time.time() < deadline, "the killed replicas were not restarted"
            time.sleep(0.2)
        assert all(_stats(a).dataset == f"{dv2.graph}/v2" for p in spec["addresses"] for a in p)
        with SamplingClient(cluster.cluster_file, ClientConfig(deadline_s=10.0, local_reads="never")) as c:
            c.sample(np.arange(64), [3, 2], seed=1)
            assert c.version == f"{dv2.graph}/v2"
    finally:
        assert cluster.stop() == 0
