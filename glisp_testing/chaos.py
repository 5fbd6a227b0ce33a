"""Chaos against a replicated sampling cluster: a seeded random sequence of faults under client load.

While client threads sample through the cluster file, a driver applies, one after another with random
gaps: SIGKILL of one replica, SIGKILL of every replica of a partition, SIGSTOP/SIGCONT of the
supervisor, hot reloads forward and back (``glisp serve-reload``'s path: the supervisor's admin
socket), and hostile requests (a huge message, a huge fanout, too many seeds). A monitor polls every
server's health, Stats (version, RSS) and an empty Gather, so that health can be compared with what the
server actually answers. ``tests/glisp_serving/test_chaos.py`` runs it for about a minute.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KINDS = ("kill_replica", "kill_partition", "stop_supervisor", "reload", "hostile")


@dataclass
class Event:
    kind: str
    start: float
    end: float = 0.0
    detail: str = ""
    outage: tuple[float, float] | None = None  # kill_partition: from the kill until a replica answers again


@dataclass
class Probe:
    t: float
    address: str
    serving: bool | None  # health said SERVING (None: no answer)
    answered: bool | None  # an empty Gather was answered (None: the server was unreachable)
    rss: int
    version: str


@dataclass
class ChaosResult:
    events: list[Event] = field(default_factory=list)
    samples: list[tuple[float, float, str, str]] = field(default_factory=list)  # (start, end, version, error)
    probes: list[Probe] = field(default_factory=list)
    hostile: list[str] = field(default_factory=list)  # how each hostile request was answered

    def errors_outside_outages(self, margin_s: float = 3.0) -> list[str]:
        """Failed requests that started while every partition had a live replica."""
        windows = [(e.outage[0], e.outage[1] + margin_s) for e in self.events if e.outage]
        return [err for t, _, _, err in self.samples if err and not any(a <= t <= b for a, b in windows)]

    def stale_after_reloads(self, bound_s: float) -> list[str]:
        """Batches that started ``bound_s`` after a reload returned and still came from another version."""
        out = []
        reloads = [e for e in self.events if e.kind == "reload" and e.detail.startswith("to ")]
        for i, e in enumerate(reloads):
            until = reloads[i + 1].start if i + 1 < len(reloads) else float("inf")
            want = e.detail[3:]
            out += [
                f"{v} at +{t - e.end:.1f} s after the reload to {want}"
                for t, _, v, err in self.samples
                if not err and e.end + bound_s <= t < until and v != want
            ]
        return out

    def health_lies(self) -> list[Probe]:
        """Probes where health and the answer disagree (SERVING but refused, NOT_SERVING but answered)."""
        return [p for p in self.probes if p.serving is not None and p.answered is not None and p.serving != p.answered]

    def longest_stall(self) -> float:
        """The longest time in which no batch completed."""
        ends = sorted(e for _, e, _, err in self.samples if not err)
        return max(np.diff(ends), default=0.0) if len(ends) > 1 else float("inf")

    def p99_ms(self, kind: str | None) -> float:
        """p99 latency of batches started during events of ``kind`` (None: outside every event)."""
        spans = [(e.start, e.end + 2.0) for e in self.events if kind is None or e.kind == kind]
        inside = [
            (end - t)
            for t, end, _, err in self.samples
            if not err and (any(a <= t <= b for a, b in spans) != (kind is None))
        ]
        return float(np.percentile(inside, 99)) * 1e3 if inside else float("nan")

    def report(self) -> str:
        lines = ["| event | count | p99 ms |", "|---|---|---|"]
        for k in (*KINDS, None):
            n = sum(e.kind == k for e in self.events) if k else len(self.samples)
            lines.append(f"| {k or 'outside events'} | {n} | {self.p99_ms(k):.1f} |")
        ok = sum(1 for s in self.samples if not s[3])
        lines.append(
            f"batches {ok} ok, {len(self.samples) - ok} failed; longest stall {self.longest_stall():.2f} s; "
            f"peak server RSS {max((p.rss for p in self.probes), default=0) >> 20} MiB"
        )
        lines += [f"  {e.start:8.1f} {e.kind} {e.detail}" for e in self.events]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- load and probes
def _client_loop(
    cluster: Path, stop: threading.Event, res: ChaosResult, lock: threading.Lock, seed: int, n: int
) -> None:
    from glisp_core.config import ClientConfig
    from glisp_serving.client.sampling_client import SamplingClient

    rng = np.random.default_rng(seed)
    cfg = ClientConfig(deadline_s=10.0, retries=4, backoff_s=0.05, local_reads="never")
    with SamplingClient(cluster, cfg) as c:
        while not stop.is_set():
            t = time.monotonic()
            try:
                c.sample(rng.choice(n, 64, replace=False), [5, 3], seed=int(rng.integers(1 << 30)))
                row = (t, time.monotonic(), c.version or "", "")
            except Exception as e:  # noqa: BLE001 - every failure is recorded and judged by the test
                row = (t, time.monotonic(), "", f"{type(e).__name__}: {e}")
            with lock:
                res.samples.append(row)


def probe(address: str) -> Probe:
    """Health, Stats and an empty Gather of one server, each with a short deadline."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
    from glisp_serving.wire import to_array

    serving = answered = None
    rss, version = 0, ""
    with grpc.insecure_channel(address) as ch:
        try:
            st = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
            serving = st.status == health_pb2.HealthCheckResponse.SERVING
            s = pb_grpc.SamplingStub(ch).Stats(pb.StatsRequest(), timeout=1.0)
            rss, version = int(s.rss_bytes), s.dataset
            req = pb.GatherRequest(seeds=to_array(np.zeros(0, np.int64)), fanout=1)
            pb_grpc.SamplingStub(ch).Gather(req, timeout=2.0)
            answered = True
        except grpc.RpcError as e:
            if (
                serving is not None
                and e.code() == grpc.StatusCode.UNAVAILABLE
                and "out of service" in (e.details() or "")
            ):
                answered = False
    return Probe(time.monotonic(), address, serving, answered, rss, version)


