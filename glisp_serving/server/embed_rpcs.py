"""The learnable node embedding RPCs of one server: a table's rows for the vertices this partition masters.

Tables live in memory beside the partition (``serve.embedding_mb`` bounds them together) and belong to the
version they were created on: after a hot reload to another version the masters may differ, so a call on
an older version's table is refused (FAILED_PRECONDITION) rather than answered with rows of other vertices.
A table is lost with its server: the trainer is told, never handed freshly initialised rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from glisp_core.sparse_embedding import EmbeddingError, EmbeddingTables, TableSpec
from glisp_sampling.budget import OverBudget
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

    @staticmethod
    def _code(e: Exception) -> grpc.StatusCode:
        if isinstance(e, MemoryError):
            return grpc.StatusCode.RESOURCE_EXHAUSTED
        if isinstance(e, EmbeddingError) and ("not held here" in str(e) or "created on version" in str(e)):
            return grpc.StatusCode.FAILED_PRECONDITION
        return grpc.StatusCode.INVALID_ARGUMENT

    def _answer(self, name: str, request: Any, context: grpc.ServicerContext, fn: Callable[[], Any]) -> Any:
        """Run one call as the other RPCs run: refused while draining, counted in flight and in the metrics, its
        message held against ``serve.max_inflight_mb``; a bad request is answered with a status naming why."""
        sv = self.servicer
        sv._refuse_if_out_of_service(context)
        err: Exception | None = None
        with sv.state.request(), sv.metrics.observe(name) as obs:
            try:
                with sv.served.engine.budget.request(context.time_remaining()):
                    try:
                        sv.served.engine.budget.reserve(2 * request.ByteSize(), "the request message")
                    except OverBudget as e:
                        raise MemoryError(str(e)) from None
                    return fn()
            except (EmbeddingError, RequestError, WireError, MemoryError) as e:
                err, obs["code"] = e, self._code(e).name
        assert err is not None
        context.abort(self._code(err), f"partition {sv.served.engine.part}: {err}")
        raise AssertionError("unreachable")

    def _shard(self, name: str) -> Any:
        shard = self.tables.get(name)
        now = self.servicer.served.version
        if self._version.get(name) != now:
            raise EmbeddingError(f"table {name!r} was created on version {self._version.get(name)}; serving {now}")
        return shard

    def _ids(self, arr: pb.Array) -> np.ndarray:
        ids = from_array(arr, "vertices", _IDS)
        return self.servicer.served.engine._check_batch(ids, "vertices").astype(np.int64, copy=False)

    def EmbedCreate(self, request: pb.EmbedCreateRequest, context: grpc.ServicerContext) -> pb.EmbedCreateResponse:
        def create() -> pb.EmbedCreateResponse:
            cur = self.servicer.served
            if request.version and request.version != cur.version:
                raise EmbeddingError(
                    f"table {request.table!r}: created on version {request.version}; serving {cur.version}"
                )
            spec = TableSpec(request.table, request.dim, request.seed, float(request.lr), float(request.eps))
            existed = request.table in self.tables.names()
            shard = self.tables.create(spec, cur.engine.r.master_gids, "serve.embedding_mb")
            self._version.setdefault(request.table, cur.version)
            n = len(shard.gids)
            return pb.EmbedCreateResponse(rows=n, bytes=shard.bytes_for(n, spec.dim), existed=existed)

        return self._answer("EmbedCreate", request, context, create)

    def EmbedFetch(self, request: pb.EmbedFetchRequest, context: grpc.ServicerContext) -> pb.EmbedFetchResponse:
        def fetch() -> pb.EmbedFetchResponse:
            shard, ids = self._shard(request.table), self._ids(request.vertices)
            limit = self.servicer.served.engine.max_response_bytes
            if len(ids) * shard.spec.dim * 4 > limit:
                raise RequestError(
                    f"vertices: {len(ids):,} rows x {shard.spec.dim * 4} bytes is over serve.max_message_mb="
                    f"{limit >> 20}; split the fetch"
                )
            return pb.EmbedFetchResponse(rows=to_array(shard.fetch(ids, request.snapshot)))

        return self._answer("EmbedFetch", request, context, fetch)

    def EmbedUpdate(self, request: pb.EmbedUpdateRequest, context: grpc.ServicerContext) -> pb.EmbedUpdateResponse:
        def update() -> pb.EmbedUpdateResponse:
            shard, ids = self._shard(request.table), self._ids(request.vertices)
            return pb.EmbedUpdateResponse(rows=shard.update(ids, from_array(request.grads, "grads", ("<f4",))))

        return self._answer("EmbedUpdate", request, context, update)

    def EmbedControl(self, request: pb.EmbedControlRequest, context: grpc.ServicerContext) -> pb.EmbedControlResponse:
        def control() -> pb.EmbedControlResponse:
            if request.action == "release":
                self._version.pop(request.table, None)
            else:
                self._shard(request.table)  # the served version's table, or refused
            return pb.EmbedControlResponse(done=self.tables.control(request.table, request.action))

        return self._answer("EmbedControl", request, context, control)
