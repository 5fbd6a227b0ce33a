"""The task side of an incremental refresh (``infer.incremental``; the driver side is :mod:`glisp_infer.refresh`).

A vertex's layer-``l`` row is a function of its own layer-``l-1`` row and its sampled neighbours' (the samples
are a function of (seed, layer, vertex, neighbourhood): :mod:`glisp_infer.stable`). So with

- ``changed``: vertices whose neighbourhood (in-edges in the aggregation direction) differs from the previous
  version's, and new vertices (the row signatures of layer 0 tell);
- ``A_0``: vertices whose features differ, and new vertices;
- ``A_l = A_{l-1} ∪ changed ∪ {v : a sampled neighbour of v at layer l is in A_{l-1}}``,

a task recomputes at layer ``l`` only its vertices in ``A_l`` and copies every other row from the previous
version's layer ``l`` (matched by original id through the id maps). Everything per vertex is written by tasks
into the refresh's directory in the dataset's store, never held by the driver: the new-vid → previous-row map
(a Zarr array by vid, :mod:`glisp_infer.row_map`), then per partition its vertices of ``changed`` and ``A_0``
(:func:`compare_signatures`, in layer 0's tasks after their features) and of each ``A_l`` (the layer's task),
as lists of vids; a task builds the masks it needs from every partition's list and returns counts only. A task
whose affected share passes ``infer.incremental_max_share`` computes all its vertices (copying most rows would
cost more than it saves).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_infer import halo as H
from glisp_infer.plan import InferPlan
from glisp_infer.stable import feature_signature, neighbour_signature
from glisp_infer.store import INDEX_FSIG, INDEX_KEY, INDEX_NSIG, fill_static, layer_name, open_array, write_owned
from glisp_sampling.apply import HopSample

CHANGED = "changed"  # the mask of vertices whose neighbourhood changed (and new ones)
PREV_ROW = "prev_row"  # new vid -> row in the previous version's arrays, -1 for a new vertex
PREV_ROW_GROUP = "prev_row.zarr"  # the Zarr group (in the refresh's directory) holding PREV_ROW


def mask_name(layer: int) -> str:
    """The mask ``A_layer`` (``A_0``: changed features)."""
    return f"affected-l{layer}"


def prev_row_url(root: StoreURI | str) -> str:
    """The Zarr group of the new-vid -> previous-row map in the refresh's directory ``root``."""
    return str(parse_uri(root) / PREV_ROW_GROUP)


def create_prev_row(root: StoreURI | str, n: int, chunk: int = 0) -> Any:
    """The (empty) by-vid array of the previous rows: chunks of the run's by-vid index arrays (or ``chunk``
    vids, those of an array its job writes too), -1 until written."""
    from glisp_infer.store import INDEX_CHUNK, open_group

    g = open_group(prev_row_url(root), mode="w")
    return g.create_array(
        PREV_ROW,
        shape=(n,),
        chunks=(chunk or min(INDEX_CHUNK, max(n, 1)),),
        dtype="int64",
        fill_value=-1,
        config={"write_empty_chunks": True},
    )


@functools.lru_cache(maxsize=4)
def prev_rows_by_vid(root: str) -> np.ndarray:
    """The whole new-vid -> previous-row map (read once per Python worker and run)."""
    return np.asarray(open_array(prev_row_url(root), PREV_ROW)[:], np.int64)


def write_mask_part(root: StoreURI | str, name: str, part: int, vids: np.ndarray) -> None:
    """Partition ``part``'s members of the mask ``name`` (one object, written whole; a retry rewrites the same)."""
    H.save_atomic(parse_uri(root) / name / f"part-{part:05d}.npz", vids=np.asarray(vids, np.int64))


@functools.lru_cache(maxsize=8)
def load_mask(root: str, name: str, n: int, parts: int) -> np.ndarray:
    """The mask ``name`` over all ``n`` vertices, from every partition's list (read once per Python worker)."""
    from glisp_core.errors import GlispError

    d = parse_uri(root) / name
    out = np.zeros(n, bool)
    for part in range(parts):
        z = H._npz(d / f"part-{part:05d}.npz")
        if z is None:
            raise GlispError(f"{d}/part-{part:05d}.npz: missing; partition {part}'s task writes it before the next job")
        with z:
            out[z["vids"]] = True
    return out


@functools.lru_cache(maxsize=4)
def vertex_keys(store: str) -> np.ndarray:
    """Every vertex's key (``index/key``, by vid), read once per Python worker and run."""
    return np.asarray(open_array(store, INDEX_KEY)[:], np.uint64)


def write_feature_signatures(plan: InferPlan, part: int, features: np.ndarray) -> None:
    """The partition's rows of ``index/fsig``: a hash of each vertex's features (written by layer 0)."""
    arr = open_array(plan.store, INDEX_FSIG, mode="r+")
    write_owned(arr, plan.layout.starts[part], feature_signature(features), plan.layout.chunk_rows)


