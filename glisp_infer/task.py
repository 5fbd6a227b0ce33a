"""The work of one Spark task: one partition, one layer.

Layer 0 copies the features of the partition's vertices into its rows. Layer ``l >= 1``:

1. samples one hop for every vertex the partition masters (Gather at every partition holding its
   edges, Apply), with the request seed of the hop slice ``l - 1`` aggregates;
2. fills the static cache: the previous layer's rows of those vertices and of every sampled
   neighbour, read from the layer-``l - 1`` array chunk by chunk into a local file, under local ids
   in the chosen order;
3. streams its vertices in that order, ``batch_size`` at a time, through slice ``l - 1``, reading
   rows through the dynamic chunk cache;
4. writes its output rows to its own chunks of the layer-``l`` array as they fill up.

Only a small dict of metrics goes back to the driver.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import numpy as np

from glisp_core.errors import GlispError
from glisp_infer.cache import ChunkCache, StaticCache, capacity_of, simulate_hits
from glisp_infer.plan import InferPlan, load_model, resolve_device, set_threads
from glisp_infer.sampling import FULL, edge_slots, hop_of, layer_request, max_degree, sample_masters
from glisp_infer.store import INDEX_POS, INDEX_ROW, INDEX_VID, layer_name, open_array, stored_bytes, write_owned


class OwnedWriter:
    """Streams a task's output rows into its own chunks of a layer array, whole chunks only."""

    def __init__(self, arr: Any, start: int, chunk_rows: int, fault: tuple[int, bool] | None = None) -> None:
        self.arr, self.next_row, self.chunk_rows = arr, start, chunk_rows
        self.buf: list[np.ndarray] = []
        self.buffered = 0
        self.chunks = 0
        self.seconds = 0.0
        self.fault = fault  # (chunks, raise instead of exiting): die after writing that many chunks

    def add(self, rows: np.ndarray) -> None:
        self.buf.append(rows)
        self.buffered += len(rows)
        if self.buffered >= self.chunk_rows:
            self._flush(self.buffered - self.buffered % self.chunk_rows)

    def close(self) -> None:
        self._flush(self.buffered)

    def _flush(self, n: int) -> None:
        if n == 0:
            return
        t = time.perf_counter()
        allrows = np.concatenate(self.buf) if len(self.buf) > 1 else self.buf[0]
        self.chunks += write_owned(self.arr, self.next_row, allrows[:n], self.chunk_rows)
        self.next_row += n
        rest = allrows[n:]
        self.buf, self.buffered = ([rest] if len(rest) else []), len(rest)
        self.seconds += time.perf_counter() - t
        if self.fault is not None and self.chunks >= self.fault[0]:
            if self.fault[1]:
                raise GlispError(f"injected failure after writing {self.chunks} chunks")
            os._exit(17)  # a crash: the Python worker dies mid-task, as a killed executor would


def parse_fault(plan: InferPlan, layer: int, part: int, attempt: int) -> tuple[int, bool] | None:
    """The test hook ``plan.fault = "layer:part:chunks[:raise]"``, armed on a task's first attempt only."""
    if not plan.fault or attempt > 0:
        return None
    f = plan.fault.split(":")
    if int(f[0]) != layer or int(f[1]) != part:
        return None
    return int(f[2]), len(f) > 3 and f[3] == "raise"


def task_vertices(plan: InferPlan, part: int) -> np.ndarray:
    """The vertices partition ``part`` infers, in row order (its slice of ``index/vid``)."""
    start, n = plan.layout.starts[part], plan.layout.counts[part]
    vids = np.asarray(open_array(plan.store, INDEX_VID)[start : start + n], np.int64)
    if (vids < 0).any():
        raise GlispError(f"{plan.store}/{INDEX_VID}: padding inside partition {part}'s rows (the index is incomplete)")
    return vids


