"""Replica-removing relocation after an expansion (AdaDNE's refinement): pairs move between partitions so
that replicas disappear, under hard edge and vertex bounds.

Why: the lock-step expansion leaves replicas a sequential NE would not create (a vertex reached from two
partitions in one round keeps both), and on graphs with a dense core (tolokers) it also leaves a few
partitions vertex-heavy. Both are repaired after the fact, HEP/2PS-style, by moving whole replicas:

* **remove**: replica (v, h) goes when every pair of v in h can move to a partition where both of its
  endpoints already have a replica (no replica is added anywhere). No vertex bound in this phase, so RF
  falls first;
* **balance**: out of vertex-heavy partitions (|V_h| > ``refine_vb`` x mean) a replica may also go when
  its pairs' other endpoints gain at most as many replicas in light partitions as the move removes, and
  pairs whose endpoints the heavy partition already holds move in from light ones (edge room for the
  first kind); removals continue, trimmed so VB stays under max(``refine_vb_max``, VB now);
* **edges**: the balance may fill partitions to (``refine_capacity`` + ``refine_edge_slack``) x |E|/p (every
  partition sits near the bound after the expansion, so without room the balance stalled: tolokers VB
  1.24); shedding rounds (``shed_rows``) then move each group's share of the excess into partitions under
  ``refine_capacity`` x |E|/p, vertex-neutral moves first, and run past ``refine_rounds`` if needed, so
  the result is under the hard bound; a second balance under that bound follows if the shedding cost VB;
* **polish**: removals only, under that VB bound, until a round moves under ``REFINE_STOP`` of the rows.

One round = one vote pass (``relocation_votes``: per replica, how many of its pairs could move) and one
move pass (``evacuate_round``), both per row group from broadcast state, so a round decides every row alike
in a Spark task and in the driver. Moves into a partition stay within the group's quota of its room under
``refine_capacity`` x |E|/p plus what the same group moved out of it earlier in the pass (exact, so the
edge bound is hard). The measured effect is in docs/partitioning.md ("Relocation").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from glisp_core.config import AdaDNEConfig
from spark_jobs.partition.kernels import _bit, bit_index, group_quota, pair_group, pair_run, radix_sort
from spark_jobs.partition.state import ExpansionState

MAX_SHED_ROUNDS = 32  # shedding rounds past refine_rounds at most (one suffices unless a group lacks rows)
REFINE_STOP = 0.001  # a relocation phase ends when a round moves under this fraction of the rows
MAX_SLACK = 3  # most replicas a balance move may add beyond those it removes, when VB stalls above its bound
_REPAIR = np.int64(1) << np.int64(50)  # key offset of a move that adds a replica (after every free one)


@njit(nogil=True, cache=True)
def relocation_votes(
    src: np.ndarray,
    dst: np.ndarray,
    part: np.ndarray,
    bits: np.ndarray,
    leaf: np.ndarray,
    light: np.ndarray,
    parts: int,
) -> tuple:
    """Per replica (v, h) of this batch's rows (canonical order): (keys v * parts + h ascending, counts
    [free, repair, leaves] int32).

    free: pairs of v in h with another partition holding both endpoints; repair: pairs without one but
    with a light partition holding v (the other endpoint would gain a replica there); leaves: pairs whose
    other endpoint has no other pair in h (it leaves h with the pair).

    Exact only for replicas that can move: a pair neither free nor repair (blocked) keeps its replica in h,
    so a replica with one may be left out or carry partial counts; its free + repair stays below its pair
    count, the one thing every decision reads of it (``keep_one``, ``balance_moves``, the sharded plan).
    Why: most pairs are blocked, and their rows were most of the sort and of the rows pickled to the driver.

    Why the two sides are summed apart: the rows come sorted by their smaller endpoint a, so a's replicas
    are summed run by run as they come; only the larger endpoints' flags (3 bits packed under the key) need
    a sort, a radix sort. One argsort of both sides' keys took 90 % of the kernel (8.4M rows: 3.8 of 4.2 s).
    """
    m = src.shape[0]
    ka, va, na = np.empty(m, np.int64), np.zeros((m, 3), np.int32), 0
    kb, nb = np.empty(m, np.int64), 0
    acc = np.zeros((parts, 3), np.int32)  # a's counts per partition, for the current run of a
    seen = np.zeros(bits.shape[1], np.uint64)  # the partitions of the run, as bitset words
    blocked = np.zeros(bits.shape[1], np.uint64)  # those where a has a blocked pair (left out at the flush)
    cur = -1
    lightw = np.zeros(bits.shape[1], np.uint64)
    for t in range(parts):
        if light[t]:
            lightw[t // 64] |= np.uint64(1) << np.uint64(t % 64)
    i = 0
    while i < m:
        a, b, j = pair_run(src, dst, i)
        if a != cur:
            na = _flush_run(cur, parts, acc, seen, blocked, ka, va, na)
            cur = a
        h = np.int64(part[i])
        hw, hm = int(h >> 6), np.uint64(1) << np.uint64(h & 63)  # h's bitset word and bit
        fa, fb = _pair_flags(bits, leaf, lightw, a, b, hw, hm)
        seen[hw] |= hm
        if fa & 3 == 0:
            blocked[hw] |= hm
        acc[h, 0] += fa & 1
        acc[h, 1] += (fa >> 1) & 1
        acc[h, 2] += (fa >> 2) & 1
        if b != a and fb & 3 != 0:
            kb[nb] = ((b * parts + h) << 3) | fb
            nb += 1
        i = j
    na = _flush_run(cur, parts, acc, seen, blocked, ka, va, na)
    kb_u, vb = _count_flags(radix_sort(kb[:nb]))
    return _merge_sums(ka[:na], va[:na], kb_u, vb)


@njit(nogil=True, cache=True)
def _pair_flags(bits, leaf, lightw, a: int, b: int, hw: int, hm: np.uint64) -> tuple:
    """The vote flags of a and of b for their pair in h (bit ``hm`` of word ``hw``): bit 0 free (another
    partition holds both), bit 1 repair (not free; a light partition other than h holds the vertex), bit 2
    leaves (the other endpoint's only pair in h). One pass over the words without branches: a loop that
    stopped at the first hit cost twice as much."""
    free, la, lb = np.uint64(0), np.uint64(0), np.uint64(0)
    for w in range(bits.shape[1]):
        keep = ~hm if w == hw else ~np.uint64(0)
        x, y = bits[a, w] & keep, bits[b, w] & keep
        free |= x & y
        la |= x & lightw[w]
        lb |= y & lightw[w]
    if free != 0:
        fa = fb = 1
    else:
        fa = 2 if la != 0 else 0
        fb = 2 if lb != 0 else 0
    if b != a:
        fa |= 4 if (leaf[b, hw] & hm) != 0 else 0
        fb |= 4 if (leaf[a, hw] & hm) != 0 else 0
    return fa, fb


@njit(nogil=True, cache=True)
def _flush_run(v: int, parts: int, acc, seen, blocked, keys, val, n: int) -> int:
    """Append v's replicas of the run (the bits of ``seen`` not ``blocked``, ascending) and clear them; the
    new length."""
    if v < 0:
        return n
    for w in range(seen.shape[0]):
        x = seen[w]
        while x != 0:
            low = x & (~x + np.uint64(1))  # the lowest set bit
            h = w * 64 + bit_index(low)
            if blocked[w] & low == 0:
                keys[n] = v * parts + h
                val[n] = acc[h]
                n += 1
            acc[h] = 0
            x ^= low
        seen[w] = 0
        blocked[w] = 0
    return n


@njit(nogil=True, cache=True)
def _count_flags(packed: np.ndarray) -> tuple:
    """Sorted (key << 3 | flags) entries -> (unique keys, [free, repair, leaves] counts)."""
    keys = np.empty(packed.shape[0], np.int64)
    val = np.zeros((packed.shape[0], 3), np.int32)
    u = -1
    for r in range(packed.shape[0]):
        k, f = packed[r] >> 3, packed[r] & 7
        if u < 0 or keys[u] != k:
            u += 1
            keys[u] = k
        val[u, 0] += f & 1
        val[u, 1] += (f >> 1) & 1
        val[u, 2] += (f >> 2) & 1
    return keys[: u + 1], val[: u + 1]


@njit(nogil=True, cache=True)
def _merge_sums(k1: np.ndarray, v1: np.ndarray, k2: np.ndarray, v2: np.ndarray) -> tuple:
    """Two (ascending unique keys, counts) lists as one, counts of a key in both added."""
    keys = np.empty(k1.shape[0] + k2.shape[0], np.int64)
    val = np.zeros((keys.shape[0], v1.shape[1]), np.int32)
    i = j = n = 0
    while i < k1.shape[0] or j < k2.shape[0]:
        take1 = j >= k2.shape[0] or (i < k1.shape[0] and k1[i] <= k2[j])
        take2 = i >= k1.shape[0] or (j < k2.shape[0] and k2[j] <= k1[i])
        keys[n] = k1[i] if take1 else k2[j]
        for c in range(val.shape[1]):  # element by element: row slices cost a view each
            val[n, c] = (v1[i, c] if take1 else 0) + (v2[j, c] if take2 else 0)
        i += take1
        j += take2
        n += 1
    return keys[:n], val[:n]


@njit(nogil=True, cache=True)
def evacuate_round(
    src: np.ndarray,
    dst: np.ndarray,
    part: np.ndarray,
    bits: np.ndarray,
    remove: np.ndarray,
    leaf: np.ndarray,
    light: np.ndarray,
    heavy: np.ndarray,
    quota: np.ndarray,
    vroom: np.ndarray,
    vout: np.ndarray,
    ecount: np.ndarray,
    vcount: np.ndarray,
    slack: int = 0,
    shed: np.ndarray | None = None,
) -> np.ndarray:
    """The new part of each row (canonical order) of one group.

    A pair in h with an endpoint whose replica in h is to go (``remove``) moves to the least loaded
    partition holding both endpoints (neither of them leaving it), else to the lightest ``light``
    partition holding one of them within its vertex room ``vroom[g]``. A pair holding the only edge in a
    ``heavy`` h of one of its endpoints (``leaf``) moves to a partition where it adds at most as many
    replicas as leave h (plus ``slack``; new ones only in light partitions), while h may still lose
    ``vout[g, h]`` vertices. A pair in a light partition whose endpoints a ``heavy`` one holds (and keeps)
    moves there. Moves into t stay within ``quota[g, t]`` plus the rows this group moved out of t before
    (the edge bound holds whatever the other groups do). With ``shed`` given, the pass only sheds: the
    group moves at least ``shed[g, h]`` rows out of each over-full h (``shed_rows``).
    """
    m = src.shape[0]
    groups = quota.shape[0]
    parts = ecount.shape[0]
    q = quota.copy()
    vr = vroom.copy()
    vo = vout.copy()
    out = part.copy()
    if shed is not None:
        shed_rows(src, dst, part, out, bits, leaf, q, shed.copy(), vr, vcount)
        return out
    load = np.empty((groups, parts), np.int64)  # per group, so a group decides alike in any process
    for g in range(groups):
        load[g] = ecount
    i = 0
    while i < m:
        a, b, j, r, h, g = _pair_at(src, dst, part, i, groups)
        best = -1
        if _bit(remove, a, h) or _bit(remove, b, h):
            bk = np.int64(1) << np.int64(62)
            for t in range(parts):
                if t == h or q[g, t] < r:
                    continue
                ha = _bit(bits, a, t) and not _bit(remove, a, t)
                hb = _bit(bits, b, t) and not _bit(remove, b, t)
                if ha and hb:
                    k = load[g, t]
                elif (ha or hb) and light[t] and vr[g, t] >= 1:
                    k = _REPAIR + vcount[t]
                else:
                    continue
                if k < bk:
                    best, bk = t, k
            if best >= 0 and bk >= _REPAIR:
                vr[g, best] -= 1
        elif heavy[h] and (_bit(leaf, a, h) or _bit(leaf, b, h)):
            best = _leaf_target(a, b, h, g, bits, leaf, light, q, vr, vo, r, vcount, slack)
        elif light[h]:
            bv = -1
            for t in range(parts):
                if t != h and heavy[t] and q[g, t] >= r and vcount[t] > bv:
                    if _held(bits, remove, leaf, a, t) and _held(bits, remove, leaf, b, t):
                        best, bv = t, vcount[t]
        if best >= 0:
            q[g, best] -= r
            q[g, h] += r
            load[g, best] += r * groups  # every group moves alike: its moves x G estimate the global load
            load[g, h] -= r * groups
            for t in range(i, j):
                out[t] = best
        i = j
    return out


@njit(nogil=True, cache=True)
def shed_rows(
    src: np.ndarray,
    dst: np.ndarray,
    part: np.ndarray,
    out: np.ndarray,
    bits: np.ndarray,
    leaf: np.ndarray,
    q: np.ndarray,
    shed: np.ndarray,
    vr: np.ndarray,
    vcount: np.ndarray,
) -> None:
    """Move rows of this group out of each partition h until ``shed[g, h]`` rows left it, into partitions
    with quota, in sweeps by what a move does to the vertex counts (``_shed_level``): first pairs whose
    endpoints both stay in h and are held by the target (no |V_i| changes), then moves that take as many
    vertices out of h as they add to the target, then those that remove replicas, then those adding one
    more than they remove. Those add a replica only within the vertex room ``vr``; the last sweep takes
    any pair (the partition with the fewest vertices first), so the shedding always completes when the
    quotas cover it. Removing replicas first (cheapest in RF) undid the balance: the over-full partitions
    are the light ones the balance filled (user-item graph VB 1.075 -> 1.139). Updates ``out`` in place."""
    m = src.shape[0]
    groups, parts = q.shape
    # replicas each group added per partition (x groups: the global estimate); per group, so a group decides
    # alike whether it runs alone (a Spark task over its file) or with every other group (the held rows)
    vadd = np.zeros((groups, parts), np.int64)
    for level in range(5):
        i = 0
        while i < m:
            a, b, j, r, h, g = _pair_at(src, dst, part, i, groups)
            if out[i] == h and shed[g, h] > 0:
                gone = _ends_in(leaf, a, b, h)
                best, bk, badd = -1, np.int64(1) << np.int64(62), 0
                for t in range(parts):
                    if t == h or q[g, t] < r:
                        continue
                    add = _ends_missing(bits, a, b, t)
                    if _shed_level(add, gone) != level or (level < 4 and add > vr[g, t]):
                        continue
                    k = vcount[t] + vadd[g, t] * groups if add > 0 else -q[g, t]
                    if k < bk:
                        best, bk, badd = t, k, add
                if best >= 0:
                    q[g, best] -= r
                    shed[g, h] -= r
                    vr[g, best] -= badd
                    vadd[g, best] += badd
                    for t in range(i, j):
                        out[t] = best
            i = j


@njit(nogil=True, cache=True)
def _pair_at(src: np.ndarray, dst: np.ndarray, part: np.ndarray, i: int, groups: int) -> tuple:
    """The pair whose rows start at i (canonical order): endpoints, end row, rows, partition, group."""
    a, b, j = pair_run(src, dst, i)
    return a, b, j, j - i, part[i], pair_group(a, b, groups)


@njit(nogil=True, cache=True)
def _ends_in(bits: np.ndarray, a: int, b: int, t: int) -> int:
    """How many of the pair's distinct endpoints have their bit set for partition t."""
    return _bit(bits, a, t) + (_bit(bits, b, t) if b != a else 0)


@njit(nogil=True, cache=True)
def _ends_missing(bits: np.ndarray, a: int, b: int, t: int) -> int:
    """Replicas a move of pair (a, b) into t adds: its distinct endpoints t does not hold."""
    return (2 if b != a else 1) - _ends_in(bits, a, b, t)


@njit(nogil=True, cache=True)
def _shed_level(add: int, gone: int) -> int:
    """The sweep of ``shed_rows`` that may make a move adding ``add`` replicas and taking ``gone`` out."""
    if add == 0 and gone == 0:
        return 0
    if add == gone:
        return 1
    if add < gone:
        return 2
    return 3 if add == gone + 1 else 4


@njit(nogil=True, cache=True)
def _held(bits: np.ndarray, remove: np.ndarray, leaf: np.ndarray, v: int, t: int) -> bool:
    """v has a replica in t that stays this round (not being removed, not a leaf that may leave)."""
    return _bit(bits, v, t) == 1 and _bit(remove, v, t) == 0 and _bit(leaf, v, t) == 0


@njit(nogil=True, cache=True)
def _leaf_target(a, b, h, g, bits, leaf, light, q, vr, vo, r, vcount, slack) -> int:
    """Target of a leaf pair leaving heavy h (fewest added replicas, then the lightest), or -1; books the
    vertex room it uses and the vertices h loses."""
    gain = _ends_in(leaf, a, b, h)
    if vo[g, h] < gain:
        return -1
    best, bk, badd = -1, np.int64(1) << np.int64(62), 0
    for t in range(q.shape[1]):
        if t == h or q[g, t] < r:
            continue
        add = _ends_missing(bits, a, b, t)
        if add > gain + slack or (add > 0 and not (light[t] and vr[g, t] >= add)):
            continue
        k = add * (np.int64(1) << np.int64(40)) + vcount[t]
        if k < bk:
            best, bk, badd = t, k, add
    if best >= 0:
        vr[g, best] -= badd
        vo[g, h] -= gain
    return best


@dataclass
class Votes:
    """Dense per-replica vote counts [n, p] (see ``relocation_votes``), summed over every group."""

    free: np.ndarray
    repair: np.ndarray
    leaves: np.ndarray

    @classmethod
    def merge(cls, parts_out: Iterable[tuple], shape: tuple[int, int]) -> Votes:
        """Add up the groups' sparse (keys, counts) into dense int32 arrays (12 B x p per vertex)."""
        out = np.zeros((3, shape[0] * shape[1]), np.int32)
        for keys, val in parts_out:
            _add_votes(out, keys, val)
        return cls(*(o.reshape(shape) for o in out))


@njit(nogil=True, cache=True)
def _add_votes(out: np.ndarray, keys: np.ndarray, val: np.ndarray) -> None:
    """out[c, keys[i]] += val[i, c] (``np.add.at`` took seconds per relocation round on the driver)."""
    for i in range(keys.shape[0]):
        for c in range(3):
            out[c, keys[i]] += val[i, c]


def keep_one(rem: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Never remove every replica of a vertex: where all would go, the one with most pairs stays (the first
    such partition); a vertex with one replica keeps it. In place; returns ``rem``."""
    _keep_one(rem, counts)
    return rem


@njit(nogil=True, cache=True)
def _keep_one(rem: np.ndarray, counts: np.ndarray) -> None:
    """One pass over the rows (the [n, p] temporaries of a numpy form took seconds per round on the driver)."""
    n, p = counts.shape
    for v in range(n):
        nrep, gone, best = 0, 0, -1
        for k in range(p):
            if counts[v, k] > 0:
                nrep += 1
                if best < 0 or counts[v, k] > counts[v, best]:
                    best = k
        if nrep < 2:
            for k in range(p):
                rem[v, k] = False
            continue
        for k in range(p):
            gone += rem[v, k]
        if gone >= nrep:
            rem[v, best] = False


def trim_to_vb(
    rem: np.ndarray, counts: np.ndarray, vcount: np.ndarray, bound: float, leaves: np.ndarray | None = None
) -> np.ndarray:
    """Drop planned removals, lightest partitions and dearest replicas first, until the VB they would give
    is at most max(bound, VB now) (removals thin light partitions, which raises VB). A removal takes its
    replica and the ``leaves`` that go with its pairs out of the partition. Within a partition the planned
    removals go by pair count, most first (ties by vertex), half of those left at a time."""
    v = vcount.astype(np.float64)
    lim = max(bound, v.max() / max(v.mean(), 1e-12)) + 1e-12
    lv = leaves if leaves is not None else np.zeros((0, rem.shape[1]), np.int32)
    r = _removal_cost(rem, lv).astype(np.float64)

    def vb() -> float:
        nv = v - r
        return nv.max() / max(nv.mean(), 1e-12)

    for h in np.argsort(v, kind="stable"):
        if vb() > lim and r[h] > 0:
            cand = np.flatnonzero(rem[:, h])
            cand = cand[np.argsort(-counts[cand, h], kind="stable")]
            cost = 1.0 + (lv[cand, h] if leaves is not None else np.zeros(len(cand))).astype(np.float64)
            i = 0
            while vb() > lim and r[h] > 0:
                k = max(1, (len(cand) - i) // 2)
                rem[cand[i : i + k], h] = False
                r[h] = max(r[h] - cost[i : i + k].sum(), 0.0) if i + k < len(cand) else 0.0
                i += k
        if vb() <= lim:
            break
    return rem


@njit(nogil=True, cache=True)
def _removal_cost(rem: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """Per partition: the replicas ``rem`` removes plus their ``leaves`` (none when ``leaves`` has no rows)."""
    n, p = rem.shape
    out = np.zeros(p, np.int64)
    for v in range(n):
        for k in range(p):
            if rem[v, k]:
                out[k] += 1 + (leaves[v, k] if leaves.shape[0] > 0 else 0)
    return out


def balance_moves(
    votes: Votes,
    counts: np.ndarray,
    vcount: np.ndarray,
    heavy: np.ndarray,
    target: float,
    taken: np.ndarray,
    slack: int = 0,
) -> np.ndarray:
    """Replicas of vertex-heavy partitions whose pairs can all go (free or repair) for at most as many new
    replicas as the move removes (the replica itself and the leaving leaves; ``slack`` more when VB is
    past its bound and nothing else moves), at most each partition's excess over ``target`` x mean,
    cheapest first."""
    ok = keep_one(_balance_ok(votes.free, votes.repair, votes.leaves, counts, heavy, taken, slack), counts) & ~taken
    mean = vcount.mean()
    for h in np.flatnonzero(heavy):
        cand = np.flatnonzero(ok[:, h])
        excess = int(vcount[h] - target * mean) + 1
        if len(cand) > excess:
            net = votes.repair[cand, h] - votes.leaves[cand, h]  # replicas added minus the endpoints leaving
            ok[cand[np.argsort(net, kind="stable")[excess:]], h] = False
    return ok


@njit(nogil=True, cache=True)
def _balance_ok(free, repair, leaves, counts, heavy, taken, slack: int) -> np.ndarray:
    """``taken`` or a balance candidate (every pair free or repair, net added replicas at most 1 + ``slack``,
    in a heavy partition), per replica in one pass: five [n, p] temporaries took 10 s of R-MAT 20 p = 32."""
    n, p = counts.shape
    ok = np.zeros((n, p), np.bool_)
    for v in range(n):
        for k in range(p):
            c = counts[v, k]
            ok[v, k] = taken[v, k] or (
                heavy[k] and c > 0 and free[v, k] + repair[v, k] == c and repair[v, k] - leaves[v, k] <= 1 + slack
            )
    return ok


@dataclass
class Relocation:
    """The round loop; the caller supplies the two passes (driver or Spark) and applies the deltas.

    ``votes(bits, leaf, light) -> Votes``; ``move(bits, remove, leaf, light, heavy, quota, vroom, vout, slack=,
    shed=)`` -> rows moved (it runs ``evacuate_round`` and applies the deltas to ``st.counts``, ``ecount``,
    ``vcount``).
    """

    cfg: AdaDNEConfig
    rows: int
    log: list[dict] = field(default_factory=list)  # per round: phase, replicas selected, rows moved, VB after
    slack: int = 0  # replicas a balance move may add beyond those it removes (+1 per stalled round above the bound)

    def run(self, st: ExpansionState, votes: Callable, move: Callable, pack: Callable) -> int:
        """Rounds until the polish settles or ``refine_rounds`` ran: the number of rounds. Shedding rounds
        run past ``refine_rounds`` when needed: no partition ends above ``refine_capacity`` x |E|/p."""
        a = self.cfg
        self.cap = np.floor(a.refine_capacity * st.total / st.parts)
        self.cap_balance = np.floor((a.refine_capacity + a.refine_edge_slack) * st.total / st.parts)
        phase, r = "remove", 0
        while r < a.refine_rounds and phase != "done":
            v = st.vcount.astype(np.float64)
            if phase == "balance" and v.max() <= a.refine_vb * v.mean():
                phase = "edges" if self.over(st) else "polish"
            if phase == "edges":
                selected, moved = self.shed(st, move, pack, r)
            else:
                selected, moved = self.relocate(st, phase, votes, move, pack, r)
            r += 1
            vb = self.record(st, phase, selected, moved)
            if phase == "edges":  # balance again, under the hard bound, if the shedding cost the balance
                self.cap_balance = self.cap
                phase = "edges" if self.over(st) else "balance" if vb > a.refine_vb else "polish"
                continue
            nxt = self._next(phase, moved, v.max() / max(v.mean(), 1e-12) - vb, vb)
            phase = "edges" if nxt in ("polish", "done") and phase == "balance" and self.over(st) else nxt
        for _ in range(MAX_SHED_ROUNDS):  # the round budget ran out while the balance used the edge slack
            if not self.over(st):
                return r
            self.record(st, "edges", *self.shed(st, move, pack, r))
            r += 1
        if self.over(st):
            raise RuntimeError(f"relocation: partitions above the edge bound {self.cap:.0f} rows: {st.ecount.tolist()}")
        return r

    def record(self, st: ExpansionState, phase: str, selected: int, moved: int) -> float:
        """Log a round (phase, replicas selected or rows to shed, rows moved, VB after); returns the VB."""
        vb = float(st.vcount.max() / max(st.vcount.mean(), 1e-12))
        self.log.append({"phase": phase, "selected": selected, "moved": moved, "vb": round(vb, 4), "slack": self.slack})
        return vb

    def over(self, st: ExpansionState) -> bool:
        """Some partition holds more rows than the hard bound (only after balance rounds used the slack)."""
        return bool((st.ecount > self.cap).any())

    def relocate(
        self, st: ExpansionState, phase: str, votes: Callable, move: Callable, pack: Callable, r: int
    ) -> tuple[int, int]:
        """One remove, balance or polish round: (replicas selected, rows moved)."""
        a, p = self.cfg, st.parts
        none = np.zeros(p, np.bool_)
        v = st.vcount.astype(np.float64)
        heavy = v > a.refine_vb * v.mean()
        light = v < a.refine_vb * v.mean() - 1 if phase == "balance" else none
        counts = st.pair_counts()
        bits, leaf = pack(counts > 0), pack(counts == 1)
        vt = votes(bits, leaf, light)
        rem = keep_one((counts > 0) & (vt.free == counts), counts)
        if phase != "remove":
            # halfway between the target and the bound: planned removals out of the largest partition may
            # find no quota, so the VB reached overshoots the plan (tolokers p=8 polish: 1.086 -> 1.103)
            rem = trim_to_vb(rem, counts, st.vcount, (a.refine_vb + a.refine_vb_max) / 2, vt.leaves)
        vroom = vout = np.zeros((st.groups, p), np.int64)
        if phase == "balance":
            rem |= balance_moves(vt, counts, v, heavy, a.refine_vb, rem, self.slack)
            vroom = group_quota(np.maximum(np.floor(a.refine_vb * v.mean() - v), 0), st.groups, r, unit=1)
            excess = np.maximum(np.ceil(v - a.refine_vb * v.mean()) - rem.sum(0), 0)
            vout = group_quota(np.where(heavy, excess, 0), st.groups, r, unit=1)
        moved = 0
        if rem.any() or phase == "balance":
            cap = self.cap_balance if phase == "balance" else self.cap
            quota = group_quota(cap - st.ecount, st.groups, r)
            args = (bits, pack(rem), leaf, light, heavy if phase == "balance" else none, quota, vroom, vout)
            moved = move(*args, slack=self.slack if phase == "balance" else 0)
        return int(rem.sum()), moved

    def shed(self, st: ExpansionState, move: Callable, pack: Callable, r: int) -> tuple[int, int]:
        """One shedding round: each group moves its share of every partition's rows above the hard bound
        into partitions under it (``shed_rows``: the cheapest moves first). Returns (rows over, rows moved)."""
        a, p, g = self.cfg, st.parts, st.groups
        none = np.zeros(p, np.bool_)
        v = st.vcount.astype(np.float64)
        zeros = np.zeros((g, p), np.int64)
        quota = group_quota(self.cap - st.ecount, g, r)
        vroom = group_quota(np.maximum(np.floor(a.refine_vb_max * v.mean() - v), 0), g, r, unit=1)
        shed = group_quota(np.maximum(st.ecount - self.cap, 0), g, r, unit=1)
        counts = st.pair_counts()
        bits = pack(counts > 0)  # nothing is removed in a shedding pass: the remove bits stay empty
        args = (bits, np.zeros_like(bits), pack(counts == 1), none, none, quota, vroom, zeros)
        return int(shed.sum()), move(*args, slack=0, shed=shed)

    def _next(self, phase: str, moved: int, vb_fall: float, vb: float) -> str:
        """remove -> balance once a round moves under 10 x ``REFINE_STOP`` of the rows; balance -> polish
        once a round no longer lowers VB by 0.001 (the target is checked before each round), unless VB is
        still above ``refine_vb_max``: then the balance goes on with ``slack`` one higher, up to
        ``MAX_SLACK`` (a move may add that many replicas more than it removes: RF for the vertex bound);
        polish ends once a round moves under ``REFINE_STOP`` of the rows."""
        stop = REFINE_STOP * self.rows
        if phase == "remove":
            return "balance" if moved < 10 * stop else phase
        if phase == "balance":
            if moved > 0 and vb_fall >= 1e-3:
                return phase
            if vb > self.cfg.refine_vb_max and self.slack < MAX_SLACK:
                self.slack += 1
                return phase
            return "polish"
        return "done" if moved < stop else phase