def write_neighbour_signatures(plan: InferPlan, part: int, whole: HopSample) -> None:
    """The partition's rows of ``index/nsig``: a hash of each vertex's neighbourhood (written where every
    neighbour is gathered anyway: the plan job, else layer 0)."""
    arr = open_array(plan.store, INDEX_NSIG, mode="r+")
    nsig = neighbour_signature(whole, vertex_keys(plan.store)[whole.nbrs])
    write_owned(arr, plan.layout.starts[part], nsig, plan.layout.chunk_rows)


def affected(plan: InferPlan, layer: int, vids: np.ndarray, sample: HopSample) -> np.ndarray:
    """Which of ``vids`` (with their samples of ``layer``) are in ``A_layer``."""
    root = plan.incremental_dir
    n = len(prev_rows_by_vid(root))  # by vid: every vertex of this version
    prev = load_mask(root, mask_name(layer - 1), n, plan.num_parts)
    aff = load_mask(root, CHANGED, n, plan.num_parts)[vids] | prev[vids]
    hit = prev[sample.nbrs]
    if hit.any():
        owner = np.repeat(np.arange(len(vids), dtype=np.int64), sample.counts.sum(axis=1))
        aff[owner[hit]] = True
    return aff


def subsample(sample: HopSample, sub: np.ndarray) -> HopSample:
    """The sample of the vertices at positions ``sub`` (ascending) only."""
    per = sample.counts.sum(axis=1)
    off = np.zeros(len(per) + 1, np.int64)
    np.cumsum(per, out=off[1:])
    lens = per[sub]
    before = np.zeros(len(sub) + 1, np.int64)
    np.cumsum(lens, out=before[1:])
    idx = np.repeat(off[sub] - before[:-1], lens) + np.arange(before[-1], dtype=np.int64)
    return HopSample(counts=sample.counts[sub], nbrs=sample.nbrs[idx])


