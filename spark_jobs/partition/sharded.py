"""The Spark path of a neighbour expansion with its per-vertex state in vertex-id-range shards
(``partition.state = "sharded"``; the shards are :mod:`spark_jobs.partition.shards`).

Why: in the driver mode (``expansion.py``) the driver holds O(|V|) arrays and broadcasts O(|V|) bytes per
round (300 B of driver RSS per vertex id measured at 10^7 ids). Here the driver holds O(p) totals and the
O(p x buckets) summaries of the last merge; every broadcast is O(p x cells).

* **Split** (one job over the ingested edges): the rows go to S(S+1)/2 cells by the unordered pair of their
  endpoints' shards (a cell's task reads at most two shards), and each task writes its vertices' degrees
  as deltas of round 0 per shard. Round 0's merge builds the shards.
* **A round** = two jobs. The cell job: each task reads its two shards, computes the claims from the
  per-partition thresholds (``shards.shard_claims``: a pure function of the shard and O(p) numbers, so
  every task computes the same claims of a vertex), runs ``kernels.edge_round`` on the cell's rows in a
  local id space (shard a's ids, then shard b's), writes the allocated rows, the rest and its delta per
  shard, and returns rows per partition and its estimate of the next round's two-hop offer (from the
  cell's own partition sets after its own allocation: other cells' replicas are not seen). The merge job
  applies the deltas per shard and returns the next selection's summary.
* **Selection** (driver): the partitioner's ``plan`` and hooks on O(p) totals; each partition's n_i
  lowest-key boundary vertices become a bucket threshold of the summed histograms
  (``shards.boundary_thresholds``), seeds a bucket range of the untouched vertices' (degree, hash) order
  (``shards.seed_ranges``). Differences to the driver mode: no per-vertex two-hop estimate (the score is
  the residual degree), ties and the cap cut at bucket granularity, hashes over the cell's local ids,
  one start, and the finishing pass as one cell job (each cell places its rows from the same state).
* **The relocation** (AdaDNE) runs over the shards too (``sharded_relocate``: vote, merge and move jobs per
  round on O(p x buckets) thresholds), then, where it ends above ``refine_vb_max``, the whole-component
  moves (``components``) on the rows that touch a candidate vertex.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tasks import map_partitions
from spark_jobs.partition import kernels
from spark_jobs.partition.rounds import EDGE_PA, FileRounds, _atomic_write_ipc
from spark_jobs.partition.selection import FINISH, Plan, Selection, bitmask
from spark_jobs.partition.sharded_relocate import RelocationFiles, ShardedRelocation
from spark_jobs.partition.shards import (
    CellView,
    ShardFiles,
    ShardRanges,
    VertexShards,
    boundary_thresholds,
    seed_ranges,
    write_deltas,
)
from spark_jobs.partition.state import ExpansionState

if TYPE_CHECKING:
    from glisp_core.config import PartitionConfig
    from spark_jobs.partition.base import PartitionContext


class Expander(Protocol):
    """What the sharded run uses of an ``expansion.ExpansionPartitioner`` (O(p) rules on the totals)."""

    name: str
    cfg: PartitionConfig
    refines: bool

    def plan(self, st: ExpansionState) -> Plan: ...
    def begin(self, st: ExpansionState) -> None: ...
    def start_seed(self, start: int) -> int: ...
    def capacity(self, st: ExpansionState) -> np.ndarray: ...
    def contest_weights(self, st: ExpansionState) -> np.ndarray: ...
    def open_parts(self, st: ExpansionState) -> np.ndarray: ...
    def min_select(self) -> int: ...
    def top_up(self, st: ExpansionState, k: int, onehop: float, cap: float) -> float: ...
    def pick_all(self, st: ExpansionState, boundary_rows: float, cap: float) -> bool: ...
    def seed_count(self, st: ExpansionState, k: int) -> int: ...
    def one_hop_take(self, st: ExpansionState, sel: Selection, cap: np.ndarray) -> np.ndarray: ...
    def two_hop_accept(self, st: ExpansionState, sel: Selection) -> np.ndarray: ...
    def finish_args(self, st: ExpansionState) -> tuple: ...


def cell_of(sa: np.ndarray, sb: np.ndarray, shards: int) -> np.ndarray:
    """Index of the cell {sa, sb} among the S(S+1)/2 unordered shard pairs (row a = min, column b = max)."""
    a, b = np.minimum(sa, sb), np.maximum(sa, sb)
    return a * shards - a * (a - 1) // 2 + (b - a)


def cell_shards(shards: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(shards) for b in range(a, shards)]


def _unused(*args: Any, **kw: Any) -> None:
    """The driver-mode callbacks of ``Relocation.run``, which ``ShardedRelocation`` does not call."""


# The driver mode's peak RSS above its process, per vertex id: measured 370 B at p = 8 and 947 B at p = 32
# (R-MAT 20-22, docs/partitioning.md "Scaling on this machine"): the state, its copies in the relocation
# and the per-round merges, with pair counts of 4 B per id and partition among them.
_DRIVER_BYTES_PER_ID = 178
_DRIVER_BYTES_PER_ID_PART = 24


def driver_state_estimate(num_vertices: int, parts: int) -> int:
    """Bytes the driver mode would add to the driver's RSS at its peak for ``num_vertices`` ids and ``parts``."""
    return num_vertices * (_DRIVER_BYTES_PER_ID + _DRIVER_BYTES_PER_ID_PART * parts)


