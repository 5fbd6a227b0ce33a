"""What a client needs besides samples, served by the servers themselves (RPCs ``Routing``, ``HeldOutEdges``).

A trainer may run on a machine that has only the cluster file and network access to the servers. The
client's routing table (replica bits, masters) and the trainer's per-vertex degrees then come from the
servers: each server streams its sorted replica gids, its master gids with their global degrees, and a
header (global vertex count, the fingerprint of the partition run, the dataset schema), in chunks of
``chunk`` ids so that no message nears the gRPC size limit. The client assembles them into a
:class:`ClusterInfo`, exactly what :meth:`RoutingTable.from_partitions` builds from the files.

``client.routing_source`` picks the source: ``files`` (the partition files named by the cluster file,
memory-mapped), ``servers`` (these RPCs), or ``auto`` (files when the dataset directory is readable).
The held-out edges of a link-prediction training run (``glisp link-split``) travel the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glisp_core.config import ClientConfig
from glisp_core.dataset.layout import MANIFEST, DatasetVersion
from glisp_core.dataset.manifest import Manifest
from glisp_core.errors import GlispError, StageError

DEFAULT_CHUNK = 1 << 20
HELDOUT_DIR = "heldout"  # partition/<run>/heldout/: eid, src, dst, etype, split (link-split runs only)


@dataclass
class PartitionInfo:
    """One partition's share of the routing table (what one server streams)."""

    part_id: int
    replica_gids: np.ndarray  # sorted int64
    master_gids: np.ndarray  # sorted int64
    master_out_degree: np.ndarray  # int64 global degrees of master_gids
    master_in_degree: np.ndarray
    owner_gids: np.ndarray | None = None
    split_owner_vertices: int = 0


def partition_info(reader: Any, owner_direction: str | None = None) -> PartitionInfo:
    """A partition's replica and master gids, master degrees and (optionally) owned gids, from its reader."""
    gid = np.asarray(reader.global_id, np.int64)
    mg = np.asarray(reader.master_gids, np.int64)
    lids = np.asarray(reader.to_local(mg), np.int64) if len(mg) else np.empty(0, np.int64)
    info = PartitionInfo(
        part_id=int(reader.part_id),
        replica_gids=gid,
        master_gids=mg,
        master_out_degree=np.asarray(reader.out_degree, np.int64)[lids],
        master_in_degree=np.asarray(reader.in_degree, np.int64)[lids],
    )
    if owner_direction:
        indptr = np.asarray(reader.out_indptr if owner_direction == "out" else reader.in_indptr, np.int64)
        glob = np.asarray(reader.out_degree if owner_direction == "out" else reader.in_degree, np.int64)
        local = np.diff(indptr)
        info.owner_gids = gid[(local == glob) & (local > 0)]
        info.split_owner_vertices = int(((local > 0) & (local < glob)).sum())
    return info


