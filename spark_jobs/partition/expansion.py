"""Distributed neighbour expansion, shared by DistributedNE and AdaDNE.

Design (measured costs in docs/partitioning.md):

* Per-vertex state lives on the driver as numpy, O(|V|): residual degree (unallocated incident edge
  rows), partition sets as bitsets (|V| x ceil(p/64) uint64), and the per-round claims. Per-partition
  counts |E_k|, |V_k| are exact sums of the deltas. Boundary B_k = {v : k in parts(v), resid(v) > 0}.
* The unallocated edge rows stay in Spark (a cached DataFrame). One round is ONE Spark job: a
  ``mapInArrow`` pass with a numba kernel over the unallocated rows only, given the broadcast claims and
  bitsets. It tags each row with its new partition (or -1) and returns a small per-task delta:
  (vertex, partition, incidences) triples and rows per partition - vertex-level, never edges.
  Allocated rows are flushed to scratch Parquet every ``checkpoint_every`` rounds, when the unallocated
  remainder is also ``localCheckpoint``-ed (lineage truncated) and coalesced as it shrinks.
* Once the remainder is at most ``partition.local_finish_edges`` rows, it is fetched once and the
  remaining rounds run in one process with the same kernels. The per-edge decision depends only on
  the broadcast state, so the result is identical whichever way a round ran (a test checks this).
* A round = the previous round's two-hop allocation (edges whose endpoints now share a partition go to
  the least-loaded shared one) + this round's one-hop allocation (all unallocated edges of the selected
  vertices). Rows of one unordered vertex pair always get the same partition.

Subclasses decide, per round, which partitions expand and how many vertices each selects.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glisp_core.errors import BadInputError
from spark_jobs.partition import kernels
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult
from spark_jobs.partition.rounds import ALLOC_PA, FileRounds


@dataclass
class ExpansionState:
    """Driver-side state of a neighbour expansion (all O(|V|) or O(p))."""

    parts: int
    resid: np.ndarray  # int64 [n]: unallocated edge rows incident to v (self-loop counts twice)
    bits: np.ndarray  # uint64 [n, W]: partition set of v
    order: np.ndarray  # int64: vertices with edges, by (degree, seeded hash): seed candidates
    seed: int
    total: int  # edge rows
    ecount: np.ndarray = field(init=False)  # int64 [p]: |E_k| in rows
    vcount: np.ndarray = field(init=False)  # int64 [p]: |V_k|
    claim: np.ndarray = field(init=False)  # int32 [n]: partition claiming v this round, -1 none
    seed_pos: np.ndarray = field(init=False)
    rounds: int = 0

    def __post_init__(self) -> None:
        self.ecount = np.zeros(self.parts, np.int64)
        self.vcount = np.zeros(self.parts, np.int64)
        self.claim = np.full(len(self.resid), -1, np.int32)
        self.seed_pos = np.zeros(2, np.int64)

    @property
    def remaining(self) -> int:
        return int(self.total - self.ecount.sum())

    def rank(self) -> np.ndarray:
        """rank[k]: position of partition k when ordered by |E_k| ascending (ties: lower k)."""
        order = np.lexsort((np.arange(self.parts), self.ecount))
        rank = np.empty(self.parts, np.int32)
        rank[order] = np.arange(self.parts, dtype=np.int32)
        return rank

    def apply(self, vert: np.ndarray, vpart: np.ndarray, cnt: np.ndarray, rows: np.ndarray) -> None:
        kernels.apply_delta(self.bits, self.resid, self.vcount, vert, vpart, cnt)
        self.ecount += rows


@dataclass
class Selection:
    """One round's plan: claimed vertices (in state.claim), partitions open for two-hop, ranks."""

    claimed: np.ndarray
    open_bits: np.ndarray
    rank: np.ndarray
    weight: np.ndarray  # float64 [p]: share of contested edges a partition draws (light = heavy weight)
    accept: np.ndarray  # float64 [p]: probability that a partition takes a two-hop edge
    onehop: np.ndarray  # float64 [p]: residual rows of the vertices each partition claimed (one-hop bound)
    round_seed: int = 0
    leftover_to: int = -1  # >= 0: give every remaining edge to this partition and stop
    take: np.ndarray | None = None  # float64 [p]: probability that partition k takes a one-hop edge

    def args(self, st: ExpansionState) -> tuple:
        """The broadcast state of the round kernel (kernels.edge_round after src, dst)."""
        take = self.take if self.take is not None else np.ones(len(self.weight))
        return (st.claim, st.bits, self.open_bits, self.weight, self.accept, self.round_seed, take)


