"""``glisp serve-cluster DATASET``: ``--replicas R`` ``glisp serve`` processes per partition on this machine,
supervised.

Starts every server on ``--host`` with a free port (each reports its bound port through a port file),
waits until all report SERVING over grpc.health.v1, writes the cluster file (every replica's address,
no secrets) and stays in the foreground. A server that dies after it was SERVING is restarted on the
same port (so cluster files and clients stay valid) after a backoff of 0.5 s doubling to 30 s, reset
once it has stayed up a minute; the others keep serving. Restarts are logged and reported by the
server's Stats (``restarts``). Restarts use the version the cluster serves now: :class:`ClusterState`
is the one record of it, moved by a reload (SIGHUP, or ``glisp serve-reload`` through the admin socket
the cluster file names) as one transaction with the servers. A server that fails while the cluster starts is a configuration error:
everything stops, exit 1. SIGTERM/SIGINT stops every child (SIGTERM, the drain, then SIGKILL what is
left), removes the cluster file and exits 0 (1 when a server did not stop cleanly: :func:`unclean_stops`).
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
from typing import Any

import grpc

from glisp_core.config import ClientConfig, Config, with_values
from glisp_core.dataset.layout import resolve_dataset
from glisp_core.errors import GlispError, StageError
from glisp_serving.admin import admin_address
from glisp_serving.cluster.cluster_file import ClusterSpec
from glisp_serving.cluster.forked import fork_context, start_server
from glisp_serving.server.lifecycle import LEASE_RELEASE_S


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset version: <root>/<graph>/<version>, <graph>[/<version>]")
    p.add_argument("--run", help="serialized partition run (default: the latest published)")
    p.add_argument("--cluster-file", default="glisp-cluster.json", help="where to write the cluster file")
    p.add_argument("--threads", type=int, help="threads per server (serve.threads)")
    p.add_argument("--host", default="127.0.0.1", help="address every server binds")
    p.add_argument("--replicas", type=int, help="servers per partition (serve.replicas)")
    p.add_argument(
        "--start",
        choices=("fork", "exec"),
        default="fork",
        help="fork every server from a warm fork server (default), or start each as a new interpreter",
    )


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
    """A server's ``glisp`` arguments; its admin socket sits beside its port file (a directory only we can open)."""
    cmd = [
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
        "--admin-socket",
        str(port_file.with_suffix(".sock")),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.config:
        cmd += ["--config", args.config]
    for s in args.set:
        cmd += ["--set", s]
    return cmd + ["--set", "serve.follow_latest_s=0"]  # the supervisor follows latest, for the whole cluster


def unclean_stops(names: list[str], codes: list[int | None]) -> list[str]:
    """The servers that did not stop cleanly after :func:`stop_children`'s SIGTERM, with their codes. A server
    ends with 0 once it drained, or when the stop came during its warm-up; one that died of the SIGTERM itself
    (-15) had not yet installed its handlers (the first thing ``glisp serve`` does), so it held nothing to drain:
    a restart the cluster's stop met in its first milliseconds. Any other code, or the SIGKILL after the grace,
    is unclean."""
    clean = (0, None, -signal.SIGTERM)
    return [f"{n} (code {c})" for n, c in zip(names, codes, strict=True) if c not in clean]


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
    """One server process of the cluster (partition ``part``, replica ``replica``) and its restart history;
    ``ctx``: the fork server its process is forked from (:mod:`glisp_serving.cluster.forked`), or None."""

    BACKOFF_S, BACKOFF_MAX_S, STABLE_S = 0.5, 30.0, 60.0

    def __init__(
        self, part: int, replica: int, port_file: Path, cmd: list[str], serves: tuple[str, str], ctx: Any = None
    ) -> None:
        self.part, self.replica, self.port_file, self.cmd, self.ctx = part, replica, port_file, cmd, ctx
        self.serves = serves  # (dataset, run) this process was started on
        self.proc = start_server(ctx, cmd, part, replica)
        self.port = 0
        self.restarts = 0
        self.failures = 0  # consecutive quick deaths, for the backoff
        self.started = time.monotonic()
        self.restart_at: float | None = None

    @property
    def name(self) -> str:
        return f"partition {self.part} replica {self.replica}"

    @property
    def admin(self) -> str:
        return admin_address(self.port_file.with_suffix(".sock"))

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
            self.serves = (dataset, run)
            self.proc = start_server(self.ctx, self.cmd, self.part, self.replica)
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


class ClusterState:
    """What the cluster serves: the one record a restart, a reload and the cluster file all follow.

    A reload (SIGHUP, or ``glisp serve-reload`` through the admin socket) is one transaction: every server
    prepares, then the new version is recorded here and in the cluster file, then every server commits.
    A server that dies or fails to commit after the record is killed and restarted on the new version.
    """

    def __init__(
        self, spec: ClusterSpec, slots: list[Slot], cluster_file: Path, client: ClientConfig, host: str
    ) -> None:
        self.spec, self.slots, self.cluster_file, self.client, self.host = spec, slots, cluster_file, client, host
        self._lock = threading.Lock()  # guards spec
        self._reloading = threading.Lock()  # one reload at a time

    def current(self) -> ClusterSpec:
        with self._lock:
            return self.spec

    def _decide(self, new: ClusterSpec) -> None:
        with self._lock:
            self.spec = new
            new.write(self.cluster_file)

    def reload(self, dataset: str = "", run: str = "", timeout: float = 600.0) -> tuple[ClusterSpec, ClusterSpec]:
        """(before, after); ClusterReloadError when nothing switched."""
        from glisp_serving.cluster.reload import reload_cluster

        with self._reloading:
            before = self.current()
            live = self._settled(time.time() + timeout)
            new, failed = reload_cluster(
                before, dataset, run, timeout, self.client, [s.admin for s in live], decide=self._decide
            )
            with self._lock:
                target = (new.dataset, new.run)
                for s in self.slots:
                    if s in live and s.admin not in failed:
                        s.serves = target
                    elif s.serves != target and s.proc.poll() is None:  # missed the commit: on the old version
                        print(
                            f"glisp serve-cluster: {s.name} did not switch; restarting it", file=sys.stderr, flush=True
                        )
                        s.proc.kill()
            return before, new

    def _settled(self, deadline: float) -> list[Slot]:
        """The servers that are up, once those still starting have answered health (or died): a reload
        moves them all; one that is dead or waiting for its restart is restarted on the new version."""
        with self._lock:
            slots = [(s, s.proc) for s in self.slots if s.proc.poll() is None and s.restart_at is None]
        live = []
        for s, proc in slots:
            try:
                wait_healthy(f"{self.host}:{s.port}", deadline, proc, self.client)
                live.append(s)
            except StageError:
                pass  # it died meanwhile: supervise() restarts it on what the cluster serves by then
        return live

    def supervise(self, args: argparse.Namespace) -> None:
        """Restart dead servers on the version the cluster serves now (ordered with a reload's record)."""
        with self._lock:
            for s in self.slots:
                s.supervise(args, self.spec.dataset, self.spec.run)

    def reload_latest(self, only_if_moved: bool = False) -> None:
        """SIGHUP (and serve.follow_latest_s): every server to the graph's latest."""
        from glisp_serving.cluster.reload import ClusterReloadError

        if only_if_moved:
            dv = self.current().dv
            try:
                if str(resolve_dataset(str(dv.root / dv.graph)).path) == self.current().dataset:
                    return
            except (GlispError, OSError) as e:
                print(f"glisp serve-cluster: cannot read the graph's latest ({e})", file=sys.stderr, flush=True)
                return
        try:
            self.reload()
        except ClusterReloadError as e:
            print(f"glisp serve-cluster: {e}", file=sys.stderr, flush=True)

    def admin_server(self, path: Path) -> grpc.Server:
        """``glisp serve-reload``'s way in: Reload on a Unix socket only this user can open."""
        from concurrent.futures import ThreadPoolExecutor

        from glisp_serving.admin import bind_admin_socket
        from glisp_serving.cluster.reload import ADMIN_SERVICE, ClusterReloadError
        from glisp_serving.proto import sampling_pb2 as pb

        def handle(req: pb.ReloadRequest, context: grpc.ServicerContext) -> pb.ReloadResponse:
            try:
                before, after = self.reload(req.dataset, req.run)
            except ClusterReloadError as e:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
                raise AssertionError("unreachable") from None
            name = f"{after.dv.graph}/{after.dv.version}"
            return pb.ReloadResponse(
                version=name,
                previous=f"{before.dv.graph}/{before.dv.version}",
                run=after.run,
                dataset_path=after.dataset,
            )

        server = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="glisp-admin"))
        handler = grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=pb.ReloadRequest.FromString,
            response_serializer=pb.ReloadResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(ADMIN_SERVICE, {"Reload": handler}),))
        bind_admin_socket(server, path)
        server.start()
        return server


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
    admin: grpc.Server | None = None
    slots: list[Slot] = []
    tmpdir = Path(tempfile.mkdtemp(prefix="glisp-cluster-"))
    cluster_file = Path(args.cluster_file).resolve()
    replicas = args.replicas or cfg.serve.replicas
    if replicas < 1:
        raise StageError(f"--replicas: at least 1 server per partition (got {replicas})")
    try:
        ctx = fork_context() if args.start == "fork" else None  # before any thread or channel of ours
        for k in range(parts):
            for r in range(replicas):
                pf = tmpdir / f"part-{k:05d}-r{r}.port"
                cmd = _child_args(args, str(dv.path), run, k, pf)
                slots.append(Slot(k, r, pf, cmd, (str(dv.path), run), ctx))
        addrs = _wait_started(slots, args.host, time.time() + cfg.serve.start_timeout_s, stop, cfg.client)
        spec = ClusterSpec(str(dv.path), run, parts, addrs, admin=admin_address(tmpdir / "admin.sock"))
        state = ClusterState(spec, slots, cluster_file, cfg.client, args.host)
        admin = state.admin_server(tmpdir / "admin.sock")
        spec.write(cluster_file)
        print(
            f"glisp serve-cluster: {parts} partitions x {replicas} replicas SERVING; cluster file {cluster_file}",
            flush=True,
        )
        follow, polled = cfg.serve.follow_latest_s, time.monotonic()
        reloading: threading.Thread | None = None
        while not stop.wait(0.2):
            due = follow > 0 and time.monotonic() - polled >= follow
            if (hup.is_set() or due) and (reloading is None or not reloading.is_alive()):
                polled = time.monotonic()
                kw = {"only_if_moved": not hup.is_set()}
                hup.clear()
                reloading = threading.Thread(target=state.reload_latest, kwargs=kw, name="glisp-reload", daemon=True)
                reloading.start()
            state.supervise(args)  # a restart serves the version the cluster serves now
    finally:
        if admin is not None:
            admin.stop(0)
        live = [s for s in slots if s.proc.poll() is None]  # a server waiting for its restart is not a failure
        # a server's stop: drain_s NOT_SERVING, grace_s for in-flight calls, then its lease's release
        codes = stop_children([s.proc for s in live], cfg.serve.drain_s + cfg.serve.grace_s + LEASE_RELEASE_S)
        if cluster_file.exists():
            cluster_file.unlink()
        for f in tmpdir.glob("*"):
            f.unlink()
        tmpdir.rmdir()
    bad = unclean_stops([s.name for s in live], codes)
    if bad:
        print(f"glisp serve-cluster: servers did not stop cleanly: {', '.join(bad)}", file=sys.stderr, flush=True)
        return 1
    print("glisp serve-cluster: all servers stopped", flush=True)
    return 0
