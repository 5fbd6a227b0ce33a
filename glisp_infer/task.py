"""The work of one Spark task: one partition, one layer.

Layer 0 copies the features of the partition's vertices into its rows. Layer ``l >= 1``:

1. samples one hop for every vertex the partition masters (Gather at every partition holding its
   edges, Apply), with the request seed of the hop slice ``l - 1`` aggregates;
2. builds the static cache on local disk: the previous layer's rows of its own vertices (from the local
   file its task of layer ``l - 1`` wrote on this host, else its own chunks of the Zarr array) and of every
   sampled neighbour mastered elsewhere (read from Zarr, each global chunk decoded once), under local ids
   in the chosen order;
3. streams its vertices in that order, ``batch_size`` at a time, through slice ``l - 1``, reading rows
   through the dynamic chunk cache;
4. writes its output rows to its own chunks of the layer-``l`` array as they fill up (and to a local
   file for its next layer).

Only a small dict of metrics goes back to the driver.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from glisp_core.errors import GlispError
from glisp_core.storage.uri import StoreURI
from glisp_infer import halo as H
from glisp_infer import incremental as I
from glisp_infer import projected as P
from glisp_infer.cache import ChunkCache, StaticCache, batch_chunks, capacity_of, reread_plan, simulate_hits
from glisp_infer.index import write_run_index, write_run_labels
from glisp_infer.node_rows import node_embedding_rows
from glisp_infer.plan import InferPlan, load_model, resolve_device, set_threads
from glisp_infer.sampling import FULL, edge_slots, hop_of, layer_request, max_degree, sample_masters, task_engine
from glisp_infer.scratch import allocate
from glisp_infer.stable import stable_sample
from glisp_infer.store import (
    ChunkWriter,
    fill_static,
    layer_name,
    open_array,
    stored_bytes,
)


class LocalRows:
    """A task's output rows kept on the local disk for its next layer: in row order, or (``at``: the local ids of
    its vertices in the next layer's static cache, of ``total`` rows) in place in that cache's file, which the
    next task then adopts instead of copying them. Written under a temporary name and renamed when complete.
    Where the scratch has no room (a full tmpfs), the file is dropped and the next task reads its rows from Zarr."""

    def __init__(self, path: Path, dim: int, at: np.ndarray | None = None, total: int = 0) -> None:
        self.path, self.k = path, 0
        self.tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
        self.at = at
        self.offset = -1  # at is one contiguous run from here (PDS, PS): slice writes
        if at is not None and (len(at) == 0 or int(at[-1]) - int(at[0]) + 1 == len(at)):
            self.offset = int(at[0]) if len(at) else 0
        self.fh = self.mm = None
        shape = (max(total, 1), dim)
        if at is None:
            self.fh = open(self.tmp, "wb")  # noqa: SIM115 - closed in close()
        elif allocate(self.tmp, shape[0] * dim * 4):
            self.mm = np.memmap(self.tmp, np.float32, "r+", shape=shape)
        self.dead = self.fh is None and self.mm is None

    def add(self, rows: np.ndarray) -> None:
        if self.dead:
            return
        try:
            if self.fh is not None:
                self.fh.write(np.ascontiguousarray(rows, np.float32).tobytes())
            elif self.offset >= 0:
                assert self.mm is not None
                self.mm[self.offset + self.k : self.offset + self.k + len(rows)] = rows
            else:
                assert self.mm is not None and self.at is not None
                self.mm[self.at[self.k : self.k + len(rows)]] = rows
        except OSError:  # no room left on the scratch: the next task reads these rows from Zarr
            self.abort()
            self.dead = True
        self.k += len(rows)

    def _release(self) -> None:
        if self.fh is not None:
            self.fh.close()
        if self.mm is not None:  # no flush (msync): the next task on this host reads it through the page cache
            self.mm._mmap.close()  # type: ignore[attr-defined]
        self.fh = self.mm = None

    def close(self) -> None:
        if self.dead:
            return
        self._release()
        os.replace(self.tmp, self.path)  # complete, or absent: a reader never sees half of it

    def abort(self) -> None:
        self._release()
        self.tmp.unlink(missing_ok=True)


class OwnedWriter:
    """Streams a task's output rows into its own chunks of a layer array, whole chunks only, and (with
    ``local``) to the local disk for the task's next static cache, and (with ``halo``) to the other partitions.
    Rows are copied into a chunk-sized buffer; a full one is stored by a background thread while the task goes on
    computing (a disk's write-back throttles the writer, not the slice), and the task waits for a buffer only when
    both are in flight."""

    def __init__(
        self,
        arr: Any,
        start: int,
        chunk_rows: int,
        fault: tuple[int, bool] | None = None,
        local: LocalRows | None = None,
        halo: H.HaloWriter | None = None,
    ) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        if start % chunk_rows:
            raise GlispError(f"write at row {start}: not a multiple of the chunk rows {chunk_rows}")
        self.sink, self.next_chunk, self.halo = ChunkWriter(arr), start // chunk_rows, halo
        self.blocks = [np.zeros((chunk_rows, *arr.shape[1:]), np.float32) for _ in range(2)]
        self.pending: list[Future | None] = [None, None]
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="glisp-chunk-writer")
        self.cur = self.filled = 0
        self.chunks = 0
        self.seconds = 0.0  # the task's own time in writes: copies into the buffer, waits for a free one
        self.fault = fault  # (chunks, raise instead of exiting): die after writing that many chunks
        self.local = local

    def add(self, rows: np.ndarray) -> None:
        if self.local is not None:
            self.local.add(rows)
        if self.halo is not None:
            self.halo.add(rows)
        t, a, c = time.perf_counter(), 0, len(self.blocks[0])
        while a < len(rows):
            k = min(c - self.filled, len(rows) - a)
            self.blocks[self.cur][self.filled : self.filled + k] = rows[a : a + k]
            self.filled, a = self.filled + k, a + k
            if self.filled == c:
                self._store()
        self.seconds += time.perf_counter() - t

    def close(self) -> None:
        t = time.perf_counter()
        if self.filled:
            self.blocks[self.cur][self.filled :] = 0
            self._store()
        self._drain()
        self.pool.shutdown()
        self.seconds += time.perf_counter() - t
        if self.halo is not None:
            self.halo.close()
        if self.local is not None:
            self.local.close()
            self.local = None

    def abort(self) -> None:
        self.pool.shutdown(cancel_futures=True)
        if self.halo is not None:
            self.halo.abort()
        if self.local is not None:
            self.local.abort()
            self.local = None

    def _store(self) -> None:
        self.pending[self.cur] = self.pool.submit(self.sink.put, self.next_chunk, self.blocks[self.cur])
        self.next_chunk, self.chunks, self.filled = self.next_chunk + 1, self.chunks + 1, 0
        self.cur = 1 - self.cur
        if (f := self.pending[self.cur]) is not None:
            f.result()  # the other buffer's chunk is stored (or its error raised) before the buffer is reused
            self.pending[self.cur] = None
        if self.fault is not None and self.chunks >= self.fault[0]:
            self._drain()
            if self.fault[1]:
                raise GlispError(f"injected failure after writing {self.chunks} chunks")
            os._exit(17)  # a crash: the Python worker dies mid-task, as a killed executor would

    def _drain(self) -> None:
        for k, f in enumerate(self.pending):
            if f is not None:
                f.result()
                self.pending[k] = None


def parse_fault(plan: InferPlan, layer: int, part: int, attempt: int) -> tuple[int, bool] | None:
    """The test hook ``plan.fault = "layer:part:chunks[:raise]"``, armed on a task's first attempt only."""
    if not plan.fault or attempt > 0:
        return None
    f = plan.fault.split(":")
    if int(f[0]) != layer or int(f[1]) != part:
        return None
    return int(f[2]), len(f) > 3 and f[3] == "raise"


def task_vertices(plan: InferPlan, part: int) -> np.ndarray:
    """The vertices partition ``part`` infers, in row order (from the reorder stage's lookup arrays)."""
    return plan.order_index().vertices(part)


CHANGES = "changes"  # write_features_and_compare's key for compare_signatures' counts


def write_features_and_compare(plan: InferPlan, part: int, attempt: int = 0) -> dict[str, Any]:
    """Layer 0 of a refresh: the partition's features, then what changed in its vertices' features and
    neighbourhoods (:func:`glisp_infer.incremental.compare_signatures`: the signatures this task and the plan job
    just wrote against the previous run's) in the same task, so that the comparison costs no Spark job (a
    barrier, and on a cluster a round of task launches) of its own."""
    m = write_features(plan, part, attempt)
    t, c = time.perf_counter(), time.process_time()
    m[CHANGES] = I.compare_signatures(plan, part, attempt)
    m["compare_s"] = time.perf_counter() - t
    m["total_s"] += m["compare_s"]
    m["cpu_s"] += time.process_time() - c
    return m


def write_features(plan: InferPlan, part: int, attempt: int = 0) -> dict[str, Any]:
    """Layer 0: the features of the partition's vertices, read from the partition they are stored in (then their
    learnable node embedding rows, for a model trained with them)."""
    t0, c0 = time.perf_counter(), time.process_time()
    reader = plan.open_partition(part)
    vids = task_vertices(plan, part)
    fdim = 0 if reader.features is None else int(reader.features.shape[1])
    if fdim == 0 and not plan.node_embeddings:
        raise GlispError(f"{reader.path}: no features stored; layerwise inference starts from vertex features")
    index_chunks = write_run_index(plan, part, vids)
    rows = reader.feature_rows(vids)
    if (rows < 0).any():
        raise GlispError(f"{reader.path}: vertices {vids[rows < 0][:3].tolist()} are not mastered here")
    if plan.task == "node":
        labels = None if reader.labels is None else np.asarray(reader.labels)[rows]
        index_chunks += write_run_labels(plan, part, labels, len(vids))
    learnt = node_embedding_rows(plan.node_embeddings, vids, plan.dims[0] - fdim) if plan.node_embeddings else None
    arr = open_array(plan.store, layer_name(0), mode="r+")
    writer = new_writer(plan, arr, 0, part, attempt)
    kept = I.Rows() if plan.stable else None
    try:
        step = plan.layout.chunk_rows * 8
        for a in range(0, len(vids), step):
            block = np.asarray(reader.features[rows[a : a + step]], np.float32) if fdim else None
            if learnt is not None:  # the learnable rows after the features
                block = learnt[a : a + step] if block is None else np.concatenate([block, learnt[a : a + step]], 1)
            assert block is not None
            writer.add(block)
            if kept is not None:
                kept.add(block)
        writer.close()
    finally:
        writer.abort()
    m = {**_write_metrics(plan, part, 0, arr, writer, attempt, t0, c0), "index_chunks": index_chunks}
    if kept is not None:  # what the next version's refresh compares
        t = time.perf_counter()
        I.write_feature_signatures(plan, part, kept.result(plan.dims[0]))
        if plan.exchange() is None:  # else the plan job wrote them
            I.write_neighbour_signatures(plan, part, every_neighbour(plan, reader, vids, _Engines(plan, reader))[0])
        m["signature_s"] = time.perf_counter() - t
        m["total_s"], m["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    return m


def new_writer(plan: InferPlan, arr: Any, layer: int, part: int, attempt: int) -> OwnedWriter:
    """The writer of a task's rows of ``layer``: its Zarr chunks, the local file of its next layer and, with the
    halo exchange, the rows other partitions' next layer needs."""
    ex = plan.exchange()
    halo = H.HaloWriter(ex, layer, part, plan.num_parts, plan.dims[layer]) if ex and layer < plan.layers else None
    try:
        return OwnedWriter(
            arr,
            plan.layout.starts[part],
            plan.layout.chunk_rows,
            parse_fault(plan, layer, part, attempt),
            _keep_local(plan, layer, part),
            halo,
        )
    except BaseException:
        if halo is not None:
            halo.abort()
        raise


def _keep_local(plan: InferPlan, layer: int, part: int) -> LocalRows | None:
    """The local file of this task's output rows, when its next layer will use them: with the halo exchange, the
    next layer's static cache with these rows in place (the plan job knows its vertices), else the rows in order."""
    if not plan.local_own_rows or layer >= plan.layers:
        return None
    ex = plan.exchange()
    nxt = H.load_static_ids(ex, layer + 1, part) if ex is not None else None
    if nxt is None:
        return LocalRows(plan.own_rows_file(layer, part), plan.dims[layer])
    ids, own_local = nxt
    return LocalRows(plan.own_rows_file(layer, part), plan.dims[layer], own_local, len(ids))


def _write_metrics(
    plan: InferPlan, part: int, layer: int, arr: Any, w: OwnedWriter, attempt: int, t0: float, c0: float
) -> dict:
    raw = plan.layout.counts[part] * plan.dims[layer] * 4  # the rows' bytes (padding compresses to almost nothing)
    stored = stored_bytes(arr, plan.layout.chunks_of(part))
    halo = {"halo_write_s": w.halo.seconds, "halo_rows_written": w.halo.rows_written} if w.halo is not None else {}
    return {
        "part": part,
        "layer": layer,
        "attempt": attempt,
        "rows": plan.layout.counts[part],
        "chunks_written": w.chunks,
        "bytes_written": stored,
        "raw_bytes": raw,
        "write_s": w.seconds,
        "total_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        **halo,
    }


class _Engines:
    """Sampling engines of the partitions this task gathers from, opened on first use (memory-mapped), without
    a server's request bounds (:func:`glisp_infer.sampling.task_engine`)."""

    def __init__(self, plan: InferPlan, own: Any) -> None:
        self.plan = plan
        self.engines = {own.part_id: task_engine(own)}

    def __call__(self, k: int) -> Any:
        if k not in self.engines:
            self.engines[k] = task_engine(self.plan.open_partition(k))
        return self.engines[k]


def _own_file(plan: InferPlan, layer: int, part: int, rows: int, dim: int) -> Path | None:
    """This host's complete copy of the partition's rows of ``layer`` (``rows`` rows: in order, or in place in
    the static cache), if its previous task left one here."""
    if not plan.local_own_rows:
        return None
    f = plan.own_rows_file(layer, part)
    return f if f.exists() and f.stat().st_size == max(rows, 1) * dim * 4 else None


def build_static(
    plan: InferPlan, layer: int, part: int, vids: np.ndarray, nbrs: np.ndarray
) -> tuple[StaticCache, dict[str, Any]]:
    """The static cache of slice ``layer - 1``: the layer-``layer - 1`` rows of the task's vertices and of every
    sampled neighbour, local ids sorted by the order's global position. The own rows come from the local file
    the partition's previous task wrote on this host (else its own chunks of the Zarr array); the others from
    the halo files the other partitions' previous tasks pushed to this one (``glisp_infer.halo``), or without
    the exchange from Zarr, each global chunk decoded once. Returns the cache and its fill metrics."""
    i, d_in = layer - 1, plan.dims[layer - 1]
    ex = plan.exchange()
    planned = H.load_static_ids(ex, layer, part) if ex is not None else None
    if planned is not None:  # the plan job's: the same ids, in the same order
        ids = planned[0]
    else:
        ids = np.unique(np.concatenate([vids, nbrs]))
        ids = ids[np.argsort(plan.order_index().pos(ids), kind="stable")]
    arr = open_array(plan.store, layer_name(i))
    c, n = plan.layout.chunk_rows, len(vids)
    in_place = _own_file(plan, i, part, len(ids), d_in) if planned is not None else None
    own_file = None if in_place is not None else _own_file(plan, i, part, n, d_in)
    cache = StaticCache(plan.scratch(), ids, d_in, plan.cache_chunk_rows, adopt=in_place)
    m = {"fill_chunks": 0, "own_rows_local": (in_place or own_file) is not None, "halo_rows": 0}
    try:
        own_local = cache.local_ids(vids)
        src = np.memmap(own_file, dtype=np.float32, mode="r", shape=(n, d_in)) if own_file and n else None
        for a in range(0, n if in_place is None else 0, c):  # own rows: one run of whole chunks, in row order
            b = min(a + c, n)
            if src is None:
                start = plan.layout.starts[part]
                block = np.asarray(arr[start + a : start + b])
                m["fill_chunks"] += 1
            else:
                block = np.asarray(src[a:b])
            cache.put(own_local[a:b], block)
        foreign = np.flatnonzero(~np.isin(ids, vids))
        if ex is not None:
            m["halo_rows"] = _fill_from_halo(cache, ex, i, part, plan.num_parts, d_in, len(foreign))
        else:
            rows = plan.order_index().rows(ids[foreign], plan.layout.starts)
            m["fill_chunks"] += fill_static(lambda j, r: cache.put(foreign[j], r), arr, rows, c)
    except BaseException:
        cache.close()
        raise
    return cache, m


def _fill_from_halo(
    cache: StaticCache, root: StoreURI, rows_layer: int, part: int, num_parts: int, dim: int, expected: int
) -> int:
    """Put the rows other partitions pushed into the static cache; they must be exactly its foreign rows."""
    ids, blocks = H.read_halo(root, rows_layer, part, num_parts, dim)
    if len(ids) != expected or len(np.unique(ids)) != expected:
        raise GlispError(
            f"{root}: the halo of layer {rows_layer} for partition {part} holds {len(ids)} rows, "
            f"its static cache needs {expected} (the plan and the layer's samples differ)"
        )
    local = cache.local_ids(ids)  # raises if a pushed row is not one the task samples
    at = 0
    for blk in blocks:
        cache.put(local[at : at + len(blk)], np.asarray(blk))
        at += len(blk)
    return len(ids)


def every_neighbour(plan: InferPlan, reader: Any, vids: np.ndarray, engines: Any) -> tuple[Any, np.ndarray, int]:
    """Every neighbour of ``vids`` in the sampling direction (per relation slot): (sample, interior, max degree)."""
    full = max_degree([reader], plan.direction, reader.to_local(vids))
    req = layer_request(FULL, plan.relations, full, plan.seed, 0, plan.direction)
    sample, interior = sample_masters(reader, vids, req, engines)
    return sample, interior, full


def layer_sample(
    plan: InferPlan, reader: Any, vids: np.ndarray, layer: int, engines: Any, whole: Any = None
) -> tuple[Any, np.ndarray, int]:
    """One hop for every vertex the task infers at ``layer``: (sample, interior, the fanout used). With stable
    samples, drawn from ``whole`` (:func:`every_neighbour`, gathered when not given) by keys of original ids;
    without, ``whole`` where the layer takes every neighbour (the plan gathered them once for its layers)."""
    from glisp_sampling.khop import hop_seed

    hop = hop_of(layer - 1, plan.layers)
    f = plan.fanouts[hop]
    if plan.stable:
        nb, interior, deg = whole if whole is not None else every_neighbour(plan, reader, vids, engines)
        keys = I.vertex_keys(plan.store)
        return (
            stable_sample(nb, keys[vids], keys[nb.nbrs], hop_seed(plan.seed, hop), f),
            interior,
            deg if f == FULL else f,
        )
    if f == FULL and whole is not None:  # the draw of every neighbour: the same edges whatever the hop's seed
        return whole
    full = max_degree([reader], plan.direction, reader.to_local(vids)) if f == FULL else 0
    req = layer_request(f, plan.relations, full, plan.seed, hop, plan.direction)
    sample, interior = sample_masters(reader, vids, req, engines)
    return sample, interior, int(full if f == FULL else f)


WORK_PROFILE = "work_profile"  # a plan task's result: its vertices and work per in-degree bin (glisp_infer.profile)


def gathers_every_neighbour(plan: InferPlan) -> bool:
    """Whether the plan job gathers every neighbour of its vertices once: stable samples are drawn from them,
    and a plain run of an untyped graph takes them for each layer of full fanout where there are several (the
    kernels return every edge in storage order whatever the hop's seed; per relation they draw them in an order
    of the seed's, so a typed graph's layers keep their own draws)."""
    return plan.stable or (not plan.relations and sum(f == FULL for f in plan.fanouts) > 1)


def profile_capped(plan: InferPlan) -> bool:
    """Whether the work profile's in-degrees are capped: layer 1 samples a finite fanout and the plan job does
    not gather every neighbour, so it sees at most that many in-edges of a vertex."""
    return plan.fanouts[hop_of(0, plan.layers)] != FULL and not gathers_every_neighbour(plan)


def _work_histogram(plan: InferPlan, sample: Any, whole: Any) -> np.ndarray:
    """Vertices and layer-1 work per in-degree bin; the in-degree from every neighbour where the run gathered them
    (stable samples), else from the sample itself."""
    from glisp_infer.profile import histogram

    work = sample.counts.sum(axis=1).astype(np.int64)
    degree = whole[0].counts.sum(axis=1) if whole is not None else work
    return histogram(degree, work + 1)


def plan_exchange(plan: InferPlan, part: int, attempt: int = 0) -> dict[str, Any]:
    """The plan task of a partition (before layer 0): sample every layer's hop for its vertices, keep the
    samples for its layer tasks and write what it needs from every other partition (``glisp_infer.halo``)."""
    t0, c0 = time.perf_counter(), time.process_time()
    ex = plan.exchange()
    if ex is None:
        raise GlispError("plan_exchange: the run has no exchange directory")
    reader = plan.open_partition(part)
    vids = task_vertices(plan, part)
    engines = _Engines(plan, reader)
    oi, starts = plan.order_index(), plan.layout.starts
    own = np.zeros(plan.layout.num_vertices, bool)
    own[vids] = True
    sample_s, needs_s, foreign = [], [], []
    whole, profile = None, None
    gathered = 0.0  # seconds of the one gather, charged to layer 1's sampling (the first layer that uses it)
    if gathers_every_neighbour(plan):  # stable draws of every layer, or a plain run's layers of full fanout
        t = time.perf_counter()
        whole = every_neighbour(plan, reader, vids, engines)
        gathered = time.perf_counter() - t
        if plan.stable:  # and the neighbourhood signatures
            I.write_neighbour_signatures(plan, part, whole[0])
    for layer in range(1, plan.layers + 1):
        t = time.perf_counter()
        sample, interior, fanout = layer_sample(plan, reader, vids, layer, engines, whole)
        t1 = time.perf_counter()
        if layer == 1:  # layer 1's work by in-degree: what a later refresh predicts its share from
            profile = _work_histogram(plan, sample, whole)
        mark = own.copy()  # distinct ids by marking: np.unique would sort every sampled edge
        mark[sample.nbrs] = True
        ids = np.flatnonzero(mark)  # the static cache's, then in the order's global position
        ids = ids[np.argsort(oi.pos(ids), kind="stable")]
        H.save_sample(ex, layer, part, sample, interior, fanout, ids, vids)
        mark[vids] = False
        foreign.append(H.write_needs(ex, layer - 1, part, np.flatnonzero(mark), lambda v: oi.rows(v, starts), starts))
        sample_s.append(t1 - t + (gathered if layer == 1 else 0.0))
        needs_s.append(time.perf_counter() - t1)
    return {
        "part": part,
        "attempt": attempt,
        "sample_s": sample_s,
        "needs_s": needs_s,
        "foreign_rows": foreign,
        WORK_PROFILE: profile,
        "total_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
    }


def infer_layer(plan: InferPlan, layer: int, part: int, attempt: int = 0, incremental: str = "") -> dict[str, Any]:
    """Compute layer ``layer`` (>= 1) of the vertices partition ``part`` masters; returns its metrics. With
    ``incremental = "copy"``, only those whose input changed, the others' rows copied from the previous version
    (:mod:`glisp_infer.incremental`); ``"measure"``: every one, the affected set only measured."""
    t0, c0 = time.perf_counter(), time.process_time()  # CPU: the task's process, zarr's codec threads included
    set_threads(plan.threads)
    i = layer - 1
    reader = plan.open_partition(part)
    vids = task_vertices(plan, part)
    n = len(vids)
    m: dict[str, Any] = {"part": part, "layer": layer, "attempt": attempt, "vertices": n}
    # 1. one hop for every vertex the task infers (the plan job's, with the halo exchange)
    ex = plan.exchange()
    got = H.load_sample(ex, layer, part) if ex is not None else None
    sample, interior, fanout = (
        got if got is not None else layer_sample(plan, reader, vids, layer, _Engines(plan, reader))
    )
    m["sample_s"] = time.perf_counter() - t0
    # 2. the static cache: own rows and every sampled neighbour's
    t = time.perf_counter()
    cache, fill = build_static(plan, layer, part, vids, sample.nbrs)
    m.update(fill)
    m["fill_s"] = time.perf_counter() - t
    todo = _incremental_todo(plan, layer, vids, sample, m, incremental == "measure") if incremental else None
    last = I.Rows() if plan.prev_store and layer == plan.layers else None  # the drift against the previous version
    # 3. stream the vertices through the slice, 4. writing the output rows
    out = open_array(plan.store, layer_name(layer), mode="r+")
    writer = None
    try:
        writer = new_writer(plan, out, layer, part, attempt)
        # rows read in place from the static cache's pages where its file stays in memory; always for an
        # incremental layer's scattered subset of the rows (a chunk copied into the dynamic cache would serve
        # one or two of them)
        dyn = ChunkCache(
            cache,
            capacity_of(cache.num_chunks, plan.cache_fraction, plan.cache_chunks),
            plan.cache_policy,
            resident=True if todo is not None else None,
        )
        m["read_in_place"] = bool(dyn.resident)
        if todo is None:
            m.update(stream(plan, layer, cache, dyn, vids, sample, writer if last is None else _Tee(writer, last)))
        else:
            rows, mi = I.compute_affected(
                plan, layer, vids, sample, todo, lambda v, s, w: stream(plan, layer, cache, dyn, v, s, w)
            )
            m.update(mi)
            for a in range(0, n, plan.layout.chunk_rows):
                writer.add(rows[a : a + plan.layout.chunk_rows])
            if last is not None:
                last.add(rows)
        writer.close()
    finally:
        if writer is not None:
            writer.abort()
        cache.close()
    if last is not None:
        m["drift"] = I.drift(plan, vids, last.result(plan.dims[layer]), np.ones(n, bool) if todo is None else todo)
    plan.own_rows_file(i, part).unlink(missing_ok=True)  # consumed; a retry reads the own rows from Zarr
    nf = len(cache.ids) - n
    m.update(
        interior=int(interior.sum()),
        boundary=int(n - interior.sum()),
        sampled_edges=int(len(sample.nbrs)),
        static_rows=n + nf,
        static_foreign_rows=nf,
        static_bytes=(n + nf) * plan.dims[i] * 4,
        static_lookups=int(n + len(sample.nbrs)),
        static_hits=int(n + len(sample.nbrs)),
        fanout=fanout,
    )
    m.update(_write_metrics(plan, part, layer, out, writer, attempt, t0, c0))
    return m


class RowSink(Protocol):
    """Where a stream's output rows go: a task's writer, or a collector of them."""

    def add(self, rows: np.ndarray) -> None: ...


class _Tee:
    """A writer that also keeps the rows."""

    def __init__(self, writer: OwnedWriter, keep: I.Rows) -> None:
        self.writer, self.keep = writer, keep

    def add(self, rows: np.ndarray) -> None:
        self.writer.add(rows)
        self.keep.add(rows)


def _incremental_todo(
    plan: InferPlan, layer: int, vids: np.ndarray, sample: Any, m: dict[str, Any], every: bool
) -> np.ndarray | None:
    """The task's vertices to compute at an incremental layer (None: all of them, when ``every`` or when the
    affected share of the layer's work passes ``plan.max_share``); records the layer's affected set in ``m``.
    A vertex's work is its sampled edges plus its own row: the slice's cost follows them, not the vertices."""
    aff = I.affected(plan, layer, vids, sample)
    work = sample.counts.sum(axis=1).astype(np.int64) + 1
    m.update(affected=int(aff.sum()), work=int(work.sum()), affected_work=int(work[aff].sum()))
    if layer < plan.layers:  # the next layer's tasks read it
        I.write_mask_part(plan.incremental_dir, I.mask_name(layer), m["part"], vids[aff])
    full = every or (len(vids) > 0 and m["affected_work"] > plan.max_share * m["work"])
    todo = None if full else aff | I.scattered(plan, layer, vids, ~aff)
    m["recomputed"] = len(vids) if todo is None else int(todo.sum())
    m["recomputed_scattered"] = 0 if todo is None else int((todo & ~aff).sum())
    m["full"] = bool(full)
    return todo


# what one slice call may gather: its input rows, one per sampled edge (a message), of at most this many bytes. A
# batch of the PDS order's hubs held 2.2M edges at R-MAT 22 (p = 8): 4.5 GB of float64 rows of width 256, and a
# worker's peak of 7-8 GB; the bound keeps a batch to a few hundred MB whatever the degrees.
BATCH_BYTES = 256 << 20


def batch_edges(dim: int, itemsize: int) -> int:
    """The most sampled edges a slice call takes for rows of ``dim`` values of ``itemsize`` bytes."""
    return max(1, BATCH_BYTES // max(1, dim * itemsize))


def slice_batches(eoff: np.ndarray, batch_size: int, max_edges: int) -> tuple[list[int], list[int]]:
    """Consecutive batches of the task's vertices (start, end lists), from the offsets of their sampled edges
    (``eoff[i]``: the edges before vertex ``i``): at most ``batch_size`` vertices and ``max_edges`` edges each; a
    vertex with more edges than that is a batch of its own. The bounds depend on the degrees only, so every run of
    a task batches alike."""
    n = len(eoff) - 1
    starts, ends = [], []
    b = 0
    while b < n:
        e = min(b + batch_size, int(np.searchsorted(eoff, eoff[b] + max_edges, side="right")) - 1)
        e = max(e, b + 1)
        starts.append(b)
        ends.append(e)
        b = e
    return starts, ends


def stream(
    plan: InferPlan, layer: int, cache: StaticCache, dyn: ChunkCache, vids: np.ndarray, sample: Any, writer: RowSink
) -> dict[str, Any]:
    """Slice ``layer - 1`` over ``vids`` in order, ``plan.batch_size`` at a time (fewer where their sampled edges
    pass :func:`batch_edges`), reading every row through the dynamic cache; returns the read and compute seconds,
    the batches and the cache metrics. A narrowing mean SAGE layer goes through :mod:`glisp_infer.projected`."""
    import torch

    from glisp_infer.cast import RowCast
    from glisp_sampling.apply import relabel

    device = resolve_device(plan.device)
    # a refresh's base: float64 arithmetic, rounded to float32 rows, so a row does not depend on which other rows
    # share its batch (a GEMM's rounding does): an incremental refresh computes other batches than a full run
    model = load_model(plan.checkpoint, str(device), plan.double)
    xtype = torch.float64 if plan.double else torch.float32
    cast = RowCast(xtype, device)
    n = len(vids)
    loc_v, loc_n = cache.local_ids(vids), cache.local_ids(sample.nbrs)
    per_vertex = sample.counts.sum(axis=1)
    eoff = np.zeros(n + 1, np.int64)
    np.cumsum(per_vertex, out=eoff[1:])
    slots = torch.from_numpy(edge_slots(sample.counts)) if plan.relations else None
    itemsize = 8 if plan.double else 4
    proj = (
        P.projection_for(model, layer - 1, len(cache.ids), n, len(loc_n), itemsize)
        if plan.project_first and slots is None
        else None
    )
    if proj is not None:
        pb = slice_batches(eoff, max(plan.batch_size, P.BATCH_VERTICES), batch_edges(proj.width, itemsize))
        return {
            **P.stream_projected(proj, cache, loc_v, loc_n, eoff, pb, writer, xtype, device),
            **P.projected_cache_metrics(cache.num_chunks, dyn.capacity, plan.cache_admit_window, plan.shadow_fractions),
        }
    scratch = np.full(len(cache.ids), -1, np.int64)
    tr = time.perf_counter()
    starts, ends = slice_batches(eoff, plan.batch_size, batch_edges(plan.dims[layer - 1], itemsize))
    # every batch's chunks before streaming (the samples are fixed), for the admission plan
    needs = [np.concatenate([loc_v[b:e], loc_n[eoff[b] : eoff[e]]]) for b, e in zip(starts, ends, strict=True)]
    trace, bounds = batch_chunks(needs, cache.chunk_rows)
    admit = reread_plan(trace, bounds, max(cache.num_chunks, 1), plan.cache_admit_window)
    read_s, compute_s = time.perf_counter() - tr, 0.0
    for k, (b, e) in enumerate(zip(starts, ends, strict=True)):
        tr = time.perf_counter()
        src, nb_pos = relabel(loc_v[b:e], loc_n[eoff[b] : eoff[e]], scratch)
        x, touched = dyn.gather(src, admit[bounds[k] : bounds[k + 1]])
        if not np.array_equal(touched, trace[bounds[k] : bounds[k + 1]]):
            raise GlispError(f"infer layer {layer}: batch {k} read other chunks than its admission plan listed")
        tc = time.perf_counter()
        read_s += tc - tr
        dst_pos = np.repeat(np.arange(e - b, dtype=np.int64), per_vertex[b:e])
        ei = torch.from_numpy(np.stack([nb_pos, dst_pos])).to(device)
        et = slots[eoff[b] : eoff[e]].to(device) if slots is not None else None
        with torch.no_grad():
            h = model.layer(layer - 1, cast(x), ei, e - b, et).to("cpu", torch.float32)
        compute_s += time.perf_counter() - tc
        writer.add(h.numpy())  # timed by the writer
    return {
        "read_s": read_s,
        "compute_s": compute_s,
        "model_s": read_s + compute_s,
        "batches": len(starts),
        "batch_edges_max": int(np.max(eoff[ends] - eoff[starts], initial=0)),
        **_cache_metrics(plan, dyn, cache.num_chunks, trace, bounds, admit),
    }


def _cache_metrics(
    plan: InferPlan, dyn: ChunkCache, num_chunks: int, trace: np.ndarray, bounds: np.ndarray, admit: np.ndarray
) -> dict[str, Any]:
    """Chunk reads and dynamic-cache hits, plus the hits of the same reads under both policies and sizes, with
    the run's admission plan and (``fifo_all``, ``lru_all``) admitting every miss."""
    every = np.ones(len(trace), np.bool_)
    shadow: dict[str, dict[str, int]] = {"fifo": {}, "lru": {}, "fifo_all": {}, "lru_all": {}}
    for frac in plan.shadow_fractions:
        cap = capacity_of(num_chunks, frac)
        for pol in shadow:
            adm = every if pol.endswith("_all") else admit
            hits = (
                simulate_hits(trace, bounds, max(num_chunks, 1), cap, pol.startswith("lru"), adm) if len(trace) else 0
            )
            shadow[pol][f"{frac:g}"] = int(hits)
    return {
        "chunk_reads": dyn.reads,
        "dynamic_hits": dyn.hits,
        "dynamic_misses": dyn.misses,
        "not_admitted": dyn.bypassed,
        "cache_capacity": dyn.capacity,
        "static_chunks": num_chunks,
        "evictions": dyn.evictions,
        "admit_window": plan.cache_admit_window,
        "shadow_hits": shadow,
    }