def write_features(plan: InferPlan, part: int, attempt: int = 0) -> dict[str, Any]:
    """Layer 0: the features of the partition's vertices, read from the partition they are stored in."""
    from glisp_core.partition_format import open_partition

    t0 = time.perf_counter()
    reader = open_partition(plan.partition_dir(part), verify=False)
    vids = task_vertices(plan, part)
    if reader.features is None:
        raise GlispError(f"{reader.path}: no features stored; layerwise inference starts from vertex features")
    rows = reader.feature_rows(vids)
    if (rows < 0).any():
        raise GlispError(f"{reader.path}: vertices {vids[rows < 0][:3].tolist()} are not mastered here")
    arr = open_array(plan.store, layer_name(0), mode="r+")
    writer = OwnedWriter(arr, plan.layout.starts[part], plan.layout.chunk_rows, parse_fault(plan, 0, part, attempt))
    step = plan.layout.chunk_rows * 8
    for a in range(0, len(vids), step):
        writer.add(np.asarray(reader.features[rows[a : a + step]], np.float32))
    writer.close()
    return _write_metrics(plan, part, 0, arr, writer, attempt, t0)


def _write_metrics(plan: InferPlan, part: int, layer: int, arr: Any, w: OwnedWriter, attempt: int, t0: float) -> dict:
    raw = plan.layout.padded[part] * plan.dims[layer] * 4
    stored = stored_bytes(arr, plan.layout.chunks_of(part))
    return {"part": part, "layer": layer, "attempt": attempt, "rows": plan.layout.counts[part], "chunks_written": w.chunks,
            "bytes_written": stored, "raw_bytes": raw, "write_s": w.seconds,
            "total_s": time.perf_counter() - t0}  # fmt: skip


class _Engines:
    """Sampling engines of the partitions this task gathers from, opened on first use (memory-mapped)."""

    def __init__(self, plan: InferPlan, own: Any) -> None:
        from glisp_serving.engine import PartitionSampler

        self.plan, self._make = plan, PartitionSampler
        self.engines = {own.part_id: PartitionSampler(own)}

    def __call__(self, k: int) -> Any:
        from glisp_core.partition_format import open_partition

        if k not in self.engines:
            self.engines[k] = self._make(open_partition(self.plan.partition_dir(k), verify=False))
        return self.engines[k]


def fill_static(cache: StaticCache, arr: Any, rows: np.ndarray, chunk_rows: int) -> int:
    """Copy the layer rows ``rows[j]`` into local id ``j``, decoding each global chunk they touch once;
    returns the number of global chunks read."""
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    chunk = srt // chunk_rows
    cuts = np.flatnonzero(np.diff(chunk)) + 1
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(srt)].tolist(), strict=True):
        a = int(chunk[lo]) * chunk_rows
        block = np.asarray(arr[a : a + chunk_rows])
        cache.put(order[lo:hi], block[srt[lo:hi] - a])
    return len(cuts) + 1 if len(srt) else 0


