"""The client's routing table: which partitions hold each vertex, which one masters it, which one owns it.

Built once from the serialized partitions (memory-mapped ``global_id`` / ``master_gids`` of each,
through ``glisp_core.partition_format``) or from the servers' ``Routing`` streams
(:mod:`glisp_sampling.cluster_facts`, for a client without the dataset directory): a per-vertex replica bitmask ``(n, ceil(P/8))`` uint8 indexed
by global id (1 byte per vertex up to 8 partitions), a master array, and, for edge-cut comparison,
an owner array (the one partition holding *all* of a vertex's edges in the sampling direction).
Splitting a frontier by partition is a numba pass over it, O(frontier x replicas).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from glisp_core.errors import GlispError


class RoutingError(GlispError):
    """A frontier holds ids the routing table does not know."""


@njit(nogil=True, cache=True)
def _split_bits(
    ids: NDArray[np.int64], bits: NDArray[np.uint8], num_parts: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """Per partition, the positions of ``ids`` whose replica bit is set; flat array + offsets."""
    counts = np.zeros(num_parts + 1, np.int64)
    bad = -1
    for i in range(len(ids)):
        v = ids[i]
        if v < 0 or v >= bits.shape[0]:
            bad = i
            continue
        for k in range(num_parts):
            if (bits[v, k >> 3] >> (k & 7)) & 1:
                counts[k + 1] += 1
    for k in range(num_parts):
        counts[k + 1] += counts[k]
    cursor = counts[:-1].copy()
    flat = np.empty(counts[num_parts], np.int64)
    for i in range(len(ids)):
        v = ids[i]
        if v < 0 or v >= bits.shape[0]:
            continue
        for k in range(num_parts):
            if (bits[v, k >> 3] >> (k & 7)) & 1:
                flat[cursor[k]] = i
                cursor[k] += 1
    return flat, counts, bad


@njit(nogil=True, cache=True)
def _split_owner(
    ids: NDArray[np.int64], owner: np.ndarray, num_parts: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    counts = np.zeros(num_parts + 1, np.int64)
    bad = -1
    for i in range(len(ids)):
        v = ids[i]
        if v < 0 or v >= owner.shape[0]:
            bad = i
            continue
        o = owner[v]
        if o >= 0:
            counts[o + 1] += 1
    for k in range(num_parts):
        counts[k + 1] += counts[k]
    cursor = counts[:-1].copy()
    flat = np.empty(counts[num_parts], np.int64)
    for i in range(len(ids)):
        v = ids[i]
        if v < 0 or v >= owner.shape[0]:
            continue
        o = owner[v]
        if o >= 0:
            flat[cursor[o]] = i
            cursor[o] += 1
    return flat, counts, bad


def split_by_bits(bits: np.ndarray, num_parts: int) -> list[np.ndarray]:
    """Per partition, the positions ``i`` whose replica bit is set in row ``bits[i]`` (rows already
    gathered for a frontier, as a partition stores them for its own vertices)."""
    bits = np.ascontiguousarray(bits, np.uint8)
    flat, off, _ = _split_bits(np.arange(len(bits), dtype=np.int64), bits, num_parts)
    return [flat[off[k] : off[k + 1]] for k in range(num_parts)]


@dataclass
class RoutingTable:
    num_parts: int
    bits: np.ndarray  # (n, ceil(P/8)) uint8: bit k of vertex v set iff partition k holds v
    master: np.ndarray  # (n,) int32 master partition, -1 = none
    owner: np.ndarray | None = None  # (n,) int32 partition holding all out-/in-edges, -1 = no edges
    owner_direction: str = ""

    @property
    def num_vertices(self) -> int:
        return int(self.bits.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes + self.master.nbytes + (self.owner.nbytes if self.owner is not None else 0))

    def _check(self, ids: np.ndarray, bad: int) -> None:
        if bad >= 0:
            raise RoutingError(f"vertex ids must be in [0, {self.num_vertices}) (got {int(ids[bad])})")

    def split(self, ids: np.ndarray, mode: str = "replicas") -> list[np.ndarray]:
        """Frontier positions to send to each partition: all replicas, or only the owner."""
        ids = np.asarray(ids, np.int64)
        if mode == "replicas":
            flat, off, bad = _split_bits(ids, self.bits, self.num_parts)
        elif mode == "owner":
            if self.owner is None:
                raise GlispError("routing 'owner': the table was built without owners (owner_direction)")
            flat, off, bad = _split_owner(ids, self.owner, self.num_parts)
        else:
            raise GlispError(f"routing: expected 'replicas' or 'owner' (got {mode!r})")
        self._check(ids, bad)
        return [flat[off[k] : off[k + 1]] for k in range(self.num_parts)]

    def split_master(self, ids: np.ndarray) -> list[np.ndarray]:
        """Positions of ``ids`` per master partition (features and labels live there)."""
        ids = np.asarray(ids, np.int64)
        flat, off, bad = _split_owner(ids, self.master, self.num_parts)
        self._check(ids, bad)
        missing = len(ids) - len(flat)
        if missing:
            m = self.master[ids] < 0
            raise RoutingError(f"{missing} vertices have no master partition (got e.g. {ids[m][:3].tolist()})")
        return [flat[off[k] : off[k + 1]] for k in range(self.num_parts)]