def _monitor(addrs: list[str], stop: threading.Event, res: ChaosResult, lock: threading.Lock) -> None:
    while not stop.wait(0.5):
        for a in addrs:
            p = probe(a)
            with lock:
                res.probes.append(p)


# ---------------------------------------------------------------------------------------------- faults
def _pid(supervisor_pid: int, addr: str) -> int | None:
    from glisp_testing.soak import server_pid

    try:
        return server_pid(supervisor_pid, addr)
    except RuntimeError:
        return None  # dead, or restarting


def _kill(supervisor_pid: int, addrs: list[str]) -> None:
    pids = [p for p in (_pid(supervisor_pid, a) for a in addrs) if p]  # all found before any is a zombie
    for p in pids:
        os.kill(p, signal.SIGKILL)


def _back(addrs: list[str], deadline: float) -> float:
    """When one of ``addrs`` answers Stats again (``deadline`` if none does by then)."""
    while time.monotonic() < deadline:
        if any(probe(a).version for a in addrs):
            return time.monotonic()
        time.sleep(0.1)
    return deadline


def hostile_requests(address: str) -> list[str]:
    """A message far over the request limit, a huge fanout, too many seeds: the status each got."""
    import grpc

    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
    from glisp_serving.wire import to_array

    cases = {
        "huge message": pb.GatherRequest(seeds=to_array(np.zeros(8 << 20, np.int64)), fanout=1),
        "huge fanout": pb.GatherRequest(seeds=to_array(np.arange(64, dtype=np.int64)), fanout=1 << 30),
        "many seeds": pb.GatherRequest(seeds=to_array(np.zeros(1_100_000, np.int32)), fanout=10),
    }
    out = []
    opts = [("grpc.max_send_message_length", 256 << 20)]
    with grpc.insecure_channel(address, options=opts) as ch:
        for name, req in cases.items():
            try:
                pb_grpc.SamplingStub(ch).Gather(req, timeout=10.0)
                out.append(f"{name}: answered")
            except grpc.RpcError as e:
                out.append(f"{name}: {e.code().name}")
    return out


