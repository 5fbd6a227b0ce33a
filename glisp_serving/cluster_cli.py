"""``glisp serve-cluster DATASET``: one ``glisp serve`` process per partition on this machine.

Starts every server on 127.0.0.1 with a free port (each reports its bound port through a port file),
waits until all report SERVING over grpc.health.v1, writes the cluster file, and stays in the
foreground. SIGTERM/SIGINT (or any server dying) stops every child: SIGTERM, wait for the drain, then
SIGKILL what is left. Exit code 0 after a requested stop, 1 when a server failed.
"""

from __future__ import annotations

import argparse
import os
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset version: <root>/<graph>/<version>, <graph>[/<version>]")
    p.add_argument("--run", help="serialized partition run (default: the latest published)")
    p.add_argument("--cluster-file", default="glisp-cluster.json", help="where to write the cluster file")
    p.add_argument("--threads", type=int, help="threads per server (serve.threads)")
    p.add_argument("--host", default="127.0.0.1", help="address every server binds")


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


def _child_args(args: argparse.Namespace, dataset: str, run: str, part: int, port_file: Path) -> list[str]:
    cmd = [sys.executable, "-m", "glisp_core.cli", "serve", dataset, "--partition", str(part), "--run", run,
           "--port", "0", "--port-file", str(port_file), "--host", args.host]  # fmt: skip
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


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_serving.cluster import ClusterSpec, num_parts_of, resolve_run
    from glisp_serving.security import check_own_client

    cfg = with_values(cfg, "serve", threads=args.threads)
    check_own_client(cfg.serve, cfg.client)
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    run = resolve_run(dv, args.run)
    parts = num_parts_of(dv, run)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    procs: list[subprocess.Popen] = []
    tmpdir = Path(tempfile.mkdtemp(prefix="glisp-cluster-"))
    cluster_file = Path(args.cluster_file).resolve()
    failed = False
    try:
        port_files = [tmpdir / f"part-{k:05d}.port" for k in range(parts)]
        env = dict(os.environ)
        for k in range(parts):
            procs.append(subprocess.Popen(_child_args(args, str(dv.path), run, k, port_files[k]), env=env))
        deadline = time.time() + cfg.serve.start_timeout_s
        addrs: list[str] = []
        for k, (p, pf) in enumerate(zip(procs, port_files, strict=True)):
            while not pf.exists():
                if p.poll() is not None:
                    raise StageError(f"server for partition {k} exited with code {p.returncode} while starting")
                if time.time() > deadline or stop.is_set():
                    raise StageError(f"server for partition {k} did not start within serve.start_timeout_s")
                time.sleep(0.05)
            addrs.append(f"{args.host}:{int(pf.read_text())}")
        for a, p in zip(addrs, procs, strict=True):
            wait_healthy(a, deadline, p, cfg.client)
        ClusterSpec(dataset=str(dv.path), run=run, num_parts=parts, addresses=[[a] for a in addrs]).write(cluster_file)
        print(f"glisp serve-cluster: {parts} servers SERVING; cluster file {cluster_file}", flush=True)
        while not stop.wait(0.2):
            dead = [k for k, p in enumerate(procs) if p.poll() is not None]
            if dead:
                print(f"glisp serve-cluster: server of partition {dead[0]} exited "
                      f"(code {procs[dead[0]].returncode}); stopping all", file=sys.stderr, flush=True)  # fmt: skip
                failed = True
                break
    finally:
        codes = stop_children(procs, cfg.serve.grace_s)
        if cluster_file.exists():
            cluster_file.unlink()
        for f in tmpdir.glob("*"):
            f.unlink()
        tmpdir.rmdir()
    if failed or any(c not in (0, None) for c in codes):
        return 1
    print("glisp serve-cluster: all servers stopped", flush=True)
    return 0
