"""One round's selection of a neighbour expansion (what the driver decides and the round kernel reads), shared
by the driver mode (``expansion.py``) and the sharded mode (``sharded.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from spark_jobs.partition.state import ExpansionState

FINISH = -2  # plan()'s leftover_to: place the remainder with the finishing pass and end the expansion
# what ExpansionPartitioner.plan returns: (active, lam, cap, seed_budget, leftover_to)
Plan = tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None, int]


@dataclass
class Selection:
    """One round's plan: claimed vertices (in state.claim), partitions open for two-hop, ranks."""

    claimed: np.ndarray
    open_bits: np.ndarray
    weight: np.ndarray  # float64 [p]: share of contested edges a partition draws (light = heavy weight)
    onehop: np.ndarray  # float64 [p]: residual rows of the vertices each partition claimed
    round_seed: int = 0
    leftover_to: int = -1  # >= 0: every remaining edge to this partition; FINISH: the finishing pass
    accept: np.ndarray | None = None  # float64 [p]: probability that partition k takes a two-hop edge
    take: np.ndarray | None = None  # float64 [p]: probability that partition k takes a one-hop edge
    quota: np.ndarray | None = None  # int64 [G, p]: most rows partition k takes from group g (hard capacity)

    def args(self, st: ExpansionState) -> tuple:
        """The broadcast state of the round kernel (kernels.edge_round after src, dst)."""
        p = len(self.weight)
        ones = np.ones(p)
        accept = self.accept if self.accept is not None else ones
        take = self.take if self.take is not None else ones
        quota = self.quota if self.quota is not None else np.full((1, p), 1 << 62, np.int64)
        return (st.claim, st.bits, self.open_bits, self.weight, accept, self.round_seed, take, quota)


def bitmask(active: np.ndarray) -> np.ndarray:
    words = (len(active) + 63) // 64
    out = np.zeros(words, np.uint64)
    for k in np.flatnonzero(active):
        out[k // 64] |= np.uint64(1) << np.uint64(k % 64)
    return out


@njit(nogil=True, cache=True)
def pack_bits(mask: np.ndarray) -> np.ndarray:
    """[n, p] bool -> [n, ceil(p/64)] uint64 bitsets, row by row (a pass per column with its casts took
    3-5 s of the relocation's driver time at R-MAT 20, p = 32)."""
    n, p = mask.shape
    out = np.zeros((n, (p + 63) // 64), np.uint64)
    for v in range(n):
        for k in range(p):
            if mask[v, k]:
                out[v, k // 64] |= np.uint64(1) << np.uint64(k % 64)
    return out