@dataclass
class ClusterInfo:
    """Every partition's routing share plus the dataset facts a trainer needs."""

    num_parts: int
    num_vertices: int
    run: str
    run_fingerprint: str
    schema: dict[str, Any]
    parts: list[PartitionInfo] = field(default_factory=list)

    def degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """Global (out, in) degree of every vertex, indexed by global id (0 for a vertex no one masters)."""
        out = np.zeros(self.num_vertices, np.int64)
        inn = np.zeros(self.num_vertices, np.int64)
        for p in self.parts:
            out[p.master_gids] = p.master_out_degree
            inn[p.master_gids] = p.master_in_degree
        return out, inn

    def routing_table(self, owner_direction: str | None = None):
        """The client's RoutingTable, exactly as ``RoutingTable.from_partitions`` builds it from the files."""
        from glisp_serving.routing import RoutingTable

        n, P = self.num_vertices, self.num_parts
        bits = np.zeros((n, (P + 7) // 8), np.uint8)
        master = np.full(n, -1, np.int32)
        owner = np.full(n, -1, np.int32) if owner_direction else None
        split = 0
        for p in self.parts:
            k = p.part_id
            bits[p.replica_gids, k >> 3] |= np.uint8(1 << (k & 7))
            master[p.master_gids] = k
            if owner is not None:
                if p.owner_gids is None:
                    raise GlispError(f"routing 'owner': partition {k} sent no owners (ask with owners=True)")
                owner[p.owner_gids] = k
                split += p.split_owner_vertices
        if owner is not None and split:
            raise StageError(
                f"routing 'owner': run {self.run} is not an edge-cut for {owner_direction}-edges: {split:,} vertex "
                f"replicas hold only part of their {owner_direction}-edges (use routing 'replicas', or an edge-cut run)"
            )
        return RoutingTable(P, bits, master, owner, owner_direction or "")


def dataset_facts(dv: DatasetVersion, run: str) -> tuple[int, str, dict[str, Any]]:
    """(global vertex count, serialize/<run> fingerprint, schema) from the manifest (servers send these)."""
    m = Manifest.read(dv.manifest_path)
    rec = m.stages.get(f"serialize/{run}")
    return int(m.schema.get("num_vertices", 0)), rec.fingerprint if rec else "", dict(m.schema)


def local_cluster_info(dv: DatasetVersion, run: str, readers: list[Any], owner_direction: str | None = None):
    """ClusterInfo from opened partition readers (the in-process reference and the ``files`` source)."""
    n, fp, schema = dataset_facts(dv, run)
    parts = [partition_info(r, owner_direction) for r in readers]
    if n == 0:
        n = max((int(p.replica_gids[-1]) + 1 for p in parts if len(p.replica_gids)), default=0)
    return ClusterInfo(len(readers), n, run, fp, schema, parts)


# ---------------------------------------------------------------------------------------------- server side
def routing_chunks(info: PartitionInfo, header: dict[str, Any], chunk: int) -> Iterator[Any]:
    """The RoutingChunk messages of one partition: the header first, then every array in slices."""
    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.wire import to_array

    chunk = chunk if chunk > 0 else DEFAULT_CHUNK
    first = pb.RoutingChunk(
        part_id=info.part_id,
        num_parts=int(header["num_parts"]),
        num_vertices=int(header["num_vertices"]),
        run=str(header["run"]),
        run_fingerprint=str(header["run_fingerprint"]),
        schema_json=json.dumps(header["schema"], sort_keys=True),
        split_owner_vertices=info.split_owner_vertices,
    )
    arrays = {
        "replica_gids": info.replica_gids,
        "master_gids": info.master_gids,
        "master_out_degree": info.master_out_degree,
        "master_in_degree": info.master_in_degree,
    }
    if info.owner_gids is not None:
        arrays["owner_gids"] = info.owner_gids
    for name, arr in arrays.items():  # empty arrays still travel once, so the client sees the field
        getattr(first, name).CopyFrom(to_array(_narrow(arr[:0])))
    yield first
    for name, arr in arrays.items():
        for a in range(0, len(arr), chunk):
            msg = pb.RoutingChunk()
            getattr(msg, name).CopyFrom(to_array(_narrow(arr[a : a + chunk])))
            yield msg


def _narrow(a: np.ndarray) -> np.ndarray:
    """int32 on the wire when every value fits (ids and degrees usually do)."""
    a = np.asarray(a, np.int64)
    if len(a) == 0 or (a.min() >= -(2**31) and a.max() < 2**31):
        return a.astype(np.int32)
    return a


def read_heldout(dv: DatasetVersion, run: str) -> dict[str, np.ndarray]:
    """The held-out edges of link-split run ``run`` (StageError naming the run when it has none)."""
    path = dv.partition(run) / HELDOUT_DIR
    if not path.is_dir():
        raise StageError(
            f"run {run!r} serves every edge: link prediction trains on a run without its held-out edges "
            f"(make one with 'glisp link-split {dv.path} --run {run}' and serve that run); no {path}"
        )
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["eid", "src", "dst", "etype", "split"]).sort_by("eid")
    return {
        "src": t["src"].to_numpy().astype(np.int64),
        "dst": t["dst"].to_numpy().astype(np.int64),
        "etype": t["etype"].to_numpy().astype(np.int32),
        "split": t["split"].to_numpy().astype(np.int8),
    }


def heldout_chunks(edges: dict[str, np.ndarray], chunk: int) -> Iterator[Any]:
    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.wire import to_array

    chunk = chunk if chunk > 0 else DEFAULT_CHUNK
    total = len(edges["src"])
    for a in range(0, max(total, 1), chunk):
        yield pb.HeldOutChunk(
            total=total,
            src=to_array(edges["src"][a : a + chunk]),
            dst=to_array(edges["dst"][a : a + chunk]),
            etype=to_array(edges["etype"][a : a + chunk]),
            split=to_array(edges["split"][a : a + chunk]),
        )


# ---------------------------------------------------------------------------------------------- client side
def _stream(addresses: list[str], part: int, method: str, request: Any, cfg: ClientConfig, max_mb: int) -> list:
    """Every message of a server-streaming call to partition ``part``, failing over between its addresses."""
    import grpc

    from glisp_serving.client import SamplingError
    from glisp_serving.proto import sampling_pb2_grpc as pb_grpc
    from glisp_serving.security import open_channel

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


def fetch_cluster_info(spec: Any, cfg: ClientConfig, owner_direction: str | None = None, max_mb: int = 256):
    """ClusterInfo from every server's ``Routing`` stream (needs only the cluster file's addresses)."""
    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.wire import from_array

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
    from glisp_serving.client import SamplingError
    from glisp_serving.proto import sampling_pb2 as pb
    from glisp_serving.wire import from_array

    err: SamplingError | None = None
    for k in range(spec.num_parts):
        try:
            msgs = _stream(spec.addresses[k], k, "HeldOutEdges", pb.HeldOutRequest(), cfg, max_mb)
        except SamplingError as e:
            import grpc

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
    return "files" if (Path(spec.dataset) / MANIFEST).is_file() else "servers"


def load_routing(spec: Any, cfg: ClientConfig, owner_direction: str | None = None, max_mb: int = 256):
    """The client's RoutingTable from the partition files or the servers (``client.routing_source``)."""
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_serving.routing import RoutingTable

    if routing_source(spec, cfg) == "files":
        dv = resolve_dataset(spec.dataset)
        return RoutingTable.from_partitions(dv, spec.run, spec.num_parts, owner_direction=owner_direction)
    return fetch_cluster_info(spec, cfg, owner_direction, max_mb).routing_table(owner_direction)
