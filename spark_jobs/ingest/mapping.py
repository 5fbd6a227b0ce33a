"""Edge endpoints -> vids, then split into source-vid buckets (``edgefiles.bucket_rows``): two ways.

- ``map_with_rank``: every id is an integer and the rank map (``keys``) is small enough to broadcast:
  one Spark job of numpy tasks over the staged files, no shuffle, nothing per-row in the JVM.
- ``map_with_join``: string ids (or too many vertices for the rank map): the staged rows become a
  DataFrame, joined twice with the (key, vid) dictionary; the bucket split then runs in
  ``mapInArrow`` tasks on the joined rows.

Both count the rows whose endpoint is not a vertex of the vertex tables per (file, column), and can
give those rows back as a DataFrame (``*_missing_frame``) for ``checks.handle_bad``: its examples in
fail mode, its rejects table in quarantine mode. Only then is that frame computed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from glisp_spark.tasks import map_partitions, run_tasks
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.ingest.columns import FID, RCOL, REASON, ROWPOS, SI
from spark_jobs.ingest.edgefiles import (
    BucketResult,
    EdgePlan,
    bucket_rows,
    column_values,
    etype_codes,
    per_source,
)
from spark_jobs.ingest.keys import RankMap
from spark_jobs.ingest.storeio import read_ipc_file

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MISSING = "edge_missing_endpoint"
_RAW = ("src", "dst", "etype", "weight", "timestamp")


def _missing_counts(
    fid: np.ndarray, si: np.ndarray, miss_s: np.ndarray, miss_d: np.ndarray, plan: EdgePlan
) -> dict[tuple[int, str], int]:
    """Rows with a missing endpoint per (file, configured column); a row missing both counts for src."""
    out: dict[tuple[int, str], int] = {}
    for mask, names in ((miss_s, plan.src_names), (miss_d, plan.dst_names)):
        if mask.any():
            pairs, cnt = np.unique(np.stack([fid[mask], si[mask]]), axis=1, return_counts=True)
            for (f, s), n in zip(pairs.T.tolist(), cnt.tolist(), strict=True):
                key = (int(f), names[int(s)])
                out[key] = out.get(key, 0) + int(n)
    return out


def _rank_vids(
    t: pa.Table, si: np.ndarray, rank: RankMap, plan: EdgePlan, typed: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(src vids, dst vids) of staged rows from the rank map; -1 where the endpoint is not a vertex."""
    s = t.column("_s").to_numpy()
    d = t.column("_d").to_numpy()
    if typed:
        return (
            rank.vids(per_source(si, dict(plan.src_vtype), 0), s),
            rank.vids(per_source(si, dict(plan.dst_vtype), 0), d),
        )
    return rank.vids_any(s), rank.vids_any(d)


def map_with_rank(
    spark: SparkSession, files: list[str], rank: RankMap, plan: EdgePlan, typed: bool
) -> list[BucketResult]:
    """One Spark job: each task maps one staged file with the broadcast rank map and buckets it."""
    b_rank = spark.sparkContext.broadcast(rank)

    def task(i: int) -> BucketResult:
        t0 = time.process_time()
        t = read_ipc_file(files[i])
        si = column_values(t, SI, np.int64, 0)
        vs, vd = _rank_vids(t, si, b_rank.value, plan, typed)
        miss_s = vs < 0
        miss_d = (vd < 0) & ~miss_s
        fid = column_values(t, FID, np.int64, -1)
        t1 = time.process_time()
        res = bucket_rows(vs, vd, t, si, ~(miss_s | miss_d), plan, f"f{i:05d}")
        res.missing = _missing_counts(fid, si, miss_s, miss_d, plan)
        res.times = {"map": t1 - t0, "bucket": time.process_time() - t1}
        return res

    try:
        return run_tasks(spark, len(files), task)
    finally:
        b_rank.unpersist()


def staged_frame(spark: SparkSession, files: list[str], key_t: str, cols: dict[str, str]) -> DataFrame:
    """The staged rows as a DataFrame: ``_s``/``_d`` as ``key_t`` keys plus ``cols`` ({name: spark type})."""
    schema = ", ".join([f"_s {key_t}", f"_d {key_t}"] + [f"{c} {t}" for c, t in cols.items()])
    kinds = {"long": pa.int64(), "string": pa.string(), "short": pa.int16(), "int": pa.int32()}
    kinds.update({"float": pa.float32(), "bigint": pa.int64()})
    want = {c: kinds[t] for c, t in cols.items()}

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        import pyarrow.compute as pc

        for b in batches:
            for i in b.column(0).to_pylist():
                t = read_ipc_file(files[i])
                out = {}
                for e in ("_s", "_d"):
                    if key_t == "string":
                        out[e] = (
                            t.column(e + "_key") if e + "_key" in t.column_names else pc.cast(t.column(e), pa.string())
                        )
                    else:
                        out[e] = t.column(e)
                for c, typ in want.items():
                    out[c] = t.column(c) if c in t.column_names else pa.nulls(t.num_rows, typ)
                yield from pa.table(out).to_batches(max_chunksize=1 << 20)

    n = max(1, len(files))
    return spark.range(0, len(files), 1, n).mapInArrow(read, schema)


