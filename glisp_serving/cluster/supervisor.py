"""``glisp serve-cluster DATASET``: ``--replicas R`` ``glisp serve`` processes per partition on this machine,
supervised.

Starts every server on ``--host`` with a free port (each reports its bound port through a port file),
waits until all report SERVING over grpc.health.v1, writes the cluster file (every replica's address,
no secrets) and stays in the foreground. A server that dies after it was SERVING is restarted on the
same port (so cluster files and clients stay valid) after a backoff of 0.5 s doubling to 30 s, reset
once it has stayed up a minute; the others keep serving. Restarts are logged and reported by the
server's Stats (``restarts``). A server that fails while the cluster starts is a configuration error:
everything stops, exit 1. SIGTERM/SIGINT stops every child (SIGTERM, the drain, then SIGKILL what is
left), removes the cluster file and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from glisp_core.config import ClientConfig, Config, with_values
from glisp_core.dataset.layout import resolve_dataset
from glisp_core.errors import StageError
from glisp_serving.cluster.cluster_file import ClusterSpec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset version: <root>/<graph>/<version>, <graph>[/<version>]")
    p.add_argument("--run", help="serialized partition run (default: the latest published)")
    p.add_argument("--cluster-file", default="glisp-cluster.json", help="where to write the cluster file")
    p.add_argument("--threads", type=int, help="threads per server (serve.threads)")
    p.add_argument("--host", default="127.0.0.1", help="address every server binds")
    p.add_argument("--replicas", type=int, help="servers per partition (serve.replicas)")


def wait_healthy(
    address: str, deadline: float, proc: subprocess.Popen | None = None, cfg: ClientConfig | None = None
) -> None:
    """Poll grpc.health.v1 at ``address`` until SERVING; StageError at ``deadline`` or if ``proc`` exits.

    ``cfg`` (the ``[client]`` section) secures the channel: a TLS server needs client.tls_ca (and,
    with mutual TLS, client.tls_cert/tls_key) here too."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from glisp_serving.security import open_channel

    with open_channel(address, cfg) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            if proc is not None and proc.poll() is not None:
                raise StageError(f"server at {address} exited with code {proc.returncode} before it was healthy")
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.time() > deadline:
                raise StageError(f"server at {address} not SERVING after the start timeout (serve.start_timeout_s)")
            time.sleep(0.1)


