"""AdaDNE's relocation (``relocate.Relocation``) over the sharded state (``shards.py``, ``sharded.py``): the same
phases, kernels and quotas; the per-vertex choices are made in shard tasks from O(p x buckets) thresholds.

Why: the driver mode merges the votes into dense [|V|, p] arrays on the driver (96 B per vertex at p = 8) and
broadcasts three bitsets per round. Here one round is four Spark jobs and the driver holds O(p x buckets):

1. votes (one task per cell): ``relocation_votes`` on the cell's allocated rows against the partition sets
   and leaves of its two shards; the sparse (vertex, partition, votes) rows go to files per shard;
2. vote merge (one task per shard): dense votes of the shard (a file), the planned removals
   (``keep_one``, as in the driver mode) and two histograms: the removals per partition by the class of
   their pair count (what ``trim_to_vb`` drops first: the dearest), and the balance candidates
   (``balance_moves``' rule) per partition by (net replicas, seeded hash);
3. the driver turns them into a class cut per partition (:func:`trim_classes`, lightest partitions first,
   dearest class first, until VB is under the bound) and a bucket bound per heavy partition
   (:func:`balance_bounds`: its excess, cheapest first), and the quotas as in the driver mode;
4. move (one task per cell): the removals of its two shards from the dense votes and the thresholds (a
   pure function, so every cell sees the same), ``evacuate_round`` with the cell's quotas, the rewritten
   allocation and the pair-count deltas per shard; then the merge (counts only; |V_k| per shard summed).

Differences to the driver mode: the trimming drops whole pair-count classes; balance candidates exclude the
removals planned before trimming; ties of the balance go by a seeded hash, not the vertex id; a cell's
``evacuate_round`` sees its own moves only (one group per task).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from glisp_core.config import AdaDNEConfig
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tasks import iter_tasks, run_tasks
from spark_jobs.partition import kernels
from spark_jobs.partition.components import candidates, plan_components, reassign, vertex_cap
from spark_jobs.partition.relocate import Relocation, evacuate_round, keep_one, relocation_votes
from spark_jobs.partition.rounds import (
    ALLOC_PA,
    FileRounds,
    _atomic_write_parquet,
    _delete,
    _nbytes,
    collect_rows,
    read_allocated,
)
from spark_jobs.partition.selection import pack_bits
from spark_jobs.partition.shards import (
    CLASSES,
    HASH_SLOTS,
    CellView,
    ShardFiles,
    VertexShards,
    read_rows,
    read_split,
    score_classes,
    write_deltas,
    write_rows,
    write_split,
)
from spark_jobs.partition.state import ExpansionState

NET_MIN, NET_MAX = -64, 64  # net replicas of a balance move, clipped
NET_BUCKETS = (NET_MAX - NET_MIN + 1) * HASH_SLOTS


def planned(
    counts: np.ndarray, votes: dict[str, np.ndarray], heavy: np.ndarray, slack: int, balance: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Per replica of a shard: the removals (``Relocation.relocate``'s first rule) and, in a balance round,
    the candidates of ``balance_moves`` (before its per-partition cut; besides the removals)."""
    rem = keep_one((counts > 0) & (votes["free"] == counts), counts)
    if not balance:
        return rem, np.zeros_like(rem)
    net = votes["repair"] - votes["leaves"]
    ok = (counts > 0) & (votes["free"] + votes["repair"] == counts) & (net <= 1 + slack) & heavy[None, :] & ~rem
    return rem, keep_one(ok | rem, counts) & ~rem


def net_buckets(votes: dict[str, np.ndarray], ids: np.ndarray, seed: int) -> np.ndarray:
    """[n, p] bucket of each balance candidate (vertex ``ids``): (net replicas, seeded vertex hash), cheapest first."""
    net = np.clip(votes["repair"] - votes["leaves"], NET_MIN, NET_MAX).astype(np.int64) - NET_MIN
    h = kernels.vertex_hash(ids, seed) >> np.uint64(60)
    return net * HASH_SLOTS + h.astype(np.int64)[:, None]