def map_with_join(joined: DataFrame, plan: EdgePlan) -> list[BucketResult]:
    """Bucket the rows of ``joined`` (staged columns + SRC/DST vids, null where missing)."""
    cols = [c for c in ("src", "dst", SI, FID, "_et", "_w", "_ts", ROWPOS) if c in joined.columns]

    def task(pid: int, batches: Iterator[pa.RecordBatch]) -> Iterator[BucketResult]:
        for j, b in enumerate(batches):
            t = pa.Table.from_batches([b])
            si = column_values(t, SI, np.int64, 0)
            vs = column_values(t, "src", np.int64, -1)
            vd = column_values(t, "dst", np.int64, -1)
            miss_s = vs < 0
            miss_d = (vd < 0) & ~miss_s
            res = bucket_rows(vs, vd, t, si, ~(miss_s | miss_d), plan, f"j{pid:05d}-{j:05d}")
            res.missing = _missing_counts(column_values(t, FID, np.int64, -1), si, miss_s, miss_d, plan)
            yield res

    return map_partitions(joined.select(*cols), task)


def _raw_columns(t: pa.Table, plan: EdgePlan) -> dict[str, pa.Array]:
    """String values of the staged rows ``t`` (rows with a missing endpoint only: few), for reports."""
    import pyarrow.compute as pc

    names = dict((v, k) for k, v in plan.etype_codes)
    codes = etype_codes(t, column_values(t, SI, np.int64, 0), plan)
    none = pa.nulls(t.num_rows, pa.string())
    return {
        "src": pc.cast(t.column("_s"), pa.string()),
        "dst": pc.cast(t.column("_d"), pa.string()),
        "etype": pa.array([names.get(int(x)) for x in codes], pa.string()),
        "weight": pc.cast(t.column("_w"), pa.string()) if "_w" in t.column_names else none,
        "timestamp": pc.cast(t.column("_ts"), pa.string()) if "_ts" in t.column_names else none,
    }


MISSING_SCHEMA = f"{FID} int, {ROWPOS} bigint, {REASON} string, {RCOL} string, " + ", ".join(
    f"{c} string" for c in _RAW
)


def rank_missing_frame(spark: SparkSession, files: list[str], rank: RankMap, plan: EdgePlan, typed: bool) -> DataFrame:
    """The staged rows whose endpoint is not a vertex (rank path), with file, reason, column, raw values."""
    b_rank = spark.sparkContext.broadcast(rank)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        import pyarrow.compute as pc

        for b in batches:
            for i in b.column(0).to_pylist():
                t = read_ipc_file(files[i])
                si = column_values(t, SI, np.int64, 0)
                vs, vd = _rank_vids(t, si, b_rank.value, plan, typed)
                miss_s = vs < 0
                miss = miss_s | (vd < 0)
                if not miss.any():
                    continue
                t = t.filter(pa.array(miss))
                si, miss_s = si[miss], miss_s[miss]
                src_n, dst_n = np.array(plan.src_names, dtype=object), np.array(plan.dst_names, dtype=object)
                names = np.where(miss_s, src_n[si], dst_n[si])
                raw = _raw_columns(t, plan)
                fid = t.column(FID) if FID in t.column_names else pa.nulls(t.num_rows, pa.int32())
                pos = t.column(ROWPOS) if ROWPOS in t.column_names else pa.nulls(t.num_rows, pa.int64())
                out = {
                    FID: pc.cast(fid, pa.int32()),
                    ROWPOS: pos,
                    REASON: pa.array([MISSING] * t.num_rows, pa.string()),
                    RCOL: pa.array(names.tolist(), pa.string()),
                    **raw,
                }
                yield from pa.table(out).to_batches()

    return spark.range(0, len(files), 1, max(1, len(files))).mapInArrow(read, MISSING_SCHEMA)


def join_missing_frame(joined: DataFrame, plan: EdgePlan) -> DataFrame:
    """The joined rows with a missing endpoint (join path), with file, reason, column, raw values."""
    from pyspark.sql import functions as F

    c = F.col
    src_names = F.create_map(*[x for i, n in enumerate(plan.src_names) for x in (F.lit(i), F.lit(n))])[c(SI)]
    dst_names = F.create_map(*[x for i, n in enumerate(plan.dst_names) for x in (F.lit(i), F.lit(n))])[c(SI)]
    et_names = {v: k for k, v in plan.etype_codes}
    const = F.create_map(*[x for s, code in plan.etype_const for x in (F.lit(s), F.lit(et_names[code]))])[c(SI)]
    etype = F.coalesce(c("_et"), const) if "_et" in joined.columns else const
    none = F.lit(None).cast("string")
    return joined.filter(c("src").isNull() | c("dst").isNull()).select(
        c(FID).cast("int").alias(FID) if FID in joined.columns else F.lit(None).cast("int").alias(FID),
        c(ROWPOS) if ROWPOS in joined.columns else F.lit(None).cast("long").alias(ROWPOS),
        F.lit(MISSING).alias(REASON),
        F.when(c("src").isNull(), src_names).otherwise(dst_names).alias(RCOL),
        c("_s").cast("string").alias("src"),
        c("_d").cast("string").alias("dst"),
        etype.alias("etype"),
        (c("_w").cast("string") if "_w" in joined.columns else none).alias("weight"),
        (c("_ts").cast("string") if "_ts" in joined.columns else none).alias("timestamp"),
    )
