"""Incremental refresh of a vertex-cut partitioning: apply a snapshot's edge changes to the previous one.

With ``partition.incremental = true`` and a previous version of the graph holding a published
``partition/<run>`` of the same algorithm and p (the *base*), the new version is not re-partitioned
from scratch:

1. **Match** the new version's edge rows to the base's by original ids (vids differ between
   versions): the driver builds the O(|V|) map base vid -> new vid from both id maps (vertex type
   and original id), Spark rewrites the base rows into new vids (``mapInArrow``, a broadcast array),
   and one window over the union of both edge sets, keyed by (src, dst, edge type) and ordered by
   eid, pairs the k-th base row of a key with the k-th new row (duplicates match one to one).
2. **Kept** rows keep their base partition; **removed** rows are simply not in the new edge set.
3. **Added** rows of an unordered pair that still has a kept row join that row's partition (the
   partition contract keeps a pair's rows together). The other added rows are streamed, grouped by
   pair in a seeded random order, through a capped HDRF score against the current replica sets
   (:func:`place_capped`): prefer partitions holding both / one endpoint, weighted toward the
   lower-degree endpoint as in HDRF, plus a balance term; a partition whose edge count would pass
   the hard capacity ``ceil((1 + incremental_epsilon) * |E| / p)`` is never chosen. The replica sets
   and sizes are updated after every pair, so the placement is exactly sequential HDRF over the added
   edges; the driver holds O(|V|) state and one chunk of added rows at a time, never the edge set.
4. The result is written and measured like any partition run (``metrics.write_outputs``); when its
   VB or EB passes ``incremental_max_vb`` / ``incremental_max_eb``, or its RF grew past
   ``incremental_max_rf_growth`` x the RF of the last full run it descends from, or the capacity
   cannot be met, ``job.run_partition`` discards it and runs the configured algorithm from scratch.
   The stage record's ``counts.incremental`` says which path ran, why, and from which base.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit
from pyspark.sql import Window
from pyspark.sql import functions as F

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import Manifest, StageRecord
from glisp_core.dataset.versions import read_latest
from spark_jobs.partition.base import PartitionContext
from spark_jobs.partition.degrees import degree_array
from spark_jobs.partition.metrics import write_outputs

# ---- choosing the base -------------------------------------------------------------------------


def _usable_base(root: Any, graph: str, version: str, stage: str, cfg: Config) -> StageRecord | None:
    dv = DatasetVersion(root, graph, version)
    try:
        m = Manifest.read(dv.manifest_path)
        rec = m.stage(stage)
    except Exception:  # missing, stale or unreadable: not a base
        return None
    ok = rec.params.get("algorithm") == cfg.partition.algorithm and rec.params.get("parts") == cfg.partition.parts
    return rec if ok else None


def find_base(cfg: Config, dv: DatasetVersion, run: str) -> tuple[DatasetVersion, StageRecord] | None:
    """The version whose ``partition/<run>`` the refresh of ``dv`` starts from, or None.

    ``partition.incremental_base`` names it explicitly; otherwise the base recorded by an earlier
    refresh of ``dv`` (so a re-run has the same fingerprint and is a no-op), else the graph's
    ``LATEST``, else its newest other version, in each case only when it holds a published run of
    the same algorithm and p.
    """
    stage = f"partition/{run}"
    pc = cfg.partition
    if pc.incremental_base:
        candidates = [pc.incremental_base]
    else:
        prev = Manifest.read(dv.manifest_path).stages.get(stage)
        recorded = (prev.params.get("incremental") or {}).get("base_version") if prev else None
        candidates = [recorded, read_latest(dv.path.parent), *reversed(list_versions(dv.root, dv.graph))]
    for v in candidates:
        if v and v != dv.version and (rec := _usable_base(dv.root, dv.graph, v, stage, cfg)) is not None:
            return DatasetVersion(dv.root, dv.graph, v), rec
    return None


def incremental_params(cfg: Config, base: DatasetVersion, base_rec: StageRecord) -> dict[str, Any]:
    """What the refreshed stage depends on besides ingest: recorded in its params (and fingerprint)."""
    pc = cfg.partition
    return {
        "base_version": base.version,
        "base_fingerprint": base_rec.fingerprint,
        "epsilon": pc.incremental_epsilon,
        "lam": pc.incremental_lam,
        "max_vb": pc.incremental_max_vb,
        "max_eb": pc.incremental_max_eb,
        "max_rf_growth": pc.incremental_max_rf_growth,
    }


# ---- matching by original ids ------------------------------------------------------------------


def _id_frame(dv: DatasetVersion, as_str: bool) -> pd.DataFrame:
    schema = Manifest.read(dv.manifest_path).schema
    t = pq.read_table(dv.idmap, columns=["vid", "orig_id", "vtype"]).to_pandas()
    names = np.asarray(schema.get("vertex_types") or ["v0"], dtype=object)
    return pd.DataFrame(
        {
            "vid": t["vid"].to_numpy(np.int64),
            "vt": names[t["vtype"].to_numpy()],
            "orig": t["orig_id"].astype(str) if as_str else t["orig_id"],
        }  # fmt: skip
    )


def vid_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base vid -> new vid of the vertex with the same (vertex type, original id); -1 where it is gone."""
    sb = Manifest.read(base.manifest_path).schema
    sn = Manifest.read(new.manifest_path).schema
    as_str = sb.get("id_type") != sn.get("id_type")
    ob, on = _id_frame(base, as_str), _id_frame(new, as_str)
    both = ob.merge(on, on=["vt", "orig"], suffixes=("_b", "_n"))
    out = np.full(int(sb["num_vertices"]), -1, np.int64)
    out[both["vid_b"].to_numpy()] = both["vid_n"].to_numpy()
    return out


