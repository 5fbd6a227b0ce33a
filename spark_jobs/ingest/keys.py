"""Integer ids -> dense vids without a join: per-task key sets, merged on the driver into a rank map.

Why: the dictionary join (sort the distinct ids, then join every edge endpoint against them) moves
every edge row through two shuffles. When every id is an integer, the vid of an id is its rank among
the distinct ids of its vertex type (the order the sort gave), and that rank can be looked up with
numpy from a small per-vertex structure broadcast to the tasks:

- dense: a rank array over [min id, max id] (-1 where no vertex) when the range is at most
  ``DENSE_FACTOR`` times the number of ids (4 bytes per id of the range, O(1) lookups);
- sparse: the sorted distinct ids (8 bytes per vertex, binary-search lookups).

Each task reports its keys as a bitmap over its own id range or as sorted distinct ids, whichever is
smaller, so what reaches the driver is per-vertex, never per-edge. The map is built only for at most
``ingest.max_rank_map_vertices`` vertices; beyond that the job falls back to the join.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

DENSE_FACTOR = 16
_TASK_DENSE_LIMIT = 1 << 28  # no bool map (task) or rank array (driver) is wider than this


class DensePart(NamedTuple):
    """A task's keys as a bitmap: bit i (of ``n``, packed) set when id ``lo + i`` was seen."""

    lo: int
    bits: np.ndarray
    n: int


class SparsePart(NamedTuple):
    """A task's keys as their sorted distinct ids."""

    ids: np.ndarray


KeyPart = DensePart | SparsePart  # what a task sends the driver about one vertex type's keys


