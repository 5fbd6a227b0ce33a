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

import numpy as np

from glisp_spark.worker_heap import freeze_worker_heap

DENSE_FACTOR = 16
_TASK_DENSE_LIMIT = 1 << 28  # no bool map (task) or rank array (driver) is wider than this


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

    def part(self) -> tuple:
        """What the task sends: ("dense", lo, packed bits, n) or ("sparse", sorted uniques)."""
        if self.present is not None:
            return ("dense", self.lo, np.packbits(self.present), len(self.present))
        u = np.unique(np.concatenate(self.uniques)) if self.uniques else np.zeros(0, np.int64)
        return ("sparse", u)


def _part_ids(p: tuple) -> np.ndarray:
    if p[0] == "dense":
        return np.flatnonzero(np.unpackbits(p[2], count=p[3])).astype(np.int64) + p[1]
    return p[1]


def _part_bounds(p: tuple) -> tuple[int, int] | None:
    if p[0] == "dense":
        return p[1], p[1] + p[3] - 1
    return (int(p[1][0]), int(p[1][-1])) if len(p[1]) else None


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
        pos = np.searchsorted(self.keys, ids)
        pos_c = np.minimum(pos, self.n - 1)
        hit = self.keys[pos_c] == ids
        out[hit] = pos_c[hit]
        return out

    def ids(self, start: int, stop: int) -> np.ndarray:
        """The ids of ranks start..stop-1 (for the idmap)."""
        if self.keys is not None:
            return self.keys[start:stop]
        present = np.flatnonzero(self.rank >= 0)
        return present[start:stop].astype(np.int64) + self.lo


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
        if np.isscalar(codes):
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


def merge_parts(parts: list[tuple]) -> TypeRank:
    """One type's rank from the parts its tasks reported."""
    bounds = [b for b in (_part_bounds(p) for p in parts) if b is not None]
    if not bounds:
        return TypeRank(n=0, keys=np.zeros(0, np.int64))
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    width = hi - lo + 1
    if all(p[0] == "dense" for p in parts) and width <= _TASK_DENSE_LIMIT:
        present = np.zeros(width, dtype=bool)
        for p in parts:
            if p[3]:
                present[p[1] - lo : p[1] - lo + p[3]] |= np.unpackbits(p[2], count=p[3]).astype(bool)
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


def part_size(p: tuple) -> int:
    """Ids a part stands for at most (for the size limit, before merging)."""
    return int(p[3]) if p[0] == "dense" else len(p[1])


def build_rank_map(parts_by_type: dict[str, list[tuple]], type_names: list[str]) -> RankMap:
    """The rank map of ``type_names`` (vid order), from each type's task parts."""
    rm = RankMap()
    acc = 0
    for name in type_names:
        t = merge_parts(parts_by_type.get(name, []))
        rm.types.append(t)
        rm.offsets.append(acc)
        acc += t.n
    return rm


def write_vertex_tables(spark, rank: RankMap, idmap_dir: str, vertices_dir: str, files: int) -> None:
    """idmap (vid, orig_id, vtype) and vertices (vid, vtype, label, split) of a graph without vertex
    tables, straight from the rank map: one Spark job, ``files`` vid ranges, numpy in the tasks."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    n = rank.n
    files = max(1, min(files, n or 1))
    bounds = np.linspace(0, n, files + 1).round().astype(np.int64)

    def task(k: int) -> int:
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        vids, orig, vtype = [], [], []
        for code, (t, off) in enumerate(zip(rank.types, rank.offsets, strict=True)):
            a, b = max(lo, off), min(hi, off + t.n)
            if a < b:
                vids.append(np.arange(a, b, dtype=np.int64))
                orig.append(t.ids(a - off, b - off))
                vtype.append(np.full(b - a, code, dtype=np.int32))
        v = np.concatenate(vids) if vids else np.zeros(0, np.int64)
        o = np.concatenate(orig) if orig else np.zeros(0, np.int64)
        vt = np.concatenate(vtype) if vtype else np.zeros(0, np.int32)
        tables = {
            idmap_dir: pa.table({"vid": v, "orig_id": o, "vtype": vt}),
            vertices_dir: pa.table(
                {
                    "vid": v,
                    "vtype": vt,
                    "label": pa.nulls(len(v), pa.int64()),
                    "split": pa.array(np.full(len(v), -1, np.int8)),
                }
            ),
        }
        for d, tab in tables.items():
            path = os.path.join(d, f"part-{k:05d}.parquet")
            tmp = f"{path}.tmp-{os.getpid()}"
            pq.write_table(tab, tmp, compression="snappy")
            os.replace(tmp, path)
        return k

    from glisp_spark.tasks import run_tasks

    for d in (idmap_dir, vertices_dir):
        os.makedirs(d, exist_ok=True)
    run_tasks(spark, files, task)


def write_vertex_rows(df, rank: RankMap, dirs: dict[str, str], with_features: bool) -> list[dict]:
    """idmap, vertices and (``with_features``) features of the good vertex rows ``df`` (columns _vtc,
    _k, label, split, feat), vids from the broadcast rank map: one Spark job, each task writes its
    part of the three tables. Returns per task {vtype code: rows}, the largest label, rows with features."""
    import os
    import pickle

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    b_rank = df.sparkSession.sparkContext.broadcast(rank)
    for name, d in dirs.items():
        if with_features or name != "features":
            os.makedirs(d, exist_ok=True)

    def put(d: str, pid: int, j: int, tab) -> None:
        path = os.path.join(d, f"part-{pid:05d}-{j:05d}.parquet")
        tmp = f"{path}.tmp-{os.getpid()}"
        pq.write_table(tab, tmp, compression="snappy")
        os.replace(tmp, path)

    def task(batches):
        freeze_worker_heap()
        from pyspark import TaskContext

        pid = TaskContext.get().partitionId()
        per_type: dict[int, int] = {}
        maxlab, nfeat = None, 0
        for j, b in enumerate(batches):
            t = pa.Table.from_batches([b])
            vtc = t.column("_vtc").to_numpy().astype(np.int64)
            vid = b_rank.value.vids(vtc, t.column("_k").to_numpy())
            vt = pa.array(vtc.astype(np.int32))
            put(dirs["idmap"], pid, j, pa.table({"vid": vid, "orig_id": t.column("_k"), "vtype": vt}))
            lab = t.column("label").cast(pa.int64())
            spl = t.column("split").cast(pa.int8())
            put(dirs["vertices"], pid, j, pa.table({"vid": vid, "vtype": vt, "label": lab, "split": spl}))
            if with_features:
                has = pc.is_valid(t.column("feat"))
                feat = t.column("feat").filter(has).cast(pa.list_(pa.float32()))
                put(dirs["features"], pid, j, pa.table({"vid": pa.array(vid).filter(has), "feat": feat}))
                nfeat += int(pc.sum(has.cast(pa.int64())).as_py() or 0)
            for code, n in zip(*np.unique(vtc, return_counts=True), strict=True):
                per_type[int(code)] = per_type.get(int(code), 0) + int(n)
            m = pc.max(lab).as_py()
            maxlab = m if maxlab is None or (m is not None and m > maxlab) else maxlab
        yield pa.RecordBatch.from_pydict(
            {"payload": [pickle.dumps({"per_type": per_type, "maxlab": maxlab, "nfeat": nfeat})]}
        )

    try:
        return [pickle.loads(r["payload"]) for r in df.mapInArrow(task, "payload binary").collect()]
    finally:
        b_rank.unpersist()
