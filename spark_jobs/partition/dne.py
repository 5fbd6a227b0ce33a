"""DistributedNE (Hanai et al., VLDB 2019) as published: fixed expansion factor lambda, hard edge threshold
T = alpha*|E|/p, one-hop and two-hop allocation, one seed per empty boundary, and the leftover rule."""

from __future__ import annotations

import numpy as np

from glisp_core.config import to_dict
from spark_jobs.partition.base import register
from spark_jobs.partition.expansion import ExpansionPartitioner, ExpansionState, Selection


@register
class DNE(ExpansionPartitioner):
    name = "dne"

    def params(self) -> dict:
        return {**to_dict(self.cfg.dne), "max_rounds": self.cfg.max_rounds}

    def begin(self, st: ExpansionState) -> None:
        self.threshold = self.cfg.dne.alpha * st.total / st.parts
        self.blocked = np.zeros(st.parts, bool)

    def full(self, st: ExpansionState) -> np.ndarray:
        return (st.ecount >= self.threshold) | self.blocked

    def plan(self, st: ExpansionState):
        p = st.parts
        full = self.full(st)
        small = int(np.argmin(st.ecount))
        others_full = bool(np.all(np.delete(full, small))) if p > 1 else False
        if p == 1 or others_full or st.remaining <= self.threshold - st.ecount[small]:
            return full, None, None, None, small
        active = ~full
        lam = np.full(p, self.cfg.dne.lambda_)
        cap = self.threshold - st.ecount.astype(np.float64)
        seed_budget = np.ones(p)  # one seed vertex per partition whose boundary is empty
        return active, lam, cap, seed_budget, -1

    needs_counts = True

    def two_hop_accept(self, st: ExpansionState, sel: Selection, offered: np.ndarray) -> np.ndarray:
        """The threshold binds two-hop too: take at most T - |E_k| - (one-hop rows) of the offered rows."""
        room = self.threshold - st.ecount - sel.onehop
        return np.clip(room / np.maximum(offered, 1.0), 0.0, 1.0)

    def on_blocked(self, st: ExpansionState, k: int) -> None:
        self.blocked[k] = True