def bitmask(active: np.ndarray) -> np.ndarray:
    words = (len(active) + 63) // 64
    out = np.zeros(words, np.uint64)
    for k in np.flatnonzero(active):
        out[k // 64] |= np.uint64(1) << np.uint64(k % 64)
    return out


class ExpansionPartitioner(Partitioner):
    """Neighbour expansion in lock-step rounds; subclasses implement ``plan`` (who expands, how fast)."""

    iterative = True

    # ---- subclass hooks ---------------------------------------------------------------------
    @abstractmethod
    def plan(self, st: ExpansionState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """Per partition: (active, lam, cap, seed_budget, leftover_to).

        active: bool, expands this round; lam: fraction of its boundary to select; cap: most residual
        rows its selection may carry (inf = no cap); seed_budget: residual rows of seeds to take when its
        boundary is empty; leftover_to >= 0 ends the run giving all remaining edges to that partition.
        """

    def min_select(self) -> int:
        return 1

    def seed_count(self, st: ExpansionState, k: int) -> int:
        """Most seed vertices partition k takes in one round when its boundary is empty."""
        return 1 << 22

    # ---- selection (driver) -----------------------------------------------------------------
    def select(self, st: ExpansionState) -> Selection:
        p = st.parts
        rank = st.rank()
        active, lam, cap, seed_budget, leftover_to = self.plan(st)
        if leftover_to >= 0:
            return Selection(
                np.empty(0, np.int64),
                np.zeros(st.bits.shape[1], np.uint64),
                rank,
                rank * 0.0,
                rank * 0.0,
                rank * 0.0,
                0,
                leftover_to,
            )
        ptr, verts = kernels.boundaries(st.resid, st.bits, p)
        claimed = []
        onehop = np.zeros(p)
        need_seed = []
        for k in np.argsort(rank):
            if not active[k]:
                continue
            b = verts[ptr[k] : ptr[k + 1]]
            if len(b) == 0:
                need_seed.append(k)
                continue
            nsel = min(len(b), max(self.min_select(), int(math.ceil(lam[k] * len(b)))))
            key = (st.resid[b] << 24) | (kernels.vertex_hash(b, st.seed + st.rounds) >> np.uint64(40)).astype(np.int64)
            if nsel < len(b):
                idx = np.argpartition(key, nsel - 1)[:nsel]
                b, key = b[idx], key[idx]
            if np.isfinite(cap[k]):
                o = np.argsort(key, kind="stable")
                b = b[o]
                keep = int(np.searchsorted(np.cumsum(st.resid[b]), cap[k], side="right"))
                if keep == 0 and not self.hard_cap and st.ecount[k] < st.total / p:
                    keep = 1  # a soft cap never stops a partition below its fair share
                b = b[:keep]
                if keep == 0:
                    self.on_blocked(st, int(k))
                    continue
            kernels.set_claims(st.claim, b, int(k), rank)
            onehop[k] += st.resid[b].sum()
            claimed.append(b)
        for k in need_seed:
            budget = int(max(1, seed_budget[k]))
            count = max(1, min(budget, 1 << 22, self.seed_count(st, int(k))))
            s = kernels.take_seeds(st.order, st.seed_pos, st.resid, st.bits, st.claim, budget, count)
            kernels.set_claims(st.claim, s, int(k), rank)
            onehop[k] += st.resid[s].sum()
            claimed.append(s)
        allc = np.concatenate(claimed) if claimed else np.empty(0, np.int64)
        w = self.contest_weights(st)
        take = np.ones(p)
        if not self.hard_cap:  # a soft cap thins the one-hop rows of a selection that overshoots it
            big = np.isfinite(cap) & (onehop > cap)
            take[big] = np.maximum(cap[big], 1.0) / onehop[big]
            onehop = onehop * take  # expected one-hop rows, which the two-hop limit counts
        return Selection(allc, bitmask(active), rank, w, np.ones(p), onehop, st.seed * 1_000_003 + st.rounds, take=take)

    hard_cap = True  # cap[k] is a hard limit (DNE); False: a partition below |E|/p always takes one vertex
    needs_counts = False  # True: estimate each partition's two-hop offer before the round (one sampled pass)

    def two_hop_accept(self, st: ExpansionState, sel: Selection, offered: np.ndarray) -> np.ndarray:
        """Probability that partition k takes a two-hop edge, given the estimated rows offered to it."""
        return np.ones(st.parts)

    def contest_weights(self, st: ExpansionState) -> np.ndarray:
        """Weight of partition k when several partitions can take an edge: its deficit to the fair share.

        DNE gives a contested edge to the member with the fewest edges, one edge at a time, which fills
        the emptiest partitions first. Drawing with probability proportional to (|E|/p - |E_k|) is the
        batch equivalent (water-filling) for a round whose edges are decided in parallel.
        """
        fair = st.total / st.parts
        return np.maximum(fair - st.ecount.astype(np.float64), 0.01 * fair)

    def on_blocked(self, st: ExpansionState, k: int) -> None:
        """Partition k cannot select anything within its cap (DNE: it is full)."""

    # ---- the run ----------------------------------------------------------------------------
    def sample_stride(self, total: int) -> int:
        """Rows with eid % stride == 0 estimate the two-hop offer; at most ``count_sample_max`` of them."""
        cfg = self.cfg
        return max(1, cfg.count_sample, math.ceil(total / max(1, cfg.count_sample_max)))

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        t_start = time.perf_counter()
        spark, cfg = ctx.spark, ctx.cfg
        n, p, m = ctx.num_vertices, ctx.parts, ctx.num_edges
        alloc_dir = ctx.staging / "alloc"
        alloc_dir.mkdir(parents=True, exist_ok=True)
        timings: dict[str, float] = {}
        stride = self.sample_stride(m)
        local_cap = cfg.local_finish_edges
        par = max(1, spark.sparkContext.defaultParallelism)
        spark_rounds = local_rounds = 0
        local: dict[str, np.ndarray] | None = None
        files: FileRounds | None = None
        smp: dict[str, np.ndarray] = {}
        local_chunks: list[pa.RecordBatch] = []
        t_spark = t_local = 0.0
        t = time.perf_counter()
        if m <= local_cap:
            local = _fetch(ctx.edges)
            deg = _local_degrees(local, n)
        else:
            files = FileRounds(spark, ctx.staging, alloc_dir, max(2 * par, math.ceil(m / 4_000_000)))
            deg, smp = files.split(ctx.edges, n, stride)
        timings["split_s" if files is not None else "fetch_s"] = round(time.perf_counter() - t, 3)
        st = self.new_state(deg, m)

        while st.remaining > 0:
            t0 = time.perf_counter()
            if local is None and st.remaining <= local_cap:
                local = files.fetch()
                files = None
            if local is not None:
                smp = {c: a[local["eid"] % stride == 0] for c, a in local.items()}
            sel = self.select(st) if st.rounds < cfg.max_rounds else None
            if sel is None or sel.leftover_to >= 0:
                k = sel.leftover_to if sel is not None else int(np.argmin(st.ecount))
                why = "leftover rule" if sel is not None else f"max_rounds {cfg.max_rounds} reached"
                ctx.log(f"{self.name}: {why}: {st.remaining:,} remaining rows -> partition {k}")
                if local is not None:
                    part = np.full(len(local["eid"]), k, np.int32)
                    local_chunks.append(_batch(local, part))
                    vert, vpart, cnt, rows = kernels.incidence_delta(local["src"], local["dst"], part, p)
                else:
                    state = (
                        st.claim,
                        st.bits,
                        np.zeros(st.bits.shape[1], np.uint64),
                        np.ones(p),
                        np.ones(p),
                        0,
                        np.ones(p),
                    )
                    vert, vpart, cnt, rows, _left = files.run(state, p, leftover_to=k)
                    files = None
                st.apply(vert, vpart, cnt, rows)  # the partition sets become the replicas: keep them exact
                break
            st.rounds += 1
            if self.needs_counts:
                cnt = kernels.two_hop_counts(smp["src"], smp["dst"], st.bits, sel.open_bits, sel.weight, sel.round_seed)
                sel.accept = self.two_hop_accept(st, sel, cnt * float(stride))
            args = sel.args(st)
            if local is not None:
                part = kernels.edge_round(local["src"], local["dst"], *args)
                vert, vpart, cnt, rows = kernels.incidence_delta(local["src"], local["dst"], part, p)
                done = part >= 0
                if done.any():
                    local_chunks.append(_batch({c: a[done] for c, a in local.items()}, part[done]))
                local = {c: a[~done] for c, a in local.items()}
                local_rounds += 1
                mode = "local"
            else:
                if self.needs_counts:  # keep the driver's sample in step with the rows (same decisions)
                    sp = kernels.edge_round(smp["src"], smp["dst"], *args)
                    smp = {c: a[sp < 0] for c, a in smp.items()}
                vert, vpart, cnt, rows, _left = files.run(args, p)
                spark_rounds += 1
                mode = "spark"
            st.claim[sel.claimed] = -1
            st.apply(vert, vpart, cnt, rows)
            dt = time.perf_counter() - t0
            if mode == "spark":
                t_spark += dt
            else:
                t_local += dt
            if cfg.progress and (mode == "spark" or st.rounds % 10 == 0 or st.remaining == 0):
                ctx.log(
                    f"{self.name} round {st.rounds} [{mode}]: unallocated {st.remaining:,} rows, "
                    f"claimed {len(sel.claimed):,}, E {st.ecount.tolist()}, V {st.vcount.tolist()}, {dt:.2f}s"
                )
        if local_chunks:
            with pq.ParquetWriter(str(alloc_dir / "local-00000.parquet"), ALLOC_PA) as w:
                for b in local_chunks:
                    w.write_batch(b)
        if not any(alloc_dir.glob("*.parquet")):
            pq.write_table(ALLOC_PA.empty_table(), str(alloc_dir / "empty.parquet"))
        alloc = spark.read.parquet(str(alloc_dir))
        timings.update(
            spark_rounds_s=round(t_spark, 3),
            local_rounds_s=round(t_local, 3),
            expansion_s=round(time.perf_counter() - t_start, 3),
        )
        counts = {"spark_rounds": spark_rounds, "local_rounds": local_rounds}
        return PartitionResult(
            alloc, rounds=st.rounds, timings=timings, counts=counts, replica_bits=st.bits, edges_per_part=st.ecount
        )

    def begin(self, st: ExpansionState) -> None:
        """Hook: called once before the first round."""

    def new_state(self, deg: np.ndarray, total: int) -> ExpansionState:
        active_v = np.flatnonzero(deg > 0)
        tie = kernels.vertex_hash(active_v, self.cfg.seed)
        order = active_v[np.lexsort((tie, deg[active_v]))]
        p = self.cfg.parts
        st = ExpansionState(
            parts=p,
            resid=deg.copy(),
            bits=np.zeros((len(deg), (p + 63) // 64), np.uint64),
            order=order,
            seed=self.cfg.seed,
            total=total,
        )
        self.begin(st)
        return st

    def run_local(
        self, src: np.ndarray, dst: np.ndarray, num_vertices: int, eid: np.ndarray | None = None, log=None
    ) -> tuple[np.ndarray, int]:
        """The whole expansion in this process on numpy arrays: (part per row, rounds).

        Same state, selection and kernels as the Spark path (which gives identical results); used for
        calibration sweeps and to cross-check the Spark rounds in tests.
        """
        src = np.asarray(src, np.int64)
        dst = np.asarray(dst, np.int64)
        deg = np.bincount(src, minlength=num_vertices) + np.bincount(dst, minlength=num_vertices)
        st = self.new_state(deg.astype(np.int64), len(src))
        out = np.full(len(src), -1, np.int32)
        idx = np.arange(len(src))
        eid = idx if eid is None else np.asarray(eid, np.int64)
        stride = self.sample_stride(len(src))
        while st.remaining > 0:
            sel = self.select(st) if st.rounds < self.cfg.max_rounds else None
            if sel is None or sel.leftover_to >= 0:
                k = sel.leftover_to if sel is not None else int(np.argmin(st.ecount))
                out[idx] = k
                st.ecount[k] += st.remaining
                break
            st.rounds += 1
            s, d = src[idx], dst[idx]
            if self.needs_counts:
                smp = eid[idx] % stride == 0
                cnt = kernels.two_hop_counts(s[smp], d[smp], st.bits, sel.open_bits, sel.weight, sel.round_seed)
                sel.accept = self.two_hop_accept(st, sel, cnt * float(stride))
            part = kernels.edge_round(s, d, *sel.args(st))
            vert, vpart, cnt, rows = kernels.incidence_delta(s, d, part, st.parts)
            done = part >= 0
            out[idx[done]] = part[done]
            idx = idx[~done]
            st.claim[sel.claimed] = -1
            st.apply(vert, vpart, cnt, rows)
            if log is not None:
                log(st, sel)
        return out, st.rounds


def _fetch(df: Any) -> dict[str, np.ndarray]:
    """Fetch a small edge set (at most partition.local_finish_edges rows) to the driver."""
    t = df.select("eid", "src", "dst").toArrow()
    return {c: t.column(c).to_numpy().astype(np.int64) for c in ("eid", "src", "dst")}


def _batch(cols: dict[str, np.ndarray], part: np.ndarray) -> pa.RecordBatch:
    return pa.record_batch([cols["eid"], cols["src"], cols["dst"], part.astype(np.int32)], schema=ALLOC_PA)


def _local_degrees(e: dict[str, np.ndarray], n: int, source: str = "ingest/edges") -> np.ndarray:
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
