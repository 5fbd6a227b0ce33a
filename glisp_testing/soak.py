"""Soak load against a replicated sampling cluster: client threads sample while one replica is SIGKILLed and
restarted by ``serve-cluster``'s supervision. ``bench/soak.py`` runs it for minutes; a test for 40 s.

The failover window runs from the SIGKILL until the restarted server has answered for 2 s.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class SoakResult:
    batches: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (start time, seconds)
    kill_t: float = 0.0
    back_t: float = 0.0
    rss_start: dict[str, int] = field(default_factory=dict)
    rss_end: dict[str, int] = field(default_factory=dict)
    restarted: str = ""
    failovers: int = 0  # requests another replica answered (the clients' metrics, summed)

    def window(self, failover: bool) -> list[float]:
        lo, hi = self.kill_t, (self.back_t or self.kill_t) + 2.0
        return [d for t, d in self.latencies if (lo <= t <= hi) == failover]

    def drift_mib(self) -> dict[str, float]:
        return {a: (self.rss_end[a] - self.rss_start[a]) / 2**20 for a in self.rss_start if a in self.rss_end}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) * 1e3 if xs else float("nan")


def _rss(addr: str) -> int:
    import grpc

    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.proto import sampling_pb2_grpc as pb_grpc

    with grpc.insecure_channel(addr) as ch:
        return int(pb_grpc.SamplingStub(ch).Stats(pb.StatsRequest(), timeout=5).rss_bytes)


def server_pid(supervisor_pid: int, addr: str) -> int:
    """The ``glisp serve`` process of ``serve-cluster`` listening on ``addr``'s port."""
    import psutil

    port = int(addr.rsplit(":", 1)[1])
    for child in psutil.Process(supervisor_pid).children(recursive=True):  # forked: under the fork server
        try:
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in child.net_connections("tcp")):
                return child.pid
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    raise RuntimeError(f"no serve-cluster child listens on {addr}")


def _client_loop(
    cluster: Path,
    stop: threading.Event,
    res: SoakResult,
    lock: threading.Lock,
    seed: int,
    num_vertices: int,
    batch: int,
    fanouts: list[int],
) -> None:
    from glisp_core.config import ClientConfig
    from glisp_serving.client.sampling_client import SamplingClient

    rng = np.random.default_rng(seed)
    cfg = ClientConfig(deadline_s=10.0, retries=4, backoff_s=0.05, local_reads="never")
    with SamplingClient(cluster, cfg) as c:
        while not stop.is_set():
            seeds = rng.choice(num_vertices, batch, replace=False)
            t = time.monotonic()
            try:
                c.sample(seeds, fanouts, seed=int(rng.integers(1 << 30)))
                with lock:
                    res.batches += 1
                    res.latencies.append((t, time.monotonic() - t))
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    res.errors.append(f"{type(e).__name__}: {e}")
    with lock:
        res.failovers += c.metrics.failovers


def soak(
    cluster: Path,
    supervisor_pid: int,
    duration_s: float,
    threads: int = 4,
    batch: int = 256,
    fanouts: tuple[int, ...] = (10, 5),
    kill: tuple[int, int] = (0, 1),
) -> SoakResult:
    """Run the soak against a running ``serve-cluster`` (its pid restarts the killed replica)."""
    spec = json.loads(Path(cluster).read_text())
    addrs = [a for p in spec["addresses"] for a in p]
    victim = spec["addresses"][kill[0]][kill[1]]
    from glisp_sampling.cluster_facts import routing_from_partitions
    from glisp_serving.cluster.cluster_file import ClusterSpec

    cs = ClusterSpec.read(cluster)
    n = routing_from_partitions(cs.dv, cs.run, cs.num_parts).num_vertices
    res, lock, stop = SoakResult(restarted=victim), threading.Lock(), threading.Event()
    workers = [
        threading.Thread(target=_client_loop, args=(Path(cluster), stop, res, lock, i, n, batch, list(fanouts)))
        for i in range(threads)
    ]
    for w in workers:
        w.start()
    t0 = time.monotonic()
    time.sleep(min(5.0, duration_s / 10))  # past the clients' first connections
    res.rss_start = {a: _rss(a) for a in addrs if a != victim}
    time.sleep(max(0.0, duration_s / 3 - (time.monotonic() - t0)))
    res.kill_t = time.monotonic()
    os.kill(server_pid(supervisor_pid, victim), signal.SIGKILL)
    while not res.back_t and time.monotonic() - t0 < duration_s:
        try:
            _rss(victim)
            res.back_t = time.monotonic()
        except Exception:  # noqa: BLE001 - not back yet
            time.sleep(0.1)
    time.sleep(max(0.0, duration_s - (time.monotonic() - t0)))
    res.rss_end = {a: _rss(a) for a in addrs if a != victim}
    stop.set()
    for w in workers:
        w.join()
    return res


def report(res: SoakResult, duration_s: float, threads: int) -> str:
    steady, failover = res.window(False), res.window(True)
    back = f"{res.back_t - res.kill_t:.1f} s" if res.back_t else "not back"
    drift = res.drift_mib()
    lines = [
        f"soak {duration_s:.0f} s, {threads} client threads, SIGKILL of {res.restarted} at "
        f"{duration_s / 3:.0f} s (restarted and SERVING after {back})",
        "| batches | errors | p50 steady ms | p99 steady ms | p50 failover ms | p99 failover ms | max RSS drift MiB |",
        "|---|---|---|---|---|---|---|",
        f"| {res.batches} | {len(res.errors)} | {_pct(steady, 50):.1f} | {_pct(steady, 99):.1f} | "
        f"{_pct(failover, 50):.1f} | {_pct(failover, 99):.1f} | {max(drift.values(), default=0):+.1f} |",
        "RSS drift per server (MiB): " + ", ".join(f"{a} {d:+.1f}" for a, d in drift.items()),
        f"failovers: {res.failovers} requests answered by another replica after one failed",
    ]
    if res.errors:
        lines.append(f"first error: {res.errors[0]}")
    return "\n".join(lines)
