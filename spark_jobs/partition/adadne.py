"""AdaDNE (GLISP, Zhu et al. 2024): DistributedNE with an adaptive per-partition expansion factor, edge
balance by construction and vertex balance by refinement. The paper's equations (5)-(7) were lost; the
adaptive factor is the reconstruction of the notes (section 3), with the form and weights configurable
([partition.adadne]):

    s_v = mean_j |V_j| / |V_i|            s_e = mean_j |E_j| / |E_i|          (5), (6)
    linear: lam_i = lam * (w_v*s_v + w_e*s_e)
    exp:    lam_i = lam * exp(-w_v*(|V_i|/mean|V| - 1) - w_e*(|E_i|/mean|E| - 1))        (7)
    lam_i   = clip(lam_i * (remaining/|E|)^(-accel), lam_min, lam_max)

Growth per round is limited to ``step`` of a partition's deficit to the fair share |E|/p (one-hop,
two-hop and seeds alike), so every partition grows at a comparable pace and none runs far ahead in
vertices. Three rules make the balance hold on graphs it was not tuned on (docs/partitioning.md):

* **capacity**: no partition ever holds more than ``capacity`` x |E|/p rows - a hard bound checked by
  the round kernel pair by pair (quotas per row group), not a target reached by tuning;
* **finishing pass**: once at most ``finish`` x |E| rows are left (or the expansion stalls) the rest is
  placed greedily against the current partition sets, HDRF-style, under the same capacity;
* **relocation** (``relocate.py``): whole replicas move out where every pair of theirs fits a partition
  holding both endpoints (RF falls), then vertex-heavy partitions (|V_i| > ``refine_vb`` x mean) shed
  replicas for at most as many new ones in light partitions (filling them up to ``refine_edge_slack``
  past the edge bound, which shedding rounds then restore), so the result keeps EB <= ``refine_capacity``
  and VB <= max(``refine_vb_max``, VB now); at most ``refine_rounds`` rounds plus the shedding;
* **restarts** (``starts``): a graph of at most ``starts_max_edges`` rows is expanded and refined from
  several first-seed sets, in the driver or as Spark jobs, and the best result kept (``start_score``);
  where the first seeds land decides most of the RF;
* **a packed start** (``cluster_start``, ``clusters.py``): one more start, from dense clusters (label
  propagation, hubs left out) packed whole into the partitions by rows and vertices before the first round;
  on ego networks of separable circles it is the start kept (ego-separable p = 16: RF 1.95 -> 1.34).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from pyspark.sql import DataFrame

from glisp_core.config import AdaDNEConfig, to_dict
from glisp_core.errors import ConfigError
from spark_jobs.partition import kernels
from spark_jobs.partition.clusters import cluster_weights, held_labels, homes, hub_mask, spark_labels, spark_weights
from spark_jobs.partition.components import candidates, plan_components, reassign, vertex_cap
from spark_jobs.partition.expansion import FINISH, ExpansionPartitioner, Plan, Selection, pack_bits
from spark_jobs.partition.relocate import Relocation, Votes, evacuate_round, relocation_votes
from spark_jobs.partition.rounds import FileRounds
from spark_jobs.partition.state import ExpansionState

_PACE_WARMUP = 8  # rounds before the pace is judged (the first rounds grow from single seeds)
# Constants that were configuration keys no test, benchmark or measured case ever set to another value
# (docs/partitioning.md says what each does):
SEED_SCALE = 1.0  # an emptied boundary seeds vertices carrying SEED_SCALE * lam * remaining / p rows
TOP_UP = 0.05  # a boundary yielding under TOP_UP x the round's speed limit is topped up with seeds
FINISH_VERTEX_WEIGHT = 1.0  # finishing pass: weight of a partition's vertex slack (HDRF's edge term has 1)
CLUSTER_HUB_FACTOR = 10.0  # packed start: vertices above this x the mean degree join no cluster


def adaptive_factors(
    ecount: np.ndarray, vcount: np.ndarray, remaining: int, total: int, acfg: AdaDNEConfig
) -> np.ndarray:
    """Per-partition expansion factor lam_i from the synchronised |V_j| and |E_j| (equations 5-7)."""
    e = ecount.astype(np.float64)
    v = vcount.astype(np.float64)
    ebar, vbar = e.mean(), v.mean()
    if acfg.form == "linear":
        s_v = vbar / np.maximum(v, 1.0) if vbar > 0 else np.ones_like(v)
        s_e = ebar / np.maximum(e, 1.0) if ebar > 0 else np.ones_like(e)
        lam = acfg.lambda_ * (acfg.w_v * s_v + acfg.w_e * s_e)
    else:
        rv = v / vbar - 1.0 if vbar > 0 else np.zeros_like(v)
        re = e / ebar - 1.0 if ebar > 0 else np.zeros_like(e)
        lam = acfg.lambda_ * np.exp(-acfg.w_v * rv - acfg.w_e * re)
    frac = max(remaining / total, 1e-9) if total else 1.0
    lam = lam * frac ** (-acfg.accel)
    return np.clip(lam, acfg.lambda_min, acfg.lambda_max)


class AdaDNE(ExpansionPartitioner):
    name = "adadne"
    refines = True

    def params(self) -> dict:
        return {**to_dict(self.cfg.adadne), "max_rounds": self.cfg.max_rounds}

    def capacity(self, st: ExpansionState) -> np.ndarray:
        return np.full(st.parts, np.floor(self.cfg.adadne.capacity * st.total / st.parts))

    def start_score(self, st: ExpansionState) -> tuple:
        """Restarts are compared by how far they miss the refinement's bounds (VB over ``refine_vb_max``,
        EB over ``refine_capacity``), then by replicas."""
        a = self.cfg.adadne
        vb = st.vcount.max() / max(st.vcount.mean(), 1e-9)
        eb = st.ecount.max() / max(st.total / st.parts, 1e-9)
        return (
            round(max(vb - a.refine_vb_max, 0.0), 6),
            round(max(eb - a.refine_capacity, 0.0), 6),
            int(st.vcount.sum()),
        )

    def step(self, st: ExpansionState) -> float:
        """The speed limit of this start: ``step``, and ``alt_step`` for every second start when set.

        How fast a partition may grow decides the replication as much as where it starts: on dense graphs
        of overlapping communities a slower expansion keeps the partitions inside their communities
        (synthetic ego-network p = 16: RF 2.91 at 0.3, 2.72 at 0.15), on others the faster one leaves
        fewer replicas after the relocation (tolokers: 0.15 alone was 1.14-1.22x the reference DNE).
        Restarts try both and keep the better (docs/partitioning.md, "Cluster scale")."""
        a = self.cfg.adadne
        return a.alt_step if st.start % 2 == 1 and a.alt_step > 0 else a.step

    def start_params(self, st: ExpansionState) -> dict[str, Any]:
        return {"step": self.step(st), "packed": st.start >= self.starts(st.total)}

    def starts(self, rows: int) -> int:
        """``starts`` up to ``starts_max_edges`` rows, one above: each start costs a whole expansion and
        relocation (Spark jobs on the Spark path), a constant factor that a graph past that size pays in
        hours rather than seconds."""
        a = self.cfg.adadne
        if a.starts < 1:
            raise ConfigError("config", "partition.adadne.starts", f"must be at least 1 (got {a.starts}; e.g. 4)")
        return a.starts if rows <= a.starts_max_edges else 1

    def packed_starts(self, rows: int) -> int:
        """One start from whole clusters (``clusters.py``) where restarts run, held rows or Spark path alike."""
        a = self.cfg.adadne
        if a.cluster_start and not 0 < a.cluster_fill <= 1:
            raise ConfigError(
                "config", "partition.adadne.cluster_fill", f"must be in (0, 1] (got {a.cluster_fill}; e.g. 0.9)"
            )
        return 1 if a.cluster_start and self.starts(rows) > 1 else 0

    def packed_homes(
        self, st: ExpansionState, rows: dict[str, np.ndarray] | DataFrame, log: Callable[[str], None]
    ) -> np.ndarray:
        a = self.cfg.adadne
        assert st.deg is not None, "new_state keeps the degrees"
        hub = hub_mask(st.deg, CLUSTER_HUB_FACTOR)
        if isinstance(rows, dict):
            label = held_labels(rows["src"], rows["dst"], st.deg, hub)
            weights = cluster_weights(rows["src"], rows["dst"], label)
        else:
            label = spark_labels(rows, st.deg, hub, st.groups, log)
            weights = spark_weights(rows, label)
        return homes(label, weights, st.total, st.parts, a.cluster_fill)

    def plan(self, st: ExpansionState) -> Plan:
        p = st.parts
        a = self.cfg.adadne
        active = np.ones(p, bool)
        lam = adaptive_factors(st.ecount, st.vcount, st.remaining, st.total, a)
        st.slow = self.behind(st)
        if p == 1:
            return active, lam, None, None, 0
        over = a.round_budget > 0 and st.rounds >= 2 * a.round_budget  # the hard bound: finish whatever is left
        if st.remaining <= a.finish * st.total or st.idle >= st.groups or over:
            return active, lam, None, None, FINISH
        # per-round speed limit on one-hop growth: a share of the deficit to the fair share
        fair = st.total / p
        step = self.step(st)
        cap = step * np.maximum(fair - st.ecount, a.floor * lam * fair)
        # first round: one seed per partition, as DNE; later an emptied boundary seeds in bulk, within the
        # same speed limit (an unbounded seed batch let one partition whose first component ran out take
        # ~its whole share of low-degree vertices in one round: rmat17 p=16 VB 4.0)
        scale = SEED_SCALE if st.rounds > 0 else 0.0
        seed_budget = np.maximum(1.0, np.minimum(lam * st.remaining / p * scale, cap))
        # ... and a vertex limit: seeds are the lowest-degree vertices, each bringing itself and its few
        # neighbours, so a row budget alone lets |V_i| run far ahead (rmat17 p=16: VB 2.4)
        vbar = st.vcount.mean()
        self._seed_count = np.maximum(1.0, step * np.maximum(vbar - st.vcount, a.floor * lam * vbar) / 2.0)
        return active, lam, cap, seed_budget, -1

    def top_up(self, st: ExpansionState, k: int, onehop: float, cap: float) -> float:
        """Seeds besides the boundary when the boundary yields under ``TOP_UP`` of the round's speed limit.

        A boundary that stays non-empty but thin (long chains, a web crawl's paths) would otherwise give
        one vertex per round; a seed opens one new front per round (``ExpansionPartitioner.select``), so
        the fronts add up and the round count stays low (test graph of chains and small components, p=3:
        6,510 rounds without). A bulk of seeds at once scattered a partition that was still growing
        through a sparse periphery over a dense core: tolokers p=8 RF 1.06-1.24x the reference DNE over
        seeds 1-8, against 0.93-1.10x with one (docs/partitioning.md, "Seeds").
        """
        return cap - onehop if st.rounds > 0 and np.isfinite(cap) and onehop < TOP_UP * cap else 0.0

    def behind(self, st: ExpansionState) -> float:
        """How many times too slow the recent pace is to place the remaining rows within
        ``adadne.round_budget`` rounds (0: on pace, or too early to tell).

        Why: on a high-diameter graph (a road network, a web crawl's long paths) a boundary is a thin ring
        or a path end, and taking the lam share of it places a few hundred rows a round; the rounds grow
        with the diameter (a 400 x 400 grid: 431 rounds). Behind pace, a boundary whose whole residual fits
        the speed limit is expanded whole (on such graphs the min-degree order of the lam share buys
        nothing: degrees are alike): 65 rounds and a lower RF there. At twice the budget the finishing pass
        places what is left (a few long paths: 504 rounds before). On power-law graphs the pace holds and
        nothing changes (tests/spark_jobs/partition/test_rounds_bound.py)."""
        budget = self.cfg.adadne.round_budget
        if budget <= 0 or st.rounds < _PACE_WARMUP or st.pace <= 0:
            return 0.0
        return st.remaining / st.pace / max(1, budget - st.rounds)

    def pick_all(self, st: ExpansionState, boundary_rows: float, cap: float) -> bool:
        return st.slow > 1 and math.isfinite(cap) and boundary_rows < cap

    def seed_count(self, st: ExpansionState, k: int) -> int:
        return int(self._seed_count[k])

    def one_hop_take(self, st: ExpansionState, sel: Selection, cap: np.ndarray) -> np.ndarray:
        """A selection that overshoots the speed limit (one hub carries more rows than the cap) gives
        each of its rows with probability cap / rows: the hub stays on the boundary and is replicated
        later, instead of moving 1.6 fair shares into one partition in one round (rmat16 p=16)."""
        take = np.ones(st.parts)
        big = np.isfinite(cap) & (sel.onehop > cap)
        take[big] = np.maximum(cap[big], 1.0) / sel.onehop[big]
        return take

    def two_hop_accept(self, st: ExpansionState, sel: Selection) -> np.ndarray:
        """Soft brake on two-hop intake, the part of a round's growth the selection does not bound.

        A partition may take about ``step`` of its remaining deficit to the fair share |E|/p per round
        (after its one-hop rows); at or above the fair share it still takes ``floor`` of what is offered.
        Nothing is refused for good: a waiting edge is taken in a later round. The capacity is enforced
        separately (quotas).
        """
        a = self.cfg.adadne
        fair = st.total / st.parts
        room = self.step(st) * (fair - st.ecount - sel.onehop)
        return np.clip(room / np.maximum(st.offer, 1.0), a.floor, 1.0)

    # ---- finishing pass and refinement ------------------------------------------------------------
    def finish_args(self, st: ExpansionState) -> tuple:
        return st.deg, self.capacity(st), 1.0, FINISH_VERTEX_WEIGHT, 1.0

    def refine_log(self) -> list[dict]:
        return self.relocation.log if hasattr(self, "relocation") else []

    def refine(self, st: ExpansionState, alloc: dict[str, np.ndarray] | FileRounds) -> int:
        """Relocation rounds (``relocate.Relocation``) over every allocated row: in the driver on the rows
        ``alloc``, or two Spark jobs per round over the allocation files. The per-vertex pair counts stay
        exact: each round's moves come back as deltas. Returns the rounds run; ``self.relocation`` keeps
        their log."""
        counts = st.pair_counts()
        p, shape = st.parts, counts.shape
        if isinstance(alloc, FileRounds):
            files = alloc

            def votes(bits: np.ndarray, leaf: np.ndarray, light: np.ndarray) -> Votes:
                return Votes.merge(files.relocation_votes((bits, leaf, light), p), shape)

            def evacuate(*args: Any) -> tuple:
                return files.evacuate(args, p)
        else:
            rows = alloc

            def votes(bits: np.ndarray, leaf: np.ndarray, light: np.ndarray) -> Votes:
                return Votes.merge(
                    [relocation_votes(rows["src"], rows["dst"], rows["part"], bits, leaf, light, p)], shape
                )

            def evacuate(*args: Any) -> tuple:
                return _reassign(rows, evacuate_round(rows["src"], rows["dst"], rows["part"], *args), p)

        def move(*args: np.ndarray, slack: int = 0, shed: np.ndarray | None = None) -> int:
            out, into, moved = evacuate(*args, st.ecount, st.vcount, slack, shed)
            _apply_deltas(st, counts, out, into)
            return moved

        self.relocation = Relocation(self.cfg.adadne, st.total)
        done = self.relocation.run(st, votes, move, pack_bits)
        self._whole_components(st, alloc, counts)
        st.bits = pack_bits(counts > 0)
        return done

    def _whole_components(
        self, st: ExpansionState, alloc: dict[str, np.ndarray] | FileRounds, counts: np.ndarray
    ) -> None:
        """Move whole components off partitions the relocation left above ``refine_vb_max`` (``components``): the
        replication factor stays as it is. Only past the bound, where the replica moves stalled. Over files, the
        rows touching a candidate vertex are read by one job (at most ``driver_finish_edges``, else the pass
        is left out and the log says so) and the moves are one more; the plan is the one the held rows give."""
        vcap = vertex_cap(st.vcount, self.cfg.adadne.refine_vb_max)
        if vcap is None:
            return
        cand = candidates(counts)
        rows = alloc if not isinstance(alloc, FileRounds) else alloc.candidate_rows(cand, self.cfg.driver_finish_edges)
        if rows is None:
            self.relocation.record(st, "components-left-out", 0, 0)
            return
        ecap = int(self.relocation.cap)
        vertices, dest = plan_components(rows["src"], rows["dst"], rows["part"], cand, st.vcount, st.ecount, vcap, ecap)
        if not len(vertices):
            return
        if isinstance(alloc, FileRounds):
            out, into, moved = alloc.move_components(vertices, dest, st.parts)
        else:
            out, into, moved = _reassign(alloc, reassign(alloc["src"], alloc["part"], vertices, dest), st.parts)
        _apply_deltas(st, counts, out, into)
        self.relocation.record(st, "components", len(vertices), moved)


def _reassign(rows: dict[str, np.ndarray], new: np.ndarray, parts: int) -> tuple:
    """Set ``rows["part"] = new``; the moved rows' incidences out of their old partitions and into their new
    ones (``kernels.incidence_delta``) and how many rows moved."""
    mv = new != rows["part"]
    out = kernels.incidence_delta(rows["src"][mv], rows["dst"][mv], rows["part"][mv], parts)
    into = kernels.incidence_delta(rows["src"][mv], rows["dst"][mv], new[mv], parts)
    rows["part"] = new
    return out, into, int(mv.sum())


def _apply_deltas(st: ExpansionState, counts: np.ndarray, out: tuple, into: tuple) -> None:
    """A round's moves applied to the exact per-vertex pair counts and the per-partition totals."""
    kernels.add_counts(counts, out[0], out[1], out[3], -1)
    kernels.add_counts(counts, into[0], into[1], into[3], 1)
    st.ecount += into[4] - out[4]
    st.vcount = (counts > 0).sum(axis=0).astype(np.int64)
