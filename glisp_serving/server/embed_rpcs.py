"""The learnable node embedding RPCs of one server: a table's rows for the vertices this partition masters.

Tables live in memory beside the partition (``serve.embedding_mb`` bounds them together) and belong to the
version they were created on: after a hot reload to another version the masters may differ, so a call on
an older version's table is refused (FAILED_PRECONDITION) rather than answered with rows of other vertices.
A table is lost with its server: the trainer is told, never handed freshly initialised rows.
"""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np

from glisp_core.sparse_embedding import EmbeddingError, EmbeddingTables, TableSpec
from glisp_sampling.gather import RequestError
from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.wire import WireError, from_array, to_array

_IDS = ("<i8", "<i4")


class EmbeddingService:
    """EmbedCreate / EmbedFetch / EmbedUpdate / EmbedControl over the served partition's masters."""

    def __init__(self, servicer: Any, limit_mb: int) -> None:
        self.servicer = servicer  # its ``served`` changes with a reload; read once per call
        self.tables = EmbeddingTables(int(limit_mb) << 20)
        self._version: dict[str, str] = {}  # table -> the version it was created on

    def _fail(self, context: grpc.ServicerContext, e: Exception) -> None:
        if isinstance(e, MemoryError):
            code = grpc.StatusCode.RESOURCE_EXHAUSTED
        elif isinstance(e, EmbeddingError) and ("not held here" in str(e) or "created on version" in str(e)):
            code = grpc.StatusCode.FAILED_PRECONDITION
        else:
            code = grpc.StatusCode.INVALID_ARGUMENT
        context.abort(code, f"partition {self.servicer.served.engine.part}: {e}")

    def _shard(self, name: str) -> Any:
        shard = self.tables.get(name)
        now = self.servicer.served.version
        if self._version.get(name) != now:
            raise EmbeddingError(f"table {name!r} was created on version {self._version.get(name)}; serving {now}")
        return shard

    def _ids(self, arr: pb.Array, engine: Any) -> np.ndarray:
        return engine._check_batch(from_array(arr, "vertices", _IDS), "vertices").astype(np.int64, copy=False)

    def EmbedCreate(self, request: pb.EmbedCreateRequest, context: grpc.ServicerContext) -> pb.EmbedCreateResponse:
        err: Exception | None = None
        try:
            cur = self.servicer.served
            if request.version and request.version != cur.version:
                raise EmbeddingError(
                    f"table {request.table!r}: created on version {request.version}; serving {cur.version}"
                )
            spec = TableSpec(request.table, request.dim, request.seed, float(request.lr), float(request.eps))
            existed = request.table in self.tables.names()
            shard = self.tables.create(spec, cur.engine.r.master_gids, "serve.embedding_mb")
            self._version.setdefault(request.table, cur.version)
            return pb.EmbedCreateResponse(
                rows=len(shard.gids), bytes=shard.bytes_for(len(shard.gids), spec.dim), existed=existed
            )
        except (EmbeddingError, MemoryError) as e:
            err = e
        self._fail(context, err)
        raise AssertionError("unreachable")

    def EmbedFetch(self, request: pb.EmbedFetchRequest, context: grpc.ServicerContext) -> pb.EmbedFetchResponse:
        err: Exception | None = None
        try:
            shard = self._shard(request.table)
            engine = self.servicer.served.engine
            ids = self._ids(request.vertices, engine)
            if len(ids) * shard.spec.dim * 4 > engine.max_response_bytes:
                raise RequestError(
                    f"vertices: {len(ids):,} rows x {shard.spec.dim * 4} bytes is over serve.max_message_mb="
                    f"{engine.max_response_bytes >> 20}; split the fetch"
                )
            return pb.EmbedFetchResponse(rows=to_array(shard.fetch(ids, request.snapshot)))
        except (EmbeddingError, RequestError, WireError) as e:
            err = e
        self._fail(context, err)
        raise AssertionError("unreachable")

    def EmbedUpdate(self, request: pb.EmbedUpdateRequest, context: grpc.ServicerContext) -> pb.EmbedUpdateResponse:
        err: Exception | None = None
        try:
            shard = self._shard(request.table)
            ids = self._ids(request.vertices, self.servicer.served.engine)
            grads = from_array(request.grads, "grads", ("<f4",))
            return pb.EmbedUpdateResponse(rows=shard.update(ids, grads))
        except (EmbeddingError, RequestError, WireError) as e:
            err = e
        self._fail(context, err)
        raise AssertionError("unreachable")

    def EmbedControl(self, request: pb.EmbedControlRequest, context: grpc.ServicerContext) -> pb.EmbedControlResponse:
        err: Exception | None = None
        try:
            if request.action == "release":
                self._version.pop(request.table, None)
                return pb.EmbedControlResponse(done=self.tables.release(request.table))
            if request.action == "snapshot":
                self._shard(request.table).snapshot()
                return pb.EmbedControlResponse(done=True)
            raise EmbeddingError(f"action: expected 'snapshot' or 'release' (got {request.action!r})")
        except EmbeddingError as e:
            err = e
        self._fail(context, err)
        raise AssertionError("unreachable")

    def held_bytes(self) -> int:
        return sum(self.tables.get(n).nbytes for n in self.tables.names())