def infer_layer(plan: InferPlan, layer: int, part: int, attempt: int = 0) -> dict[str, Any]:
    """Compute layer ``layer`` (>= 1) of the vertices partition ``part`` masters; returns its metrics."""
    import torch

    from glisp_core.partition_format import open_partition
    from glisp_serving.apply import relabel

    t0 = time.perf_counter()
    set_threads(plan.threads)
    device = resolve_device(plan.device)
    model = load_model(plan.checkpoint, str(device))
    i, k_layers = layer - 1, plan.layers
    reader = open_partition(plan.partition_dir(part), verify=False)
    vids = task_vertices(plan, part)
    n = len(vids)
    m: dict[str, Any] = {"part": part, "layer": layer, "attempt": attempt, "vertices": n}
    # 1. one hop for every vertex the task infers
    hop = hop_of(i, k_layers)
    f = plan.fanouts[hop]
    full = max_degree([reader], plan.direction, reader.to_local(vids)) if f == FULL else 0
    req = layer_request(f, plan.relations, full, plan.seed, hop, plan.direction)
    sample, interior = sample_masters(reader, vids, req, _Engines(plan, reader))
    nbrs = sample.nbrs
    m["sample_s"] = time.perf_counter() - t0
    # 2. the static cache: own rows and every sampled neighbour's, local ids in the chosen order
    t = time.perf_counter()
    ids = np.unique(np.concatenate([vids, nbrs]))
    ids = ids[np.argsort(open_array(plan.store, INDEX_POS).get_orthogonal_selection(ids), kind="stable")]
    rows = np.asarray(open_array(plan.store, INDEX_ROW).get_orthogonal_selection(ids), np.int64)
    d_in, d_out = plan.dims[i], plan.dims[layer]
    path = plan.scratch() / f"static-l{layer}-p{part}-a{attempt}-{uuid.uuid4().hex[:8]}.f32"
    cache = StaticCache(path, ids, d_in, plan.cache_chunk_rows)
    try:
        m["fill_chunks"] = fill_static(cache, open_array(plan.store, layer_name(i)), rows, plan.layout.chunk_rows)
        m["fill_s"] = time.perf_counter() - t
        # 3. stream the vertices through the slice; 4. write the output rows
        loc_v, loc_n = cache.local_ids(vids), cache.local_ids(nbrs)
        per_vertex = sample.counts.sum(axis=1)
        eoff = np.zeros(n + 1, np.int64)
        np.cumsum(per_vertex, out=eoff[1:])
        slots = torch.from_numpy(edge_slots(sample.counts)) if plan.relations else None
        dyn = ChunkCache(cache, capacity_of(cache.num_chunks, plan.cache_fraction, plan.cache_chunks),
                         plan.cache_policy)  # fmt: skip
        out = open_array(plan.store, layer_name(layer), mode="r+")
        writer = OwnedWriter(out, plan.layout.starts[part], plan.layout.chunk_rows,
                             parse_fault(plan, layer, part, attempt))  # fmt: skip
        scratch = np.full(len(ids), -1, np.int64)
        trace, read_s, compute_s = [], 0.0, 0.0
        for b in range(0, n, plan.batch_size):
            e = min(b + plan.batch_size, n)
            tr = time.perf_counter()
            src, nb_pos = relabel(loc_v[b:e], loc_n[eoff[b] : eoff[e]], scratch)
            x, touched = dyn.gather(src)
            trace.append(touched)
            tc = time.perf_counter()
            read_s += tc - tr
            dst_pos = np.repeat(np.arange(e - b, dtype=np.int64), per_vertex[b:e])
            ei = torch.from_numpy(np.stack([nb_pos, dst_pos])).to(device)
            et = slots[eoff[b] : eoff[e]].to(device) if slots is not None else None
            with torch.no_grad():
                h = model.layer(i, torch.from_numpy(x).to(device), ei, e - b, et)
            h = h.to("cpu", torch.float32).numpy()
            compute_s += time.perf_counter() - tc
            writer.add(h)
        writer.close()
        num_chunks = cache.num_chunks
    finally:
        cache.close()
    m.update(read_s=read_s, compute_s=compute_s, model_s=read_s + compute_s)
    m.update(_cache_metrics(plan, dyn, num_chunks, trace))
    foreign = len(ids) - n
    m.update(interior=int(interior.sum()), boundary=int(n - interior.sum()), sampled_edges=int(len(nbrs)),
             static_rows=int(len(ids)), static_foreign_rows=int(foreign), static_bytes=int(len(ids) * d_in * 4),
             static_lookups=int(n + len(nbrs)), static_hits=int(n + len(nbrs)),
             fanout=int(full if f == FULL else f))  # fmt: skip
    m.update(_write_metrics(plan, part, layer, out, writer, attempt, t0))
    assert d_out == plan.dims[layer]
    return m


def _cache_metrics(plan: InferPlan, dyn: ChunkCache, num_chunks: int, batches: list[np.ndarray]) -> dict[str, Any]:
    """Chunk reads and dynamic-cache hits, plus the hits of the same reads under both policies and sizes."""
    trace = np.concatenate(batches) if batches else np.empty(0, np.int64)
    bounds = np.zeros(len(batches) + 1, np.int64)
    np.cumsum([len(b) for b in batches], out=bounds[1:])
    shadow: dict[str, dict[str, int]] = {"fifo": {}, "lru": {}}
    for frac in plan.shadow_fractions:
        cap = capacity_of(num_chunks, frac)
        for pol in ("fifo", "lru"):
            hits = simulate_hits(trace, bounds, max(num_chunks, 1), cap, pol == "lru") if len(trace) else 0
            shadow[pol][f"{frac:g}"] = int(hits)
    return {"chunk_reads": dyn.reads, "dynamic_hits": dyn.hits, "dynamic_misses": dyn.misses,
            "cache_capacity": dyn.capacity, "static_chunks": num_chunks, "evictions": dyn.evictions,
            "shadow_hits": shadow}  # fmt: skip
