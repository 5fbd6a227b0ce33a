"""The relocation kernels and selection rules (spark_jobs/partition/relocate.py) on random states: votes
against a brute-force count, removal moves that never add a replica, the hard edge bound per group, the
same decisions per group as over all rows, the shedding of rows above the bound (cheapest moves first),
and the driver-side rules that keep a replica and bound VB."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.config import AdaDNEConfig
from glisp_testing.graphs import rmat_edges
from spark_jobs.partition import kernels
from spark_jobs.partition.expansion import pack_bits
from spark_jobs.partition.relocate import (
    MAX_SLACK,
    Relocation,
    Votes,
    balance_moves,
    evacuate_round,
    keep_one,
    relocation_votes,
    shed_rows,
    trim_to_vb,
)

N, P, GROUPS = 300, 5, 4


@pytest.fixture(scope="module")
def state():
    """Rows in canonical order (two per pair), a random part per pair and the exact pair counts."""
    rng = np.random.default_rng(7)
    s, d = rmat_edges(9, 6, seed=5)
    s, d = s % N, d % N
    keep = s != d
    key = np.unique(np.minimum(s[keep], d[keep]) * N + np.maximum(s[keep], d[keep]))
    a, b = key // N, key % N
    s, d = np.concatenate([a, b]), np.concatenate([b, a])
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    s, d = s[o], d[o]
    pair = np.minimum(s, d) * N + np.maximum(s, d)
    _, inv = np.unique(pair, return_inverse=True)
    part = rng.integers(0, P, inv.max() + 1)[inv].astype(np.int32)
    return s, d, part


def counts_of(s, d, part):
    c = np.zeros((N, P), np.int32)
    first = np.r_[
        True, (np.minimum(s, d)[1:] != np.minimum(s, d)[:-1]) | (np.maximum(s, d)[1:] != np.maximum(s, d)[:-1])
    ]
    np.add.at(c, (s[first], part[first]), 1)
    np.add.at(c, (d[first], part[first]), 1)
    return c


def test_votes_count_the_pairs_that_could_move(state):
    s, d, part = state
    c = counts_of(s, d, part)
    bits, leaf = pack_bits(c > 0), pack_bits(c == 1)
    light = np.array([True, False, True, False, False])
    got = Votes.merge([relocation_votes(s, d, part, bits, leaf, light, P)], (N, P))
    want = np.zeros((3, N, P), np.int32)
    rep = c > 0
    for i in range(0, len(s), 2):  # one decision per pair (two rows)
        a, b, h = s[i], d[i], part[i]
        free = any(t != h and rep[a, t] and rep[b, t] for t in range(P))
        for v, u in ((a, b), (b, a)):
            want[0, v, h] += free
            want[1, v, h] += (not free) and any(t != h and light[t] and rep[v, t] for t in range(P))
            want[2, v, h] += c[u, h] == 1
    movable = rep & (want[0] + want[1] == c)  # no blocked pair: counts exact
    for g, w in zip((got.free, got.repair, got.leaves), want, strict=True):
        assert (g[movable] == w[movable]).all()
    assert (got.free + got.repair < c)[rep & ~movable].all()  # a blocked replica never looks movable
    assert got.free.sum() > 0 and got.repair.sum() > 0 and got.leaves.sum() > 0 and (rep & ~movable).any()


@pytest.mark.parametrize("p", [3, 70])
def test_votes_with_self_loops_parallel_rows_and_two_bitset_words(p):
    """The kernel sums a pair's smaller endpoint run by run and sorts only the larger ones' flags: its
    (key, counts) rows equal a direct per-row definition, ascending and unique, for self-loops, parallel
    rows of one pair (one decision per pair) and p > 64 (two bitset words), on every replica without a
    blocked pair; a replica with one is left out or shows free + repair under its pairs."""
    rng = np.random.default_rng(p)
    n = 200
    s, d = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    s[:40] = d[:40]  # self-loops
    s, d = np.r_[s, s[100:300]], np.r_[d, d[100:300]]  # parallel rows
    o = kernels.canonical_order(s, d, np.arange(len(s)))
    s, d = s[o], d[o]
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    _, inv = np.unique(lo * n + hi, return_inverse=True)
    part = rng.integers(0, p, inv.max() + 1)[inv].astype(np.int32)
    rep, single = rng.random((n, p)) < 0.2, rng.random((n, p)) < 0.1
    light = rng.random(p) < 0.5
    keys, got = relocation_votes(s, d, part, pack_bits(rep), pack_bits(single & rep), light, p)
    want: dict[int, np.ndarray] = {}  # per replica: free, repair, leaves, pairs
    first = np.r_[True, (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])]
    for i in np.flatnonzero(first):
        a, b, h = lo[i], hi[i], part[i]
        free = any(t != h and rep[a, t] and rep[b, t] for t in range(p))
        for v, u in ((a, b),) if a == b else ((a, b), (b, a)):
            w = want.setdefault(int(v * p + h), np.zeros(4, np.int32))
            w += [
                free,
                (not free) and any(t != h and light[t] and rep[v, t] for t in range(p)),
                u != v and single[u, h] and rep[u, h],
                1,
            ]
    assert np.all(np.diff(keys) > 0)
    movable = sorted(k for k, w in want.items() if w[0] + w[1] == w[3])
    at = dict(zip(keys.tolist(), got, strict=True))
    assert np.array_equal(np.array([at[k] for k in movable]), np.array([want[k][:3] for k in movable]))
    blocked = set(at) - set(movable)
    assert all(at[k][0] + at[k][1] < want[k][3] for k in blocked)
    stuck = [k for k, w in want.items() if w[0] + w[1] == 0]  # every pair blocked: left out
    assert not set(stuck) & set(at) and (len(stuck) > 0 or p > 64)
    assert got[:, 0].sum() > 0 and got[:, 1].sum() > 0 and got[:, 2].sum() > 0


def test_radix_sort_equals_np_sort():
    rng = np.random.default_rng(3)
    for top in (1, 2**11, 2**35, 2**62):
        x = rng.integers(0, top, 10_000)
        assert np.array_equal(kernels.radix_sort(x), np.sort(x))
    assert kernels.radix_sort(np.zeros(0, np.int64)).shape == (0,)


def test_removal_moves_add_no_replica_and_keep_the_edge_bound(state):
    s, d, part = state
    c = counts_of(s, d, part)
    bits = pack_bits(c > 0)
    votes = Votes.merge([relocation_votes(s, d, part, bits, pack_bits(c == 1), np.zeros(P, bool), P)], (N, P))
    rem = keep_one((c > 0) & (votes.free == c), c.copy())
    assert rem.any()
    ecount = np.bincount(part, minlength=P).astype(np.int64)
    quota = np.random.default_rng(1).integers(0, 30, (GROUPS, P)).astype(np.int64)
    none = np.zeros(P, bool)
    zero, leaf = np.zeros((GROUPS, P), np.int64), pack_bits(c == 1)
    args = (bits, pack_bits(rem), leaf, none, none, quota, zero, zero, ecount, (c > 0).sum(0))
    new = evacuate_round(s, d, part, *args)
    moved = new != part
    assert moved.any()
    after = counts_of(s, d, new)
    assert not ((after > 0) & (c == 0)).any()  # no vertex gained a replica anywhere
    assert (after > 0).sum() < (c > 0).sum()  # and replicas went
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    assert all(rem[lo[i], part[i]] or rem[hi[i], part[i]] for i in np.flatnonzero(moved))  # only selected ones
    grp = (kernels.pair_keys(s, d) % np.uint64(GROUPS)).astype(np.int64)
    for g in range(GROUPS):
        sel = (grp == g) & moved
        into = np.bincount(new[sel], minlength=P)
        out = np.bincount(part[sel], minlength=P)
        assert (into <= quota[g] + out).all(), (g, into, quota[g], out)  # the group's room plus its outflow
    pair = lo * N + hi
    for k in np.unique(pair[moved]):
        assert len(set(new[pair == k].tolist())) == 1  # a pair's rows move together
    # one group's rows decide alike alone (a Spark task) and among all rows (the driver)
    for g in range(GROUPS):
        sel = grp == g
        alone = evacuate_round(s[sel], d[sel], part[sel], *args)
        assert (alone == new[sel]).all()


def test_balance_moves_fill_light_partitions_within_their_vertex_room(state):
    s, d, part = state
    c = counts_of(s, d, part)
    bits = pack_bits(c > 0)
    heavy = np.array([False, True, False, False, False])
    light = ~heavy
    rem = np.zeros((N, P), bool)
    rem[:, 1] = c[:, 1] > 0  # empty partition 1
    vroom = np.zeros((GROUPS, P), np.int64)
    vroom[:, 3] = 2  # at most two new replicas per group, all in partition 3
    quota = np.full((GROUPS, P), 10**6, np.int64)
    ecount = np.bincount(part, minlength=P).astype(np.int64)
    zero = np.zeros((GROUPS, P), np.int64)
    leaf = pack_bits(c == 1)
    new = evacuate_round(
        s, d, part, bits, pack_bits(rem), leaf, light, heavy, quota, vroom, zero, ecount, (c > 0).sum(0)
    )
    after = counts_of(s, d, new)
    gained = (after > 0) & (c == 0)
    assert gained[:, 3].sum() >= 1 and gained.sum() == gained[:, 3].sum()
    grp = (kernels.pair_keys(s, d) % np.uint64(GROUPS)).astype(np.int64)
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    for g in range(GROUPS):  # a group's moves into 3 add at most its vertex room there
        sel = (grp == g) & (new == 3) & (part != 3)
        new_ends = {int(v) for i in np.flatnonzero(sel) for v in (lo[i], hi[i]) if c[v, 3] == 0}
        assert len(new_ends) <= vroom[g, 3], (g, new_ends)
    assert (new[part == 1] != 1).mean() > 0.5  # most of the heavy partition's pairs went


def test_keep_one_and_trim_to_vb():
    rng = np.random.default_rng(2)
    c = rng.integers(0, 3, (200, 6)).astype(np.int32)
    rem = keep_one(c > 0, c.copy())
    rep = c > 0
    assert ((rep & ~rem).sum(1)[rep.sum(1) > 0] >= 1).all()  # every vertex keeps a replica
    assert not rem[rep.sum(1) < 2].any()
    vcount = np.array([110, 100, 100, 100, 60, 60])
    cand = np.zeros((400, 6), bool)
    cand[:40, 4] = cand[40:80, 5] = cand[80:90, 0] = True  # removals in the light partitions raise VB
    before = vcount.max() / vcount.mean()
    out = trim_to_vb(cand.copy(), np.ones((400, 6), np.int32), vcount, 1.10)
    nv = vcount - out.sum(0)
    assert nv.max() / nv.mean() <= max(1.10, before) + 1e-9
    assert out[:, 0].sum() == 10  # removals from the (one) heaviest partition lower VB: all stay
    assert out.sum() < cand.sum()


def _keep_one_reference(rem, counts):
    """keep_one's definition in numpy (the compiled form must give the same)."""
    rep = counts > 0
    nrep = rep.sum(1)
    rem &= (nrep >= 2)[:, None]
    every = np.flatnonzero(rem.sum(1) >= nrep)
    rem[every, np.argmax(np.where(rep, counts, -1), axis=1)[every]] = False
    return rem