def etype_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base edge type code -> new code of the same name; -1 where the type is gone."""
    names_b = Manifest.read(base.manifest_path).schema.get("edge_types") or ["e0"]
    names_n = list(Manifest.read(new.manifest_path).schema.get("edge_types") or ["e0"])
    return np.array([names_n.index(t) if t in names_n else -1 for t in names_b], np.int64)


def _base_rows_in_new_ids(spark: Any, base: DatasetVersion, run: str, vmap: np.ndarray, emap: np.ndarray) -> Any:
    """The base's edge rows (src, dst, etype in the new version's ids, part); rows that lost an endpoint
    or their edge type are dropped (they are removed edges)."""
    bc = spark.sparkContext.broadcast((vmap, emap))
    rows = spark.read.parquet(str(base.edges)).select("eid", "src", "dst", "etype")
    rows = rows.join(spark.read.parquet(str(base.assignment(run))).select("eid", "part"), "eid")

    def remap(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        vm, em = bc.value
        for b in batches:
            c = {n: b.column(b.schema.get_field_index(n)).to_numpy(zero_copy_only=False) for n in b.schema.names}
            s, d, t = vm[c["src"]], vm[c["dst"]], em[c["etype"]]
            keep = (s >= 0) & (d >= 0) & (t >= 0)
            yield pa.RecordBatch.from_arrays(
                [pa.array(s[keep]), pa.array(d[keep]), pa.array(t[keep].astype(np.int32)),
                 pa.array(c["part"][keep].astype(np.int32))],
                names=["src", "dst", "etype", "part"],
            )  # fmt: skip

    return rows.mapInArrow(remap, "src long, dst long, etype int, part int")


def match_rows(spark: Any, base: DatasetVersion, run: str, new: DatasetVersion) -> Any:
    """New edge rows (eid, src, dst, part) with ``part`` = the matched base row's partition, null if added."""
    old = _base_rows_in_new_ids(spark, base, run, vid_map(base, new), etype_map(base, new))
    old = old.select(F.lit(None).cast("long").alias("eid"), "src", "dst", "etype", "part", F.lit(0).alias("side"))
    cur = spark.read.parquet(str(new.edges)).select(
        "eid", "src", "dst", F.col("etype").cast("int"), F.lit(None).cast("int").alias("part"), F.lit(1).alias("side")
    )
    key = ["src", "dst", "etype"]
    ordered = Window.partitionBy(*key).orderBy("side", "eid")
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    u = old.unionByName(cur)
    u = u.select(
        "*",
        F.row_number().over(ordered).alias("rn"),
        F.sum(1 - F.col("side")).over(whole).alias("n_old"),
        F.collect_list("part").over(whole).alias("old_parts"),  # base rows first, in eid order; nulls skipped
    )
    occ = F.col("rn") - F.col("n_old")  # 1-based rank of a new row among its key's new rows
    part = F.when(occ <= F.col("n_old"), F.element_at("old_parts", occ.cast("int")))
    return u.where(F.col("side") == 1).select("eid", "src", "dst", part.cast("int").alias("part"))


