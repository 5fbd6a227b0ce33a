"""Sampling kernels and Apply, in process, against exact probabilities and a numpy A-ES reference.

A vertex's edges are split over several "servers" (plain CSR arrays, one per partition id); every
trial is one task with its own seed, the partials are merged by the client's Apply, and inclusion
counts over thousands of trials are tested against the target distribution.
"""

from __future__ import annotations

import numpy as np
import pytest

from glisp_sampling import kernels as K
from glisp_sampling.apply import Partial, merge_partials, relabel
from glisp_testing.stats import binomial_chi2_z, two_sample_z

E64 = np.empty(0, np.int64)
EF = np.empty(0, np.float32)


class Star:
    """Vertex gid 0 whose D out-edges go to gids 1..D; server k holds the neighbours in slice k."""

    def __init__(self, sizes: list[int], weight: np.ndarray | None = None, ts: np.ndarray | None = None):
        self.D = int(sum(sizes))
        self.parts = []
        lo = 1
        for k, c in enumerate(sizes):
            nbr_g = np.arange(lo, lo + c, dtype=np.int64)
            gid = np.concatenate([[0], nbr_g])
            sl = slice(lo - 1, lo - 1 + c)
            self.parts.append(
                dict(
                    part=k,
                    c=c,
                    global_id=gid,
                    out_indptr=np.concatenate([[0], np.full(len(gid), c)]).astype(np.int64),
                    out_nbr=np.arange(1, c + 1, dtype=np.int32),
                    weight=EF if weight is None else np.asarray(weight[sl], np.float32),
                    ts=E64 if ts is None else np.asarray(ts[sl], np.int64),
                )
            )
            lo += c


def run_part(
    p: dict, method: int, f: int, R: int, D: int, base_seed: int = 1, tmax: int | None = None, want_eids: bool = False
):
    """R independent trials of vertex 0 on one part: (counts, nbrs, keys, eids).

    Trial r is one task over the whole local range [0, c) with the seed vertex 0's stream of request
    seed ``base_seed + r`` (the kernel derives it from the request seed, vertex, slot and partition).
    """
    counts, nbrs, keys, eids = [], [], [], []
    has_time = tmax is not None
    ts = p["ts"] if has_time else E64
    w = p["weight"] if method == K.WEIGHTED else EF
    for r in range(R):
        c = np.empty(1, np.int32)
        nb, ei, ke = np.empty(f, np.int64), np.empty(f, np.int64), np.empty(f, np.float32)
        end = K.sample_tasks(
            method,
            np.zeros(1, np.int64),
            np.zeros(1, np.int64),
            1,
            E64,
            E64,
            False,
            p["out_indptr"],
            np.array([D]),
            np.array([f]),
            np.uint64(base_seed + r),
            p["part"],
            False,
            E64,
            has_time,
            np.int64(tmax or 0),
            ts,
            w,
            p["out_nbr"],
            p["out_indptr"],
            p["global_id"],
            want_eids,
            0,
            1,
            c,
            nb,
            ei,
            ke,
            0,
        )
        counts.append(c[0])
        nbrs.append(nb[:end])
        keys.append(ke[:end])
        eids.append(ei[:end])
    return np.array(counts), np.concatenate(nbrs), np.concatenate(keys), np.concatenate(eids)


def run_star(star: Star, method: int, f: int, R: int, **kw) -> tuple[np.ndarray, np.ndarray]:
    merge = {K.QUOTA: "concat", K.KEYED: "topk", K.REPLACE: "per_draw", K.WEIGHTED: "topk"}[method]
    partials = []
    for p in star.parts:
        c, n, k, e = run_part(p, method, f, R, star.D, **kw)
        partials.append(Partial(pos=np.arange(R), counts=c, nbrs=n, keys=k))
    hop = merge_partials(R, partials, merge, np.array([f]))
    return hop.counts[:, 0], hop.nbrs


def inclusion(star: Star, nbrs: np.ndarray) -> np.ndarray:
    return np.bincount(nbrs, minlength=star.D + 1)[1:]


