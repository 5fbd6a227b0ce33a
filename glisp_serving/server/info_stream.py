"""The ``Routing`` and ``HeldOutEdges`` streams of one server, in chunks that stay far below gRPC's size limit.

A trainer may run on a machine that has only the cluster file and network access to the servers. Each server
streams its sorted replica gids, its master gids with their global degrees, and a header (global vertex count,
the fingerprint of the partition run, the dataset schema), in chunks of ``chunk`` ids; the client
(:mod:`glisp_serving.client.info_fetch`) assembles them into a :class:`~glisp_sampling.cluster_facts.ClusterInfo`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from glisp_sampling.cluster_facts import PartitionInfo
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.wire import to_array

DEFAULT_CHUNK = 1 << 20


def routing_chunks(info: PartitionInfo, header: dict[str, Any], chunk: int) -> Iterator[Any]:
    """The RoutingChunk messages of one partition: the header first, then every array in slices."""
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
    if info.master_vtype is not None:
        arrays["master_vtype"] = info.master_vtype
    if info.edge_triples is not None:
        arrays["edge_triples"] = info.edge_triples.reshape(-1)
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


def heldout_chunks(edges: dict[str, np.ndarray], chunk: int) -> Iterator[Any]:
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
