"""The vertex-side tables (idmap, vertices, features) of the rank-map path, written by numpy tasks.

Why not Spark writers: with the rank map every vid is known without a sort, so each task writes its own
Parquet files straight from the rank map (no vertex tables) or from its good vertex rows, in one job.
The table directories are local paths or URI strings: each task opens the store itself, and a file
appears whole (``storeio``), its name fixed by the task.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from glisp_spark.tasks import map_partitions, run_tasks
from spark_jobs.ingest.keys import RankMap
from spark_jobs.ingest.storeio import join, make_dirs, write_parquet

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class VertexRowsWritten:
    """What one task of ``write_vertex_rows`` wrote: rows per vertex type code, largest label, rows with features."""

    per_type: dict[int, int] = field(default_factory=dict)
    maxlab: int | None = None
    nfeat: int = 0


def _write_parquet(path: str, table: pa.Table) -> None:
    write_parquet(path, table, compression="snappy")


def _rank_range(rank: RankMap, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vids lo..hi-1, their original ids, their vertex type codes), straight from the rank map."""
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
    return v, o, vt


def write_vertex_tables(spark: SparkSession, rank: RankMap, idmap_dir: str, vertices_dir: str, files: int) -> None:
    """idmap (vid, orig_id, vtype) and vertices (vid, vtype, label, split) of a graph without vertex
    tables, straight from the rank map: one Spark job, ``files`` vid ranges, numpy in the tasks."""
    import pyarrow as pa

    n = rank.n
    files = max(1, min(files, n or 1))
    bounds = np.linspace(0, n, files + 1).round().astype(np.int64)

    def task(k: int) -> int:
        v, o, vt = _rank_range(rank, int(bounds[k]), int(bounds[k + 1]))
        labels, splits = pa.nulls(len(v), pa.int64()), pa.array(np.full(len(v), -1, np.int8))
        _write_parquet(join(idmap_dir, f"part-{k:05d}.parquet"), pa.table({"vid": v, "orig_id": o, "vtype": vt}))
        vertices = pa.table({"vid": v, "vtype": vt, "label": labels, "split": splits})
        _write_parquet(join(vertices_dir, f"part-{k:05d}.parquet"), vertices)
        return k

    make_dirs(idmap_dir, vertices_dir)
    run_tasks(spark, files, task)


def _write_rows_batch(
    b: pa.RecordBatch, rank: RankMap, dirs: dict[str, str], name: str, with_features: bool
) -> VertexRowsWritten:
    """One batch of good vertex rows -> its part of the idmap, vertices and features tables."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = pa.Table.from_batches([b])
    vtc = t.column("_vtc").to_numpy().astype(np.int64)
    vid = rank.vids(vtc, t.column("_k").to_numpy())
    vt = pa.array(vtc.astype(np.int32))
    _write_parquet(join(dirs["idmap"], name), pa.table({"vid": vid, "orig_id": t.column("_k"), "vtype": vt}))
    lab = t.column("label").cast(pa.int64())
    spl = t.column("split").cast(pa.int8())
    _write_parquet(join(dirs["vertices"], name), pa.table({"vid": vid, "vtype": vt, "label": lab, "split": spl}))
    out = VertexRowsWritten(maxlab=pc.max(lab).as_py())
    if with_features:
        has = pc.is_valid(t.column("feat"))
        feat = t.column("feat").filter(has).cast(pa.list_(pa.float32()))
        _write_parquet(join(dirs["features"], name), pa.table({"vid": pa.array(vid).filter(has), "feat": feat}))
        out.nfeat = int(pc.sum(has.cast(pa.int64())).as_py() or 0)
    for code, n in zip(*np.unique(vtc, return_counts=True), strict=True):
        out.per_type[int(code)] = out.per_type.get(int(code), 0) + int(n)
    return out


def write_vertex_rows(
    df: DataFrame, rank: RankMap, dirs: dict[str, str], with_features: bool
) -> list[VertexRowsWritten]:
    """idmap, vertices and (``with_features``) features of the good vertex rows ``df`` (columns _vtc,
    _k, label, split, feat), vids from the broadcast rank map: one Spark job, each task writes its
    part of the three tables. Returns what each task wrote."""
    b_rank = df.sparkSession.sparkContext.broadcast(rank)
    make_dirs(*[d for name, d in dirs.items() if with_features or name != "features"])

    def task(pid: int, batches: Iterator[pa.RecordBatch]) -> Iterator[VertexRowsWritten]:
        total = VertexRowsWritten()
        for j, b in enumerate(batches):
            part = _write_rows_batch(b, b_rank.value, dirs, f"part-{pid:05d}-{j:05d}.parquet", with_features)
            for code, n in part.per_type.items():
                total.per_type[code] = total.per_type.get(code, 0) + n
            m = part.maxlab
            total.maxlab = m if total.maxlab is None or (m is not None and m > total.maxlab) else total.maxlab
            total.nfeat += part.nfeat
        yield total

    try:
        return map_partitions(df, task)
    finally:
        b_rank.unpersist()
