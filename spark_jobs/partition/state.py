"""The driver-side state of a neighbour expansion (``expansion.py``), which the relocation (``relocate.py``)
refines in place: O(|V|) per-vertex arrays and O(p) per-partition counts, exact sums of the rounds' deltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spark_jobs.partition import kernels


@dataclass
class ExpansionState:
    """Driver-side state of a neighbour expansion (all O(|V|) or O(p))."""

    parts: int
    resid: np.ndarray  # int64 [n]: unallocated edge rows incident to v (self-loop counts twice)
    bits: np.ndarray  # uint64 [n, W]: partition set of v
    order: np.ndarray  # int64: vertices with edges, by (degree, seeded hash): seed candidates
    seed: int
    total: int  # edge rows
    groups: int = 1  # G: rows are split into G groups by pair hash (the Spark tasks); quotas are per group
    deg: np.ndarray | None = None  # int64 [n]: degree in rows (the finishing pass weighs endpoints by it)
    counts: np.ndarray | None = None  # int32 [n, p]: pairs of v in partition k (kept when refining)
    ecount: np.ndarray = field(init=False)  # int64 [p]: |E_k| in rows
    vcount: np.ndarray = field(init=False)  # int64 [p]: |V_k|
    claim: np.ndarray = field(init=False)  # int32 [n]: partition claiming v this round, -1 none
    seed_pos: np.ndarray = field(init=False)
    offer: np.ndarray = field(init=False)  # float64 [p]: estimated two-hop rows the coming round offers k
    pend: np.ndarray | None = None  # int64 [n]: estimated two-hop rows of v in the coming round
    rounds: int = 0
    idle: int = 0  # rounds in a row that allocated nothing
    pace: float = -1.0  # rows placed per round lately (an average over the last rounds; -1: none yet)
    slow: float = (
        0.0  # set by the partitioner's plan: > 1 when this pace would overrun its round budget that many times
    )
    start: int = 0  # which restart this state belongs to (a partitioner may vary its rules by start)

    def __post_init__(self) -> None:
        self.ecount = np.zeros(self.parts, np.int64)
        self.vcount = np.zeros(self.parts, np.int64)
        self.claim = np.full(len(self.resid), -1, np.int32)
        self.seed_pos = np.zeros(2, np.int64)
        self.offer = np.zeros(self.parts)

    @property
    def remaining(self) -> int:
        return int(self.total - self.ecount.sum())

    @property
    def round_seed(self) -> int:
        return self.seed * 1_000_003 + self.rounds

    def rank(self) -> np.ndarray:
        """rank[k]: position of partition k when ordered by |E_k| ascending (ties: lower k)."""
        order = np.lexsort((np.arange(self.parts), self.ecount))
        rank = np.empty(self.parts, np.int32)
        rank[order] = np.arange(self.parts, dtype=np.int32)
        return rank

    def pair_counts(self) -> np.ndarray:
        """``counts``, which only the state of a refining partitioner keeps (``new_state`` of one with
        ``refines``): what the relocation works on."""
        if self.counts is None:
            raise ValueError("expansion state: no per-vertex pair counts (kept only when the partitioner refines)")
        return self.counts

    def nbytes(self) -> int:
        """Bytes of the per-vertex state held by the driver (what stops scaling first)."""
        arrays = (self.resid, self.bits, self.order, self.deg, self.counts, self.claim, self.pend)
        return int(sum(a.nbytes for a in arrays if a is not None))

    def apply(self, delta: tuple) -> None:
        """Add a batch's allocation delta (vert, vpart, row incidences, pair incidences, rows per part)."""
        vert, vpart, cnt, pcnt, rows = delta
        kernels.apply_delta(self.bits, self.resid, self.vcount, vert, vpart, cnt)
        if self.counts is not None:
            kernels.add_counts(self.counts, vert, vpart, pcnt, 1)
        self.ecount += rows
        self.placed(int(rows.sum()))

    def placed(self, rows: int) -> None:
        """Count a finished round that placed ``rows`` rows: the idle rounds and the pace."""
        self.idle = self.idle + 1 if rows == 0 else 0
        self.pace = float(rows) if self.pace < 0 else 0.5 * self.pace + 0.5 * rows