# ---- placing added edges -------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def place_capped(
    src: np.ndarray,
    dst: np.ndarray,
    rows: np.ndarray,
    deg: np.ndarray,
    bits: np.ndarray,
    sizes: np.ndarray,
    cap: int,
    lam: float,
    last: np.ndarray,
) -> np.ndarray:
    """Partition of each streamed added row; -1 where no partition has room for the row's pair.

    Rows of one unordered pair arrive adjacent (``rows`` = the pair's row count) and share the pair's
    decision (``last`` carries it across chunks). Score of partition k for pair (a, b), over the
    partitions with ``sizes[k] + rows <= cap`` only::

        g(a, k) + g(b, k) + lam * (max_size - sizes[k]) / (1 + max_size - min_size)
        g(x, k) = 1 + (1 - theta(x)) if k holds x else 0,  theta(a) = deg(a) / (deg(a) + deg(b))

    HDRF's replication term with the new version's full degrees (the lower-degree endpoint pulls
    harder, so hubs take the replicas) and its balance term; bits and sizes update after each pair.
    """
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    out = np.empty(src.shape[0], np.int32)
    for i in range(src.shape[0]):
        if lo[i] != last[0] or hi[i] != last[1]:  # a new pair: decide it once for all its rows
            last[0], last[1] = lo[i], hi[i]
            last[2] = _best_capped(lo[i], hi[i], deg, bits, sizes, rows[i], cap, lam)
        k = last[2]
        if k >= 0:
            sizes[k] += 1
        out[i] = k
    return out


@njit(nogil=True, cache=True)
def _best_capped(a: int, b: int, deg: np.ndarray, bits: np.ndarray, sizes: np.ndarray, need: int, cap: int,
                 lam: float) -> int:  # fmt: skip
    """The best partition for pair (a, b) among those with room for ``need`` rows (-1: none); marks it."""
    theta = deg[a] / (deg[a] + deg[b]) if deg[a] + deg[b] > 0 else 0.5
    hi_size, lo_size = sizes.max(), sizes.min()
    choice, best = -1, -np.inf
    for k in range(sizes.shape[0]):
        if sizes[k] + need > cap:
            continue
        word, mask = k // 64, np.uint64(1) << np.uint64(k % 64)
        rep = (2.0 - theta if bits[a, word] & mask else 0.0) + (1.0 + theta if bits[b, word] & mask else 0.0)
        score = rep + lam * (hi_size - sizes[k]) / (1.0 + hi_size - lo_size)
        if score > best:
            choice, best = k, score
    if choice >= 0:
        word, mask = choice // 64, np.uint64(1) << np.uint64(choice % 64)
        bits[a, word] |= mask
        bits[b, word] |= mask
    return choice


# ---- the refresh -------------------------------------------------------------------------------


@dataclass
class Refresh:
    """What an incremental refresh measured; ``fallback`` names why a full re-partition must run."""

    counts: dict[str, Any]
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)
    fallback: str = ""


