"""A training run's learnable node embeddings (``train.node_embeddings``): rows fetched with each batch, moved by
the batch's sparse gradient after each step, snapshotted at the best epoch and written with the checkpoint.

The rows live with the partitions (the servers of a cluster, or this process for the in-process source), so
a trainer never holds the table. A batch's rows are fetched while it is prepared (``train.prefetch`` batches
ahead) and its gradient is sent back without waiting; at most ``MAX_PENDING`` updates are in flight, so a
batch's rows miss at most ``prefetch + MAX_PENDING`` earlier updates (DistDGL's and GraphStorm's sparse
embeddings are asynchronous the same way). ``train.prefetch = 0`` with ``sync=True`` is exact: the tests
compare that with ``torch.nn.Embedding(sparse=True)`` and ``torch.optim.Adagrad``.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from glisp_core.sparse_embedding import EmbeddingTables, TableSpec

MAX_PENDING = 2  # gradient updates in flight before the trainer waits for the oldest
EXPORT_CHUNK = 1 << 16  # rows per fetch (and per Parquet file) when the table is written out


class LocalEmbeddings:
    """The in-process source's holder: the whole table in this process, with the servers' interface."""

    def __init__(self, gids: np.ndarray, limit_mb: int) -> None:
        self.gids = np.asarray(gids, np.int64)
        self.tables = EmbeddingTables(int(limit_mb) << 20)

    async def create(self, spec: TableSpec) -> int:
        return len(self.tables.create(spec, self.gids, "serve.embedding_mb").gids)

    async def fetch(self, table: str, ids: np.ndarray, dim: int, snapshot: bool = False) -> np.ndarray:
        return self.tables.get(table).fetch(np.asarray(ids, np.int64), snapshot)

    async def update(self, table: str, ids: np.ndarray, grads: np.ndarray) -> int:
        return self.tables.get(table).update(np.asarray(ids, np.int64), np.ascontiguousarray(grads, np.float32))

    async def control(self, table: str, action: str) -> None:
        self.tables.control(table, action)


class NodeEmbeddings:
    """One run's table on its holder (see the module docstring)."""

    def __init__(self, holder: Any, spec: TableSpec, submit: Callable[[Any], Future], sync: bool = False) -> None:
        self.holder, self.spec, self.submit, self.sync = holder, spec, submit, sync
        self.use_snapshot = False  # after training: evaluate and export the best epoch's rows
        self._pending: deque[Future] = deque()

    @property
    def dim(self) -> int:
        return self.spec.dim

    @classmethod
    def open(cls, holder: Any, spec: TableSpec, submit: Callable[[Any], Future], sync: bool = False) -> NodeEmbeddings:
        submit(holder.create(spec)).result()
        return cls(holder, spec, submit, sync)

    async def rows(self, ids: np.ndarray) -> np.ndarray:
        """Current rows of ``ids`` (on the source's event loop, as a batch is prepared)."""
        return await self.holder.fetch(self.spec.name, ids, self.spec.dim, self.use_snapshot)

    def push(self, ids: np.ndarray, grad: torch.Tensor) -> None:
        """Send one batch's gradient rows; wait only when ``MAX_PENDING`` are in flight (or always when sync)."""
        g = grad.detach().float().cpu().numpy()
        self._pending.append(self.submit(self.holder.update(self.spec.name, np.asarray(ids, np.int64), g)))
        while self._pending and (self.sync or len(self._pending) > MAX_PENDING):
            self._pending.popleft().result()

    def flush(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def snapshot(self) -> None:
        """Keep the rows as they are now as the best epoch's (every update sent so far applied)."""
        self.flush()
        self.submit(self.holder.control(self.spec.name, "snapshot")).result()

    def chunks(self, num_vertices: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, rows) of every vertex in ``EXPORT_CHUNK`` pieces: the snapshot once training ended."""
        for a in range(0, num_vertices, EXPORT_CHUNK):
            ids = np.arange(a, min(num_vertices, a + EXPORT_CHUNK), dtype=np.int64)
            yield ids, self.submit(self.rows(ids)).result()

    def release(self, failed: bool = False) -> None:
        """Free the table on its holder once every update in flight has landed; after a failed run (``failed``)
        an update that failed too does not stop the release."""
        while self._pending:
            f = self._pending.popleft()
            if failed and f.exception() is not None:
                continue
            f.result()
        self.submit(self.holder.control(self.spec.name, "release")).result()


def table_name(run: str, dist: Any) -> str:
    """A name no other run shares (a re-run must not pick up a dead run's rows): the run's, and a token every
    process of a group agrees on."""
    token = [uuid.uuid4().hex[:12]]
    if dist.enabled:
        torch.distributed.broadcast_object_list(token, src=0)
    return f"{run}-{token[0]}"
