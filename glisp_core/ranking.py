"""Top-k ranking over every candidate, as recommendation is judged: recall@k and NDCG@k.

Why not MRR against sampled negatives: a model that ranks a held-out item above 100 random vertices can still
rank it below the thousands of popular items a user would be shown; ranking every candidate of the target type
(excluding what the user already has in training) is the measure published recommenders are compared on
(LightGCN's recall@20 and NDCG@20). Candidates arrive in blocks (rows of an embedding store), so memory is the
queries' top-k plus one block, whatever the number of candidates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class TopK:
    """The ``k`` best-scoring candidates of each query row, over blocks of candidates added one by one.

    ``exclude``: per query, candidate ids it must not be ranked on (its training items), as a CSR pair
    ``(indptr, ids)`` with each row's ids sorted.
    """

    def __init__(self, queries: np.ndarray, k: int, exclude: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.q = np.asarray(queries, np.float32)
        self.k = int(k)
        m = len(self.q)
        self.ids = np.full((m, 0), -1, np.int64)
        self.scores = np.full((m, 0), -np.inf, np.float32)
        self.exclude = exclude

    def add(self, ids: np.ndarray, emb: np.ndarray, candidate: np.ndarray | None = None) -> None:
        """Score the block ``ids`` (ascending vertex ids, embeddings ``emb``); ``candidate``: which of them may
        be ranked at all (the target type)."""
        ids = np.asarray(ids, np.int64)
        s = self.q @ np.asarray(emb, np.float32).T
        if candidate is not None:
            s[:, ~np.asarray(candidate, bool)] = -np.inf
        if self.exclude is not None and len(ids):
            indptr, ex = self.exclude
            rows = np.repeat(np.arange(len(self.q)), np.diff(indptr))
            pos = np.searchsorted(ids, ex)
            hit = (pos < len(ids)) & (ids[np.minimum(pos, len(ids) - 1)] == ex)
            s[rows[hit], pos[hit]] = -np.inf
        all_s = np.concatenate([self.scores, s], axis=1)
        all_i = np.concatenate([self.ids, np.broadcast_to(ids, s.shape)], axis=1)
        if all_s.shape[1] > self.k:
            top = np.argpartition(-all_s, self.k - 1, axis=1)[:, : self.k]
            all_s, all_i = np.take_along_axis(all_s, top, 1), np.take_along_axis(all_i, top, 1)
        self.scores, self.ids = all_s, all_i

    def result(self) -> np.ndarray:
        """Each query's top-k candidate ids, best first (-1 where fewer than k could be ranked)."""
        order = np.argsort(-self.scores, axis=1, kind="stable")
        ids = np.take_along_axis(self.ids, order, 1)
        ids[~np.isfinite(np.take_along_axis(self.scores, order, 1))] = -1
        short = self.k - ids.shape[1]
        return np.pad(ids, ((0, 0), (0, short)), constant_values=-1) if short > 0 else ids


def recall_ndcg(top: np.ndarray, truth: Sequence[np.ndarray], ks: Sequence[int]) -> dict[str, float]:
    """``recall@k`` (hits in the top k over the user's held-out items, LightGCN's definition) and ``ndcg@k``
    (binary relevance, ideal DCG over min(k, held-out items)), averaged over users with a held-out item."""
    out: dict[str, float] = {}
    users = [i for i, t in enumerate(truth) if len(t)]
    for k in ks:
        disc = 1.0 / np.log2(np.arange(2, k + 2))
        rec, ndcg = [], []
        for i in users:
            hit = np.isin(top[i, :k], truth[i])
            rec.append(hit.sum() / len(truth[i]))
            ndcg.append((hit * disc[: len(hit)]).sum() / disc[: min(k, len(truth[i]))].sum())
        out[f"recall@{k}"] = float(np.mean(rec)) if rec else 0.0
        out[f"ndcg@{k}"] = float(np.mean(ndcg)) if ndcg else 0.0
    out["ranked_users"] = len(users)
    return out


def held_out_users(src: np.ndarray, dst: np.ndarray, limit: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sources ranked (all, or a seeded sample of ``limit``; sorted) and each one's held-out destinations."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    users = np.unique(src)
    if len(users) > limit:
        users = np.sort(np.random.default_rng([seed, 3]).choice(users, limit, replace=False))
    order = np.argsort(src, kind="stable")
    lo, hi = np.searchsorted(src[order], users, "left"), np.searchsorted(src[order], users, "right")
    return users, [np.unique(dst[order][a:b]) for a, b in zip(lo, hi, strict=True)]


def items_of(users: np.ndarray, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, ids sorted within each row) of the destinations of ``users`` among the edges (s, d)."""
    order = np.lexsort((d, s))
    s, d = np.asarray(s, np.int64)[order], np.asarray(d, np.int64)[order]
    bounds = zip(np.searchsorted(s, users, "left"), np.searchsorted(s, users, "right"), strict=True)
    parts = [np.unique(d[a:b]) for a, b in bounds]
    indptr = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    return indptr, (np.concatenate(parts) if parts else np.empty(0, np.int64))


def smaller_side(src_types: np.ndarray, sizes: Mapping[Any, int]) -> tuple[np.ndarray, Any]:
    """(mask, type) of the held-out pairs to rank on an undirected typed graph: those whose query endpoint has
    the type with the fewest vertices among the queries' types (users, usually, beside items). Such a graph
    stores each pair both ways and does not keep which way it was given."""
    present = np.unique(src_types)
    qt = min(present.tolist(), key=lambda t: sizes[t])
    return np.asarray(src_types) == qt, qt
