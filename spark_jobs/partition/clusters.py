"""A packed start for the neighbour expansion: dense clusters found by label propagation, packed whole into
the partitions by rows and vertices, their inner rows placed before the first round.

Why: on graphs of many dense circles around hubs (social ego networks) an expansion grows each partition as one
contiguous front, so a partition that must balance its vertices against its rows cuts circles apart; a packing
of whole circles can pair dense and sparse circles in one partition and keep both balances (ego-separable
stand-in, p = 8: whole clusters packed reach RF 1.24 at VB 1.08, where the expansion ends at RF 1.61).
The expansion then continues from the packed partitions' boundaries (the rows between clusters and the hubs'
rows), under its own capacity, finishing pass and relocation; ``adadne.cluster_start`` adds this as one more
start, kept only when ``start_score`` prefers it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from numba import njit
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from glisp_spark.worker_heap import freeze_worker_heap

ROUNDS = 20  # label propagation rounds at most, on both paths (both stop after two quiet rounds)


@njit(nogil=True, cache=True)
def _relabel(
    vs: np.ndarray, us: np.ndarray, old: np.ndarray, hub: np.ndarray, t: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Round t of label propagation over the adjacency (vs, us), sorted by vs: each non-hub v with (v + t) even
    takes the label most of its non-hub neighbours held after round t - 1 (ties: its own label if among the
    most, else the smallest), where that is strictly more frequent than its own. Returns the vertices that
    changed and their labels. Updating half the vertices a round keeps two-coloured regions from flipping."""
    out_v = np.empty(len(vs), np.int64)
    out_l = np.empty(len(vs), np.int64)
    buf = np.empty(len(vs), np.int64)
    m = 0
    a = 0
    while a < len(vs):
        v = vs[a]
        b = a
        while b < len(vs) and vs[b] == v:
            b += 1
        if not hub[v] and (v + t) % 2 == 0:
            k = 0
            for j in range(a, b):
                u = us[j]
                if not hub[u] and u != v:
                    buf[k] = old[u]
                    k += 1
            if k > 0:
                srt = np.sort(buf[:k])
                best, best_c, own_c = old[v], 0, 0
                i = 0
                while i < k:
                    j = i
                    while j < k and srt[j] == srt[i]:
                        j += 1
                    if srt[i] == old[v]:
                        own_c = j - i
                    if j - i > best_c:  # sorted: the first label of the highest count is the smallest
                        best, best_c = srt[i], j - i
                    i = j
                if own_c < best_c:
                    out_v[m], out_l[m] = v, best
                    m += 1
        a = b
    return out_v[:m], out_l[:m]


