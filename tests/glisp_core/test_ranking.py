"""recall@k and NDCG@k over every candidate, against a direct computation on the whole score matrix."""

from __future__ import annotations

import numpy as np
import pytest

from glisp_core.ranking import TopK, recall_ndcg


def _direct(q, items, candidate, train, truth, k):
    """The whole score matrix, training items and non-candidates removed, each user's top k by a full sort."""
    s = q @ items.T
    s[:, ~candidate] = -np.inf
    for u, t in enumerate(train):
        s[u, t] = -np.inf
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    rec, ndcg = [], []
    for u, t in enumerate(truth):
        if not len(t):
            continue
        hits = [1.0 if v in set(t.tolist()) and np.isfinite(s[u, v]) else 0.0 for v in top[u]]
        rec.append(sum(hits) / len(t))
        dcg = sum(h / np.log2(r + 2) for r, h in enumerate(hits))
        ndcg.append(dcg / sum(1 / np.log2(r + 2) for r in range(min(k, len(t)))))
    return top, np.mean(rec), np.mean(ndcg)


@pytest.mark.parametrize("block", [7, 64, 1000])
def test_blockwise_top_k_with_exclusions_equals_the_whole_matrix(block):
    rng = np.random.default_rng(3)
    n_users, n_items, d, k = 30, 500, 8, 20
    q = rng.normal(size=(n_users, d)).astype(np.float32)
    items = rng.normal(size=(n_items, d)).astype(np.float32)
    candidate = rng.random(n_items) < 0.7  # the target type
    train = [np.sort(rng.choice(n_items, rng.integers(0, 40), replace=False)) for _ in range(n_users)]
    truth = [np.setdiff1d(rng.choice(np.flatnonzero(candidate), rng.integers(0, 6)), t) for t in train]
    indptr = np.concatenate([[0], np.cumsum([len(t) for t in train])])
    topk = TopK(q, k, (indptr, np.concatenate(train).astype(np.int64)))
    for a in range(0, n_items, block):
        ids = np.arange(a, min(n_items, a + block))
        topk.add(ids, items[ids], candidate[ids])
    top = topk.result()
    want_top, want_recall, want_ndcg = _direct(q, items, candidate, train, truth, k)
    assert np.array_equal(top, want_top)
    got = recall_ndcg(top, truth, [k, 5])
    assert got["recall@20"] == pytest.approx(want_recall) and got["ndcg@20"] == pytest.approx(want_ndcg)
    assert got["ranked_users"] == sum(1 for t in truth if len(t)) and 0 < got["recall@20"] < 1
    assert not np.isin(top, np.flatnonzero(~candidate)).any()
    assert all(not np.isin(top[u], train[u]).any() for u in range(n_users))


def test_ndcg_of_a_known_ranking():
    top = np.array([[3, 9, 4, 1]])
    got = recall_ndcg(top, [np.array([4, 7])], [4])  # one of two relevant items, at rank 3
    assert got["recall@4"] == pytest.approx(0.5)
    assert got["ndcg@4"] == pytest.approx((1 / np.log2(4)) / (1 + 1 / np.log2(3)))


def test_fewer_candidates_than_k_leave_minus_one():
    topk = TopK(np.ones((1, 2), np.float32), 5)
    topk.add(np.array([0, 1, 2]), np.ones((3, 2), np.float32), np.array([True, False, True]))
    top = topk.result()
    assert sorted(top[0, :2].tolist()) == [0, 2] and top[0, 2:].tolist() == [-1, -1, -1]
