"""Learnable node embeddings for a PyG script on the service: ``glisp train --node-embeddings DIM`` for the
script's own loop.

::

    data = glisp_remote("cluster.json")
    emb = NodeEmbedding(data, 64, lr=0.1)                 # a table on the servers, rows of their masters
    for batch in loader:
        x = emb(batch.n_id)                               # or torch.cat([batch.x, emb(batch.n_id)], 1)
        loss = ...; loss.backward()                       # the rows' gradient goes back to the servers
    emb.release()

The table is the one ``glisp train`` uses (:mod:`glisp_core.sparse_embedding`): it lives with the partitions,
not in this process, so a graph of 10^9 vertices needs no 10^9-row tensor here. ``forward`` fetches the rows
of the ids asked for; ``backward`` sends their gradient, which the servers apply as a sparse Adagrad step (as
``torch.optim.Adagrad`` on a sparse ``nn.Embedding`` would). With ``sync`` (the default) each backward waits
for its update, so the next forward reads rows that include it, exactly as in memory; ``sync=False`` lets two
updates be in flight (a forward may read rows one or two steps old), as ``glisp train`` does with prefetch.
The module has no parameters of its own: the script's optimiser holds the model's weights only.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import torch

from glisp_core.sparse_embedding import TableSpec
from glisp_train.node_embeddings import NodeEmbeddings


class _Rows(torch.autograd.Function):
    """Rows of ``ids`` from the table; their gradient back to it (duplicates summed by the servers' step)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, ids: torch.Tensor, table: NodeEmbeddings) -> torch.Tensor:
        ctx.ids, ctx.table = ids, table
        got = table.submit(table.rows(ids.detach().cpu().numpy().astype(np.int64))).result()
        return torch.from_numpy(got).to(ids.device)  # where the script's batch (and model) is

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        ctx.table.push(ctx.ids.detach().cpu().numpy().astype(np.int64), grad)
        return None, None, None


class NodeEmbedding(torch.nn.Module):
    """A served table of ``dim`` learnable values per vertex (see the module docstring)."""

    def __init__(self, data: Any, dim: int, lr: float = 0.1, seed: int = 0, name: str = "", sync: bool = True) -> None:
        super().__init__()
        source = data.source
        if source.embeddings is None:
            raise TypeError("NodeEmbedding: this source holds no node embeddings (open it with glisp_remote)")
        spec = TableSpec(name or f"pyg-{uuid.uuid4().hex[:12]}", dim, seed=seed, lr=lr)
        self.table = NodeEmbeddings.open(source.embeddings, spec, source.submit, sync=sync)
        self._anchor = torch.zeros(0, requires_grad=True)  # makes the output part of the graph autograd walks

    @property
    def dim(self) -> int:
        return self.table.dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = _Rows.apply(self._anchor, ids, self.table)
        return out if self.training else out.detach()

    def snapshot(self) -> None:
        """Keep the rows as they are now (every update sent so far applied) as the best epoch's."""
        self.table.snapshot()

    def use_snapshot(self, yes: bool = True) -> None:
        """Read the snapshot's rows (evaluation and export after training) instead of the current ones."""
        self.table.use_snapshot = yes

    def flush(self) -> None:
        """Wait for every update in flight (before reading rows that must include them)."""
        self.table.flush()

    def release(self) -> None:
        """Free the table on the servers (after the script has exported what it needs)."""
        self.table.release()
