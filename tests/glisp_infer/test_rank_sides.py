"""glisp infer's recall@20 on an undirected typed graph: each held-out pair is stored both ways, and only the
smaller type's side is ranked (users against items), as glisp train ranks it; real Spark and Parquet."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glisp_core.dataset.layout import VID, VTYPE
from glisp_core.storage.uri import parse_uri
from glisp_infer.rank_eval import ranking_scores
from glisp_testing.graphs import write_dataset

USERS, ITEMS = 3, 30  # vids 0-2 users, 3-32 items


def test_an_undirected_typed_graph_is_ranked_from_its_smaller_type(spark, tmp_path):
    n = USERS + ITEMS
    test = [(u, USERS + u) for u in range(USERS)]  # user u's held-out item: 3 + u
    train = [(u, USERS + 10 + 2 * u + k) for u in range(USERS) for k in range(2)]
    pairs = np.array(test + train)
    s, d = np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]])
    vtype = np.array([0] * USERS + [1] * ITEMS)
    dv = write_dataset(tmp_path, "ui", s, d, num_vertices=n, vtype=vtype, vertex_types=["user", "item"], directed=False)
    t = np.array(test)
    held = {  # as link-split publishes them: both directions of every held-out pair
        "src": np.concatenate([t[:, 0], t[:, 1]]),
        "dst": np.concatenate([t[:, 1], t[:, 0]]),
        "split": np.full(2 * len(t), 2, np.int8),
    }
    emb = np.random.default_rng(0).normal(scale=0.01, size=(n, USERS)).astype(np.float32)
    for u, i in test:  # each user's held-out item is its best match; users resemble their items too
        emb[u, u] = emb[i, u] = 1.0
    out = tmp_path / "run"
    (out / "embeddings").mkdir(parents=True)
    col = pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), USERS)
    names = np.array(["user", "item"])[vtype]
    pq.write_table(pa.table({VID: np.arange(n), VTYPE: names, "embedding": col}), out / "embeddings" / "part-0.parquet")
    got = ranking_scores(spark, dv, parse_uri(out), held, seed=0)
    # ranked from both sides, an item's held-out partner (a user) is never among the candidates of one type
    assert got["ranked_from"] == "user" and got["ranked_users"] == USERS
    assert got["recall@20"] == 1.0 and got["ndcg@20"] == 1.0