@pytest.mark.parametrize(
    "sizes,f", [([50, 150], 15), ([7, 13], 5), ([300, 200, 100, 400], 25)], ids=["hub2", "small", "hub4"]
)
def test_quota_each_edge_with_probability_f_over_D(sizes, f):
    star, R = Star(sizes), 4000
    counts, nbrs = run_star(star, K.QUOTA, f, R)
    inc = inclusion(star, nbrs)
    assert inc.max() <= R  # never twice in one trial
    for r in range(0, R, 97):  # without replacement within a trial
        seg = nbrs[counts[:r].sum() : counts[: r + 1].sum()]
        assert len(np.unique(seg)) == len(seg)
    assert binomial_chi2_z(inc, R, f / star.D) < 4.0
    assert abs(counts.mean() - f) < 4 * np.sqrt(f / R)
    # each server's count is floor(x) or floor(x) + 1 with x = f d_i / D
    for p in star.parts:
        c, *_ = run_part(p, K.QUOTA, f, 500, star.D)
        x = f * p["c"] / star.D
        assert set(np.unique(c)) <= {int(np.floor(x)), int(np.floor(x)) + 1}
        assert abs(c.mean() - x) < 0.1


def test_quota_degree_at_most_fanout_returns_all():
    star = Star([3, 5])
    counts, nbrs = run_star(star, K.QUOTA, 10, 50)
    assert (counts == 8).all()
    assert (inclusion(star, nbrs) == 50).all()


@pytest.mark.parametrize("sizes,f", [([40, 60], 10), ([2, 3], 10)])
def test_keyed_uniform_exact_count(sizes, f):
    star, R = Star(sizes), 4000
    counts, nbrs = run_star(star, K.KEYED, f, R)
    assert (counts == min(f, star.D)).all()
    inc = inclusion(star, nbrs)
    if star.D <= f:
        assert (inc == R).all()
    else:
        assert binomial_chi2_z(inc, R, f / star.D) < 4.0


def test_with_replacement_uniform_over_all_edges():
    star, R, f = Star([10, 30, 20]), 3000, 5
    counts, nbrs = run_star(star, K.REPLACE, f, R)
    assert (counts == f).all()
    inc = inclusion(star, nbrs)
    assert binomial_chi2_z(inc, R * f, 1 / star.D) < 4.0
    # duplicates happen (with replacement): with D=60, f=5 about 16% of trials repeat an edge
    dup = sum(len(np.unique(nbrs[r * f : (r + 1) * f])) < f for r in range(R))
    assert 0.08 * R < dup < 0.25 * R


def aes_reference(w: np.ndarray, f: int, R: int, seed: int) -> np.ndarray:
    """Single-process A-ES (Efraimidis-Spirakis): per trial the f largest log(U)/w; inclusion counts."""
    rng = np.random.default_rng(seed)
    keys = np.log(rng.random((R, len(w)))) / w
    top = np.argpartition(-keys, f - 1, axis=1)[:, :f]
    return np.bincount(top.ravel(), minlength=len(w))


def test_weighted_matches_single_process_aes():
    rng = np.random.default_rng(3)
    D, f, R = 60, 6, 4000
    w = rng.uniform(0.05, 5.0, D).astype(np.float32)
    star = Star([20, 25, 15], weight=w)
    counts, nbrs = run_star(star, K.WEIGHTED, f, R)
    assert (counts == f).all()
    inc = inclusion(star, nbrs)
    ref = aes_reference(w.astype(np.float64), f, R, seed=11)
    assert two_sample_z(inc, R, ref, R) < 4.0
    # and it is really weighted: the heaviest tenth is sampled far more often than the lightest tenth
    order = np.argsort(w)
    assert inc[order[-6:]].sum() > 5 * inc[order[:6]].sum()


def test_weighted_zero_weight_never_sampled():
    w = np.array([0, 1, 0, 2, 0.5, 0], np.float32)
    star = Star([3, 3], weight=w)
    counts, nbrs = run_star(star, K.WEIGHTED, 10, 200)
    assert (counts == 3).all()
    assert set(np.unique(nbrs)) == {2, 4, 5}


@pytest.mark.parametrize("method", [K.KEYED, K.REPLACE, K.WEIGHTED])
def test_time_bound_excludes_later_edges(method):
    rng = np.random.default_rng(5)
    D = 80
    ts = rng.integers(0, 100, D)
    w = rng.uniform(0.5, 2, D).astype(np.float32)
    star = Star([30, 50], weight=w, ts=ts)
    counts, nbrs = run_star(star, method, 8, 1000, tmax=40)
    allowed = set((np.flatnonzero(ts <= 40) + 1).tolist())
    assert set(np.unique(nbrs)) <= allowed
    assert len(set(np.unique(nbrs))) > 0.9 * len(allowed)
    if method == K.KEYED:
        inc = inclusion(star, nbrs)[np.flatnonzero(ts <= 40)]
        assert binomial_chi2_z(inc, 1000, 8 / len(allowed)) < 4.0