def _replica_bits(kept: Any, n: int, p: int) -> np.ndarray:
    t = (
        kept.select(F.explode(F.array("src", "dst")).alias("vid"), "part").distinct().toArrow()
    )  # O(replicas), not O(edges)
    bits = np.zeros((n, (p + 63) // 64), np.uint64)
    vid, part = t.column("vid").to_numpy(), t.column("part").to_numpy().astype(np.int64)
    np.bitwise_or.at(bits, (vid, part // 64), np.left_shift(np.uint64(1), (part % 64).astype(np.uint64)))
    return bits


def _sizes(df: Any, p: int) -> np.ndarray:
    t = df.groupBy("part").count().toArrow()
    out = np.zeros(p, np.int64)
    out[t.column("part").to_numpy()] = t.column("count").to_numpy()
    return out


def _stream_added(ctx: PartitionContext, added: Any, deg: np.ndarray, bits: np.ndarray, sizes: np.ndarray,
                  cap: int) -> tuple[Any, int]:  # fmt: skip
    """Place the added rows with :func:`place_capped`; returns (their allocation, rows without room)."""
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
    stream_dir, out_dir = ctx.staging / "inc_stream", ctx.staging / "inc_placed"
    (
        added.withColumn("rows", F.count(F.lit(1)).over(Window.partitionBy(lo, hi)))
        .withColumn("k", F.xxhash64(lo, hi, F.lit(ctx.seed)))
        .orderBy("k", lo, hi, "eid")
        .select("eid", "src", "dst", "rows")
        .write.parquet(str(stream_dir))
    )
    out_dir.mkdir(parents=True)
    schema = pa.schema([("eid", pa.int64()), ("src", pa.int64()), ("dst", pa.int64()), ("part", pa.int32())])
    last = np.array([-1, -1, -1], np.int64)
    unplaced = 0
    with pq.ParquetWriter(str(out_dir / "part-00000.parquet"), schema) as w:
        for f in sorted(stream_dir.glob("part-*.parquet")):
            for b in pq.ParquetFile(f).iter_batches(batch_size=ctx.cfg.incremental_batch_edges):
                eid, src, dst, rows = (b.column(i).to_numpy() for i in range(4))
                part = place_capped(src, dst, rows, deg, bits, sizes, cap, ctx.cfg.incremental_lam, last)
                unplaced += int((part < 0).sum())
                w.write_batch(pa.record_batch([eid, src, dst, part], schema=schema))
    return ctx.spark.read.parquet(str(out_dir)), unplaced


def refresh(ctx: PartitionContext, new: DatasetVersion, base: DatasetVersion, base_rec: StageRecord,
            run: str, out: Any) -> Refresh:  # fmt: skip
    """Partition ``new`` from ``base``'s ``partition/<run>``; writes assignment/ and replicas/ under ``out``."""
    spark, p, n, m = ctx.spark, ctx.parts, ctx.num_vertices, ctx.num_edges
    t0 = time.perf_counter()
    matched_dir = ctx.staging / "inc_matched"
    match_rows(spark, base, run, new).write.parquet(str(matched_dir))
    t_match = time.perf_counter()
    matched = spark.read.parquet(str(matched_dir))
    kept = matched.where(F.col("part").isNotNull())
    added = matched.where(F.col("part").isNull()).select("eid", "src", "dst")
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
    # an added row of a pair that still has kept rows goes where they are (one partition per pair)
    kept_pairs = (
        kept.select(lo.alias("lo"), hi.alias("hi"), "part")
        .join(added.select(lo.alias("lo"), hi.alias("hi")).distinct(), ["lo", "hi"], "left_semi")
        .dropDuplicates(["lo", "hi"])
    )
    added = added.withColumn("lo", lo).withColumn("hi", hi).join(kept_pairs, ["lo", "hi"], "left")
    attached = added.where(F.col("part").isNotNull()).select("eid", "src", "dst", "part")
    fresh = added.where(F.col("part").isNull()).select("eid", "src", "dst")

    bits = _replica_bits(kept, n, p)
    sizes = _sizes(kept, p)
    n_kept = int(sizes.sum())
    sizes += _sizes(attached, p)
    n_attached = int(sizes.sum()) - n_kept
    cap = math.ceil((1.0 + ctx.cfg.incremental_epsilon) * m / p)
    deg = degree_array(ctx.edges, n)
    t_state = time.perf_counter()
    placed, unplaced = _stream_added(ctx, fresh, deg, bits, sizes, cap)
    t_place = time.perf_counter()
    base_m = int(Manifest.read(base.manifest_path).schema["num_edges"])
    info = {
        "base": f"{base.graph}/{base.version}", "base_run": run, "base_fingerprint": base_rec.fingerprint,
        "kept": n_kept, "removed": base_m - n_kept, "added": m - n_kept, "attached": n_attached,
        "placed": m - n_kept - n_attached, "capacity": cap,
        "anchor_rf": _anchor_rf(base_rec),
        "seconds": {"match": round(t_match - t0, 2), "state": round(t_state - t_match, 2),
                    "place": round(t_place - t_state, 2)},
    }  # fmt: skip
    if unplaced:
        return Refresh({}, {}, info, f"{unplaced} added rows found no partition under the capacity {cap}")
    alloc = kept.select("eid", "src", "dst", "part").unionByName(attached).unionByName(placed)
    counts, metrics = write_outputs(spark, alloc, out, p, m, bits, sizes)
    info["seconds"]["write"] = round(time.perf_counter() - t_place, 2)
    return Refresh(counts, metrics, info, drift(ctx.cfg, metrics, info["anchor_rf"]))


def _anchor_rf(base_rec: StageRecord) -> float:
    """RF of the last full run the base descends from (the base's own when it was a full run)."""
    inc = base_rec.counts.get("incremental") or {}
    return float(inc["anchor_rf"] if inc.get("path") == "incremental" else base_rec.metrics["rf"])


def drift(pc: Any, metrics: dict[str, Any], anchor_rf: float) -> str:
    """Why an incremental result is not good enough to publish ("" = it is)."""
    why = []
    if metrics["vb"] > pc.incremental_max_vb:
        why.append(f"VB {metrics['vb']:.3f} > incremental_max_vb {pc.incremental_max_vb}")
    if metrics["eb"] > pc.incremental_max_eb:
        why.append(f"EB {metrics['eb']:.3f} > incremental_max_eb {pc.incremental_max_eb}")
    if pc.incremental_max_rf_growth > 0 and metrics["rf"] > pc.incremental_max_rf_growth * anchor_rf:
        why.append(
            f"RF {metrics['rf']:.3f} > incremental_max_rf_growth {pc.incremental_max_rf_growth} x RF of the "
            f"last full run {anchor_rf:.3f}"
        )
    return "; ".join(why)