def trim_classes(count: np.ndarray, cost: np.ndarray, vcount: np.ndarray, bound: float) -> np.ndarray:
    """``trim_to_vb`` on histograms: per partition the class cut (removals of pair-count class >= cut are
    dropped), lightest partitions first, dearest class first, until the VB the removals give is at most
    max(bound, VB now)."""
    v = vcount.astype(np.float64)
    lim = max(bound, v.max() / max(v.mean(), 1e-12)) + 1e-12
    r = cost.sum(axis=1).astype(np.float64)
    cut = np.full(len(v), count.shape[1], np.int64)

    def vb() -> float:
        nv = v - r
        return nv.max() / max(nv.mean(), 1e-12)

    for h in np.argsort(v, kind="stable"):
        while vb() > lim and r[h] > 0:
            top = np.flatnonzero(count[h, : cut[h]])
            cut[h] = top[-1] if len(top) else 0
            r[h] = cost[h, : cut[h]].sum()
        if vb() <= lim:
            break
    return cut


def balance_bounds(count: np.ndarray, vcount: np.ndarray, heavy: np.ndarray, target: float) -> np.ndarray:
    """Per heavy partition the bucket bound: its cheapest candidates, at most its excess over target x mean."""
    v = vcount.astype(np.float64)
    t = np.zeros(len(v), np.int64)
    for h in np.flatnonzero(heavy):
        excess = int(v[h] - target * v.mean()) + 1
        t[h] = int(np.searchsorted(np.cumsum(count[h]), excess, side="right"))
    return t


