"""``glisp serve-reload --cluster-file F [DATASET] [--run R]``: move a running cluster to another version.

Two phases over every server the cluster file lists (replicas included): *prepare* (each opens and
warms the new version beside the one it serves; any failure aborts, and nothing has switched), then
*commit* (each switches in one assignment). Clients see at most a few milliseconds in which servers
answer from different versions, and they never mix them within a batch (they restart the batch on the
new version). The cluster file is then rewritten (atomically) to name the new version. A version with
a different number of partitions is refused: that needs a new cluster.

When the cluster file names a supervisor's admin socket (``serve-cluster`` writes it), the command
asks the supervisor, which runs the same two phases over its servers' admin sockets and records the
new version between them (glisp_serving.cluster.supervisor.ClusterState): a server restarted later
serves what its peers serve. ``serve-cluster`` does the same on SIGHUP (to the graph's ``latest``),
which is what a scheduler's reload task sends after ``glisp promote``. Without a supervisor, the
servers must accept ``Reload`` over the network: a token is configured (glisp_serving.admin).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from glisp_core.config import ClientConfig, Config
from glisp_core.errors import GlispError
from glisp_serving.admin import admin_channel
from glisp_serving.cluster.cluster_file import ClusterSpec
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc


class ClusterReloadError(GlispError):
    """A cluster reload that did not happen (every server still serves the old version)."""


ADMIN_SERVICE = "glisp.admin.v1.ClusterAdmin"  # serve-cluster's own Reload, on its admin socket


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default="", help="version to serve (default: the graph's latest)")
    p.add_argument("--cluster-file", default="glisp-cluster.json", help="the running cluster's file")
    p.add_argument("--run", default="", help="serialized run (default: the same run name, else the newest)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a server may take to prepare")


def _call(addr: str, req: pb.ReloadRequest, timeout: float, client: ClientConfig | None) -> pb.ReloadResponse:
    with admin_channel(addr, client) as ch:
        return pb_grpc.SamplingStub(ch).Reload(req, timeout=timeout)


def _prepare_all(
    spec: ClusterSpec, servers: list[str], dataset: str, run: str, timeout: float, client: ClientConfig | None
) -> list[pb.ReloadResponse]:
    """Phase one: every server opens, checks and warms the target; on any refusal the prepared ones drop it."""
    prepared: list[pb.ReloadResponse] = []
    for a in servers:
        try:
            prepared.append(_call(a, pb.ReloadRequest(dataset=dataset, run=run, prepare_only=True), timeout, client))
        except grpc.RpcError as e:
            _abort(servers[: len(prepared)], spec, client)
            raise ClusterReloadError(
                f"reload refused by {a} ({e.code().name}): {e.details()}; nothing switched"
            ) from None
    return prepared


def _abort(servers: list[str], spec: ClusterSpec, client: ClientConfig | None) -> None:
    """Preparing the version a server serves drops what it had prepared (its memory goes back)."""
    for a in servers:
        with contextlib.suppress(grpc.RpcError):
            _call(a, pb.ReloadRequest(dataset=spec.dataset, run=spec.run, prepare_only=True), 30.0, client)


def reload_cluster(
    spec: ClusterSpec,
    dataset: str = "",
    run: str = "",
    timeout: float = 600.0,
    client: ClientConfig | None = None,
    servers: list[str] | None = None,
    decide: Callable[[ClusterSpec], None] = lambda new: None,
) -> tuple[ClusterSpec, list[str]]:
    """Move every server (``servers``: their admin addresses, default the cluster file's) to a version, as
    one transaction: all prepare, or none switches; then ``decide(new spec)`` records the move (the
    supervisor's state and the cluster file) before any server commits, so a server that dies from here
    on is restarted on the new version. Returns the new spec and the servers that did not commit."""
    servers = [a for part in spec.addresses for a in part] if servers is None else servers
    if not servers:
        raise ClusterReloadError("no server of the cluster is up to move; nothing switched")
    prepared = _prepare_all(spec, servers, dataset, run, timeout, client)
    targets = {(r.dataset_path, r.run) for r in prepared}
    if len(targets) != 1:
        _abort(servers, spec, client)
        raise ClusterReloadError(f"servers resolved different versions {sorted(targets)}; nothing switched")
    path, new_run = targets.pop()
    new = ClusterSpec(dataset=path, run=new_run, num_parts=spec.num_parts, addresses=spec.addresses, admin=spec.admin)
    decide(new)
    t, failed = time.perf_counter(), []
    for a in servers:  # name the resolved version, so a latest that moves meanwhile cannot split the cluster
        try:
            _call(a, pb.ReloadRequest(dataset=path, run=new_run), timeout, client)
        except grpc.RpcError as e:
            print(f"glisp serve-reload: {a} did not switch ({e.code().name}: {e.details()})", file=sys.stderr)
            failed.append(a)
    print(
        f"glisp serve-reload: {len(servers) - len(failed)} servers switched to {prepared[0].version} run {new_run} "
        f"(commit window {1e3 * (time.perf_counter() - t):.1f} ms)",
        flush=True,
    )
    return new, failed


def main(args: argparse.Namespace, cfg: Config) -> int:
    path = Path(args.cluster_file)
    spec = ClusterSpec.read(path)
    try:
        if spec.admin:  # serve-cluster moves its servers and its own state together, and rewrites the file
            _ask_supervisor(spec.admin, pb.ReloadRequest(dataset=args.dataset, run=args.run), args.timeout, cfg.client)
            return 0
        new, failed = reload_cluster(spec, args.dataset, args.run, args.timeout, cfg.client)
    except ClusterReloadError as e:
        print(f"glisp serve-reload: {e}", file=sys.stderr, flush=True)
        return 1
    new.write(path)
    return 1 if failed else 0


def _ask_supervisor(address: str, req: pb.ReloadRequest, timeout: float, client: ClientConfig | None) -> None:
    with admin_channel(address, client) as ch:
        call = ch.unary_unary(
            f"/{ADMIN_SERVICE}/Reload",
            request_serializer=pb.ReloadRequest.SerializeToString,
            response_deserializer=pb.ReloadResponse.FromString,
        )
        try:
            r = call(req, timeout=timeout + 60.0)
        except grpc.RpcError as e:
            raise ClusterReloadError(f"{e.details()} ({e.code().name})") from None
    print(f"glisp serve-reload: the cluster serves {r.version} run {r.run} (was {r.previous})", flush=True)