class KeySet:
    """Distinct int64 ids seen by one task: a bool map over a growing range, or a list of uniques."""

    def __init__(self) -> None:
        self.lo = 0
        self.present: np.ndarray | None = None  # bool over [lo, lo + len)
        self.uniques: list[np.ndarray] = []
        self.seen = 0

    def add(self, ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self.seen += len(ids)
        if not self.uniques:  # still a bool map
            lo, hi = int(ids.min()), int(ids.max())
            if self.present is not None:
                lo, hi = min(lo, self.lo), max(hi, self.lo + len(self.present) - 1)
            width = hi - lo + 1
            if width <= min(_TASK_DENSE_LIMIT, DENSE_FACTOR * self.seen + (1 << 20)):
                if self.present is None:
                    self.present, self.lo = np.zeros(width, dtype=bool), lo
                elif width > len(self.present):
                    grown = np.zeros(width, dtype=bool)
                    grown[self.lo - lo : self.lo - lo + len(self.present)] = self.present
                    self.present, self.lo = grown, lo
                self.present[ids - self.lo] = True
                return
            if self.present is not None:  # too sparse for a map now: switch to sorted uniques
                self.uniques.append(np.flatnonzero(self.present).astype(np.int64) + self.lo)
                self.present = None
        self.uniques.append(np.unique(ids))

    def part(self) -> KeyPart:
        """What the task sends: a bitmap over its id range or its sorted distinct ids."""
        if self.present is not None:
            return DensePart(self.lo, np.packbits(self.present), len(self.present))
        u = np.unique(np.concatenate(self.uniques)) if self.uniques else np.zeros(0, np.int64)
        return SparsePart(u)


def _part_ids(p: KeyPart) -> np.ndarray:
    if isinstance(p, DensePart):
        return np.flatnonzero(np.unpackbits(p.bits, count=p.n)).astype(np.int64) + p.lo
    return p.ids


def _part_bounds(p: KeyPart) -> tuple[int, int] | None:
    if isinstance(p, DensePart):
        return p.lo, p.lo + p.n - 1
    return (int(p.ids[0]), int(p.ids[-1])) if len(p.ids) else None


@dataclass
class TypeRank:
    """Rank lookup of one vertex type: id -> position among the type's distinct ids, -1 if absent."""

    n: int
    lo: int = 0
    rank: np.ndarray | None = None  # dense: int32/int64 over [lo, lo + len)
    keys: np.ndarray | None = None  # sparse: sorted distinct ids

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        out = np.full(len(ids), -1, dtype=np.int64)
        if self.n == 0 or len(ids) == 0:
            return out
        if self.rank is not None:
            off = ids - self.lo
            if off.min() >= 0 and off.max() < len(self.rank):  # one gather; -1 marks ids not present
                return self.rank[off].astype(np.int64)
            ok = (off >= 0) & (off < len(self.rank))
            out[ok] = self.rank[off[ok]]
            return out
        keys = self._sorted_keys()
        pos = np.searchsorted(keys, ids)
        pos_c = np.minimum(pos, self.n - 1)
        hit = keys[pos_c] == ids
        out[hit] = pos_c[hit]
        return out

    def ids(self, start: int, stop: int) -> np.ndarray:
        """The ids of ranks start..stop-1 (for the idmap)."""
        if self.rank is None:
            return self._sorted_keys()[start:stop]
        present = np.flatnonzero(self.rank >= 0)
        return present[start:stop].astype(np.int64) + self.lo

    def _sorted_keys(self) -> np.ndarray:
        if self.keys is None:
            raise ValueError("a TypeRank holds a rank array or its sorted keys; this one holds neither")
        return self.keys


@dataclass
class RankMap:
    """Per vertex type (by code): its rank lookup and its first vid (types are numbered in vid order)."""

    types: list[TypeRank] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        return sum(t.n for t in self.types)

    def vids(self, codes: np.ndarray | int, ids: np.ndarray) -> np.ndarray:
        """vid of each (type code, id); -1 where the id is not a vertex of that type."""
        if isinstance(codes, (int, np.integer)):
            r = self.types[int(codes)].lookup(ids)
            return np.where(r >= 0, r + self.offsets[int(codes)], -1)
        out = np.full(len(ids), -1, dtype=np.int64)
        for code in np.unique(codes):
            m = codes == code
            if code < 0:
                continue
            r = self.types[int(code)].lookup(ids[m])
            out[m] = np.where(r >= 0, r + self.offsets[int(code)], -1)
        return out

    def vids_any(self, ids: np.ndarray) -> np.ndarray:
        """vid of each id in whichever type holds it (ids are unique across types); -1 if none."""
        out = np.full(len(ids), -1, dtype=np.int64)
        for t, off in zip(self.types, self.offsets, strict=True):
            r = t.lookup(ids)
            hit = r >= 0
            out[hit] = r[hit] + off
        return out


def merge_parts(parts: list[KeyPart]) -> TypeRank:
    """One type's rank from the parts its tasks reported."""
    bounds = [b for b in (_part_bounds(p) for p in parts) if b is not None]
    if not bounds:
        return TypeRank(n=0, keys=np.zeros(0, np.int64))
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    width = hi - lo + 1
    dense = [p for p in parts if isinstance(p, DensePart)]
    if len(dense) == len(parts) and width <= _TASK_DENSE_LIMIT:
        present = np.zeros(width, dtype=bool)
        for p in dense:
            if p.n:
                present[p.lo - lo : p.lo - lo + p.n] |= np.unpackbits(p.bits, count=p.n).astype(bool)
        n = int(present.sum())
        if width <= DENSE_FACTOR * n:
            dt = np.int32 if n < (1 << 31) else np.int64
            rank = np.cumsum(present, dtype=dt) - 1
            rank[~present] = -1
            return TypeRank(n=n, lo=lo, rank=rank)
        keys = np.flatnonzero(present).astype(np.int64) + lo
        return TypeRank(n=n, keys=keys)
    keys = np.unique(np.concatenate([_part_ids(p) for p in parts]))
    if len(keys) and keys[-1] - keys[0] + 1 <= DENSE_FACTOR * len(keys):
        rank = np.full(int(keys[-1] - keys[0] + 1), -1, dtype=np.int32 if len(keys) < (1 << 31) else np.int64)
        rank[keys - keys[0]] = np.arange(len(keys), dtype=rank.dtype)
        return TypeRank(n=len(keys), lo=int(keys[0]), rank=rank)
    return TypeRank(n=len(keys), keys=keys)


def part_size(p: KeyPart) -> int:
    """Ids a part stands for at most (for the size limit, before merging)."""
    return int(p.n) if isinstance(p, DensePart) else len(p.ids)


def build_rank_map(parts_by_type: dict[str, list[KeyPart]], type_names: list[str]) -> RankMap:
    """The rank map of ``type_names`` (vid order), from each type's task parts."""
    rm = RankMap()
    acc = 0
    for name in type_names:
        t = merge_parts(parts_by_type.get(name, []))
        rm.types.append(t)
        rm.offsets.append(acc)
        acc += t.n
    return rm
