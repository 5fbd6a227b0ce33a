"""``glisp serve-reload --cluster-file F [DATASET] [--run R]``: move a running cluster to another version.

Two phases over every server the cluster file lists (replicas included): *prepare* (each opens and
warms the new version beside the one it serves; any failure aborts, and nothing has switched), then
*commit* (each switches in one assignment). Clients see at most a few milliseconds in which servers
answer from different versions, and they never mix them within a batch (they restart the batch on the
new version). The cluster file is then rewritten (atomically) to name the new version. A version with
a different number of partitions is refused: that needs a new cluster.

``serve-cluster`` does the same on SIGHUP (to the graph's ``latest``), which is what a scheduler's
reload task sends after ``glisp promote``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import grpc

from glisp_core.config import ClientConfig, Config
from glisp_core.errors import GlispError
from glisp_serving.cluster.cluster_file import ClusterSpec
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.security import open_channel


class ClusterReloadError(GlispError):
    """A cluster reload that did not happen (every server still serves the old version)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default="", help="version to serve (default: the graph's latest)")
    p.add_argument("--cluster-file", default="glisp-cluster.json", help="the running cluster's file")
    p.add_argument("--run", default="", help="serialized run (default: the same run name, else the newest)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a server may take to prepare")


def _call(addr: str, req: pb.ReloadRequest, timeout: float, client: ClientConfig | None) -> pb.ReloadResponse:
    with open_channel(addr, client) as ch:
        return pb_grpc.SamplingStub(ch).Reload(req, timeout=timeout)


def reload_cluster(
    spec: ClusterSpec, dataset: str = "", run: str = "", timeout: float = 600.0, client: ClientConfig | None = None
) -> ClusterSpec:
    """Prepare on every server, then commit on every server; the cluster spec of the new version."""
    addrs = [a for part in spec.addresses for a in part]
    prepared = []
    for a in addrs:
        try:
            prepared.append(_call(a, pb.ReloadRequest(dataset=dataset, run=run, prepare_only=True), timeout, client))
        except grpc.RpcError as e:
            raise ClusterReloadError(
                f"reload refused by {a} ({e.code().name}): {e.details()}; nothing switched"
            ) from None
    targets = {(r.dataset_path, r.run) for r in prepared}
    if len(targets) != 1:
        raise ClusterReloadError(f"servers resolved different versions {sorted(targets)}; nothing switched")
    path, new_run = targets.pop()
    t = time.perf_counter()
    for a in addrs:  # name the resolved version, so a latest that moves meanwhile cannot split the cluster
        _call(a, pb.ReloadRequest(dataset=path, run=new_run), timeout, client)
    print(
        f"glisp serve-reload: {len(addrs)} servers switched to {prepared[0].version} run {new_run} "
        f"(commit window {1e3 * (time.perf_counter() - t):.1f} ms)",
        flush=True,
    )
    return ClusterSpec(dataset=path, run=new_run, num_parts=spec.num_parts, addresses=spec.addresses)


def main(args: argparse.Namespace, cfg: Config) -> int:
    path = Path(args.cluster_file)
    try:
        new = reload_cluster(ClusterSpec.read(path), args.dataset, args.run, args.timeout, cfg.client)
    except ClusterReloadError as e:
        print(f"glisp serve-reload: {e}", file=sys.stderr, flush=True)
        return 1
    new.write(path)
    return 0