def _child_args(
    args: argparse.Namespace, dataset: str, run: str, part: int, port_file: Path, port: int = 0, restarts: int = 0
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "glisp_app.cli",
        "serve",
        dataset,
        "--partition",
        str(part),
        "--run",
        run,
        "--port",
        str(port),
        "--port-file",
        str(port_file),
        "--host",
        args.host,
        "--restarts",
        str(restarts),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.config:
        cmd += ["--config", args.config]
    for s in args.set:
        cmd += ["--set", s]
    return cmd


def stop_children(procs: list[subprocess.Popen], grace_s: float) -> list[int | None]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.time() + grace_s + 5.0
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return [p.returncode for p in procs]


class Slot:
    """One server process of the cluster (partition ``part``, replica ``replica``) and its restart history."""

    BACKOFF_S, BACKOFF_MAX_S, STABLE_S = 0.5, 30.0, 60.0

    def __init__(self, part: int, replica: int, port_file: Path, cmd: list[str]) -> None:
        self.part, self.replica, self.port_file, self.cmd = part, replica, port_file, cmd
        self.proc = subprocess.Popen(cmd)
        self.port = 0
        self.restarts = 0
        self.failures = 0  # consecutive quick deaths, for the backoff
        self.started = time.monotonic()
        self.restart_at: float | None = None

    @property
    def name(self) -> str:
        return f"partition {self.part} replica {self.replica}"

    def supervise(self, args: argparse.Namespace, dataset: str, run: str) -> None:
        """Schedule a restart of a dead server, and start it when its backoff has passed."""
        now = time.monotonic()
        if self.restart_at is None:
            if self.proc.poll() is None:
                return
            self.failures = 1 if now - self.started > self.STABLE_S else self.failures + 1
            delay = min(self.BACKOFF_MAX_S, self.BACKOFF_S * 2 ** (self.failures - 1))
            self.restart_at = now + delay
            print(
                f"glisp serve-cluster: server of {self.name} on port {self.port} exited (code "
                f"{self.proc.returncode}); restarting it on the same port in {delay:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        elif now >= self.restart_at:
            self.restarts += 1
            self.restart_at, self.started = None, now
            self.cmd = _child_args(args, dataset, run, self.part, self.port_file, self.port, self.restarts)
            self.proc = subprocess.Popen(self.cmd)
            print(
                f"glisp serve-cluster: restarted {self.name} on port {self.port} (restart {self.restarts})",
                file=sys.stderr,
                flush=True,
            )


def _wait_started(
    slots: list[Slot], host: str, deadline: float, stop: threading.Event, client: ClientConfig
) -> list[list[str]]:
    """Every slot's bound port, then every server SERVING; the addresses per partition."""
    for s in slots:
        while not s.port_file.exists():
            if s.proc.poll() is not None:
                raise StageError(f"server for {s.name} exited with code {s.proc.returncode} while starting")
            if time.time() > deadline or stop.is_set():
                raise StageError(f"server for {s.name} did not start within serve.start_timeout_s")
            time.sleep(0.05)
        s.port = int(s.port_file.read_text())
    for s in slots:
        wait_healthy(f"{host}:{s.port}", deadline, s.proc, client)
    parts = 1 + max(s.part for s in slots)
    return [[f"{host}:{s.port}" for s in slots if s.part == k] for k in range(parts)]


def _reload(spec: ClusterSpec, cluster_file: Path, client: ClientConfig) -> ClusterSpec:
    """SIGHUP: every server to the graph's latest, two-phase; the cluster file names it after."""
    from glisp_serving.cluster.reload import ClusterReloadError, reload_cluster

    try:
        new = reload_cluster(spec, client=client)
    except ClusterReloadError as e:
        print(f"glisp serve-cluster: {e}", file=sys.stderr, flush=True)
        return spec
    new.write(cluster_file)
    return new


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_serving.cluster.cluster_file import num_parts_of, resolve_run
    from glisp_serving.security import check_own_client

    cfg = with_values(cfg, "serve", threads=args.threads)
    check_own_client(cfg.serve, cfg.client)
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    run = resolve_run(dv, args.run)
    parts = num_parts_of(dv, run)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    hup = threading.Event()  # SIGHUP: hot reload to the graph's latest (glisp_serving.cluster.reload)
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    slots: list[Slot] = []
    tmpdir = Path(tempfile.mkdtemp(prefix="glisp-cluster-"))
    cluster_file = Path(args.cluster_file).resolve()
    replicas = args.replicas or cfg.serve.replicas
    if replicas < 1:
        raise StageError(f"--replicas: at least 1 server per partition (got {replicas})")
    try:
        for k in range(parts):
            for r in range(replicas):
                pf = tmpdir / f"part-{k:05d}-r{r}.port"
                slots.append(Slot(k, r, pf, _child_args(args, str(dv.path), run, k, pf)))
        addrs = _wait_started(slots, args.host, time.time() + cfg.serve.start_timeout_s, stop, cfg.client)
        spec = ClusterSpec(dataset=str(dv.path), run=run, num_parts=parts, addresses=addrs)
        spec.write(cluster_file)
        print(
            f"glisp serve-cluster: {parts} partitions x {replicas} replicas SERVING; cluster file {cluster_file}",
            flush=True,
        )
        while not stop.wait(0.2):
            if hup.is_set():
                hup.clear()
                spec = _reload(spec, cluster_file, cfg.client)
            for s in slots:
                s.supervise(args, spec.dataset, spec.run)  # a restart serves the version the cluster serves now
    finally:
        live = [s for s in slots if s.proc.poll() is None]  # a server waiting for its restart is not a failure
        codes = stop_children([s.proc for s in live], cfg.serve.grace_s)
        if cluster_file.exists():
            cluster_file.unlink()
        for f in tmpdir.glob("*"):
            f.unlink()
        tmpdir.rmdir()
    bad = [f"{s.name} (code {c})" for s, c in zip(live, codes, strict=True) if c not in (0, None)]
    if bad:
        print(f"glisp serve-cluster: servers did not stop cleanly: {', '.join(bad)}", file=sys.stderr, flush=True)
        return 1
    print("glisp serve-cluster: all servers stopped", flush=True)
    return 0
