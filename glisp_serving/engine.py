"""The server side of Gather: validate a request, turn it into kernel tasks, run them on a thread pool.

:class:`PartitionSampler` wraps one opened partition (a ``glisp_core.partition_format`` reader, or any
object with the same attributes) and is used both by the gRPC server and, with no RPC at all, by the
in-process sampler (:mod:`glisp_serving.local`). Bad requests raise :class:`RequestError`, which the
server maps to ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from glisp_core.errors import GlispError
from glisp_serving import kernels as K
from glisp_serving import profile

# Public method names -> kernel method. "uniform" is the paper's quota method when the global
# degree is known (untyped, no time bound) and the exact-count keyed form otherwise.
METHODS = ("uniform", "uniform_exact", "replace", "weighted")
DIRECTIONS = ("out", "in")
MERGE_CONCAT, MERGE_TOPK, MERGE_PER_DRAW = "concat", "topk", "per_draw"
_MERGE_OF = {K.QUOTA: MERGE_CONCAT, K.KEYED: MERGE_TOPK, K.REPLACE: MERGE_PER_DRAW, K.WEIGHTED: MERGE_TOPK}
_ID_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


class RequestError(GlispError):
    """A request the server cannot serve as asked (maps to gRPC INVALID_ARGUMENT)."""


@dataclass
class GatherResult:
    """One server's partial one-hop sample for a batch of seeds.

    ``counts`` is (n,) for one fanout or (n, T) for per-type fanouts (seed-major); neighbours of
    seed i (type j) follow those of earlier seeds (types). ``keys`` is set for top-f and per-draw
    merges; ``edge_ids`` holds global edge ids ``(part << 40) | edge_local_id`` when asked.
    """

    counts: np.ndarray
    nbrs: np.ndarray
    keys: np.ndarray | None
    edge_ids: np.ndarray | None
    merge: str
    fanouts: np.ndarray  # per slot (T,) fanout, for the client's Apply


def _example(values: np.ndarray, k: int = 3) -> str:
    return ", ".join(str(int(v)) for v in values[:k])


class PartitionSampler:
    """Gather and lookups on one partition. Thread-safe; kernels release the GIL."""

    def __init__(self, reader: Any, threads: int = 1, chunk: int = 4096, max_batch: int = 1_000_000) -> None:
        self.r = reader
        self.part = int(reader.part_id)
        self.num_parts = int(reader.num_parts)
        self.chunk = max(1, int(chunk))
        self.max_batch = int(max_batch)
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="glisp-kernel") if threads > 1 else None
        self.global_id = np.asarray(reader.global_id)
        self.out_indptr = np.asarray(reader.out_indptr)
        self.out_nbr = np.asarray(reader.out_nbr)
        self.in_indptr = np.asarray(reader.in_indptr)
        self.in_eid = np.asarray(reader.in_eid)
        self.out_degree = np.asarray(reader.out_degree)
        self.in_degree = np.asarray(reader.in_degree)
        self.weight = np.asarray(reader.weight) if reader.weighted and reader.weight is not None else None
        self.timestamp = np.asarray(reader.timestamp) if reader.timestamped and reader.timestamp is not None else None
        self.edge_type_names = list(reader.edge_type_names)
        self._no_w = np.empty(0, np.float32)
        self._no_ts = np.empty(0, np.int64)
        # gids fit int32 on the wire when the largest does
        self.id_dtype = np.int32 if len(self.global_id) == 0 or int(self.global_id[-1]) < 2**31 else np.int64
        self._lock = threading.Lock()
        self.requests = 0
        self.vertices_served = 0
        self.edges_served = 0
        self.busy_s = 0.0

    # ------------------------------------------------------------------ validation helpers
    def _check_batch(self, ids: np.ndarray, what: str) -> np.ndarray:
        """A 1-d int32/int64 id array within serve.max_batch, else RequestError naming ``what``."""
        ids = np.asarray(ids)
        if ids.dtype not in _ID_DTYPES or ids.ndim != 1:
            raise RequestError(f"{what}: expected a 1-d int32 or int64 array (got {ids.dtype} shape {ids.shape})")
        if len(ids) > self.max_batch:
            raise RequestError(f"{what}: at most serve.max_batch={self.max_batch} per request (got {len(ids)})")
        return ids

    def check_ids(self, ids: np.ndarray, what: str = "vertices") -> np.ndarray:
        """Local ids of global ``ids``; RequestError naming count and examples when any is absent."""
        ids = self._check_batch(ids, what)
        lids = np.asarray(self.r.to_local(ids.astype(np.int64, copy=False)))
        bad = lids < 0
        if bad.any():
            raise RequestError(
                f"{what}: {int(bad.sum())} of {len(ids)} vertices are not in partition {self.part} "
                f"(got e.g. {_example(ids[bad])})"
            )
        return lids

    def _type_ids(self, type_fanouts: Sequence[tuple[str, int]]) -> tuple[list[int], np.ndarray]:
        ids, fans = [], []
        for name, f in type_fanouts:
            if name not in self.edge_type_names:
                raise RequestError(f"edge type {name!r} does not exist; known: {self.edge_type_names} (got {name!r})")
            ids.append(self.edge_type_names.index(name))
            fans.append(int(f))
        return ids, np.asarray(fans, np.int64)

    # ------------------------------------------------------------------ Gather
    def gather(
        self,
        seeds: np.ndarray,
        fanout: int | None = None,
        type_fanouts: Sequence[tuple[str, int]] | None = None,
        method: str = "uniform",
        direction: str = "out",
        max_time: int | None = None,
        seed: int = 0,
        edge_ids: bool = False,
    ) -> GatherResult:
        """One-hop partial sample of every seed (GLISP Gather); see :mod:`glisp_serving.kernels`."""
        t0 = time.perf_counter()
        if method not in METHODS:
            raise RequestError(f"method: expected one of {METHODS} (got {method!r})")
        if direction not in DIRECTIONS:
            raise RequestError(f"direction: expected 'out' or 'in' (got {direction!r})")
        typed = bool(type_fanouts)
        if typed:
            type_ids, fans = self._type_ids(type_fanouts)  # type: ignore[arg-type]
        else:
            if fanout is None:
                raise RequestError("fanout: required when no per-type fanouts are given (got none)")
            type_ids, fans = [], np.asarray([int(fanout)], np.int64)
        if (fans < 0).any():
            raise RequestError(f"fanout: must be >= 0 (got {fans.tolist()})")
        if method == "weighted" and self.weight is None:
            raise RequestError(f"method 'weighted': partition {self.part} has no edge weights (got weighted)")
        if max_time is not None and self.timestamp is None:
            raise RequestError(f"max_time: partition {self.part} has no edge timestamps (got {max_time})")
        with profile.stage("server.id_lookup"):
            lids = self.check_ids(seeds, "seeds")
        tasks_stage = profile.stage("server.tasks")
        tasks_stage.__enter__()
        seeds = np.asarray(seeds, np.int64)
        is_in = direction == "in"
        if method == "weighted":
            kmethod = K.WEIGHTED
        elif method == "replace":
            kmethod = K.REPLACE
        elif method == "uniform_exact" or typed or max_time is not None:
            kmethod = K.KEYED
        else:
            kmethod = K.QUOTA

        n = len(lids)
        nslot = len(type_ids) if typed else 1
        if typed:
            rng = self.r.in_range if is_in else self.r.out_range
            st, en = [], []
            for tid in type_ids:
                s, e = rng(lids, tid)
                st.append(np.asarray(s, np.int64))
                en.append(np.asarray(e, np.int64))
            starts = np.stack(st, axis=1).reshape(-1) if n else np.empty(0, np.int64)
            ends = np.stack(en, axis=1).reshape(-1) if n else np.empty(0, np.int64)
            gdeg = np.zeros(n * nslot, np.int64)  # unused by the keyed method
        else:
            indptr = self.in_indptr if is_in else self.out_indptr
            starts = indptr[lids]
            ends = indptr[lids + 1]
            gdeg = (self.in_degree if is_in else self.out_degree)[lids]
        fanouts = np.tile(fans, n)
        task_seeds = np.empty(n * nslot, np.uint64)
        K.make_seeds(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), seeds, nslot, self.part, is_in, task_seeds)
        has_time = max_time is not None
        tmax = np.int64(max_time if has_time else 0)
        ts = self.timestamp if has_time else self._no_ts
        w = self.weight if kmethod == K.WEIGHTED else self._no_w
        common = (kmethod,)
        nt = len(starts)
        chunks = [(a, min(a + self.chunk, nt)) for a in range(0, nt, self.chunk)] or [(0, 0)]

        def args(a: int, b: int) -> tuple:
            return (starts[a:b], ends[a:b], gdeg[a:b], fanouts[a:b], task_seeds[a:b])

        counts = np.empty(nt, np.int64)
        tasks_stage.__exit__(None, None, None)

        def count(ab: tuple[int, int]) -> None:
            a, b = ab
            K.count_tasks(*common, *args(a, b), is_in, self.in_eid, has_time, tmax, ts, w, counts[a:b])

        with profile.stage("server.kernel_count"):
            self._run(count, chunks)
        offsets = np.zeros(nt + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        nbrs = np.empty(total, np.int64)
        eids = np.empty(total if edge_ids else 0, np.int64)
        keys = np.empty(total if kmethod != K.QUOTA else 0, np.float32)

        def fill(ab: tuple[int, int]) -> None:
            a, b = ab
            K.fill_tasks(
                *common, *args(a, b), is_in, self.in_eid, has_time, tmax, ts, w,
                self.out_nbr, self.out_indptr, self.global_id, self.part, edge_ids,
                offsets[a : b + 1], nbrs, eids, keys,
            )  # fmt: skip

        if total:
            with profile.stage("server.kernel_fill"):
                self._run(fill, chunks)
        shape = (n, nslot) if typed else (n,)
        res = GatherResult(
            counts=counts.astype(np.int32).reshape(shape),
            nbrs=nbrs,
            keys=keys if kmethod != K.QUOTA else None,
            edge_ids=eids if edge_ids else None,
            merge=_MERGE_OF[kmethod],
            fanouts=fans,
        )
        self._account(n, total, time.perf_counter() - t0)
        return res

    def _run(self, fn: Any, chunks: list[tuple[int, int]]) -> None:
        if self.pool is None or len(chunks) == 1:
            for c in chunks:
                fn(c)
        else:
            for fut in [self.pool.submit(fn, c) for c in chunks]:
                fut.result()

    def _account(self, vertices: int, edges: int, seconds: float) -> None:
        with self._lock:
            self.requests += 1
            self.vertices_served += vertices
            self.edges_served += edges
            self.busy_s += seconds

    # ------------------------------------------------------------------ lookups
    def features(self, gids: np.ndarray, want_features: bool = True, want_labels: bool = True) -> dict[str, Any]:
        """Features/labels/split of vertices mastered here; RequestError when one is not."""
        t0 = time.perf_counter()
        gids = self._check_batch(gids, "vertices")
        with profile.stage("server.lookup_rows"):
            rows = np.asarray(self.r.feature_rows(gids.astype(np.int64, copy=False)))
        bad = rows < 0
        if bad.any():
            raise RequestError(
                f"vertices: {int(bad.sum())} of {len(gids)} are not mastered by partition {self.part} "
                f"(got e.g. {_example(gids[bad])})"
            )
        out: dict[str, Any] = {}
        if want_features and self.r.features is not None:
            with profile.stage("server.lookup_gather"):
                out["features"] = np.asarray(self.r.features[rows], np.float32)
        if want_labels and self.r.labels is not None:
            out["labels"] = np.asarray(self.r.labels[rows], np.int64)
            if self.r.split is not None:
                out["split"] = np.asarray(self.r.split[rows], np.int8)
        self._account(len(gids), 0, time.perf_counter() - t0)
        return out

    def vertex_info(self, gids: np.ndarray) -> dict[str, np.ndarray]:
        """Global out/in degree, replica bitmask rows and master partition of vertices held here."""
        lids = self.check_ids(gids, "vertices")
        out = {
            "out_degree": np.asarray(self.out_degree[lids], np.int64),
            "in_degree": np.asarray(self.in_degree[lids], np.int64),
            "replicas": np.ascontiguousarray(np.asarray(self.r.partition_bits)[lids]),
        }
        if self.r.master is not None:
            out["master"] = np.asarray(self.r.master[lids], np.int32)
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
