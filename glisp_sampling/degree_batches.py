"""One hop's vertices in Gathers that return every neighbour (full-neighbourhood evaluation, ranking's
training edges): the fanout of a Gather is its vertices' largest degree, so vertices of similar degree go
together instead of every Gather asking the graph's largest degree (which a server refuses past
serve.max_fanout, and which leaves a few seeds per request under serve.max_request_edges)."""

from __future__ import annotations

import numpy as np


def degree_batches(deg: np.ndarray, batch: int, budget: int, cap: int) -> list[tuple[np.ndarray, int]]:
    """Positions of one hop's vertices in Gathers that return every neighbour: low degrees first, at most
    ``batch`` vertices and about ``budget`` edge slots each, with the fanout of the batch's largest degree
    rounded up to a power of two (few distinct samplers; at most 2 x budget slots). A vertex with more than
    ``cap`` neighbours (the servers' serve.max_fanout) gets ``cap`` of them: one Gather returns no more."""
    order = np.argsort(deg, kind="stable")
    d = np.clip(deg[order], 1, cap)
    out: list[tuple[np.ndarray, int]] = []
    a, n = 0, len(order)
    while a < n:
        hi = min(n, a + batch)
        fits = int((np.arange(1, hi - a + 1) * d[a:hi] <= budget).sum())  # a prefix: the product grows with k
        b = a + max(1, fits)
        out.append((order[a:b], int(min(cap, 1 << (int(d[b - 1]) - 1).bit_length()))))
        a = b
    return out
