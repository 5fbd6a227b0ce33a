"""The client's side of ``Routing`` and ``HeldOutEdges``: a routing table and held-out edges from the servers.

``client.routing_source`` picks the source: ``files`` (the partition files named by the cluster file,
memory-mapped), ``servers`` (these RPCs), or ``auto`` (files when the dataset directory is readable).
"""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
import numpy as np

from glisp_core.config import ClientConfig
from glisp_core.dataset.layout import readable_here, resolve_dataset
from glisp_core.errors import GlispError, StageError
from glisp_sampling.cluster_facts import ClusterInfo, PartitionInfo, routing_from_partitions
from glisp_sampling.routing import RoutingTable
from glisp_serving.errors import SamplingError
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
from glisp_serving.security import open_channel
from glisp_serving.wire import from_array


def _stream(addresses: list[str], part: int, method: str, request: Any, cfg: ClientConfig, max_mb: int) -> list:
    """Every message of a server-streaming call to partition ``part``, failing over between its addresses."""

    opts = [("grpc.max_send_message_length", max_mb << 20), ("grpc.max_receive_message_length", max_mb << 20)]
    last: grpc.RpcError | None = None
    for attempt in range(cfg.retries + 1):
        addr = addresses[attempt % len(addresses)]
        with open_channel(addr, cfg, opts) as ch:
            try:
                return list(getattr(pb_grpc.SamplingStub(ch), method)(request, timeout=cfg.deadline_s))
            except grpc.RpcError as e:
                last = e
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == cfg.retries:
                    break
        time.sleep(cfg.backoff_s * (2**attempt))
    assert last is not None
    raise SamplingError(
        f"partition {part} at {addresses}: {method} failed with {last.code().name}: {last.details()}", last.code()
    ) from None


def fetch_cluster_info(
    spec: Any, cfg: ClientConfig, owner_direction: str | None = None, max_mb: int = 256
) -> ClusterInfo:
    """ClusterInfo from every server's ``Routing`` stream (needs only the cluster file's addresses)."""

    req = pb.RoutingRequest(owners=bool(owner_direction), owner_direction=pb.IN if owner_direction == "in" else pb.OUT)
    parts: list[PartitionInfo] = []
    head: Any = None
    for k in range(spec.num_parts):
        msgs = _stream(spec.addresses[k], k, "Routing", req, cfg, max_mb)
        if not msgs:
            raise GlispError(f"partition {k} at {spec.addresses[k]}: Routing returned nothing")
        h = msgs[0]
        if h.part_id != k or h.num_parts != spec.num_parts or h.run != spec.run:
            raise GlispError(
                f"partition {k} at {spec.addresses[k]}: the server holds partition {h.part_id} of {h.num_parts} of "
                f"run {h.run!r}; the cluster file says partition {k} of {spec.num_parts} of run {spec.run!r}"
            )
        head = head or h
        arrays: dict[str, list[np.ndarray]] = {}
        for m in msgs:
            for f, _ in m.ListFields():
                if f.message_type is not None and f.message_type.name == "Array":
                    arrays.setdefault(f.name, []).append(from_array(getattr(m, f.name), f.name).astype(np.int64))
        cat = {name: np.concatenate(v) for name, v in arrays.items()}
        parts.append(
            PartitionInfo(
                part_id=k,
                replica_gids=cat["replica_gids"],
                master_gids=cat["master_gids"],
                master_out_degree=cat["master_out_degree"],
                master_in_degree=cat["master_in_degree"],
                owner_gids=cat.get("owner_gids"),
                split_owner_vertices=int(h.split_owner_vertices),
                master_vtype=cat.get("master_vtype"),
                edge_triples=cat["edge_triples"].reshape(-1, 3) if "edge_triples" in cat else None,
            )
        )
    return ClusterInfo(
        spec.num_parts,
        int(head.num_vertices),
        head.run,
        head.run_fingerprint,
        json.loads(head.schema_json or "{}"),
        parts,
    )


def fetch_heldout(spec: Any, cfg: ClientConfig, max_mb: int = 256) -> dict[str, np.ndarray]:
    """The held-out edges of the served link-split run, from the first partition that answers."""
    err: SamplingError | None = None
    for k in range(spec.num_parts):
        try:
            msgs = _stream(spec.addresses[k], k, "HeldOutEdges", pb.HeldOutRequest(), cfg, max_mb)
        except SamplingError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                raise StageError(str(e).split(": ", 2)[-1]) from None
            err = e
            continue
        out = {
            name: np.concatenate([from_array(getattr(m, name), name) for m in msgs])
            for name in ("src", "dst", "etype", "split")
        }
        if len(out["src"]) != msgs[0].total:
            raise GlispError(f"partition {k}: HeldOutEdges sent {len(out['src'])} of {msgs[0].total} edges")
        return {
            "src": out["src"].astype(np.int64),
            "dst": out["dst"].astype(np.int64),
            "etype": out["etype"].astype(np.int32),
            "split": out["split"].astype(np.int8),
        }
    assert err is not None
    raise err


def routing_source(spec: Any, cfg: ClientConfig) -> str:
    """``files`` or ``servers``, resolving ``auto`` by whether the cluster file's dataset is readable here."""
    src = getattr(cfg, "routing_source", "auto")
    if src != "auto":
        return src
    return "files" if readable_here(spec.dataset) else "servers"


def load_routing(spec: Any, cfg: ClientConfig, owner_direction: str | None = None, max_mb: int = 256) -> RoutingTable:
    """The client's RoutingTable from the partition files or the servers (``client.routing_source``)."""

    if routing_source(spec, cfg) == "files":
        dv = resolve_dataset(spec.dataset)
        return routing_from_partitions(dv, spec.run, spec.num_parts, owner_direction=owner_direction)
    return fetch_cluster_info(spec, cfg, owner_direction, max_mb).routing_table(owner_direction)