def propagate(relabel: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Label propagation from every vertex its own label, ``relabel(labels, t)`` giving round t's changes,
    until two rounds in a row (one of each parity) change nothing or ``ROUNDS`` ran: the same loop whether the
    rounds run in the driver or as Spark jobs, so both paths find the same clusters."""
    label = np.arange(n, dtype=np.int64)
    quiet = False
    for t in range(ROUNDS):
        v, lab = relabel(label, t)
        label[v] = lab
        if len(v) == 0 and quiet:
            break
        quiet = len(v) == 0
    return label


@njit(nogil=True, cache=True)
def _pack(ce: np.ndarray, cv: np.ndarray, order: np.ndarray, ecap: float, vcap: float, p: int) -> np.ndarray:
    """Each cluster in ``order`` to the partition where the larger of its row and vertex fill stays least,
    if it fits both caps; -1 for a cluster that fits nowhere (the expansion takes its rows)."""
    el = np.zeros(p)
    vl = np.zeros(p)
    part = np.full(len(ce), -1, np.int64)
    for c in order:
        best, score = -1, np.inf
        for k in range(p):
            e, v = el[k] + ce[c], vl[k] + cv[c]
            if e > ecap or v > vcap:
                continue
            s = max(e / ecap, v / vcap)
            if s < score:
                best, score = k, s
        if best >= 0:
            part[c] = best
            el[best] += ce[c]
            vl[best] += cv[c]
    return part


def hub_mask(deg: np.ndarray, factor: float) -> np.ndarray:
    """Vertices above ``factor`` x the mean degree of the vertices with edges: they join no cluster (a hub's
    circles are packed apart and the hub replicated to each, as a vertex-cut should)."""
    active = deg > 0
    return deg > factor * max(float(deg[active].mean()), 1.0) if active.any() else np.zeros(len(deg), bool)


def held_labels(src: np.ndarray, dst: np.ndarray, deg: np.ndarray, hub: np.ndarray) -> np.ndarray:
    """Cluster label per vertex of rows the driver holds (-1: hub or no edge); see :func:`_relabel`."""
    a, b = np.concatenate([src, dst]), np.concatenate([dst, src])
    o = np.argsort(a, kind="stable")
    vs, us = a[o].astype(np.int64), b[o].astype(np.int64)
    label = propagate(lambda old, t: _relabel(vs, us, old, hub, t), len(hub))
    return np.where((deg > 0) & ~hub, label, -1)


def cluster_weights(src: np.ndarray, dst: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, rows, vertices) per cluster: a cluster's rows are its inner rows plus half of each row it
    shares with another cluster or a hub (where that row lands is the rounds' choice)."""
    ids, rows = _row_weights(label[src], label[dst])
    return ids, rows, _vertices(ids, label)


def _row_weights(ls: np.ndarray, ld: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows per cluster of rows whose endpoints have labels ``ls``, ``ld`` (-1: none): sorted labels, sums."""
    inner = (ls == ld) & (ls >= 0)
    keys = np.concatenate([ls[inner], ls[~inner & (ls >= 0)], ld[~inner & (ld >= 0)]])
    w = np.concatenate([np.ones(int(inner.sum())), np.full(len(keys) - int(inner.sum()), 0.5)])
    ids, inv = np.unique(keys, return_inverse=True)
    return ids, np.bincount(inv, weights=w, minlength=len(ids))


def _vertices(ids: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Vertices per cluster of ``ids`` (every clustered vertex has a row, so its label is in ``ids``)."""
    vid, vcount = np.unique(label[label >= 0], return_counts=True)
    verts = np.zeros(len(ids))
    verts[np.searchsorted(ids, vid)] = vcount
    return verts


def homes(
    label: np.ndarray, weights: tuple[np.ndarray, np.ndarray, np.ndarray], rows: int, parts: int, fill: float
) -> np.ndarray:
    """A home partition per vertex (-1: none) from whole clusters packed to ``fill`` of each partition's fair
    share of rows and of the clustered vertices, heaviest first (by rows share plus vertex share)."""
    ids, ce, cv = weights
    clustered = max(float(cv.sum()), 1.0)
    order = np.lexsort((ids, -(ce / max(rows, 1) + cv / clustered)))
    part = _pack(ce, cv, order, fill * rows / parts, fill * clustered / parts, parts)
    home = np.full(len(label), -1, np.int64)
    c = label >= 0  # every clustered vertex has a row, so its label is one of ``ids``
    home[c] = part[np.searchsorted(ids, label[c])]
    return home


def packed_rows(src: np.ndarray, dst: np.ndarray, home: np.ndarray) -> np.ndarray:
    """The partition of each row both of whose endpoints have the same home, -1 for every other row."""
    hs, hd = home[src], home[dst]
    return np.where((hs == hd) & (hs >= 0), hs, -1).astype(np.int32)


def spark_labels(
    edges: DataFrame, deg: np.ndarray, hub: np.ndarray, tasks: int, log: Callable[[str], None]
) -> np.ndarray:
    """:func:`held_labels` over rows the driver does not hold: the adjacency in both directions is cached once,
    split by vertex across ``tasks`` partitions and sorted; each round is one job whose tasks run
    :func:`_relabel` on their vertices with the labels broadcast (8 B per vertex, as the rounds' own state)
    and return only the vertices that changed. No shuffle after the first job."""
    spark = edges.sparkSession
    e = edges.select("src", "dst")
    nb = e.select(F.col("src").alias("v"), F.col("dst").alias("u"))
    nb = nb.unionAll(e.select(F.col("dst").alias("v"), F.col("src").alias("u")))
    nb = nb.repartition(tasks, F.col("v") % tasks).sortWithinPartitions("v", "u").persist()
    hub_b = spark.sparkContext.broadcast(hub)
    rounds = 0

    def relabel(old: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        nonlocal rounds
        rounds += 1
        bc = spark.sparkContext.broadcast(old)

        def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            freeze_worker_heap()
            got = [b for b in batches if b.num_rows]
            if got:
                tb = pa.Table.from_batches(got)
                v, lab = _relabel(tb.column("v").to_numpy(), tb.column("u").to_numpy(), bc.value, hub_b.value, t)
                yield pa.RecordBatch.from_arrays([pa.array(v), pa.array(lab)], ["v", "label"])

        try:
            out = nb.mapInArrow(fn, "v long, label long").toArrow()
        finally:
            bc.unpersist()
        return out.column("v").to_numpy().astype(np.int64), out.column("label").to_numpy().astype(np.int64)

    try:
        label = propagate(relabel, len(hub))
    finally:
        nb.unpersist()
        hub_b.unpersist()
    log(f"clusters: label propagation, {rounds} rounds")
    return np.where((deg > 0) & ~hub, label, -1)


def spark_weights(edges: DataFrame, label: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`cluster_weights` of rows the driver does not hold: one job sums each batch's rows per cluster
    (the labels broadcast) and adds the sums up per cluster; O(clusters) comes back."""
    bc = edges.sparkSession.sparkContext.broadcast(label)

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        lab = bc.value
        for b in batches:
            ids, w = _row_weights(lab[b.column("src").to_numpy()], lab[b.column("dst").to_numpy()])
            yield pa.RecordBatch.from_arrays([pa.array(ids), pa.array(w)], ["k", "w"])

    try:
        sums = edges.select("src", "dst").mapInArrow(fn, "k long, w double").groupBy("k").agg(F.sum("w").alias("w"))
        got = sums.toArrow().sort_by("k")
    finally:
        bc.unpersist()
    ids = got.column("k").to_numpy().astype(np.int64)
    return ids, got.column("w").to_numpy().astype(np.float64), _vertices(ids, label)
