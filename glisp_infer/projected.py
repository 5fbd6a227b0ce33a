"""A narrowing mean layer streamed from projected rows: every row the task reads is multiplied once.

A mean SAGE slice ``256 -> 8`` streamed batch by batch gathers 256 values per sampled edge through the dynamic
cache and multiplies every batch's source rows again in each batch that reads them (about 7 batches per row at
R-MAT 22). The mean commutes with the neighbour weight (:class:`glisp_core.models.Projection`), so here the
task reads its static cache once, in order, projecting every row to the layer's output width (and its own rows
by the root weight too), and each batch only averages ``width`` values an edge. A row of the output depends on
its own edges alone, whatever the batch, so the batches can be large.

The task decides by :func:`glisp_core.models.sage_transforms_first` over the whole task (its sampled edges
against the static cache's rows) and by :data:`PROJECTED_BYTES`; otherwise, or for a user's model, the layer
streams batch by batch (:func:`glisp_infer.task.stream`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from glisp_infer.cache import StaticCache

# the projected rows a task may hold in memory (its static cache's rows at the output width): 75 MB a task for
# R-MAT 22's 256 -> 8 layer at p = 8; past the bound the layer streams batch by batch
PROJECTED_BYTES = 1 << 30
PROJECT_ROWS = 16384  # rows multiplied per call while projecting (a 16 MB float64 copy of width 128)
BATCH_VERTICES = 65536  # a projected batch's vertices (its edges are bounded by the caller)


def projection_for(model: Any, i: int, static_rows: int, n: int, edges: int, itemsize: int) -> Any:
    """Slice ``i``'s :class:`~glisp_core.models.Projection` when projecting the task's ``static_rows`` rows once
    costs less than gathering full rows for its ``edges`` sampled edges, and the projected rows fit
    :data:`PROJECTED_BYTES`; else None."""
    from glisp_core.models import GNN, sage_transforms_first

    # the built-in models only: a user's module may well have an attribute of that name meaning something else
    proj = model.projection(i) if isinstance(model, GNN) else None
    if proj is None or static_rows * proj.width * itemsize > PROJECTED_BYTES:
        return None
    return proj if sage_transforms_first(proj.in_width, proj.width, static_rows, n, edges) else None


def project_static(proj: Any, cache: StaticCache, loc_v: np.ndarray, xtype: Any, device: Any) -> tuple[Any, Any]:
    """Every static row projected by the neighbour weight, and the task's own rows (local ids ``loc_v``, in
    task order) by the root weight: both read from the static cache's file in order."""
    import torch

    from glisp_infer.cast import RowCast

    assert cache.mm is not None
    mm = np.asarray(cache.mm)
    cast = RowCast(xtype, device)
    rows = len(cache.ids)
    h = torch.empty((rows, proj.width), dtype=xtype, device=device)
    root = torch.empty((len(loc_v), proj.width), dtype=xtype, device=device)
    with torch.no_grad():
        for a in range(0, rows, PROJECT_ROWS):
            x = cast(mm[a : a + PROJECT_ROWS])
            h[a : a + len(x)] = proj.project(x)
        for a in range(0, len(loc_v), PROJECT_ROWS):
            x = cast(mm[loc_v[a : a + PROJECT_ROWS]])
            root[a : a + len(x)] = proj.root(x)
    return h, root


def stream_projected(
    proj: Any,
    cache: StaticCache,
    loc_v: np.ndarray,
    loc_n: np.ndarray,
    eoff: np.ndarray,
    bounds: tuple[list[int], list[int]],
    writer: Any,
    xtype: Any,
    device: Any,
) -> dict[str, Any]:
    """The layer's rows of the task's vertices (sampled neighbours ``loc_n``, vertex ``i``'s from ``eoff[i]`` to
    ``eoff[i + 1]``, both as local ids), batch by batch between ``bounds``, into ``writer``; the read and compute
    seconds and the batches."""
    import torch

    t = time.perf_counter()
    h, root = project_static(proj, cache, loc_v, xtype, device)
    read_s = time.perf_counter() - t  # the projection reads every static row once: the layer's reads
    t = time.perf_counter()
    for b, e in zip(*bounds, strict=True):
        src = torch.from_numpy(loc_n[eoff[b] : eoff[e]]).to(device)
        dst = torch.from_numpy(np.repeat(np.arange(e - b, dtype=np.int64), np.diff(eoff[b : e + 1]))).to(device)
        with torch.no_grad():
            out = proj.finish(h, src, dst, e - b, root[b:e]).to("cpu", torch.float32)
        writer.add(out.numpy())
    compute_s = time.perf_counter() - t
    edges = eoff[bounds[1]] - eoff[bounds[0]]
    return {
        "read_s": read_s,
        "compute_s": compute_s,
        "model_s": read_s + compute_s,
        "batches": len(bounds[0]),
        "batch_edges_max": int(np.max(edges, initial=0)),
    }


def projected_cache_metrics(num_chunks: int, capacity: int, window: int, fractions: Any) -> dict[str, Any]:
    """The cache metrics of a projected layer: every static chunk read once, straight from the static cache
    (none admitted to the dynamic cache, so no hits under any replayed policy or size)."""
    shadow = {pol: {f"{frac:g}": 0 for frac in fractions} for pol in ("fifo", "lru", "fifo_all", "lru_all")}
    return {
        "chunk_reads": num_chunks,
        "dynamic_hits": 0,
        "dynamic_misses": num_chunks,
        "not_admitted": num_chunks,
        "cache_capacity": capacity,
        "static_chunks": num_chunks,
        "evictions": 0,
        "admit_window": window,
        "shadow_hits": shadow,
        "projected": 1,
    }