class Rows:
    """Collects a stream's output rows (the writer interface of ``task.stream``)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, rows: np.ndarray) -> None:
        self.parts.append(np.asarray(rows, np.float32))

    def result(self, dim: int) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.empty((0, dim), np.float32)


COPY_MIN_SHARE = 1 / 16  # a previous chunk is decoded for at least this share of its rows; fewer are recomputed


def scattered(plan: InferPlan, layer: int, vids: np.ndarray, copy: np.ndarray) -> np.ndarray:
    """Which of ``vids`` marked ``copy`` to recompute instead of copying: those whose previous rows are few in
    their chunk (vertices that moved to another partition: about 100 of a task's 30,000 rows at R-MAT 18, spread
    over six chunks the task would decode whole). With stable samples a recomputed row equals the copied one."""
    out = np.zeros(len(vids), bool)
    idx = np.flatnonzero(copy)
    if len(idx) == 0 or not plan.prev_store:
        return out
    chunk_rows = int(open_array(plan.prev_store, layer_name(layer)).chunks[0])
    chunk = prev_rows_by_vid(plan.incremental_dir)[vids[idx]] // chunk_rows
    _, inv, per_chunk = np.unique(chunk, return_inverse=True, return_counts=True)
    held = _chunk_rows_held(plan.incremental_dir, chunk_rows)[chunk]  # a last, part-filled chunk holds fewer
    out[idx[per_chunk[inv] < COPY_MIN_SHARE * held]] = True
    return out


@functools.lru_cache(maxsize=4)
def _chunk_rows_held(root: str, chunk_rows: int) -> np.ndarray:
    """Per chunk of the previous version's layers, how many of its rows belong to a vertex of this version."""
    prev = prev_rows_by_vid(root)
    return np.bincount(prev[prev >= 0] // chunk_rows)


def prev_rows(plan: InferPlan, layer: int, vids: np.ndarray) -> tuple[np.ndarray, int]:
    """The previous version's layer-``layer`` rows of ``vids`` (every one matched), each chunk read whole once
    (a slice: zarr's orthogonal selection of many scattered rows costs several times more)."""
    rows = prev_rows_by_vid(plan.incremental_dir)[vids]
    arr = open_array(plan.prev_store, layer_name(layer))
    out = np.empty((len(rows), arr.shape[1]), np.float32)
    if len(rows) == 0:
        return out, 0

    def put(j: np.ndarray, vals: np.ndarray) -> None:
        out[j] = vals

    return out, fill_static(put, arr, rows, int(arr.chunks[0]))


def compute_affected(
    plan: InferPlan, layer: int, vids: np.ndarray, sample: HopSample, todo: np.ndarray, stream: Any
) -> tuple[np.ndarray, dict[str, Any]]:
    """Rows of every vertex of the task: ``stream(vids, sample, writer)`` for the affected ones, the previous
    version's for the others; returns them in row order and the metrics."""
    dim = plan.dims[layer]
    sub = np.flatnonzero(todo)
    got = Rows()
    m = stream(vids[sub], subsample(sample, sub), got)  # also with none: the layer's metrics have every key
    out = np.empty((len(vids), dim), np.float32)
    out[sub] = got.result(dim)
    t = time.perf_counter()
    rest = np.flatnonzero(~todo)
    vals, chunks = prev_rows(plan, layer, vids[rest])
    out[rest] = vals
    return out, {**m, "copy_s": time.perf_counter() - t, "copy_chunks": chunks, "copied": len(rest)}


DRIFT_EDGES = np.concatenate([[0.0], np.geomspace(1e-9, 2.0, 2049)])  # cosine distance bins: 0, then 1.05 % wide


def drift(plan: InferPlan, vids: np.ndarray, rows: np.ndarray, recomputed: np.ndarray) -> dict[str, Any]:
    """Against the previous version's last layer: a histogram of the cosine distance of every matched vertex
    this task recomputed (a copied row's is 0; the driver adds those) and for a node task how many predictions
    changed. Counts and a fixed histogram, not a distance per vertex: the driver merges them whatever |V|."""
    prow = prev_rows_by_vid(plan.incremental_dir)[vids]
    sel = np.flatnonzero(recomputed & (prow >= 0))
    old, _ = prev_rows(plan, plan.prev_last_layer if plan.prev_last_layer >= 0 else plan.layers, vids[sel])
    new = rows[sel]
    dist = cosine_distance(new, old)
    pred = int((new.argmax(axis=1) != old.argmax(axis=1)).sum()) if plan.task == "node" and len(sel) else 0
    return {
        "matched": int((prow >= 0).sum()),
        "measured": len(sel),
        "hist": np.histogram(dist, DRIFT_EDGES)[0].astype(np.int64),
        "moved": int((dist > 1e-6).sum()),
        "sum": float(dist.sum()),
        "max": float(dist.max(initial=0.0)),
        "pred_changed": pred,
    }


def compare_signatures(plan: InferPlan, part: int, attempt: int = 0) -> dict[str, Any]:
    """After layer 0, partition ``part``'s vertices of ``A_0`` (new vertices and changed features) and of
    ``changed`` (new vertices and changed neighbourhoods): this run's row signatures against the previous
    run's rows of the same vertices. Writes both lists; returns counts."""
    from glisp_core.errors import GlispError
    from glisp_infer.store import read_rows

    if not plan.prev_store:
        raise GlispError("compare_signatures: the run has no previous store to compare with")
    vids = plan.order_index().vertices(part)
    lo, hi = plan.layout.starts[part], plan.layout.starts[part] + len(vids)
    prow = prev_rows_by_vid(plan.incremental_dir)[vids]
    ok = prow >= 0
    new_f, new_n = (np.asarray(open_array(plan.store, a)[lo:hi], np.uint64) for a in (INDEX_FSIG, INDEX_NSIG))
    old_f, old_n = (
        np.asarray(read_rows(open_array(plan.prev_store, a), prow[ok])[0]) for a in (INDEX_FSIG, INDEX_NSIG)
    )
    a0, changed = ~ok, ~ok  # two arrays: new vertices are in both
    a0[ok] = new_f[ok] != old_f
    changed[ok] = new_n[ok] != old_n
    write_mask_part(plan.incremental_dir, mask_name(0), part, vids[a0])
    write_mask_part(plan.incremental_dir, CHANGED, part, vids[changed])
    out = {
        "part": part,
        "attempt": attempt,
        "matched": int(ok.sum()),
        "added": int((~ok).sum()),
        "changed_features": int((a0 & ok).sum()),
        "changed_neighbourhoods": int((changed & ok).sum()),
        "first_affected": int((a0 | changed).sum()),
    }
    work = first_layer_work(plan, part, len(vids))
    if work is not None:  # what layer 1's tasks will compute for A_0 | changed at least, of all they would
        out.update(work=int(work.sum()), first_work=int(work[a0 | changed].sum()))
    return out


def first_layer_work(plan: InferPlan, part: int, n: int) -> np.ndarray | None:
    """Each of the partition's vertices' work at layer 1 (its sampled edges and its own row, as the layer's task
    counts it), from the plan job's sample; None without one (no exchange)."""
    ex = plan.exchange()
    counts = H.load_sample_counts(ex, 1, part) if ex is not None else None
    if counts is None or len(counts) != n:
        return None
    return counts.sum(axis=1).astype(np.int64) + 1


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise 1 - cos(a, b); two zero rows are at distance 0, a zero and a non-zero row at 1."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dot = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        d = 1.0 - dot / (na * nb)
    d[(na == 0) & (nb == 0)] = 0.0
    d[(na == 0) ^ (nb == 0)] = 1.0
    return np.clip(d, 0.0, 2.0)