@dataclass(frozen=True)
class RelocationFiles:
    """What the relocation's tasks need (picklable): the shards, the allocation files, the cells."""

    shards: ShardFiles
    alloc: StoreURI
    cells: list[tuple[int, int]]

    def votes_dir(self, r: int) -> StoreURI:
        return self.shards.root / "rvotes" / f"r{r:05d}"

    def dense_uri(self, r: int, s: int) -> StoreURI:
        return self.shards.root / "rdense" / f"r{r:05d}" / f"s{s:05d}.arrow"

    def view(self, sr: int, c: int) -> CellView:
        return CellView(self.shards, sr, *self.cells[c])

    def vote_cell(self, sr: int, r: int, c: int, light: np.ndarray) -> int:
        """Job 1, task c: the cell's votes, by shard; the bytes of the rows it read."""
        e = read_allocated(self.alloc, c)[1]
        view, p = self.view(sr, c), self.shards.parts
        counts = view.col("counts")
        src, dst = view.local(e["src"]), view.local(e["dst"])
        keys, val = relocation_votes(src, dst, e["part"], pack_bits(counts > 0), pack_bits(counts == 1), light, p)
        cols = {"vert": view.globals(keys // p), "vpart": (keys % p).astype(np.int32)}
        cols.update({n: val[:, i] for i, n in enumerate(("free", "repair", "leaves"))})
        write_split(self.votes_dir(r), c, self.shards.ranges, cols)
        return _nbytes(e)

    def dense(self, r: int, s: int, ids: np.ndarray, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Shard s's votes [n, p] int32 (a row per vertex of ``ids``, the shard's): summed from the cells'
        files (job 2), else read back (job 4)."""
        p, n = self.shards.parts, len(ids)
        if names is None:
            cols = read_rows(self.dense_uri(r, s), n)
            return {v: np.stack([cols[f"{v}{k}"] for k in range(p)], axis=1) for v in VOTES}
        out = {v: np.zeros(n * p, np.int64) for v in VOTES}
        for t in read_split(self.votes_dir(r), names, s):
            key = np.searchsorted(ids, t.column("vert").to_numpy()) * p + t.column("vpart").to_numpy()
            for v in VOTES:
                out[v] += np.bincount(key, weights=t.column(v).to_numpy(), minlength=len(out[v])).astype(np.int64)
        dense = {v: a.astype(np.int32).reshape(n, p) for v, a in out.items()}
        write_rows(self.dense_uri(r, s), {f"{n}{k}": dense[n][:, k] for n in VOTES for k in range(p)})
        return dense

    def vote_shard(self, sr: int, r: int, s: int, names: list[str], heavy: np.ndarray, slack: int, seed: int) -> tuple:
        """Job 2, task s: the dense votes written; (removals by pair-count class: count, cost; candidates)."""
        st, p = self.shards.read(sr, s), self.shards.parts
        counts, votes = st["counts"], self.dense(r, s, st["ids"], names)
        rem, ok = planned(counts, votes, heavy, slack, bool(heavy.any()))
        cls = np.minimum(score_classes(counts), CLASSES - 1)
        cost = 1 + votes["leaves"].astype(np.int64)
        count, costs = np.zeros((p, CLASSES), np.int64), np.zeros((p, CLASSES), np.int64)
        cand = np.zeros((p, NET_BUCKETS), np.int64)
        nb = net_buckets(votes, st["ids"], seed)
        for k in range(p):
            count[k] = np.bincount(cls[rem[:, k], k], minlength=CLASSES)
            costs[k] = np.bincount(cls[rem[:, k], k], weights=cost[rem[:, k], k], minlength=CLASSES)
            cand[k] = np.bincount(nb[ok[:, k], k], minlength=NET_BUCKETS)
        return count, costs, cand

    def removals(self, sr: int, r: int, c: int, plan: tuple) -> np.ndarray:
        """The cell's view of the round's removals [n, p] bool (job 4)."""
        heavy, slack, seed, cut, bound = plan
        view = self.view(sr, c)
        out = []
        for s in sorted({*self.cells[c]}):
            st = self.shards.read(sr, s)
            counts, votes = st["counts"], self.dense(r, s, st["ids"])
            rem, ok = planned(counts, votes, heavy, slack, bool(heavy.any()))
            rem &= np.minimum(score_classes(counts), CLASSES - 1) < cut[None, :]
            out.append(rem | (ok & (net_buckets(votes, st["ids"], seed) < bound[None, :])))
        assert sum(len(o) for o in out) == len(view.col("resid"))
        return np.concatenate(out)


VOTES = ("free", "repair", "leaves")
Decide = Callable[[int, dict[str, np.ndarray], int], np.ndarray]  # (cell, its rows, round) -> new partitions


class ShardedRelocation(Relocation):
    """``Relocation``'s rounds with the jobs above (``relocate`` and ``shed`` replaced; ``run`` as it is)."""

    def __init__(
        self, cfg: AdaDNEConfig, rows: int, files: RelocationFiles, shards: VertexShards, fr: FileRounds
    ) -> None:
        super().__init__(cfg, rows)
        self.files, self.shards, self.fr = files, shards, fr

    def relocate(self, st: ExpansionState, phase: str, votes: Any, move: Any, pack: Any, r: int) -> tuple[int, int]:
        """One remove, balance or polish round: (replicas selected, rows moved)."""
        a, p, f = self.cfg, st.parts, self.files
        none = np.zeros(p, np.bool_)
        v = st.vcount.astype(np.float64)
        balance = phase == "balance"
        heavy = v > a.refine_vb * v.mean() if balance else none
        light = v < a.refine_vb * v.mean() - 1 if balance else none
        seed, sr, vr = st.seed * 1_000_003 + 500_000 + r, self.shards.round, self.fr.round + 1
        slack = self.slack  # the tasks' closures must not hold self (its FileRounds holds the session)
        t0 = time.perf_counter()
        staged = sum(run_tasks(self.fr.spark, len(f.cells), lambda c: f.vote_cell(sr, vr, c, light)))
        names = store_for(f.votes_dir(vr)).names(f.votes_dir(vr))
        hists = run_tasks(
            self.fr.spark, f.shards.ranges.shards, lambda s: f.vote_shard(sr, vr, s, names, heavy, slack, seed)
        )
        self.fr._record("relocation_votes", t0, (light, heavy), staged)
        count, cost, cand = (np.sum([h[i] for h in hists], axis=0) for i in range(3))
        cut = np.full(p, CLASSES, np.int64)
        if phase != "remove":
            cut = trim_classes(count, cost, st.vcount, (a.refine_vb + a.refine_vb_max) / 2)
        bound = balance_bounds(cand, st.vcount, heavy, a.refine_vb) if balance else np.zeros(p, np.int64)
        chosen = np.array([count[k, : cut[k]].sum() + cand[k, : bound[k]].sum() for k in range(p)])
        g = st.groups
        vroom = vout = np.zeros((g, p), np.int64)
        if balance:
            vroom = kernels.group_quota(np.maximum(np.floor(a.refine_vb * v.mean() - v), 0), g, r, unit=1)
            excess = np.maximum(np.ceil(v - a.refine_vb * v.mean()) - chosen, 0)
            vout = kernels.group_quota(np.where(heavy, excess, 0), g, r, unit=1)
        moved = 0
        if chosen.sum() > 0 or balance:
            cap = self.cap_balance if balance else self.cap
            quota = kernels.group_quota(cap - st.ecount, g, r)
            plan = (heavy, self.slack if balance else 0, seed, cut, bound)
            moved = self._move(st, plan, light, heavy, quota, vroom, vout, None)
        store_for(f.shards.root).delete(f.votes_dir(vr))
        store_for(f.shards.root).delete(f.shards.root / "rdense" / f"r{vr:05d}")
        return int(chosen.sum()), moved

    def shed(self, st: ExpansionState, move: Any, pack: Any, r: int) -> tuple[int, int]:
        """One shedding round (``Relocation.shed``'s quotas): (rows over, rows moved)."""
        a, p, g = self.cfg, st.parts, st.groups
        none = np.zeros(p, np.bool_)
        v = st.vcount.astype(np.float64)
        quota = kernels.group_quota(self.cap - st.ecount, g, r)
        vroom = kernels.group_quota(np.maximum(np.floor(a.refine_vb_max * v.mean() - v), 0), g, r, unit=1)
        shed = kernels.group_quota(np.maximum(st.ecount - self.cap, 0), g, r, unit=1)
        return int(shed.sum()), self._move(st, None, none, none, quota, vroom, np.zeros((g, p), np.int64), shed)

    def _move(
        self,
        st: ExpansionState,
        plan: tuple | None,
        light: np.ndarray,
        heavy: np.ndarray,
        quota: np.ndarray,
        vroom: np.ndarray,
        vout: np.ndarray,
        shed: np.ndarray | None,
    ) -> int:
        """Job 4 and the merge: every cell moves its rows (``evacuate_round``); the counts follow."""
        f, sr, parts = self.files, self.shards.round, st.parts
        ecount, vcount, slack = st.ecount.copy(), st.vcount.copy(), plan[1] if plan is not None else 0

        def decide(c: int, e: dict[str, np.ndarray], r: int) -> np.ndarray:
            view = f.view(sr, c)
            counts = view.col("counts")
            rem = f.removals(sr, r, c, plan) if plan is not None else np.zeros_like(counts, bool)
            src, dst, old = view.local(e["src"]), view.local(e["dst"]), e["part"]
            one = slice(c, c + 1)
            return evacuate_round(
                src, dst, old, pack_bits(counts > 0), pack_bits(rem), pack_bits(counts == 1), light, heavy,
                quota[one], vroom[one], vout[one], ecount, vcount, slack, None if shed is None else shed[one],
            )  # fmt: skip

        kind = "relocate" if shed is None else "shed"
        return self._rewrite(st, kind, decide, (light, heavy, quota, vroom, vout), parts)

    def components(self, st: ExpansionState, limit: int) -> None:
        """``components``' whole-component moves where the relocation ended above ``refine_vb_max`` (as
        ``AdaDNE._whole_components`` runs them): one job reads the rows touching a candidate vertex, each cell's
        candidates from its shard state; the driver plans on those rows in compact ids (so nothing it holds
        grows with |V|: at most ``limit`` rows, else the pass is left out and the log says so); one job moves
        the components' rows and the shards merge the deltas."""
        vcap = vertex_cap(st.vcount, self.cfg.refine_vb_max)
        if vcap is None:
            return
        f, sr, t0 = self.files, self.shards.round, time.perf_counter()

        def task(c: int) -> tuple[dict[str, np.ndarray], int]:
            e = read_allocated(f.alloc, c)[1]
            view = f.view(sr, c)
            cand = candidates(view.col("counts"))
            cs, cd = cand[view.local(e["src"])], cand[view.local(e["dst"])]
            keep = cs | cd
            return {
                "src": e["src"][keep],
                "dst": e["dst"][keep],
                "part": e["part"][keep],
                "cs": cs[keep],
                "cd": cd[keep],
            }, _nbytes(e)

        rows, staged = collect_rows(iter_tasks(self.fr.spark, len(f.cells), task, self.fr.results), limit)
        self.fr._record("component_rows", t0, (), staged)
        if rows is None:
            self.record(st, "components-left-out", 0, 0)
            return
        m = len(rows["src"])
        ids, loc = np.unique(np.concatenate([rows["src"], rows["dst"]]), return_inverse=True)
        cand = np.zeros(len(ids), np.bool_)
        cand[loc[:m]], cand[loc[m:]] = rows["cs"], rows["cd"]
        args = (st.vcount, st.ecount, vcap, int(self.cap))
        moving, dest = plan_components(loc[:m], loc[m:], rows["part"], cand, *args)
        if not len(moving):
            return
        vertices = ids[moving]  # ascending, as ``reassign`` needs: compact ids keep the order

        def decide(c: int, e: dict[str, np.ndarray], r: int) -> np.ndarray:
            return reassign(e["src"], e["part"], vertices, dest)

        moved = self._rewrite(st, "components", decide, (vertices, dest), st.parts)
        self.record(st, "components", len(vertices), moved)

    def _rewrite(self, st: ExpansionState, kind: str, decide: Decide, state: tuple, parts: int) -> int:
        """One job: every cell's rows get ``decide(cell, rows, round)`` as their partitions and are rewritten as
        one file, the moved rows' pair-count deltas go to the shards; then the merge (|V_k| summed over shards).
        ``decide`` must not hold ``self`` (its FileRounds holds the session). Returns the rows moved."""
        f, fr = self.files, self.fr
        fr.round += 1
        r, t0 = fr.round, time.perf_counter()

        def task(c: int) -> tuple[np.ndarray, int, int]:
            paths, e = read_allocated(f.alloc, c)
            new = decide(c, e, r)
            target = f.alloc / f"f{r:05d}-g{c:05d}.parquet"
            rows = pa.table([e["eid"], e["src"], e["dst"], new], schema=ALLOC_PA)
            _atomic_write_parquet(target, rows)
            _delete([q for q in paths if q != target])
            mv = new != e["part"]
            out = kernels.incidence_delta(e["src"][mv], e["dst"][mv], e["part"][mv], parts)
            into = kernels.incidence_delta(e["src"][mv], e["dst"][mv], new[mv], parts)
            both = tuple(np.concatenate([x, y]) for x, y in zip(out[:3], into[:3], strict=True))
            write_deltas(f.shards.delta_dir(r), c, f.shards.ranges, (*both, np.concatenate([-out[3], into[3]])))
            return into[4] - out[4], int(mv.sum()), _nbytes(e) + rows.nbytes

        res = run_tasks(fr.spark, len(f.cells), task)
        fr._record(kind, t0, state, sum(x[2] for x in res))
        st.ecount += np.sum([x[0] for x in res], axis=0).astype(np.int64)
        st.vcount = self.shards.merge(r, 0, st.seed, moves=True)[0]
        return sum(x[1] for x in res)
