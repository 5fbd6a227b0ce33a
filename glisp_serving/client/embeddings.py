"""A trainer's side of the learnable node embeddings the servers hold (``glisp_serving.server.embed_rpcs``).

Rows are routed to the partition that masters each vertex, like a Lookup, but always to the partition's
first replica: that is where the table lives (replicas would each apply the updates in their own order and
drift apart). A table does not survive its server, so these calls do not fail over: a failure names the
partition and its address, and training stops rather than continue on freshly initialised rows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import numpy as np

from glisp_core.sparse_embedding import TableSpec
from glisp_serving.errors import SamplingError
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.wire import from_array, to_array

HOLDER = 0  # the replica of each partition that holds the tables


class RemoteEmbeddings:
    """Create, fetch, update, snapshot and release one cluster's embedding tables (coroutines of its loop)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend  # glisp_serving.client.sampling_client.RemoteBackend

    async def _call(self, part: int, method: str, request: Any) -> Any:
        b = self.backend
        try:
            return await getattr(b._stubs[part][HOLDER], method)(request, timeout=b.cfg.deadline_s)
        except grpc.aio.AioRpcError as e:
            addr = b.spec.addresses[part][HOLDER]
            raise SamplingError(
                f"partition {part} at {addr} (the replica holding node embeddings): {method} failed with "
                f"{e.code().name}: {e.details()}",
                e.code(),
            ) from None

    async def create(self, spec: TableSpec) -> int:
        """The table on every partition (or the same one another trainer created); the rows held in all."""
        req = pb.EmbedCreateRequest(
            table=spec.name, dim=spec.dim, seed=spec.seed, lr=spec.lr, eps=spec.eps, version=self.backend.version or ""
        )
        got = await asyncio.gather(*[self._call(k, "EmbedCreate", req) for k in range(self.backend.spec.num_parts)])
        return int(sum(r.rows for r in got))

    def _split(self, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        split = self.backend.routing.split_master(np.asarray(ids, np.int64))
        return [(k, idx) for k, idx in enumerate(split) if len(idx)]

    async def fetch(self, table: str, ids: np.ndarray, dim: int, snapshot: bool = False) -> np.ndarray:
        """Rows of ``ids`` (any order, repeats allowed) as float32 (n, dim)."""
        ids = np.asarray(ids, np.int64)
        where = self._split(ids)
        reqs = [pb.EmbedFetchRequest(table=table, vertices=to_array(ids[i]), snapshot=snapshot) for _, i in where]
        got = await asyncio.gather(*[self._call(k, "EmbedFetch", r) for (k, _), r in zip(where, reqs, strict=True)])
        out = np.empty((len(ids), dim), np.float32)
        for (_, i), r in zip(where, got, strict=True):
            out[i] = from_array(r.rows, "rows", ("<f4",))
        return out

    async def update(self, table: str, ids: np.ndarray, grads: np.ndarray) -> int:
        """Apply one sparse gradient (rows of ``ids``; repeats are summed); the distinct rows moved."""
        ids, grads = np.asarray(ids, np.int64), np.ascontiguousarray(grads, np.float32)
        where = self._split(ids)
        reqs = [
            pb.EmbedUpdateRequest(table=table, vertices=to_array(ids[i]), grads=to_array(grads[i])) for _, i in where
        ]
        got = await asyncio.gather(*[self._call(k, "EmbedUpdate", r) for (k, _), r in zip(where, reqs, strict=True)])
        return int(sum(r.rows for r in got))

    async def control(self, table: str, action: str) -> None:
        req = pb.EmbedControlRequest(table=table, action=action)
        await asyncio.gather(*[self._call(k, "EmbedControl", req) for k in range(self.backend.spec.num_parts)])
