"""DistributedNE (Hanai et al., VLDB 2019) as published: fixed expansion factor lambda, hard edge threshold
T = alpha*|E|/p, one-hop and two-hop allocation, one seed per empty boundary, and the leftover rule."""

from __future__ import annotations

import numpy as np

from glisp_core.config import to_dict
from spark_jobs.partition.expansion import FINISH, ExpansionPartitioner, Plan, Selection
from spark_jobs.partition.state import ExpansionState


class DNE(ExpansionPartitioner):
    name = "dne"
    # A partition whose coming two-hop step is estimated to bring it within this share of the offer of
    # T waits a round before selecting more: in DNE the two-hop step completes before the next
    # selection, in the lock-step batch form it runs in the same pass (docs/partitioning.md: tolokers
    # p=16 RF 3.03 -> 2.84, 1.06x -> 0.99x the reference)
    pending_share = 0.5

    def params(self) -> dict:
        return {**to_dict(self.cfg.dne), "max_rounds": self.cfg.max_rounds}

    def begin(self, st: ExpansionState) -> None:
        self.threshold = self.cfg.dne.alpha * st.total / st.parts

    def capacity(self, st: ExpansionState) -> np.ndarray:
        """The threshold T is a hard bound: no round, two-hop estimate or hub takes a partition past it
        (the kernel's quotas). A claimed vertex gives the edges that fit; the rest wait."""
        return np.full(st.parts, self.threshold)

    def plan(self, st: ExpansionState) -> Plan:
        p = st.parts
        avg = st.total / p
        small = int(np.argmin(st.ecount))
        # leftover rule: every other partition holds its share |E|/p, or the rest fits under T in the smallest
        others_full = bool(np.all(np.delete(st.ecount, small) >= avg)) if p > 1 else False
        if p == 1 or others_full or st.remaining <= self.threshold - st.ecount[small]:
            return np.ones(p, bool), None, None, None, small
        if st.idle >= st.groups:  # stalled: no partition has room under T for any remaining pair
            return np.ones(p, bool), None, None, None, FINISH
        active = st.ecount + self.pending_share * st.offer + 1 < self.threshold
        lam = np.full(p, self.cfg.dne.lambda_)
        cap = np.full(p, np.inf)  # no cut of the selection: the quotas stop it at T
        seed_budget = np.ones(p)  # one seed vertex per partition whose boundary is empty
        return active, lam, cap, seed_budget, -1

    def finish_args(self, st: ExpansionState) -> tuple:
        """A stall ends with the finishing pass under T (fewest rows first, HDRF's replica rule).

        Past p = 64 the threshold's slack (alpha - 1) |E|/p is about one row, less than most pairs hold,
        so every partition can be a pair short of T with rows left over and no round allocating: the
        leftover rule would then wait out ``max_rounds`` and give the rest to one partition (R-MAT 11 at
        p = 128: 10,000 rounds, EB 9.2). A pair no partition has room for goes to the least loaded one.
        """
        return st.deg, self.capacity(st), 1.0, 0.0, 1.0

    def two_hop_accept(self, st: ExpansionState, sel: Selection) -> np.ndarray:
        """The threshold binds two-hop too: a partition takes at most its room T - |E_k| of the offered rows."""
        room = self.threshold - st.ecount
        return np.clip(room / np.maximum(st.offer, 1.0), 0.0, 1.0)