def _trim_reference(rem, counts, vcount, bound, leaves=None):
    """trim_to_vb's definition in numpy: half of a partition's planned removals at a time, most pairs first."""
    v = vcount.astype(np.float64)
    lim = max(bound, v.max() / max(v.mean(), 1e-12)) + 1e-12
    cost = 1.0 + (leaves if leaves is not None else np.zeros_like(counts)).astype(np.float64)
    r = (rem * cost).sum(0)

    def vb():
        nv = v - r
        return nv.max() / max(nv.mean(), 1e-12)

    for h in np.argsort(v, kind="stable"):
        while vb() > lim and r[h] > 0:
            cand = np.flatnonzero(rem[:, h])
            drop = cand[np.argsort(-counts[cand, h], kind="stable")[: max(1, len(cand) // 2)]]
            rem[drop, h] = False
            r[h] = max(r[h] - cost[drop, h].sum(), 0.0) if rem[:, h].any() else 0.0
        if vb() <= lim:
            break
    return rem


def _balance_reference(votes, counts, vcount, heavy, target, taken, slack):
    net = votes.repair - votes.leaves
    ok = (counts > 0) & (votes.free + votes.repair == counts) & (net <= 1 + slack) & heavy[None, :] & ~taken
    ok = _keep_one_reference(ok | taken, counts) & ~taken
    for h in np.flatnonzero(heavy):
        cand = np.flatnonzero(ok[:, h])
        excess = int(vcount[h] - target * vcount.mean()) + 1
        if len(cand) > excess:
            ok[cand[np.argsort(net[cand, h], kind="stable")[excess:]], h] = False
    return ok


@pytest.mark.parametrize("seed", range(3))
def test_compiled_balance_moves_and_pack_bits_equal_their_definitions(seed):
    rng = np.random.default_rng(seed)
    n, p = 3000, 70
    c = np.where(rng.random((n, p)) < 0.3, rng.integers(1, 4, (n, p)), 0).astype(np.int32)
    free = np.minimum(rng.integers(0, 4, (n, p)), c).astype(np.int32)
    votes = Votes(free, (c - free) * (rng.random((n, p)) < 0.8), rng.integers(0, 3, (n, p)).astype(np.int32))
    vcount = (c > 0).sum(0).astype(np.float64) + rng.integers(0, 300, p)
    heavy, taken = rng.random(p) < 0.4, (c > 0) & (rng.random((n, p)) < 0.1)
    for slack in (0, 1):
        got = balance_moves(votes, c, vcount, heavy, 1.05, taken, slack)
        assert np.array_equal(got, _balance_reference(votes, c, vcount, heavy, 1.05, taken, slack))
        assert got.any() and not (got & taken).any()
    mask = c > 0
    want = np.zeros((n, 2), np.uint64)
    for k in range(p):
        want[:, k // 64] |= mask[:, k].astype(np.uint64) << np.uint64(k % 64)
    assert np.array_equal(pack_bits(mask), want)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_keep_one_and_trim_equal_their_definitions(seed):
    rng = np.random.default_rng(seed)
    n, p = 3000, 8
    c = np.where(rng.random((n, p)) < 0.3, rng.integers(1, 6, (n, p)), 0).astype(np.int32)
    rem = (c > 0) & (rng.random((n, p)) < 0.7)
    assert np.array_equal(keep_one(rem.copy(), c), _keep_one_reference(rem.copy(), c))
    rem = keep_one(rem, c)
    vcount = (c > 0).sum(0) + rng.integers(0, 300, p)
    leaves = rng.integers(0, 3, (n, p)).astype(np.int32)
    for lv in (None, leaves):
        for bound in (1.0, 1.05, 1.2):
            got = trim_to_vb(rem.copy(), c, vcount, bound, lv)
            assert np.array_equal(got, _trim_reference(rem.copy(), c, vcount, bound, lv)), (lv is None, bound)
            assert got.sum() < rem.sum() or bound > 1.1


def test_leaf_pairs_leave_a_heavy_partition_for_no_net_replica(state):
    """With nothing selected, the balance moves out of the heavy partition only pairs holding a leaf's only
    edge there, each adding at most the replicas it takes out, and h loses at most vout vertices; into it
    only pairs whose endpoints it holds (edge room for the light partitions)."""
    s, d, part = state
    c = counts_of(s, d, part)
    heavy = np.array([True, False, False, False, False])
    light = ~heavy
    quota = np.full((GROUPS, P), 10**6, np.int64)
    vroom = np.full((GROUPS, P), 10**6, np.int64)
    ecount = np.bincount(part, minlength=P).astype(np.int64)
    nothing = pack_bits(np.zeros((N, P), bool))
    for cap in (3, 10**6):
        vout = np.zeros((GROUPS, P), np.int64)
        vout[:, 0] = cap
        new = evacuate_round(
            s,
            d,
            part,
            pack_bits(c > 0),
            nothing,
            pack_bits(c == 1),
            light,
            heavy,
            quota,
            vroom,
            vout,
            ecount,
            (c > 0).sum(0),
        )
        moved = new != part
        out, inn = moved & (part == 0), moved & (part != 0)
        assert out.any() and inn.any()
        lo, hi = np.minimum(s, d), np.maximum(s, d)
        assert all(c[lo[i], 0] == 1 or c[hi[i], 0] == 1 for i in np.flatnonzero(out))  # leaf pairs leave h
        for i in np.flatnonzero(out):  # each adds at most the replicas it takes out of h
            added = (c[lo[i], new[i]] == 0) + (c[hi[i], new[i]] == 0)
            assert added <= (c[lo[i], 0] == 1) + (c[hi[i], 0] == 1), (i, added)
        assert all(new[i] == 0 and c[lo[i], 0] and c[hi[i], 0] for i in np.flatnonzero(inn))  # held pairs come in
        after = counts_of(s, d, new)
        lost = ((c > 0) & (after == 0))[:, 0].sum()
        assert lost <= GROUPS * cap
        assert (after > 0).sum() <= (c > 0).sum()  # no net replica added
    assert lost > GROUPS * 3  # unbounded, more go


def test_a_leaf_pair_never_moves_where_it_adds_more_than_it_removes():
    """Pair (0, 1) in heavy partition 0, vertex 0 a leaf there, neither endpoint anywhere else: any target
    adds two replicas for the one removed, so it stays; with vertex 1 also in partition 2 it goes there."""
    s, d = np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1])  # pairs (0, 1) and (1, 2), two rows each
    part = np.array([0, 0, 0, 0], np.int32)
    p, groups = 3, 1
    counts = np.zeros((3, p), np.int32)
    counts[0, 0], counts[1, 0], counts[2, 0] = 1, 2, 1
    heavy, light = np.array([True, False, False]), np.array([False, True, True])
    big = np.full((groups, p), 100, np.int64)
    nothing = pack_bits(np.zeros((3, p), bool))

    def run(c):
        return evacuate_round(
            s,
            d,
            part,
            pack_bits(c > 0),
            nothing,
            pack_bits(c == 1),
            light,
            heavy,
            big,
            big,
            big,
            np.array([4, 0, 0]),
            (c > 0).sum(0),
        )

    counts[1, 0] = 3  # vertex 1 is no leaf; 0 and 2 are: each pair removes one replica and would add two
    assert (run(counts) == part).all()
    forced = evacuate_round(
        s,
        d,
        part,
        pack_bits(counts > 0),
        nothing,
        pack_bits(counts == 1),
        light,
        heavy,
        big,
        big,
        big,
        np.array([4, 0, 0]),
        (counts > 0).sum(0),
        1,
    )
    assert (forced != part).all()  # with slack 1 (VB stalled above its bound) one extra replica is allowed
    counts[1, 2] = 1  # vertex 1 also in partition 2: each pair adds one (its leaf) and removes one
    assert (run(counts) == 2).all()


def test_balance_takes_dearer_moves_only_when_vb_stalls_above_its_bound():
    """balance_moves selects a replica whose move adds two replicas for one removed only with slack 1; the
    loop raises the slack one step per stalled round while VB is above refine_vb_max, then polishes."""
    counts = np.array([[2, 1], [1, 1], [1, 1]], np.int32)  # vertex 0: two pairs in heavy partition 0
    votes = Votes(free=np.zeros_like(counts), repair=counts.copy(), leaves=np.zeros_like(counts))
    heavy = np.array([True, False])
    vcount = np.array([30, 10])
    none = np.zeros_like(counts, bool)
    assert not balance_moves(votes, counts, vcount, heavy, 1.08, none)[0, 0]  # net +1: refused
    assert balance_moves(votes, counts, vcount, heavy, 1.08, none, slack=1)[0, 0]
    loop = Relocation(AdaDNEConfig(), rows=1000)
    assert loop._next("balance", moved=50, vb_fall=0.01, vb=1.3) == "balance" and loop.slack == 0  # progress
    assert loop._next("balance", moved=0, vb_fall=0.0, vb=1.3) == "balance" and loop.slack == 1  # stalled
    for k in range(2, MAX_SLACK + 1):
        assert loop._next("balance", moved=0, vb_fall=0.0, vb=1.3) == "balance" and loop.slack == k
    assert loop._next("balance", moved=0, vb_fall=0.0, vb=1.3) == "polish"
    assert Relocation(AdaDNEConfig(), rows=1000)._next("balance", moved=0, vb_fall=0.0, vb=1.09) == "polish"


def _sweep(c, a, b, h, t):
    """The shedding sweep that may move pair (a, b) from h to t: 0 no |V_i| changes, 1 as many vertices
    leave h as t gains, 2 replicas removed, 3 one added net, 4 more."""
    add = int(c[a, t] == 0) + int(c[b, t] == 0)
    gone = int(c[a, h] == 1) + int(c[b, h] == 1)
    if add == gone == 0:
        return 0
    return 1 if add == gone else 2 if add < gone else 3 if add == gone + 1 else 4


def test_shedding_takes_each_groups_share_out_of_a_full_partition_cheapest_first(state):
    """Partition 0 must shed: every group moves at least its share out of it (into partitions within their
    quotas, nothing else moves), and a small share goes by the moves of the earliest sweep the group has
    (those that change no vertex count first); asked for every row, the last sweep empties partition 0
    whatever it costs."""
    s, d, part = state
    c = counts_of(s, d, part)
    bits, leaf = pack_bits(c > 0), pack_bits(c == 1)
    grp = (kernels.pair_keys(s, d) % np.uint64(GROUPS)).astype(np.int64)
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    quota = np.full((GROUPS, P), 10**6, np.int64)
    quota[:, 0] = 0
    for share in (6, 10**6):
        shed = np.zeros((GROUPS, P), np.int64)
        shed[:, 0] = share
        out = part.copy()
        shed_rows(
            s, d, part, out, bits, leaf, quota.copy(), shed, np.full((GROUPS, P), 10**6, np.int64), (c > 0).sum(0)
        )
        moved = out != part
        assert (part[moved] == 0).all() and (out[moved] != 0).all()
        for g in range(GROUPS):
            sel = moved & (grp == g)
            in_h = (grp == g) & (part == 0)
            assert sel.sum() >= min(share, in_h.sum()), (g, sel.sum())
            if share < 10**6:  # the moves made cost no more than the cheapest left behind
                cost = {i: min(_sweep(c, lo[i], hi[i], 0, t) for t in range(1, P)) for i in np.flatnonzero(in_h)}
                made = max(cost[i] for i in np.flatnonzero(sel))
                assert made <= min([cost[i] for i in np.flatnonzero(in_h & ~moved)] or [made]), g
        if share == 10**6:
            assert not (out == 0).any()  # the last sweep takes any pair


def test_shedding_keeps_the_receivers_quotas(state):
    """Rows shed into t never pass the group's quota there: the hard bound holds for the receivers."""
    s, d, part = state
    c = counts_of(s, d, part)
    grp = (kernels.pair_keys(s, d) % np.uint64(GROUPS)).astype(np.int64)
    quota = np.random.default_rng(3).integers(0, 20, (GROUPS, P)).astype(np.int64)
    shed = np.zeros((GROUPS, P), np.int64)
    shed[:, 2] = 10**6
    out = part.copy()
    shed_rows(
        s,
        d,
        part,
        out,
        pack_bits(c > 0),
        pack_bits(c == 1),
        quota.copy(),
        shed,
        np.zeros((GROUPS, P), np.int64),
        (c > 0).sum(0),
    )
    moved = out != part
    assert moved.any()
    for g in range(GROUPS):
        into = np.bincount(out[moved & (grp == g)], minlength=P)
        assert (into <= quota[g]).all(), (g, into, quota[g])