def use_shards(cfg: PartitionConfig, num_vertices: int) -> bool:
    """``partition.state``: sharded; or auto: sharded once the driver mode would pass ``state_auto_mb`` of
    driver memory (its estimate for these ids and partitions) or ``state_auto_vertices`` ids."""
    if cfg.state != "auto":
        return cfg.state == "sharded"
    big = driver_state_estimate(num_vertices, cfg.parts) > cfg.state_auto_mb << 20
    return big or num_vertices >= cfg.state_auto_vertices


def split_cells(rows: FileRounds, ctx: PartitionContext, files: ShardFiles) -> None:
    """One Spark job: the ingested rows into cell files (round 0 of ``rows``) and the degrees as round 0's
    deltas per shard (a row with vpart -1 adds to degree and residual degree)."""
    n, ranges, shards = ctx.num_vertices, files.ranges, files.ranges.shards
    d0, ddir, cells = rows.dir / "r00000", files.delta_dir(0), rows.tasks

    def fn(pid: int, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, list[int]]]:
        tab = pa.Table.from_batches(list(batches), schema=EDGE_PA)
        src, dst = (tab.column(c).to_numpy().astype(np.int64, copy=False) for c in ("src", "dst"))
        bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n)
        if bad.any():
            ids = np.concatenate([src[bad], dst[bad]])
            yield int(bad.sum()), ids[(ids < 0) | (ids >= n)][:3].tolist()
            return
        cell = cell_of(ranges.of(src), ranges.of(dst), shards)
        for g in range(cells):
            _atomic_write_ipc(d0 / f"g{g:05d}-i{pid:05d}.arrow", tab.filter(pa.array(cell == g)))
        v, cnt = np.unique(np.concatenate([src, dst]), return_counts=True)
        write_deltas(ddir, pid, ranges, (v, np.full(len(v), -1, np.int32), cnt, np.zeros(len(v), np.int64)))
        yield 0, []

    out = map_partitions(ctx.edges.select("eid", "src", "dst"), fn)
    if any(b for b, _ in out):
        raise BadInputError(
            "ingest/edges",
            "src/dst",
            sum(b for b, _ in out),
            -1,
            f"name vertex ids outside 0..{n - 1}",
            examples=[i for _, ex in out for i in ex][:3],
            hint="re-run 'glisp ingest' (vertex ids must be dense)",
        )
    names = sorted(store_for(d0).names(d0))
    for g in range(cells):
        rows.groups[g] = [d0 / f for f in names if f.startswith(f"g{g:05d}-") and f.endswith(".arrow")]


