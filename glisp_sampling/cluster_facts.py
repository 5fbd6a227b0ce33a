"""What a client needs besides samples: every partition's routing share and the dataset facts a trainer needs.

A :class:`ClusterInfo` is built either from opened partition files (:func:`local_cluster_info`, the in-process
reference and the ``files`` routing source) or from the servers' ``Routing`` streams (glisp_serving's client);
both give the same :class:`~glisp_sampling.routing.RoutingTable`. The held-out edges of a link-prediction run
(``glisp link-split``) are read here too, for servers and in-process training alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import GlispError, StageError
from glisp_sampling.routing import RoutingTable

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
    master_vtype: np.ndarray | None = None  # vertex type code of each master gid (None: a server before them)
    edge_triples: np.ndarray | None = None  # (k, 3) int64 (src vtype, etype, dst vtype) codes present here


def edge_triples(reader: Any) -> np.ndarray:
    """The distinct (source vertex type, edge type, destination vertex type) codes of a partition's edges.

    A typed graph's edge type names say nothing about the vertex types they join (an undirected ``ACTED_IN``
    joins actors to movies and movies to actors); PyG's heterogeneous view keys edges by these triples.
    One pass over the local edges, only when the graph has several vertex or edge types."""
    m = int(reader.num_edges)
    if m == 0:
        return np.empty((0, 3), np.int64)
    if len(reader.vertex_type_names) <= 1 and len(reader.edge_type_names) <= 1:
        return np.zeros((1, 3), np.int64)
    indptr = np.asarray(reader.out_indptr, np.int64)
    eids = np.arange(m, dtype=np.int64)
    src = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    vs = reader.vertex_type(src).astype(np.int64)
    vd = reader.vertex_type(np.asarray(reader.out_nbr, np.int64)).astype(np.int64)
    et = reader.edge_type(eids).astype(np.int64)
    nv, ne = max(1, len(reader.vertex_type_names)), max(1, len(reader.edge_type_names))
    code = np.unique((vs * ne + et) * nv + vd)
    return np.stack([code // nv // ne, code // nv % ne, code % nv], axis=1)


def partition_info(reader: Any, owner_direction: str | None = None) -> PartitionInfo:
    """A partition's replica and master gids, master degrees and vertex types, its edge type triples and
    (optionally) owned gids, from its reader."""
    gid = np.asarray(reader.global_id, np.int64)
    mg = np.asarray(reader.master_gids, np.int64)
    lids = np.asarray(reader.to_local(mg), np.int64) if len(mg) else np.empty(0, np.int64)
    info = PartitionInfo(
        part_id=int(reader.part_id),
        replica_gids=gid,
        master_gids=mg,
        master_out_degree=np.asarray(reader.out_degree, np.int64)[lids],
        master_in_degree=np.asarray(reader.in_degree, np.int64)[lids],
        master_vtype=np.asarray(reader.vertex_type(lids), np.int64),
        edge_triples=edge_triples(reader),
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

    def vertex_types(self) -> np.ndarray:
        """Vertex type code of every vertex, indexed by global id (GlispError when a server sent none)."""
        vt = np.zeros(self.num_vertices, np.int64)
        for p in self.parts:
            if p.master_vtype is None:
                raise GlispError(f"partition {p.part_id} sent no vertex types (a server older than this client)")
            vt[p.master_gids] = p.master_vtype
        return vt

    def edge_triples(self) -> np.ndarray:
        """The distinct (src vtype, etype, dst vtype) codes of the served edges, sorted, as (k, 3) int64."""
        have = [p.edge_triples for p in self.parts if p.edge_triples is not None]
        if len(have) < len(self.parts):
            raise GlispError("a partition sent no edge type triples (a server older than this client)")
        allt = np.concatenate(have) if have else np.empty((0, 3), np.int64)
        return np.unique(allt.reshape(-1, 3), axis=0)

    def routing_table(self, owner_direction: str | None = None) -> RoutingTable:
        """The client's RoutingTable, exactly as :func:`routing_from_partitions` builds it from the files."""
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
    m = read_manifest(dv)
    rec = m.stages.get(f"serialize/{run}")
    return int(m.schema.get("num_vertices", 0)), rec.fingerprint if rec else "", dict(m.schema)


def local_cluster_info(
    dv: DatasetVersion, run: str, readers: list[Any], owner_direction: str | None = None
) -> ClusterInfo:
    """ClusterInfo from opened partition readers (the in-process reference and the ``files`` source)."""
    n, fp, schema = dataset_facts(dv, run)
    parts = [partition_info(r, owner_direction) for r in readers]
    if n == 0:
        n = max((int(p.replica_gids[-1]) + 1 for p in parts if len(p.replica_gids)), default=0)
    return ClusterInfo(len(readers), n, run, fp, schema, parts)


def routing_from_partitions(
    dv: DatasetVersion, run: str, num_parts: int, owner_direction: str | None = None
) -> RoutingTable:
    """Read every partition's vertex ids (memory-mapped, no checksums) into one compact routing table.

    ``owner_direction`` ("out"/"in") also computes edge-cut owners; StageError when some vertex's
    edges in that direction span several partitions (the run is not an edge-cut for it).
    """
    from glisp_core.partition_format import open_partition

    readers = [open_partition(dv.partition_dir(run, k), verify=False) for k in range(num_parts)]
    return local_cluster_info(dv, run, readers, owner_direction).routing_table(owner_direction)


def read_heldout(dv: DatasetVersion, run: str) -> dict[str, np.ndarray]:
    """The held-out edges of link-split run ``run`` (StageError naming the run when it has none)."""
    path = dv.partition(run) / HELDOUT_DIR
    if not dv.store.is_dir(path):
        raise StageError(
            f"run {run!r} serves every edge: link prediction trains on a run without its held-out edges "
            f"(make one with 'glisp link-split {dv.path} --run {run}' and serve that run); no {path}"
        )
    t = dv.store.read_table(path, columns=["eid", "src", "dst", "etype", "split"]).sort_by("eid")
    return {
        "src": t["src"].to_numpy().astype(np.int64),
        "dst": t["dst"].to_numpy().astype(np.int64),
        "etype": t["etype"].to_numpy().astype(np.int32),
        "split": t["split"].to_numpy().astype(np.int8),
    }