def random_csr(n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    o = np.lexsort((dst, src))
    src, dst = src[o], dst[o]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    in_eid = np.lexsort((src, dst)).astype(np.int64)
    in_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=in_indptr[1:])
    gid = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    return src, dst, indptr, in_indptr, in_eid, gid


def _sample(g, lids, method, f, is_in, seed, part=3, chunks=1):
    """Every vertex of ``lids`` once, in ``chunks`` kernel calls writing into their own regions."""
    src, dst, indptr, in_indptr, in_eid, gid = g
    ptr = in_indptr if is_in else indptr
    deg = np.diff(ptr)
    n = len(lids)
    counts = np.empty(n, np.int32)
    nb, ei, ke = np.empty(n * f, np.int64), np.empty(n * f, np.int64), np.empty(n * f, np.float32)
    bounds = np.linspace(0, n, chunks + 1).astype(int)  # seeds per kernel call (one slot per seed here)
    spans = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        end = K.sample_tasks(
            method,
            lids,
            gid[lids],
            1,
            E64,
            E64,
            False,
            ptr,
            deg,
            np.array([f]),
            np.uint64(seed),
            part,
            is_in,
            in_eid,
            False,
            0,
            E64,
            EF,
            dst.astype(np.int32),
            indptr,
            gid,
            True,
            a,
            b,
            counts,
            nb,
            ei,
            ke,
            a * f,
        )
        spans.append((a * f, end))
    cat = [np.concatenate([x[s:e] for s, e in spans]) for x in (nb, ei, ke)]
    return counts, cat[0], cat[1], cat[2]


@pytest.mark.parametrize("is_in", [False, True], ids=["out", "in"])
def test_edges_are_real_and_edge_ids_global(is_in):
    g = random_csr(300, 3000, 1)
    src, dst, indptr, in_indptr, in_eid, gid = g
    lids = np.arange(300)
    counts, nb, ei, _ = _sample(g, lids, K.QUOTA, 5, is_in, seed=9)
    deg = np.diff(in_indptr if is_in else indptr)
    assert np.array_equal(counts, np.minimum(deg, 5))
    assert ((ei >> 40) == 3).all()
    local = ei & ((1 << 40) - 1)
    owner = np.repeat(lids, counts)
    if is_in:  # edge local -> (src, dst): dst is the seed, nbr is the source
        assert np.array_equal(dst[local], owner) and np.array_equal(gid[src[local]], nb)
    else:
        assert np.array_equal(src[local], owner) and np.array_equal(gid[dst[local]], nb)
    for v in range(0, 300, 7):  # distinct edges per seed
        seg = local[counts[:v].sum() : counts[: v + 1].sum()]
        assert len(np.unique(seg)) == len(seg)


@pytest.mark.parametrize("method", [K.QUOTA, K.KEYED, K.REPLACE])
def test_reproducible_for_a_seed_and_independent_of_chunking(method):
    g = random_csr(500, 8000, 2)
    lids = np.arange(500)
    a = _sample(g, lids, method, 7, False, seed=42)
    b = _sample(g, lids, method, 7, False, seed=42, chunks=5)
    c = _sample(g, lids, method, 7, False, seed=43)
    n_cmp = 3 if method == K.QUOTA else 4  # QUOTA writes no keys
    for x, y in zip(a[:n_cmp], b[:n_cmp], strict=True):
        assert np.array_equal(x, y)
    assert not np.array_equal(a[1], c[1])


def test_merge_typed_topk_keeps_per_slot_fanout():
    # two servers, 2 frontier vertices, 2 slots (types) with fanouts 2 and 1
    p0 = Partial(
        pos=np.array([0, 1]),
        counts=np.array([[2, 1], [1, 0]]),
        nbrs=np.array([10, 11, 12, 13]),
        keys=np.array([-1.0, -0.5, -0.2, -3.0], np.float32),
    )
    p1 = Partial(
        pos=np.array([1]),
        counts=np.array([[2, 1]]),
        nbrs=np.array([20, 21, 22]),
        keys=np.array([-0.1, -4.0, -0.3], np.float32),
    )
    hop = merge_partials(2, [p0, p1], "topk", np.array([2, 1]))
    assert hop.counts.tolist() == [[2, 1], [2, 1]]
    assert hop.nbrs.tolist() == [11, 10, 12, 20, 13, 22]