class ShardedExpansion:
    """One expansion (one start) of ``part`` with the sharded state; see the module docstring."""

    def __init__(self, part: Expander, ctx: PartitionContext, alloc_dir: StoreURI) -> None:
        cfg, p = part.cfg, part.cfg.parts
        self.part, self.ctx = part, ctx
        ranges = ShardRanges(ctx.num_vertices, max(1, math.ceil(ctx.num_vertices / max(1, cfg.shard_vertices))))
        self.cells = cell_shards(ranges.shards)
        self.rows = FileRounds(ctx.spark, ctx.staging, alloc_dir, len(self.cells))
        self.shards = VertexShards(ctx.spark, ShardFiles(ctx.staging / "shards", ranges, p, counts=part.refines))
        words = (p + 63) // 64
        self.st = ExpansionState(
            parts=p,
            resid=np.zeros(0, np.int64),
            bits=np.zeros((0, words), np.uint64),
            order=np.zeros(0, np.int64),
            seed=part.start_seed(0),
            total=ctx.num_edges,
            groups=len(self.cells),
        )
        self.count = self.weight = np.zeros((p + 1, 0), np.int64)

    def run(self) -> tuple[ExpansionState, dict[str, Any], dict[str, float]]:
        """Split, rounds, the end; returns the state (O(p) totals), the stats and the split's time."""
        t = time.perf_counter()
        split_cells(self.rows, self.ctx, self.shards.files)
        st, log = self.st, self.ctx.log
        self.part.begin(st)
        self._merge(0)
        timings = {"split_s": round(time.perf_counter() - t, 3)}
        t_rounds, n = 0.0, 0
        while st.remaining > 0:
            t0 = time.perf_counter()
            sel = self.select() if st.rounds < self.part.cfg.max_rounds else None
            if sel is None or sel.leftover_to != -1:
                self._end(sel)
                break
            st.rounds += 1
            self._cells(sel)
            dt = time.perf_counter() - t0
            t_rounds, n = t_rounds + dt, n + 1
            if self.part.cfg.progress:
                log(
                    f"{self.part.name} round {st.rounds} [sharded]: unallocated {st.remaining:,} rows, "
                    f"E {st.ecount.tolist()}, V {st.vcount.tolist()}, {dt:.2f}s"
                )
        stats: dict[str, Any] = {"spark_rounds": n, "local_rounds": 0, "spark_rounds_s": t_rounds}
        stats.update(local_rounds_s=0.0, shards=self.shards.files.ranges.shards)
        if self.part.refines:
            t = time.perf_counter()
            files = RelocationFiles(self.shards.files, self.rows.alloc_dir, self.cells)
            reloc = ShardedRelocation(self.part.cfg.adadne, st.total, files, self.shards, self.rows)
            stats["refine_rounds"] = reloc.run(st, _unused, _unused, _unused)
            reloc.components(st, self.part.cfg.driver_finish_edges)
            stats.update(refine_log=reloc.log, refine_s=time.perf_counter() - t)
        return st, stats, timings

    def _merge(self, r: int) -> None:
        """Round r's deltas into the shards; the replicas they add and the next selection's summary."""
        gain, self.count, self.weight = self.shards.merge(r, self.st.round_seed, self.st.seed)
        self.st.vcount += gain

    def select(self) -> Selection:
        """``ExpansionPartitioner.select`` on the summaries: per-partition thresholds and seed ranges."""
        part, st, p = self.part, self.st, self.st.parts
        rank = st.rank()
        active, lam, cap, seed_budget, leftover_to = part.plan(st)
        w = part.contest_weights(st)
        if leftover_to != -1:
            return Selection(np.empty(0, np.int64), bitmask(active), w, np.zeros(p), st.round_seed, leftover_to)
        assert lam is not None and cap is not None and seed_budget is not None, f"{part.name}: plan() without rates"
        size = self.count[:p].sum(axis=1)
        nsel = np.where(active, np.minimum(size, np.maximum(part.min_select(), np.ceil(lam * size))), 0)
        whole = np.array([part.pick_all(st, float(self.weight[k].sum()), float(cap[k])) for k in range(p)])
        nsel = np.where(active & whole, size, nsel)
        t = boundary_thresholds(self.count, self.weight, nsel.astype(np.int64), cap)
        onehop = np.array([self.weight[k, : t[k]].sum() for k in range(p)], np.float64)
        budget, most, order = np.zeros(p), np.zeros(p, np.int64), []
        for k in np.argsort(rank):
            top = part.top_up(st, int(k), onehop[k], cap[k]) if size[k] > 0 else 0.0
            if active[k] and (size[k] == 0 or top > 0):
                budget[k] = max(1, seed_budget[k] if onehop[k] == 0 else top)
                most[k] = 1 if onehop[k] > 0 else max(1, min(int(budget[k]), 1 << 22, part.seed_count(st, int(k))))
                order.append(int(k))
        seeds = seed_ranges(self.count[p], self.weight[p], np.array(order, np.int64), budget, most)
        for k in order:
            onehop[k] += self.weight[p, seeds[k, 0] : seeds[k, 1]].sum()
        room = part.capacity(st) - st.ecount
        sel = Selection(np.empty(0, np.int64), bitmask(part.open_parts(st)), w, onehop, st.round_seed)
        sel.take = part.one_hop_take(st, sel, cap)
        sel.onehop = onehop * sel.take
        sel.accept = part.two_hop_accept(st, sel)
        sel.quota = kernels.group_quota(room, st.groups, st.rounds)
        self.thresholds = (t, rank, seeds)
        return sel

    def _cells(self, sel: Selection) -> None:
        """One round: the cell job, then the merge."""
        assert sel.accept is not None and sel.take is not None and sel.quota is not None
        st, files, cells, cache = self.st, self.shards.files, self.cells, {}
        r, sr = self.rows.round + 1, self.shards.round
        t, rank, seeds = self.thresholds
        state = (t, rank, seeds, sel.round_seed, st.seed, sel.open_bits, sel.weight, sel.accept, sel.take, sel.quota)

        def decide(e: dict[str, np.ndarray], b: tuple, g: int) -> np.ndarray:
            t, rank, seeds, round_seed, seed, open_bits, weight, accept, take, quota = b
            view = cache[g] = CellView(files, sr, *cells[g])
            claim = view.claims(t, rank, seeds, round_seed, seed)
            src, dst = view.local(e["src"]), view.local(e["dst"])
            return kernels.edge_round(
                src, dst, claim, view.col("bits"), open_bits, weight, accept, round_seed, take, quota[g : g + 1]
            )

        def sink(g: int, e: dict[str, np.ndarray], part: np.ndarray, delta: tuple) -> tuple:
            write_deltas(files.delta_dir(r), g, files.ranges, delta)
            view = cache.pop(g)  # the next round's two-hop offer, as this cell sees it after its own allocation
            bits, rest = view.col("bits"), part < 0
            kernels.apply_delta(
                bits, view.col("resid"), np.zeros(len(delta[4]), np.int64), view.local(delta[0]), *delta[1:3]
            )
            src, dst = view.local(e["src"][rest]), view.local(e["dst"][rest])
            return delta[4], kernels.two_hop_counts(src, dst, bits, state[5], state[6], state[3] + 1)

        out = self.rows._pass(st.parts, decide, state, -1, sink=sink)[0]
        self._settle(r, out)
        st.offer = np.sum([o[1] for o in out], axis=0).astype(np.float64)

    def _settle(self, r: int, out: tuple) -> None:
        rows = np.sum([o[0] for o in out], axis=0).astype(np.int64)
        self.st.ecount += rows
        self.st.placed(int(rows.sum()))
        self._merge(r)

    def _end(self, sel: Selection | None) -> None:
        """The finishing pass as one cell job, or the leftover rule; then the last merge."""
        part, st, files, cells = self.part, self.st, self.shards.files, self.cells
        r, sr = self.rows.round + 1, self.shards.round

        def sink(g: int, e: dict[str, np.ndarray], p: np.ndarray, delta: tuple) -> tuple:
            write_deltas(files.delta_dir(r), g, files.ranges, delta)
            return (delta[4],)

        if (sel is not None and sel.leftover_to == FINISH) or (sel is None and part.refines):
            self.ctx.log(f"{part.name}: finishing pass over {st.remaining:,} rows (one cell job)")
            _, cap, lam_e, lam_v, eps = part.finish_args(st)
            quota = kernels.group_quota(cap - st.ecount, st.groups, st.rounds)
            state = (st.ecount, st.vcount, quota, lam_e, lam_v, eps)

            def fin(e: dict[str, np.ndarray], b: tuple, g: int) -> np.ndarray:
                ecount, vcount, quota, lam_e, lam_v, eps = b
                view, ec = CellView(files, sr, *cells[g]), ecount.copy()
                src, dst = view.local(e["src"]), view.local(e["dst"])
                bits, deg = view.col("bits"), view.col("deg")
                return kernels.finish_greedy(src, dst, deg, bits, ec, vcount.copy(), ec + quota[g], lam_e, lam_v, eps)

            out = self.rows._pass(st.parts, fin, state, -1, kind="finish", sink=sink)[0]
        else:
            k = sel.leftover_to if sel is not None else int(np.argmin(st.ecount))
            self.ctx.log(f"{part.name}: {st.remaining:,} remaining rows -> partition {k}")
            out = self.rows._pass(st.parts, lambda e, b, g: e["eid"], (), k, kind="leftover", sink=sink)[0]
        self._settle(r, out)