def _reload(admin: str, dataset: str, run: str) -> str:
    from glisp_serving.cluster.reload import _ask_supervisor
    from glisp_serving.proto import sampling_pb2 as pb

    _ask_supervisor(admin, pb.ReloadRequest(dataset=dataset, run=run), 120.0, None)
    return dataset


def _apply(kind: str, rng: np.random.Generator, ctx: dict, res: ChaosResult) -> Event:
    spec, sup = ctx["spec"], ctx["supervisor_pid"]
    ev = Event(kind, time.monotonic())
    if kind == "kill_replica":
        part, rep = int(rng.integers(spec.num_parts)), int(rng.integers(len(spec.addresses[0])))
        _kill(sup, [spec.addresses[part][rep]])
        ev.detail = f"partition {part} replica {rep}"
    elif kind == "kill_partition":
        part = int(rng.integers(spec.num_parts))
        _kill(sup, spec.addresses[part])
        ev.detail = f"partition {part}"
        ev.outage = (ev.start, _back(spec.addresses[part], ev.start + 120))
    elif kind == "stop_supervisor":
        os.kill(sup, signal.SIGSTOP)
        time.sleep(float(rng.uniform(0.5, 2.0)))
        os.kill(sup, signal.SIGCONT)
    elif kind == "reload":
        ctx["at"] = 1 - ctx["at"]
        dataset, run, name = ctx["versions"][ctx["at"]]
        _reload(spec.admin, dataset, run)
        ev.detail = f"to {name}"
    else:
        addr = spec.addresses[int(rng.integers(spec.num_parts))][0]
        res.hostile += hostile_requests(addr)
        ev.detail = addr
    ev.end = time.monotonic()
    return ev


def run_chaos(
    cluster_file: Path,
    supervisor_pid: int,
    versions: list[tuple[str, str, str]],
    seed: int = 0,
    events: int = 12,
    gap_s: tuple[float, float] = (1.0, 3.0),
    threads: int = 2,
) -> ChaosResult:
    """``events`` faults drawn with ``seed`` against a running ``serve-cluster`` serving ``versions[0]``
    ((dataset path, run, version name) each; reloads alternate between the two)."""
    from glisp_sampling.cluster_facts import routing_from_partitions
    from glisp_serving.cluster.cluster_file import ClusterSpec

    spec = ClusterSpec.read(cluster_file)
    n = routing_from_partitions(spec.dv, spec.run, spec.num_parts).num_vertices
    res, lock, stop = ChaosResult(), threading.Lock(), threading.Event()
    addrs = [a for p in spec.addresses for a in p]
    workers = [
        threading.Thread(target=_client_loop, args=(cluster_file, stop, res, lock, i, n)) for i in range(threads)
    ]
    workers.append(threading.Thread(target=_monitor, args=(addrs, stop, res, lock)))
    for w in workers:
        w.start()
    rng = np.random.default_rng(seed)
    ctx = {"spec": spec, "supervisor_pid": supervisor_pid, "versions": versions, "at": 0}
    try:
        time.sleep(2.0)
        order = np.concatenate([rng.permutation(KINDS) for _ in range(-(-events // len(KINDS)))])[:events]
        for kind in order:  # every kind once before any twice
            ev = _apply(str(kind), rng, ctx, res)
            with lock:
                res.events.append(ev)
            time.sleep(float(rng.uniform(*gap_s)))
        time.sleep(3.0)
    finally:
        stop.set()
        for w in workers:
            w.join()
    return res
