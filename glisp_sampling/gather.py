"""The server side of Gather: validate a request, turn it into kernel tasks, run them on a thread pool.

:class:`PartitionSampler` wraps one opened partition (a ``glisp_core.partition_format`` reader, or any
object with the same attributes) and is used both by the gRPC server and, with no RPC at all, by the
in-process sampler (:mod:`glisp_sampling.inprocess`). Bad requests raise :class:`RequestError`, which the
server maps to ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from glisp_core.errors import GlispError
from glisp_sampling import kernels as K
from glisp_sampling import profile
from glisp_sampling.budget import OverBudget, WorkBudget

# Public method names -> kernel method. "uniform" is the paper's quota method when the global
# degree is known (untyped, no time bound) and the exact-count keyed form otherwise.
METHODS = ("uniform", "uniform_exact", "replace", "weighted")
DIRECTIONS = ("out", "in")
MERGE_CONCAT, MERGE_TOPK, MERGE_PER_DRAW = "concat", "topk", "per_draw"
_MERGE_OF = {K.QUOTA: MERGE_CONCAT, K.KEYED: MERGE_TOPK, K.REPLACE: MERGE_PER_DRAW, K.WEIGHTED: MERGE_TOPK}
_ID_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))

# The arguments of K.sample_tasks before the seed range (i0, i1) and the outputs
_TaskArgs: TypeAlias = tuple[
    int,  # method
    np.ndarray,  # lids
    NDArray[np.int64],  # gids
    int,  # nslot
    NDArray[np.int64],  # starts
    NDArray[np.int64],  # ends
    bool,  # ranged
    np.ndarray,  # indptr
    np.ndarray,  # gdeg_of
    NDArray[np.int64],  # fans
    np.uint64,  # req_seed
    int,  # part
    bool,  # is_in
    np.ndarray,  # in_eid
    bool,  # has_time
    np.int64,  # tmax
    np.ndarray,  # ts
    np.ndarray,  # weight
    np.ndarray,  # out_nbr
    np.ndarray,  # out_indptr
    np.ndarray,  # gid_of
    bool,  # want_eids
]


class RequestError(GlispError):
    """A request the server cannot serve as asked (maps to gRPC INVALID_ARGUMENT)."""


class VersionMismatch(RequestError):
    """The request names another dataset version than the one served (a hot reload happened); maps to
    FAILED_PRECONDITION with details ``VERSION_MISMATCH <served version>``."""


VERSION_MISMATCH = "version: this server now serves"


class RequestTooCostly(RequestError):
    """A well-formed request whose answer would exceed the server's per-request budget
    (``serve.max_request_edges``, ``serve.max_message_mb``); maps to RESOURCE_EXHAUSTED."""


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

    def __init__(
        self,
        reader: Any,
        threads: int = 1,
        chunk: int = 4096,
        max_batch: int = 1_000_000,
        dense_id_map_mb: float = 256.0,
        max_fanout: int = 100_000,
        max_request_edges: int = 16_000_000,
        max_response_bytes: int = 256 << 20,
        budget: WorkBudget | None = None,
    ) -> None:
        """``max_fanout`` bounds one fanout, ``max_request_edges`` the sampled-edge slots a request may
        allocate (seeds x sum of fanouts: every method's buffers are sized by it) and
        ``max_response_bytes`` a Lookup's rows: one request can never take more memory than these."""
        self.r = reader
        self.max_fanout = int(max_fanout)
        self.max_request_edges = int(max_request_edges)
        self.max_response_bytes = int(max_response_bytes)
        self.budget = budget or WorkBudget()  # shared by the requests in progress (serve.max_inflight_mb)
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
        self._type_index: dict[str, tuple[np.ndarray, ...]] = {}  # side -> (ptr, ids, end), on first typed request
        self._no_w = np.empty(0, np.float32)
        self._no_ts = np.empty(0, np.int64)
        self._no_i64 = np.empty(0, np.int64)
        self.ts_or_empty = self.timestamp if self.timestamp is not None else self._no_ts
        self.weight_or_empty = self.weight if self.weight is not None else self._no_w
        # gids fit int32 on the wire when the largest does; the kernel then writes int32 neighbours
        top = int(self.global_id[-1]) + 1 if len(self.global_id) else 0
        self.id_dtype = np.int32 if top <= 2**31 else np.int64
        self.gid_out = self.global_id.astype(self.id_dtype, copy=False)
        # global -> local id: a dense int32 map over [0, largest global id here] when it fits the budget
        self.g2l: np.ndarray | None = None
        if 0 < top * 4 <= dense_id_map_mb * 2**20 and len(self.global_id) < 2**31:
            self.g2l = np.full(top, -1, np.int32)
            self.g2l[self.global_id] = np.arange(len(self.global_id), dtype=np.int32)
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
        """Local ids of global ``ids``; RequestError naming count and examples when any is absent.

        With the dense map (``g2l``) this is one O(n) pass; without it, a sorted lookup (O(n log n)).
        """
        ids = self._check_batch(ids, what)
        if self.g2l is not None:
            lids = np.empty(len(ids), np.int32)
            ids64 = ids if ids.dtype == np.int64 and ids.flags.writeable else np.array(ids, np.int64)  # one kernel type
            if K.local_ids(ids64, self.g2l, lids) == 0:
                return lids
        else:
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
            t = self.edge_type_names.index(name)
            if t in ids:
                raise RequestError(f"type_fanouts: edge type {name!r} is listed twice (got {list(type_fanouts)[:4]})")
            ids.append(t)
            fans.append(int(f))
        return ids, np.asarray(fans, np.int64)

    def _seed_caps(
        self, lids: np.ndarray, fans: np.ndarray, kmethod: int, is_in: bool, starts: np.ndarray, ends: np.ndarray
    ) -> np.ndarray:
        """Per seed, the most edges the kernel can return: min(fanout, local range) per slot (with
        replacement: the fanout wherever the range is not empty). Buffers are sized by this, not by the
        fanouts, so "every neighbour" (a huge fanout) costs what the neighbourhoods hold."""
        n, nslot = len(lids), len(fans)
        if nslot and len(starts):
            d = (ends - starts).reshape(n, nslot)
        else:
            ptr = self.in_indptr if is_in else self.out_indptr
            lid = lids.astype(np.int64)
            d = (np.asarray(ptr[lid + 1], np.int64) - np.asarray(ptr[lid], np.int64))[:, None]
        per = np.where(d > 0, fans[None, :], 0) if kmethod == K.REPLACE else np.minimum(d, fans[None, :])
        caps: np.ndarray = per.sum(axis=1, dtype=np.int64)
        return caps

    def _check_cost(self, n: int, fans: np.ndarray, slots: int) -> None:
        """The request's buffers (``slots`` sampled edges at most) within serve.max_request_edges."""
        if slots > self.max_request_edges:
            raise RequestTooCostly(
                f"request: {n} seeds x fanouts {fans.tolist()} can return {slots:,} sampled edges, over "
                f"serve.max_request_edges={self.max_request_edges:,}; split the batch"
            )

    def _reserve(self, nbytes: int, what: str) -> None:
        """Hold the buffers a request is about to allocate (output, compaction and encoding copies) in the
        server's budget; RequestTooCostly when it cannot be had within the request's deadline."""
        try:
            self.budget.reserve(nbytes, what)
        except OverBudget as e:
            raise RequestTooCostly(str(e)) from None

    # ------------------------------------------------------------------ Gather
    def _kernel_method(
        self,
        fanout: int | None,
        type_fanouts: Sequence[tuple[str, int]] | None,
        method: str,
        direction: str,
        max_time: int | None,
    ) -> tuple[int, list[int], np.ndarray]:
        """Validate the request's parameters; (kernel method, edge type ids, fanout per slot)."""
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
        if (fans > self.max_fanout).any():
            raise RequestError(f"fanout: at most serve.max_fanout={self.max_fanout} (got {int(fans.max())})")
        if method == "weighted" and self.weight is None:
            raise RequestError(f"method 'weighted': partition {self.part} has no edge weights (got weighted)")
        if max_time is not None and self.timestamp is None:
            raise RequestError(f"max_time: partition {self.part} has no edge timestamps (got {max_time})")
        if method == "weighted":
            return K.WEIGHTED, type_ids, fans
        if method == "replace":
            return K.REPLACE, type_ids, fans
        if method == "uniform_exact" or typed or max_time is not None:
            return K.KEYED, type_ids, fans
        return K.QUOTA, type_ids, fans

    def _type_ranges(self, lids: np.ndarray, type_ids: list[int], is_in: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per (seed, type) task, seed-major: the range of the type's edges in the sampling direction."""
        side = "in" if is_in else "out"
        if side not in self._type_index:
            self._type_index[side] = tuple(np.asarray(a) for a in self.r.type_index(side))
        ptr, tids, tend = self._type_index[side]
        starts = np.empty(len(lids) * len(type_ids), np.int64)
        ends = np.empty_like(starts)
        K.typed_ranges(
            lids,
            np.asarray(type_ids, np.int64),
            self.in_indptr if is_in else self.out_indptr,
            ptr,
            tids,
            tend,
            starts,
            ends,
        )
        return starts, ends

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
        """One-hop partial sample of every seed (GLISP Gather); see :mod:`glisp_sampling.kernels`."""
        t0 = time.perf_counter()
        kmethod, type_ids, fans = self._kernel_method(fanout, type_fanouts, method, direction, max_time)
        with profile.stage("server.id_lookup"):
            # one argument type per partition for the kernel (numba compiles one specialisation per
            # dtype and writability): writable int64 global ids, int32 local ids
            seeds = np.array(self._check_batch(seeds, "seeds"), np.int64)
            lids = np.asarray(self.check_ids(seeds, "seeds"), np.int32)
        is_in = direction == "in"
        typed = bool(type_ids)
        n, nslot = len(lids), len(fans)
        with profile.stage("server.tasks"):
            starts, ends = self._type_ranges(lids, type_ids, is_in) if typed else (self._no_i64, self._no_i64)
            caps = self._seed_caps(lids, fans, kmethod, is_in, starts, ends)
            slots = int(caps.sum())
            self._check_cost(len(seeds), fans, slots)
            per_edge = self.gid_out.itemsize + (8 if edge_ids else 0) + (4 if kmethod != K.QUOTA else 0)
            self._reserve(3 * (per_edge * slots + 4 * n * nslot) + 16 * n, "request")
        has_time = max_time is not None
        args: _TaskArgs = (
            kmethod,
            lids,
            seeds,
            nslot,
            starts,
            ends,
            typed,
            self.in_indptr if is_in else self.out_indptr,
            self.in_degree if is_in else self.out_degree,
            fans,
            np.uint64(seed & 0xFFFFFFFFFFFFFFFF),
            self.part,
            is_in,
            self.in_eid,
            has_time,
            np.int64(max_time if max_time is not None else 0),
            self.ts_or_empty,
            self.weight_or_empty,
            self.out_nbr,
            self.out_indptr,
            self.gid_out,
            edge_ids,
        )
        with profile.stage("server.kernel"):
            counts, nbrs, eids, keys = self._sample(args, n, fans, caps, edge_ids, kmethod != K.QUOTA)
        res = GatherResult(
            counts=counts.reshape((n, nslot) if typed else (n,)),
            nbrs=nbrs,
            keys=keys if kmethod != K.QUOTA else None,
            edge_ids=eids if edge_ids else None,
            merge=_MERGE_OF[kmethod],
            fanouts=fans,
        )
        self._account(n, len(nbrs), time.perf_counter() - t0)
        return res

    def _sample(
        self, args: _TaskArgs, n: int, fans: np.ndarray, caps: np.ndarray, want_eids: bool, want_keys: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Run the kernel over every task, in chunks on the pool when there is one; compact outputs.

        Output buffers hold ``caps`` (the most each seed can return); chunk c writes from the start of
        its seeds' region, and the regions are concatenated afterwards.
        """
        nslot = len(fans)
        offset = np.zeros(n + 1, np.int64)
        np.cumsum(caps, out=offset[1:])
        cap = int(offset[-1])
        counts = np.empty(n * nslot, np.int32)
        nbrs = np.empty(cap, self.gid_out.dtype)
        eids = np.empty(cap if want_eids else 0, np.int64)
        keys = np.empty(cap if want_keys else 0, np.float32)
        outs = (counts, nbrs, eids, keys)
        seeds_per_chunk = max(1, self.chunk // nslot)
        bounds = list(range(0, n, seeds_per_chunk)) + [n]
        if self.pool is None or len(bounds) <= 2:
            end = K.sample_tasks(*args, 0, n, *outs, 0)
            return counts, nbrs[:end], eids[:end], keys[:end]

        def run(a: int, b: int) -> int:
            return K.sample_tasks(*args, a, b, *outs, int(offset[a]))

        futs = [(a, self.pool.submit(run, a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        spans = [(int(offset[a]), f.result()) for a, f in futs]

        def cat(x: np.ndarray) -> np.ndarray:
            return np.concatenate([x[s:e] for s, e in spans]) if len(x) else x

        return counts, cat(nbrs), cat(eids), cat(keys)

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
        row = self._check_lookup_bytes(len(gids), want_features, want_labels)
        self._reserve(2 * row * len(gids) + 16 * len(gids), "vertices")
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

    def _check_lookup_bytes(self, n: int, want_features: bool, want_labels: bool) -> int:
        """A Lookup answer (rows are copied, repeated ids included) within serve.max_message_mb; bytes per row."""
        row = 0
        if want_features and self.r.features is not None:
            row += int(np.prod(self.r.features.shape[1:], dtype=np.int64)) * 4
        if want_labels and self.r.labels is not None:
            row += 9
        if n * row > self.max_response_bytes:
            raise RequestTooCostly(
                f"vertices: {n:,} rows x {row} bytes = {n * row:,} bytes, over serve.max_message_mb="
                f"{self.max_response_bytes >> 20}; split the lookup"
            )
        return row

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