def test_relabel_scratch_and_sort_agree():
    rng = np.random.default_rng(0)
    dst = rng.choice(1000, 50, replace=False)
    nbrs = rng.integers(0, 1000, 400)
    s1, l1 = relabel(dst, nbrs, np.full(1000, -1, np.int32))
    s2, l2 = relabel(dst, nbrs)
    assert np.array_equal(s1, s2) and np.array_equal(l1, l2)
    assert np.array_equal(s1[:50], dst) and np.array_equal(s1[l1], nbrs)
    assert len(np.unique(s1)) == len(s1)


def _random_partials(rng, n: int, servers: int, nslot: int, keys: bool = False) -> list[Partial]:
    """Partials as servers return them: ascending positions, int32 counts and neighbour ids."""
    out = []
    for _ in range(servers):
        pos = np.flatnonzero(rng.random(n) < 0.6)
        counts = rng.integers(0, 5, (len(pos), nslot)).astype(np.int32)
        m = int(counts.sum())
        out.append(
            Partial(
                pos=pos,
                counts=counts if nslot > 1 else counts[:, 0],
                nbrs=rng.integers(0, 5000, m).astype(np.int32),
                keys=-rng.random(m).astype(np.float32) if keys else None,
                edge_ids=rng.integers(0, 1 << 41, m),
            )
        )
    return out


@pytest.mark.parametrize("nslot", [1, 3])
def test_concat_merge_and_block_match_a_reference(nslot):
    rng = np.random.default_rng(7)
    n = 400
    dst = rng.choice(5000, n, replace=False)
    parts = _random_partials(rng, n, 3, nslot)
    scratch = np.full(5000, -1, np.int32)
    hop = merge_partials(n, parts, "concat", np.full(nslot, 4), want_eids=True, dst=dst, scratch=scratch)
    # reference: vertex by vertex, slot by slot, servers in order
    nb, ei, counts = [], [], np.zeros((n, nslot), np.int64)
    for i in range(n):
        for j in range(nslot):
            for p in parts:
                r = np.searchsorted(p.pos, i)
                if r < len(p.pos) and p.pos[r] == i:
                    c = p.counts.reshape(len(p.pos), nslot)
                    a = int(c[:r].sum() + c[r, :j].sum())
                    nb.append(p.nbrs[a : a + c[r, j]])
                    ei.append(p.edge_ids[a : a + c[r, j]])
                    counts[i, j] += c[r, j]
    assert np.array_equal(hop.counts, counts)
    assert np.array_equal(hop.nbrs, np.concatenate(nb)) and np.array_equal(hop.edge_ids, np.concatenate(ei))
    src, local = relabel(dst, hop.nbrs)
    assert np.array_equal(hop.block[0], src)
    assert np.array_equal(hop.block[1], np.stack([local, np.repeat(np.arange(n), counts.sum(axis=1))]))
    assert (scratch == -1).all()  # restored for the next hop


def test_topk_merge_keeps_the_largest_keys_in_order():
    rng = np.random.default_rng(8)
    n, f = 300, 3
    parts = _random_partials(rng, n, 3, 1, keys=True)
    hop = merge_partials(n, parts, "topk", np.array([f]))
    o = 0
    for i in range(n):
        ks, nb = [], []
        for p in parts:
            r = np.searchsorted(p.pos, i)
            if r < len(p.pos) and p.pos[r] == i:
                a = int(p.counts[:r].sum())
                ks.append(p.keys[a : a + p.counts[r]])
                nb.append(p.nbrs[a : a + p.counts[r]])
        ks, nb = np.concatenate(ks) if ks else np.empty(0), np.concatenate(nb) if nb else np.empty(0)
        want = nb[np.argsort(-ks, kind="stable")[:f]]
        assert hop.counts[i, 0] == len(want)
        assert np.array_equal(hop.nbrs[o : o + len(want)], want)
        o += len(want)
