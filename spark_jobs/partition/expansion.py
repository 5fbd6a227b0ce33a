"""Distributed neighbour expansion, shared by DistributedNE and AdaDNE.

Design (measured costs in docs/partitioning.md):

* Per-vertex state lives on the driver as numpy, O(|V|) (``state.ExpansionState``): residual degree
  (unallocated incident edge rows), partition sets as bitsets (|V| x ceil(p/64) uint64), the per-round
  claims and, for a partitioner that refines (AdaDNE), the pairs each vertex has in each partition.
  Per-partition counts |E_k|, |V_k| are exact sums of the deltas. Boundary
  B_k = {v : k in parts(v), resid(v) > 0}.
* The rows are split into G groups by a hash of their unordered pair (``kernels.pair_group``); G
  depends on the row count only. A group is one Spark task of a round, its rows in canonical order
  (pair hash, eid). Each round's kernel decides a group's rows from the broadcast state alone, so a
  round gives the same result in Spark tasks and in the driver, and on any cluster.
* **Hard capacity**: each partition's room under its capacity is split over the groups as quotas
  that the kernel checks pair by pair (``kernels.edge_round``): no round, estimate, seed or hub can
  take a partition past it.
* The unallocated rows stay in files (``rounds.FileRounds``; one round = one Spark job) until at most
  ``partition.local_finish_edges`` remain; the driver then reads them once and runs the remaining
  rounds in process with the same kernels (``LocalRows``).
* A round = the previous round's two-hop allocation (edges whose endpoints now share a partition go to
  a shared one) + this round's one-hop allocation (the unallocated edges of the selected vertices).
  The selection sees an estimate of the coming two-hop step (from the driver's sample): how many rows
  it will offer each partition and each vertex - the lock-step batch form needs it, see ``estimate``.
* A partitioner may end the expansion with a finishing pass (the remainder placed greedily under the
  capacity, ``kernels.finish_greedy``) and refine the result (``relocate.py``).

Subclasses decide, per round, which partitions expand and how many vertices each selects.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tables import read_parquet
from spark_jobs.partition import kernels
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult
from spark_jobs.partition.clusters import packed_rows
from spark_jobs.partition.metrics import quality
from spark_jobs.partition.rounds import ALLOC_PA, FileRounds
from spark_jobs.partition.selection import FINISH, Plan, Selection, bitmask, pack_bits
from spark_jobs.partition.sharded import ShardedExpansion, use_shards
from spark_jobs.partition.staging import parquet_names, read_columns
from spark_jobs.partition.state import ExpansionState


class LocalRows:
    """Rows held by the driver (canonical order): the unallocated ones and the allocated chunks."""

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        o = kernels.canonical_order(rows["src"], rows["dst"], rows["eid"])
        self.rest = {c: np.asarray(a, np.int64)[o] for c, a in rows.items()}
        self.done: list[dict[str, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self.rest["eid"])

    def restart(self) -> LocalRows:
        """The same rows, all unallocated again, without sorting them again (``rest``'s arrays are never
        written in place, so the copies share them)."""
        fresh = object.__new__(LocalRows)
        fresh.rest, fresh.done = dict(self.rest), []
        return fresh

    def sample(self, stride: int) -> dict[str, np.ndarray]:
        s = self.rest["eid"] % stride == 0
        return {c: a[s] for c, a in self.rest.items()}

    def settle(self, part: np.ndarray, parts: int) -> tuple:
        """Move the rows with part >= 0 to the allocated chunks; return their delta."""
        delta = kernels.incidence_delta(self.rest["src"], self.rest["dst"], part, parts)
        done = part >= 0
        if done.any():
            self.done.append({**{c: a[done] for c, a in self.rest.items()}, "part": part[done].astype(np.int32)})
            self.rest = {c: a[~done] for c, a in self.rest.items()}
        return delta

    def allocated(self) -> dict[str, np.ndarray]:
        """Every allocated row, in canonical order (what the refinement works on)."""
        cols = [*self.rest, "part"]
        a = {c: np.concatenate([d[c] for d in self.done]) if self.done else np.empty(0, np.int64) for c in cols}
        o = kernels.canonical_order(a["src"], a["dst"], a["eid"])
        return {c: x[o] for c, x in a.items()}


class ExpansionPartitioner(Partitioner):
    """Neighbour expansion in lock-step rounds; subclasses implement ``plan`` (who expands, how fast)."""

    iterative = True
    needs_counts = True  # estimate the coming two-hop step from the sample before each selection
    refines = False  # keep per-vertex pair counts and run ``refine`` after the expansion

    # ---- subclass hooks ---------------------------------------------------------------------
    @abstractmethod
    def plan(self, st: ExpansionState) -> Plan:
        """Per partition: (active, lam, cap, seed_budget, leftover_to).

        active: bool, expands (selects vertices) this round; lam: fraction of its boundary to select;
        cap: most residual rows its selection may carry (inf = no cut); seed_budget: residual rows of
        seeds to take when its boundary is empty; leftover_to >= 0 ends the run giving all remaining
        edges to that partition, FINISH ends it with the finishing pass (lam, cap and seed_budget are
        then not used and may be None).
        """

    def capacity(self, st: ExpansionState) -> np.ndarray:
        """Hard per-partition capacity in rows (float64 [p], inf = none): no round can cross it."""
        return np.full(st.parts, np.inf)

    def min_select(self) -> int:
        return 1

    def starts(self, rows: int) -> int:
        """First-seed sets to expand a graph of ``rows`` edge rows from (the best by ``start_score`` is kept)."""
        return 1

    def pick_all(self, st: ExpansionState, boundary_rows: float, cap: float) -> bool:
        """Whether a partition expands its whole boundary this round (its residual rows ``boundary_rows``),
        rather than the lam share of it; none by default (AdaDNE does when its rounds fall behind)."""
        return False

    def seed_count(self, st: ExpansionState, k: int) -> int:
        """Most seed vertices partition k takes in one round when its boundary is empty."""
        return 1 << 22

    def top_up(self, st: ExpansionState, k: int, onehop: float, cap: float) -> float:
        """Residual rows of extra seeds partition k takes besides its boundary selection (0: none)."""
        return 0.0

    def two_hop_accept(self, st: ExpansionState, sel: Selection) -> np.ndarray:
        """Probability that partition k takes a two-hop edge, given ``st.offer`` (estimated rows offered)."""
        return np.ones(st.parts)

    def one_hop_take(self, st: ExpansionState, sel: Selection, cap: np.ndarray) -> np.ndarray:
        """Probability that partition k takes a one-hop edge of its selection (1: all of them)."""
        return np.ones(st.parts)

    def contest_weights(self, st: ExpansionState) -> np.ndarray:
        """Weight of partition k when several partitions can take an edge: its deficit to the fair share.

        DNE gives a contested edge to the member with the fewest edges, one edge at a time, which fills
        the emptiest partitions first. Drawing with probability proportional to (|E|/p - |E_k|) is the
        batch equivalent (water-filling) for a round whose edges are decided in parallel.
        """
        fair = st.total / st.parts
        return np.maximum(fair - st.ecount.astype(np.float64), 0.01 * fair)

    def finish(self, st: ExpansionState, rows: dict[str, np.ndarray]) -> np.ndarray:
        """The finishing pass over the remaining rows (canonical order), one sequential pass
        (``kernels.finish_greedy``) on copies of the state: their partitions (the caller applies the delta)."""
        deg, cap, lam_e, lam_v, eps = self.finish_args(st)
        return kernels.finish_greedy(
            rows["src"], rows["dst"], deg, st.bits.copy(), st.ecount.copy(), st.vcount.copy(), cap, lam_e, lam_v, eps
        )

    def finish_args(self, st: ExpansionState) -> tuple:
        """The state of the finishing pass besides the partition sets: (deg, cap, lam_e, lam_v, eps)."""
        raise NotImplementedError(f"{self.name} has no finishing pass")

    def refine(self, st: ExpansionState, alloc: dict[str, np.ndarray] | FileRounds) -> int:
        """Refine the allocation after the expansion (rows in the driver, or the files); return rounds."""
        return 0

    # ---- estimate and selection (driver) ------------------------------------------------------
    def refine_log(self) -> list[dict]:
        """What the last ``refine`` did, per round (reported in the stage's counts)."""
        return []

    def open_parts(self, st: ExpansionState) -> np.ndarray:
        """Partitions that may take a two-hop edge this round: those with room under their capacity."""
        return st.ecount + 1 <= self.capacity(st)

    def estimate(self, st: ExpansionState, smp: dict[str, np.ndarray], stride: int) -> None:
        """The coming two-hop step, from the sample: rows it offers each partition and each vertex.

        In the lock-step batch form the two-hop step of a round runs in the same pass as the next
        selection's one-hop step, so the selection cannot see its result. Without the estimate a
        partition that is about to be filled by its two-hop step selects as if empty, and boundary
        vertices whose remaining edges are about to go two-hop look expensive to expand (measured:
        tolokers p=16 RF 3.03 -> 2.84 with it). ``pend`` is used where it is reliable (a vertex with at
        least ``8 * stride`` residual rows, or every vertex when the sample is all rows).
        """
        if not self.needs_counts:
            return
        w = self.contest_weights(st)
        offer, pend = kernels.two_hop_pending(
            smp["src"], smp["dst"], st.bits, bitmask(self.open_parts(st)), w, st.round_seed, len(st.resid)
        )
        st.offer = offer * float(stride)
        pend *= stride
        if stride > 1:
            pend[st.resid < 8 * stride] = 0
        st.pend = pend

    def select(self, st: ExpansionState) -> Selection:
        p = st.parts
        rank = st.rank()
        active, lam, cap, seed_budget, leftover_to = self.plan(st)
        w = self.contest_weights(st)
        if leftover_to != -1:
            z = np.zeros(p)
            return Selection(np.empty(0, np.int64), bitmask(active), w, z, st.round_seed, leftover_to)
        assert lam is not None and cap is not None and seed_budget is not None, f"{self.name}: plan() without rates"
        ptr, verts = kernels.boundaries(st.resid, st.bits, p)
        claimed = []
        onehop = np.zeros(p)
        need_seed = []
        whole: set[int] = set()  # partitions that expand their whole boundary this round
        for k in np.argsort(rank):
            if not active[k]:
                continue
            b = verts[ptr[k] : ptr[k + 1]]
            if len(b) == 0:
                need_seed.append(k)
                continue
            if self.pick_all(st, float(st.resid[b].sum()), float(cap[k])):
                whole.add(int(k))
            b = self._pick(st, b, 1.0 if k in whole else lam[k], cap[k])
            kernels.set_claims(st.claim, b, int(k), rank)
            onehop[k] += st.resid[b].sum()
            claimed.append(b)
            if self.top_up(st, int(k), onehop[k], cap[k]) > 0:
                need_seed.append(k)
        for k in need_seed:
            budget = int(max(1, seed_budget[k] if onehop[k] == 0 else self.top_up(st, int(k), onehop[k], cap[k])))
            # a top-up (the boundary still yields) opens one new front per round; an empty boundary seeds in bulk
            count = 1 if onehop[k] > 0 else max(1, min(budget, 1 << 22, self.seed_count(st, int(k))))
            s = kernels.take_seeds(st.order, st.seed_pos, st.resid, st.bits, st.claim, budget, count)
            kernels.set_claims(st.claim, s, int(k), rank)
            onehop[k] += st.resid[s].sum()
            claimed.append(s)
        allc = np.concatenate(claimed) if claimed else np.empty(0, np.int64)
        room = self.capacity(st) - st.ecount
        sel = Selection(allc, bitmask(self.open_parts(st)), w, onehop, st.round_seed)
        sel.take = self.one_hop_take(st, sel, cap)
        sel.onehop = onehop * sel.take  # expected one-hop rows
        sel.accept = self.two_hop_accept(st, sel)
        sel.quota = kernels.group_quota(room, st.groups, st.rounds)
        return sel

    def _pick(self, st: ExpansionState, b: np.ndarray, lam: float, cap: float) -> np.ndarray:
        """The max(1, ceil(lam |B|)) boundary vertices of smallest residual degree (after the pending
        two-hop step), seeded ties; cut where their residual rows pass ``cap``."""
        nsel = min(len(b), max(self.min_select(), int(math.ceil(lam * len(b)))))
        score = st.resid[b] if st.pend is None else np.maximum(st.resid[b] - st.pend[b], 0)
        key = (score << 24) | (kernels.vertex_hash(b, st.round_seed) >> np.uint64(40)).astype(np.int64)
        if nsel < len(b):
            idx = np.argpartition(key, nsel - 1)[:nsel]
            b, key = b[idx], key[idx]
        if np.isfinite(cap):
            b = b[np.argsort(key, kind="stable")]
            keep = max(1, int(np.searchsorted(np.cumsum(st.resid[b]), cap, side="right")))
            b = b[:keep]  # a partition always keeps one vertex (take thins a hub's rows)
        return b

    # ---- the run ----------------------------------------------------------------------------
    def sample_stride(self, total: int) -> int:
        """Rows with eid % stride == 0 estimate the two-hop step; at most ``count_sample_max`` of them."""
        cfg = self.cfg
        return max(1, math.ceil(total / max(1, cfg.count_sample_max)))

    def groups(self, total: int) -> int:
        """G, the number of row groups (Spark tasks of a round): from the configuration and the row count
        only, never from the cluster, so a run decides alike on any cluster."""
        return self.cfg.groups or max(8, math.ceil(total / 4_000_000))

    def _round(self, st: ExpansionState, sel: Selection, rows: LocalRows | FileRounds) -> tuple[tuple, np.ndarray]:
        """Run one round on the rows wherever they are; return its delta and the eids of the count-sample
        rows it allocated (a Spark round's; the driver draws the sample of the rows it holds anew)."""
        st.rounds += 1
        if isinstance(rows, LocalRows):
            part = kernels.edge_round(rows.rest["src"], rows.rest["dst"], *sel.args(st))
            return rows.settle(part, st.parts), np.empty(0, np.int64)
        return rows.run(sel.args(st), st.parts)

    def _end(
        self, st: ExpansionState, sel: Selection | None, rows: LocalRows | FileRounds, log: Callable[[str], None]
    ) -> tuple:
        """The last step: leftover rule, max_rounds, or the finishing pass; returns its delta."""
        p = st.parts
        if sel is not None and sel.leftover_to == FINISH:
            log(f"{self.name}: finishing pass over {st.remaining:,} rows")
            return self._finish_rows(st, rows)
        if self._finishes(sel):  # out of rounds: the capacity still holds in the finishing pass
            log(f"{self.name}: max_rounds {self.cfg.max_rounds} reached, finishing pass over {st.remaining:,} rows")
            return self._finish_rows(st, rows)
        k = sel.leftover_to if sel is not None else int(np.argmin(st.ecount))
        why = "leftover rule" if sel is not None else f"max_rounds {self.cfg.max_rounds} reached"
        log(f"{self.name}: {why}: {st.remaining:,} remaining rows -> partition {k}")
        if isinstance(rows, LocalRows):
            return rows.settle(np.full(len(rows), k, np.int32), p)
        return rows.run((), p, leftover_to=k)[0]

    def _finishes(self, sel: Selection | None) -> bool:
        """Whether ``_end`` runs the finishing pass (rather than the leftover rule)."""
        return (sel is not None and sel.leftover_to == FINISH) or (sel is None and self.refines)

    def _finish_rows(self, st: ExpansionState, rows: LocalRows | FileRounds) -> tuple:
        """The finishing pass over the remaining rows, in the driver or as one Spark job; returns its delta."""
        if isinstance(rows, LocalRows):
            return rows.settle(self.finish(st, rows.rest), st.parts)
        return rows.finish(st, self.finish_args(st))

    def expand(
        self,
        st: ExpansionState,
        rows: LocalRows | FileRounds,
        smp: dict[str, np.ndarray],
        stride: int,
        local_cap: int,
        log: Callable[[str], None],
        progress: bool = False,
        on_round: Callable[[ExpansionState, Selection], None] | None = None,
    ) -> tuple[LocalRows | None, dict[str, Any]]:
        """The rounds, from the files (Spark) and then in the driver, until every row is allocated; returns
        the rows the driver ended up holding (None: it never held any) and the round statistics."""
        t_spark = t_local = 0.0
        n_spark = n_local = 0
        while st.remaining > 0:
            t0 = time.perf_counter()
            if isinstance(rows, FileRounds) and st.remaining <= local_cap:
                rows = LocalRows(rows.fetch())
            if isinstance(rows, LocalRows):
                smp = rows.sample(stride)
            self.estimate(st, smp, stride)
            sel = self.select(st) if st.rounds < self.cfg.max_rounds else None
            if sel is None or sel.leftover_to != -1:
                if (
                    isinstance(rows, FileRounds)
                    and self._finishes(sel)
                    and st.remaining <= self.cfg.driver_finish_edges
                ):
                    rows = LocalRows(rows.fetch())  # the finishing pass decides pair after pair in the driver
                st.apply(self._end(st, sel, rows, log))
                break
            if on_round is not None:
                on_round(st, sel)
            mode = "local" if isinstance(rows, LocalRows) else "spark"
            delta, sampled = self._round(st, sel, rows)
            if mode == "spark":  # the sample rows the round allocated leave the driver's sample
                keep = ~np.isin(smp["eid"], sampled)
                smp = {c: a[keep] for c, a in smp.items()}
            st.claim[sel.claimed] = -1
            st.apply(delta)
            dt = time.perf_counter() - t0
            if mode == "spark":
                t_spark, n_spark = t_spark + dt, n_spark + 1
            else:
                t_local, n_local = t_local + dt, n_local + 1
            if progress and (mode == "spark" or st.rounds % 10 == 0 or st.remaining == 0):
                log(
                    f"{self.name} round {st.rounds} [{mode}]: unallocated {st.remaining:,} rows, "
                    f"claimed {len(sel.claimed):,}, E {st.ecount.tolist()}, V {st.vcount.tolist()}, {dt:.2f}s"
                )
        stats = {"spark_rounds": n_spark, "local_rounds": n_local, "spark_rounds_s": t_spark, "local_rounds_s": t_local}
        return (rows if isinstance(rows, LocalRows) else None), stats

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        t_start = time.perf_counter()
        alloc_dir = ctx.staging / "alloc"
        held = ctx.num_edges <= ctx.cfg.local_finish_edges
        sharded = use_shards(ctx.cfg, ctx.num_vertices)
        run = self._partition_sharded if sharded else self._partition_held if held else self._partition_files
        st, stats, timings, files = run(ctx, alloc_dir)
        alloc_dir = files.alloc_dir if files is not None else alloc_dir  # the kept start's
        if not parquet_names(alloc_dir):
            store_for(alloc_dir).write_table(ALLOC_PA.empty_table(), alloc_dir / "empty.parquet")
        alloc = read_parquet(ctx.spark, alloc_dir)
        timings.update(
            starts_s=round(stats.get("starts_s", 0.0), 3),
            refine_s=round(stats.get("refine_s", 0.0), 3),
            spark_rounds_s=round(stats["spark_rounds_s"], 3),
            local_rounds_s=round(stats["local_rounds_s"], 3),
            expansion_s=round(time.perf_counter() - t_start, 3),
        )
        counts = {
            "spark_rounds": stats["spark_rounds"],
            "local_rounds": stats["local_rounds"],
            "starts": stats.get("starts", []),
            "refine_rounds": stats.get("refine_rounds", 0),
            "refine_log": stats.get("refine_log", []),
            "groups": st.groups,
            "driver_state_bytes": st.nbytes() + stats.get("sample_bytes", 0),
            "spark_jobs": files.jobs if files is not None else [],
        }
        if sharded:
            counts["shards"] = stats["shards"]
        bits = None if sharded else st.bits if st.counts is None else pack_bits(st.counts > 0)
        return PartitionResult(
            alloc, rounds=st.rounds, timings=timings, counts=counts, replica_bits=bits, edges_per_part=st.ecount
        )

    def _partition_sharded(
        self, ctx: PartitionContext, alloc_dir: StoreURI
    ) -> tuple[ExpansionState, dict[str, Any], dict[str, float], FileRounds | None]:
        """``partition.state`` = sharded: the per-vertex state in vertex-id-range shards (``sharded.py``), one
        start, every round a Spark job, the relocation from the shards too (``sharded_relocate.py``)."""
        run = ShardedExpansion(self, ctx, alloc_dir)
        st, stats, timings = run.run()
        return st, stats, timings, run.rows

    def _partition_held(
        self, ctx: PartitionContext, alloc_dir: StoreURI
    ) -> tuple[ExpansionState, dict[str, Any], dict[str, float], FileRounds | None]:
        """A graph of at most ``local_finish_edges`` rows: fetched once, expanded and refined in the driver."""
        t = time.perf_counter()
        held = read_columns(ctx.source, ("eid", "src", "dst"))  # no Spark job: straight from the store
        timings = {"fetch_s": round(time.perf_counter() - t, 3)}
        st, local, stats = self.expand_held(held, local_degrees(held, ctx.num_vertices), ctx.log, ctx.cfg.progress)
        _write_local(local, alloc_dir)
        return st, stats, timings, None

    def _partition_files(
        self, ctx: PartitionContext, alloc_dir: StoreURI
    ) -> tuple[ExpansionState, dict[str, Any], dict[str, float], FileRounds | None]:
        """A bigger graph: rounds as Spark jobs over the row files until the remainder fits the driver,
        refinement over the allocation files; from ``starts(rows)`` first-seed sets, which share the split
        (each start has its own rounds and allocation files; the best by ``start_score`` is kept)."""
        spark, cfg, m = ctx.spark, ctx.cfg, ctx.num_edges
        stride = self.sample_stride(m)
        t = time.perf_counter()
        files = FileRounds(spark, ctx.staging, alloc_dir, self.groups(m))
        deg, smp = files.split(ctx.edges, ctx.num_vertices, stride)
        timings = {"split_s": round(time.perf_counter() - t, 3)}
        starts, active = self.starts(m) + self.packed_starts(m), int((deg > 0).sum())
        best: tuple[tuple, ExpansionState, dict[str, Any], FileRounds] | None = None
        tried: list[dict[str, Any]] = []
        for start in range(starts):
            run = files if starts == 1 else files.restart(start)
            st = self.new_state(deg, m, start)
            sample = smp
            if start >= self.starts(m):  # the rounds go on from a packing of whole clusters (one job places it)
                delta, placed = run.place(self.packed_homes(st, ctx.edges, ctx.log), st.parts)
                st.apply(delta)
                sample = {c: a[~np.isin(smp["eid"], placed)] for c, a in smp.items()}
            local, stats = self.expand(st, run, sample, stride, cfg.local_finish_edges, ctx.log, cfg.progress)
            stats["sample_bytes"] = sum(a.nbytes for a in smp.values())
            t = time.perf_counter()
            if self.refines:  # the allocated rows live in files per group (the local part joins them)
                run.write_allocated(local.allocated() if local is not None else None)
                stats["refine_rounds"] = self.refine(st, run)
                stats["refine_log"] = self.refine_log()
            elif local is not None and local.done:
                _write_local(local, run.alloc_dir)
            stats["refine_s"] = time.perf_counter() - t
            score = self._tried(st, stats, active, tried, starts, ctx.log)
            if best is None or score < best[0]:
                if best is not None:
                    best[3].discard()
                best = (score, st, stats, run)
            else:
                run.discard()
        assert best is not None, "starts() is at least 1"
        _, st, stats, kept = best
        if starts > 1:
            files.drop_split()
            stats["starts"], stats["starts_s"] = tried, sum(x["s"] for x in tried)
        return st, stats, timings, kept

    def expand_held(
        self,
        rows: dict[str, np.ndarray],
        deg: np.ndarray,
        log: Callable[[str], None],
        progress: bool = False,
        on_round: Callable[[ExpansionState, Selection], None] | None = None,
    ) -> tuple[ExpansionState, LocalRows, dict[str, Any]]:
        """Expansion and refinement of a graph the driver holds, from ``starts()`` first-seed sets
        (``new_state``'s ``start``); the best result by ``start_score`` is kept.

        The replication a neighbour expansion ends with depends mostly on where its first seeds land (a
        partition that starts in a sparse periphery enters the dense core late, and every vertex it takes
        there is a replica; tolokers p=4 over seeds 1-8: 0.93-1.20x the reference DNE's RF). The Spark path
        (``_partition_files``) makes the same starts, each with its Spark jobs.
        Each start is refined before it is scored: a start with few replicas but a vertex balance the
        relocation cannot repair must not win.
        """
        total = len(rows["eid"])
        stride = self.sample_stride(total)
        starts = self.starts(total) + self.packed_starts(total)
        active = int((deg > 0).sum())
        unallocated = LocalRows(rows)  # sorted into canonical order once for every start
        best: tuple[tuple, ExpansionState, LocalRows, dict[str, Any]] | None = None
        tried: list[dict[str, Any]] = []
        for start in range(starts):
            st = self.new_state(deg, total, start)
            local = unallocated.restart()  # the expansion settles the rows in place
            if start >= self.starts(total):  # the rounds go on from a packing of whole clusters
                home = self.packed_homes(st, local.rest, log)
                st.apply(local.settle(packed_rows(local.rest["src"], local.rest["dst"], home), st.parts))
            stats = self.expand(st, local, {}, stride, total, log, progress, on_round)[1]
            t = time.perf_counter()
            if self.refines:
                done = local.allocated()
                stats["refine_rounds"] = self.refine(st, done)
                stats["refine_log"] = self.refine_log()
                local.done = [done]
            stats["refine_s"] = time.perf_counter() - t
            score = self._tried(st, stats, active, tried, starts, log)
            if best is None or score < best[0]:
                best = (score, st, local, stats)
        assert best is not None, "starts() is at least 1"
        _, st, local, stats = best
        stats["starts"] = tried
        stats["starts_s"] = sum(t["s"] for t in tried)  # the kept start's rounds_s and refine_s are its own
        return st, local, stats

    def _tried(
        self,
        st: ExpansionState,
        stats: dict[str, Any],
        active: int,
        tried: list[dict[str, Any]],
        starts: int,
        log: Callable[[str], None],
    ) -> tuple:
        """Score a finished start, add it to ``tried`` (the stage's ``counts.starts``) and say so."""
        score, q = self.start_score(st), quality(st.ecount, st.vcount, active)
        seconds = round(stats["spark_rounds_s"] + stats["local_rounds_s"] + stats["refine_s"], 3)
        entry = {"seed": st.seed, **self.start_params(st), "replicas": int(st.vcount.sum()), "rounds": st.rounds}
        entry["score"] = list(score)
        tried.append({**entry, "s": seconds, **q})
        if starts > 1:
            log(
                f"{self.name}: start {len(tried) - 1} (seed {st.seed}): RF {q['rf']:.3f} VB {q['vb']:.3f} EB {q['eb']:.3f}"
            )
        return score

    def start_params(self, st: ExpansionState) -> dict[str, Any]:
        """What a start varies besides its seed (reported with it in ``counts.starts``)."""
        return {}

    def start_score(self, st: ExpansionState) -> tuple:
        """Lower is better: how restarts are compared (by replicas; AdaDNE adds its balance bounds)."""
        return (int(st.vcount.sum()),)

    def begin(self, st: ExpansionState) -> None:
        """Hook: called once before the first round."""

    def packed_starts(self, rows: int) -> int:
        """Hook: starts after ``starts(rows)`` that begin from ``packed_homes`` (held rows or Spark path)."""
        return 0

    def packed_homes(
        self, st: ExpansionState, rows: dict[str, np.ndarray] | DataFrame, log: Callable[[str], None]
    ) -> np.ndarray:
        """Hook: a home partition per vertex (-1: none) for a packed start, from the rows the driver holds or
        the rows' table; the rows both of whose endpoints share a home are placed before the first round."""
        raise NotImplementedError(f"{self.name}: no packed start")

    def start_seed(self, start: int) -> int:
        """The seed of restart ``start``: the configured seed for the first, derived ones after it."""
        return self.cfg.seed if start == 0 else int(kernels.vertex_hash(np.array([start]), self.cfg.seed)[0] >> 33)

    def new_state(self, deg: np.ndarray, total: int, start: int = 0) -> ExpansionState:
        deg = np.asarray(deg, np.int64)
        seed = self.start_seed(start)
        active_v = np.flatnonzero(deg > 0)
        tie = kernels.vertex_hash(active_v, seed)
        order = active_v[np.lexsort((tie, deg[active_v]))]
        p = self.cfg.parts
        st = ExpansionState(
            parts=p,
            resid=deg.copy(),
            bits=np.zeros((len(deg), (p + 63) // 64), np.uint64),
            order=order,
            seed=seed,
            total=total,
            groups=self.groups(total),
            deg=deg,
            counts=np.zeros((len(deg), p), np.int32) if self.refines else None,
            start=start,
        )
        self.begin(st)
        return st

    def run_local(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        num_vertices: int,
        eid: np.ndarray | None = None,
        on_round: Callable[[ExpansionState, Selection], None] | None = None,
    ) -> tuple[np.ndarray, int]:
        """The whole expansion in this process on numpy arrays: (part per row, rounds).

        Same state, selection, kernels and groups as the Spark path (which gives identical results);
        used for calibration sweeps and to cross-check the Spark rounds in tests. ``on_round(st, sel)``
        is called with each round's selection (claims set) before the round runs.
        """
        src = np.asarray(src, np.int64)
        dst = np.asarray(dst, np.int64)
        pos = np.arange(len(src))
        eid = pos if eid is None else np.asarray(eid, np.int64)
        deg = np.bincount(src, minlength=num_vertices) + np.bincount(dst, minlength=num_vertices)
        held = {"eid": eid, "src": src, "dst": dst, "pos": pos}
        st, local, _ = self.expand_held(held, deg.astype(np.int64), lambda s: None, on_round=on_round)
        rows = local.allocated()
        out = np.full(len(src), -1, np.int32)
        out[rows["pos"]] = rows["part"]
        return out, st.rounds


def _write_local(local: LocalRows, alloc_dir: StoreURI) -> None:
    """The rows the driver allocated, as one file of the allocation (in the store: Spark's tasks read it)."""
    a = local.allocated()
    store_for(alloc_dir).write_table(
        pa.table([a["eid"], a["src"], a["dst"], a["part"]], schema=ALLOC_PA), alloc_dir / "local.parquet"
    )


def local_degrees(e: dict[str, np.ndarray], n: int, source: str = "ingest/edges") -> np.ndarray:
    """Degrees of a fetched edge set; ids outside 0..n-1 are an inconsistent ingest."""
    ids = np.concatenate([e["src"], e["dst"]])
    bad = (ids < 0) | (ids >= n)
    if bad.any():
        raise BadInputError(
            source,
            "src/dst",
            int(bad.sum()),
            len(ids),
            f"name vertex ids outside 0..{n - 1}",
            examples=ids[bad][:3].tolist(),
            hint="re-run 'glisp ingest' (vertex ids must be dense)",
        )
    return np.bincount(ids, minlength=n).astype(np.int64)
