"""recall@k and NDCG@k of a link model's held-out test edges at the end of ``glisp train``: every candidate of
the test destinations' type is ranked for each test source (at most ``RANK_USERS``, a seeded sample), the
source's training neighbours (as served: the held-out edges are not) left out (:mod:`glisp_core.ranking`).
Which endpoint is the query is :func:`_oriented`'s choice (``train.rank_from``).

Candidates are embedded in chunks by the run's evaluator (full neighbourhoods or sampled trees, as validation)
and folded into each source's top k, so the trainer holds the sources' rows, their top k and one chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glisp_core.ranking import TopK, held_out_users, items_of, recall_ndcg, smaller_side
from glisp_sampling.degree_batches import degree_batches
from glisp_sampling.khop import HopRequest
from glisp_train.dist import all_gather

RANK_USERS = 2000
RANK_K = 20
CHUNK = 1 << 14  # candidates embedded at a time
REQUEST_EDGES = 8_000_000  # sources x fanout of one Gather for their training neighbours
MAX_FANOUT = 100_000  # serve.max_fanout's default: a source with more training neighbours keeps this many out


def rank_test_edges(ctx: Any, evaluator: Any, task: Any, times: Any) -> dict[str, Any]:
    """``{"recall@20", "ndcg@20", "ranked_users"}`` of the test split (every process gets the same numbers)."""
    held = task.heldout
    test = held["split"] == 2
    src, dst, query_type = _oriented(task, held["src"][test], held["dst"][test])
    users, truth = held_out_users(src, dst, RANK_USERS, ctx.seed)
    if not len(users):
        return {}
    exclude = items_of(users, *_training_edges(task, users))
    q = _rows(ctx, evaluator, users, times)
    topk = TopK(q, RANK_K, exclude)
    cand = _candidates(task, dst)
    for a in range(0, len(cand), CHUNK):
        ids = cand[a : a + CHUNK]
        topk.add(ids, _rows(ctx, evaluator, ids, times))
    got = recall_ndcg(topk.result(), truth, (RANK_K,))
    out = {**{k: round(v, 6) for k, v in got.items() if k != "ranked_users"}, "ranked_users": got["ranked_users"]}
    if query_type < 0:
        return out
    names = task.type_names
    return {**out, "ranked_from": names[query_type] if query_type < len(names) else str(query_type)}


def _oriented(task: Any, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The test edges as (query, held-out candidate) pairs, and the queries' vertex type (-1: any).

    An undirected graph stores each held-out pair both ways and does not keep which way it was given, so on a
    typed one the queries are ``train.rank_from``'s vertices, else those of the smaller vertex type among the
    test edges' endpoints (users, usually, beside items); on a directed graph the test sources, as given.
    """
    if not task.typed or (not task.undirected and task.rank_from < 0):
        return src, dst, -1
    vt = np.asarray(task.vtype)
    if task.rank_from >= 0:
        keep, qt = vt[src] == task.rank_from, task.rank_from
    else:
        keep, qt = smaller_side(vt[src], dict(enumerate(np.bincount(vt).tolist())))
    return src[keep], dst[keep], int(qt)


def _training_edges(task: Any, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every out-neighbour of ``users`` in the served (training) graph: one full Gather hop per slice of them."""
    deg = np.asarray(task.out_degree)[users]
    s, d = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for pos, fanout in degree_batches(deg, max(1, len(users)), REQUEST_EDGES, MAX_FANOUT):
        u = users[pos]
        req = HopRequest(fanout=fanout, method="uniform_exact", direction="out")
        hop = task.submit(task.backend.gather(u, req)).result()
        s.append(np.repeat(u, hop.per_vertex))
        d.append(np.asarray(hop.nbrs, np.int64))
    return np.concatenate(s), np.concatenate(d)


def _candidates(task: Any, dst: np.ndarray) -> np.ndarray:
    """Vertices of the test destinations' most common type (all vertices on an untyped graph), ascending."""
    if not task.typed:
        return np.arange(task.num_vertices, dtype=np.int64)
    vt = np.asarray(task.vtype)
    target = np.bincount(vt[np.asarray(dst, np.int64)]).argmax()
    return np.flatnonzero(vt == target).astype(np.int64)


def _rows(ctx: Any, evaluator: Any, ids: np.ndarray, times: Any) -> np.ndarray:
    """The model's output rows of ``ids`` in that order, computed by every process's share."""
    got, rows = evaluator.embed(ctx, ids, times, keep=False)
    parts = all_gather((got, rows), ctx.dist)
    all_ids = np.concatenate([p[0] for p in parts])
    all_rows = np.concatenate([p[1] for p in parts if len(p[1])])
    order = np.argsort(all_ids)
    return all_rows[order][np.searchsorted(all_ids[order], ids)]
