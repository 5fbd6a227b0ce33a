"""recall@k and NDCG@k of a link model's held-out test edges, ranking every candidate of the target type.

For each test source (a seeded sample of at most :data:`RANK_USERS`), every vertex of its test edges'
destination type is scored by the dot product of the last layer (as ``glisp train`` scores links), the
source's training neighbours are left out, and the held-out destinations are looked for in the top k
(:mod:`glisp_core.ranking`). The embeddings are read from the stage's ``embeddings/`` table in batches: the
driver holds the sampled sources' rows, their top k and one batch, whatever |V|. The sources' training
neighbours come from the dataset's edge table (one Spark filter on the sampled sources), less the held-out pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.dataset.layout import DST, SRC, VID, VTYPE, DatasetVersion
from glisp_core.dataset.manifest import read_manifest
from glisp_core.ranking import TopK, held_out_users, items_of, recall_ndcg, smaller_side
from glisp_core.storage.uri import StoreURI
from glisp_spark.tables import read_parquet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RANK_USERS = 2000  # test sources ranked; a seeded sample beyond this
RANK_KS = (20,)
BATCH_ROWS = 65_536


def _batches(dv: DatasetVersion, table: StoreURI, columns: list[str]) -> Any:
    import pyarrow.dataset as pads

    store = dv.store
    return pads.dataset(store.at(table), filesystem=store.fs, format="parquet").to_batches(
        columns=columns, batch_size=BATCH_ROWS
    )


def _matrix(col: Any) -> np.ndarray:
    import pyarrow.compute as pc

    n = len(col)
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float32)
    return flat.reshape(n, -1) if n else flat.reshape(0, 0)


def _pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One exact key per unordered vertex pair (as ``glisp link-split`` holds pairs out): ids below 2^53."""
    return np.minimum(a, b).astype(np.float64) + 1j * np.maximum(a, b).astype(np.float64)


def _training_items(spark: SparkSession, dv: DatasetVersion, users: np.ndarray, held: dict) -> tuple[Any, Any]:
    """CSR (indptr, sorted ids) of each user's out-neighbours in the training graph (held-out pairs removed)."""
    from pyspark.sql import functions as F

    rows = (
        read_parquet(spark, dv.edges)
        .where(F.col(SRC).isin([int(u) for u in users]))
        .select(SRC, DST)
        .toArrow()  # bounded by the sampled users' degrees
    )
    s, d = rows.column(SRC).to_numpy().astype(np.int64), rows.column(DST).to_numpy().astype(np.int64)
    keep = ~np.isin(_pairs(s, d), _pairs(held["src"], held["dst"]))
    return items_of(users, s[keep], d[keep])


def ranking_scores(spark: SparkSession, dv: DatasetVersion, out: StoreURI, held: dict, seed: int) -> dict[str, Any]:
    """recall@k and NDCG@k of the test edges in ``held`` over the stage's ``embeddings/`` table under ``out``."""
    import pyarrow.compute as pc

    test = held["split"] == 2
    src, dst = held["src"][test].astype(np.int64), held["dst"][test].astype(np.int64)
    src, dst, side = _one_side(dv, out, src, dst)
    users, truth = held_out_users(src, dst, RANK_USERS, seed)
    if not len(users):
        return {}
    q = np.zeros((len(users), 0), np.float32)
    dst_types: dict[str, int] = {}
    for b in _batches(dv, out / "embeddings", [VID, VTYPE, "embedding"]):  # pass 1: the users' rows, dst types
        vid = b.column(VID).to_numpy()
        at = np.searchsorted(users, vid)
        mine = (at < len(users)) & (users[np.minimum(at, len(users) - 1)] == vid)
        if mine.any():
            m = _matrix(b.column("embedding").filter(mine))
            q = q if q.shape[1] else np.zeros((len(users), m.shape[1]), np.float32)
            q[at[mine]] = m
        for c in pc.value_counts(b.column(VTYPE).filter(np.isin(vid, dst))).to_pylist():
            dst_types[str(c["values"])] = dst_types.get(str(c["values"]), 0) + int(c["counts"])
    target = max(dst_types, key=lambda t: dst_types[t])
    topk = TopK(q, max(RANK_KS), _training_items(spark, dv, users, held))
    for b in _batches(dv, out / "embeddings", [VID, VTYPE, "embedding"]):  # pass 2: every candidate
        vid = b.column(VID).to_numpy().astype(np.int64)
        order_b = np.argsort(vid, kind="stable")
        cand = pc.equal(pc.cast(b.column(VTYPE), "string"), target).to_numpy(zero_copy_only=False)
        topk.add(vid[order_b], _matrix(b.column("embedding"))[order_b], cand[order_b])
    got = recall_ndcg(topk.result(), truth, RANK_KS)
    res = {**{k: round(v, 6) for k, v in got.items() if k != "ranked_users"}, "ranked_users": got["ranked_users"]}
    return res if side is None else {**res, "ranked_from": side}


def _one_side(dv: DatasetVersion, out: StoreURI, src: np.ndarray, dst: np.ndarray) -> tuple[Any, Any, str | None]:
    """The test pairs to rank: as given on a directed or untyped graph; on an undirected typed one, only those
    whose source has the smaller vertex type (:func:`glisp_core.ranking.smaller_side`), as ``glisp train``
    ranks them. One pass over the embeddings table gives the sources' types and every type's size."""
    import pyarrow.compute as pc

    schema = read_manifest(dv).schema
    if schema.get("directed") is not False or len(schema.get("vertex_types") or []) < 2 or not len(src):
        return src, dst, None
    ends = np.unique(src)
    kind = np.empty(len(ends), object)
    sizes: dict[str, int] = {}
    for b in _batches(dv, out / "embeddings", [VID, VTYPE]):
        vid = b.column(VID).to_numpy().astype(np.int64)
        vt = pc.cast(b.column(VTYPE), "string").to_numpy(zero_copy_only=False)
        for name, n in zip(*np.unique(vt, return_counts=True), strict=True):
            sizes[str(name)] = sizes.get(str(name), 0) + int(n)
        at = np.minimum(np.searchsorted(ends, vid), len(ends) - 1)
        hit = ends[at] == vid
        kind[at[hit]] = vt[hit]
    keep, side = smaller_side(kind[np.searchsorted(ends, src)].astype(str), sizes)
    return src[keep], dst[keep], str(side)
