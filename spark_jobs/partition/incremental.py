"""Incremental refresh of a vertex-cut partitioning: apply a snapshot's edge changes to the previous one.

With ``partition.incremental = true`` and a previous version of the graph holding a published
``partition/<run>`` of the same algorithm and p (the *base*), the new version is not re-partitioned
from scratch:

1. **Match** the new version's edge rows to the base's by original ids (vids differ between
   versions): the driver builds the O(|V|) map base vid -> new vid from both id maps (vertex type
   and original id); base rows are rewritten into new vids and both sides go through one sorted-merge
   kernel (:mod:`spark_jobs.partition.incremental_match`) that pairs the k-th base row of a key
   (src, dst, edge type) with the k-th new row in eid order (duplicates match one to one). Where a
   graph fits one process (each edge set within ``incremental_local_edges`` rows) the
   driver runs it over all rows read with pyarrow; above that each Spark task runs it over the pairs
   hashed to it (``mapInArrow``), with the same result.
2. **Kept** rows keep their base partition; **removed** rows are simply not in the new edge set.
3. **Added** rows of an unordered pair that still has a kept row join that row's partition (the
   partition contract keeps a pair's rows together; same kernel). The other added rows go, grouped by
   pair in a seeded random order (in place, or streamed through the driver in the Spark path),
   through a capped HDRF score against the current replica sets (:func:`place_capped`): prefer
   partitions holding both / one endpoint, weighted toward the lower-degree endpoint as in HDRF,
   plus a balance term; a partition whose edge count would pass the hard capacity
   ``ceil((1 + incremental_epsilon) * |E| / p)`` is never chosen. The replica sets and sizes are
   updated after every pair, so the placement is exactly sequential HDRF over the added
   edges; in the Spark path the driver holds O(|V|) state and one chunk of added rows at a time,
   never the edge set.
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
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit
from pyspark.sql import functions as F

from glisp_core.config import Config, PartitionConfig
from glisp_core.dataset.layout import DatasetVersion, list_versions
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.versions import read_latest
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_spark.tables import read_parquet, write_parquet
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.partition import incremental_match
from spark_jobs.partition.base import PartitionContext
from spark_jobs.partition.degrees import degree_array
from spark_jobs.partition.expansion import local_degrees
from spark_jobs.partition.metrics import write_outputs, write_outputs_local
from spark_jobs.partition.rounds import ALLOC_PA
from spark_jobs.partition.staging import read_columns, stream_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# ---- choosing the base -------------------------------------------------------------------------


def _usable_base(root: StoreURI, graph: str, version: str, stage: str, cfg: Config) -> StageRecord | None:
    dv = DatasetVersion(root, graph, version)
    try:
        m = read_manifest(dv)
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
    candidates: list[str | None]
    if pc.incremental_base:
        candidates = [pc.incremental_base]
    else:
        prev = read_manifest(dv).stages.get(stage)
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


def id_frame(dv: DatasetVersion, as_str: bool, types: list[str]) -> pd.DataFrame:
    """vid, vertex type (`vt`: its index in ``types``, -1 for a type not there) and original id (`orig`, as text
    when `as_str`) of every vertex of `dv`. Types as integers: a column of names would be one Python object
    per vertex on the driver."""
    names = read_manifest(dv).schema.get("vertex_types") or ["v0"]
    codes = np.array([types.index(t) if t in types else -1 for t in names], np.int32)
    t = store_for(dv.idmap).read_table(dv.idmap, columns=["vid", "orig_id", "vtype"]).to_pandas()
    return pd.DataFrame(
        {
            "vid": t["vid"].to_numpy(np.int64),
            "vt": codes[t["vtype"].to_numpy()],
            "orig": t["orig_id"].astype(str) if as_str else t["orig_id"],
        }
    )


def vid_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base vid -> new vid of the vertex with the same (vertex type, original id); -1 where it is gone."""
    sb = read_manifest(base).schema
    sn = read_manifest(new).schema
    as_str = sb.get("id_type") != sn.get("id_type")
    types = list(sn.get("vertex_types") or ["v0"])
    ob, on = id_frame(base, as_str, types), id_frame(new, as_str, types)
    both = ob.merge(on, on=["vt", "orig"], suffixes=("_b", "_n"))
    out = np.full(int(sb["num_vertices"]), -1, np.int64)
    out[both["vid_b"].to_numpy()] = both["vid_n"].to_numpy()
    return out


def etype_map(base: DatasetVersion, new: DatasetVersion) -> np.ndarray:
    """base edge type code -> new code of the same name; -1 where the type is gone."""
    names_b = read_manifest(base).schema.get("edge_types") or ["e0"]
    names_n = list(read_manifest(new).schema.get("edge_types") or ["e0"])
    return np.array([names_n.index(t) if t in names_n else -1 for t in names_b], np.int64)


def _base_rows_in_new_ids(
    spark: SparkSession, base: DatasetVersion, run: str, vmap: np.ndarray, emap: np.ndarray
) -> DataFrame:
    """The base's edge rows (eid, src, dst, etype in the new version's ids, part); rows that lost an
    endpoint or their edge type are dropped (they are removed edges).

    The join with the assignment hashes both sides by eid without sorting them (a shuffled hash join:
    the assignment's two columns are the build side). When no id changed (vertices and edge types only
    added, as a snapshot that appends does) the rows need no remapping and stay in the JVM."""
    rows = read_parquet(spark, base.edges).select("eid", "src", "dst", "etype")
    assignment = read_parquet(spark, base.assignment(run)).select("eid", "part")
    rows = rows.join(assignment.hint("shuffle_hash"), "eid")
    if same_ids(vmap, emap):
        return rows.select("eid", "src", "dst", F.col("etype").cast("int"), F.col("part").cast("int"))
    bc = spark.sparkContext.broadcast((vmap, emap))

    def remap(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        vm, em = bc.value
        for b in batches:
            c = {n: b.column(b.schema.get_field_index(n)).to_numpy(zero_copy_only=False) for n in b.schema.names}
            s, d, t = vm[c["src"]], vm[c["dst"]], em[c["etype"]]
            keep = (s >= 0) & (d >= 0) & (t >= 0)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(c["eid"][keep].astype(np.int64)),
                    pa.array(s[keep]),
                    pa.array(d[keep]),
                    pa.array(t[keep].astype(np.int32)),
                    pa.array(c["part"][keep].astype(np.int32)),
                ],
                names=["eid", "src", "dst", "etype", "part"],
            )

    return rows.mapInArrow(remap, "eid long, src long, dst long, etype int, part int")


def same_ids(vmap: np.ndarray, emap: np.ndarray) -> bool:
    """Whether both id maps send every base id to itself (nothing removed or renumbered)."""
    return all(bool(np.array_equal(m, np.arange(len(m), dtype=m.dtype))) for m in (vmap, emap))


MATCHED_SCHEMA = "eid long, src long, dst long, part int, how int, rows long, k long"


def _match_batches(batches: list[pa.RecordBatch], seed: int) -> pa.RecordBatch | None:
    """:func:`incremental_match.match` over Arrow batches of base and new rows (a pair-closed set)."""
    if not batches:
        return None
    names = ("eid", "src", "dst", "etype", "part", "side")
    c = {
        n: np.concatenate([b.column(b.schema.get_field_index(n)).to_numpy(zero_copy_only=False) for b in batches])
        for n in names
    }
    r = incremental_match.match(c["src"], c["dst"], c["etype"], c["side"], c["eid"], c["part"], seed)
    pos = r["pos"]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(c["eid"][pos].astype(np.int64)),
            pa.array(c["src"][pos].astype(np.int64)),
            pa.array(c["dst"][pos].astype(np.int64)),
            pa.array(r["part"]),
            pa.array(r["how"].astype(np.int32)),
            pa.array(r["rows"]),
            pa.array(r["k"]),
        ],
        names=["eid", "src", "dst", "part", "how", "rows", "k"],
    )


def match_spark(
    ctx: PartitionContext,
    base: DatasetVersion,
    run: str,
    new: DatasetVersion,
    vmap: np.ndarray,
    emap: np.ndarray,
    rows_total: int,
) -> DataFrame:
    """New edge rows (eid, src, dst, part, how, rows, k) as :func:`incremental_match.match` decides them:
    base and new rows are hashed to tasks by unordered pair, each task runs the match over its pairs."""
    old = _base_rows_in_new_ids(ctx.spark, base, run, vmap, emap).withColumn("side", F.lit(0))
    cur = read_parquet(ctx.spark, new.edges).select(
        "eid", "src", "dst", F.col("etype").cast("int"), F.lit(-1).alias("part"), F.lit(1).alias("side")
    )
    tasks = max(1, math.ceil(rows_total / ctx.cfg.incremental_batch_edges))
    seed = ctx.seed

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        out = _match_batches(list(batches), seed)
        if out is not None:
            yield out

    u = old.unionByName(cur).repartition(tasks, F.least("src", "dst"), F.greatest("src", "dst"))
    return u.mapInArrow(fn, MATCHED_SCHEMA)


def match_local(
    base: DatasetVersion, run: str, new: DatasetVersion, vmap: np.ndarray, emap: np.ndarray, seed: int
) -> dict[str, np.ndarray]:
    """The same match in this process over all rows (both sides at most ``incremental_local_edges``)."""
    b = read_columns(base.edges, ("eid", "src", "dst", "etype"))
    a = read_columns(base.assignment(run), ("eid", "part"))
    bpart = np.full(int(b["eid"].max(initial=-1)) + 1, -1, np.int32)
    bpart[a["eid"]] = a["part"]
    s, d, t = vmap[b["src"]], vmap[b["dst"]], emap[b["etype"]]
    keep = (s >= 0) & (d >= 0) & (t >= 0)
    e = read_columns(new.edges, ("eid", "src", "dst", "etype"))
    nb, m = int(keep.sum()), len(e["eid"])
    side = np.concatenate([np.zeros(nb, np.int8), np.ones(m, np.int8)])
    part = np.concatenate([bpart[b["eid"][keep]], np.full(m, -1, np.int32)])
    r = incremental_match.match(
        np.concatenate([s[keep], e["src"]]),
        np.concatenate([d[keep], e["dst"]]),
        np.concatenate([t[keep], e["etype"]]),
        side,
        np.concatenate([b["eid"][keep], e["eid"]]),
        part,
        seed,
    )
    idx = r.pop("pos") - nb  # new rows come after the base rows: 0..m-1 in order
    return {"eid": e["eid"][idx], "src": e["src"][idx], "dst": e["dst"][idx], **r}


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
def _best_capped(
    a: int, b: int, deg: np.ndarray, bits: np.ndarray, sizes: np.ndarray, need: int, cap: int, lam: float
) -> int:
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


def _bits_of(vid: np.ndarray, part: np.ndarray, n: int, p: int) -> np.ndarray:
    """Partition sets (|V| x ceil(p/64) uint64 bitsets) of the given (vertex, partition) pairs."""
    bits = np.zeros((n, (p + 63) // 64), np.uint64)
    part = np.asarray(part, np.int64)
    np.bitwise_or.at(bits, (vid, part // 64), np.left_shift(np.uint64(1), (part % 64).astype(np.uint64)))
    return bits


@dataclass
class _Done:
    """The rows decided so far (kept and attached) and the state the placement starts from."""

    bits: np.ndarray
    sizes: np.ndarray
    kept: int
    attached: int


def _done_local(r: dict[str, np.ndarray], n: int, p: int) -> _Done:
    done = r["how"] != incremental_match.FRESH
    vid = np.concatenate([r["src"][done], r["dst"][done]])
    part = np.concatenate([r["part"][done], r["part"][done]])
    kept = int((r["how"] == incremental_match.KEPT).sum())
    sizes = np.bincount(r["part"][done], minlength=p).astype(np.int64)
    return _Done(_bits_of(vid, part, n, p), sizes, kept, int(done.sum()) - kept)


def _done_spark(matched: DataFrame, n: int, p: int) -> _Done:
    done = matched.where(F.col("how") != incremental_match.FRESH)
    t = done.select(F.explode(F.array("src", "dst")).alias("vid"), "part").distinct().toArrow()  # O(replicas)
    bits = _bits_of(t.column("vid").to_numpy(), t.column("part").to_numpy(), n, p)
    c = done.groupBy("how", "part").count().toArrow()
    how, part, cnt = (c.column(x).to_numpy() for x in ("how", "part", "count"))
    sizes = np.bincount(part, weights=cnt, minlength=p).astype(np.int64)
    kept = int(cnt[how == incremental_match.KEPT].sum())
    return _Done(bits, sizes, kept, int(cnt.sum()) - kept)


def _place_local(ctx: PartitionContext, r: dict[str, np.ndarray], st: _Done, deg: np.ndarray, cap: int) -> int:
    """Place the fresh rows of ``r`` in place (``r["part"]``), in the order the Spark path streams them."""
    f = np.flatnonzero(r["how"] == incremental_match.FRESH)
    src, dst = r["src"][f], r["dst"][f]
    f = f[np.lexsort((r["eid"][f], np.maximum(src, dst), np.minimum(src, dst), r["k"][f]))]
    last = np.array([-1, -1, -1], np.int64)
    part = place_capped(
        r["src"][f], r["dst"][f], r["rows"][f], deg, st.bits, st.sizes, cap, ctx.cfg.incremental_lam, last
    )
    r["part"][f] = part
    return int((part < 0).sum())


def _stream_added(
    ctx: PartitionContext, fresh: DataFrame, deg: np.ndarray, st: _Done, cap: int
) -> tuple[DataFrame, int]:
    """Place the fresh rows with :func:`place_capped`, streamed through the driver in (k, pair, eid) order;
    returns (their allocation, rows without room)."""
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
    stream_dir, out_dir = ctx.staging / "inc_stream", ctx.staging / "inc_placed"
    write_parquet(fresh.orderBy("k", lo, hi, "eid").select("eid", "src", "dst", "rows"), stream_dir)
    last = np.array([-1, -1, -1], np.int64)
    unplaced = 0
    out = out_dir / "part-00000.parquet"
    with store_for(out).open_output(out) as sink, pq.ParquetWriter(sink, ALLOC_PA) as w:
        for b in stream_batches(stream_dir, ctx.cfg.incremental_batch_edges):
            eid, src, dst, rows = (b.column(i).to_numpy() for i in range(4))
            part = place_capped(src, dst, rows, deg, st.bits, st.sizes, cap, ctx.cfg.incremental_lam, last)
            unplaced += int((part < 0).sum())
            w.write_batch(pa.record_batch([eid, src, dst, part], schema=ALLOC_PA))
    return read_parquet(ctx.spark, out_dir), unplaced


def _refresh_local(
    ctx: PartitionContext,
    base: DatasetVersion,
    run: str,
    new: DatasetVersion,
    vmap: np.ndarray,
    emap: np.ndarray,
    cap: int,
    clock: dict[str, float],
) -> tuple[dict[str, np.ndarray], _Done, int]:
    """Match and place in this process: the new rows (eid, src, dst, part, ...) as arrays."""
    t = time.perf_counter()
    r = match_local(base, run, new, vmap, emap, ctx.seed)
    clock["match"] = time.perf_counter() - t
    st = _done_local(r, ctx.num_vertices, ctx.parts)
    deg = local_degrees(r, ctx.num_vertices)
    clock["state"] = time.perf_counter() - t - clock["match"]
    unplaced = _place_local(ctx, r, st, deg, cap)
    return r, st, unplaced


def _refresh_spark(
    ctx: PartitionContext,
    base: DatasetVersion,
    run: str,
    new: DatasetVersion,
    vmap: np.ndarray,
    emap: np.ndarray,
    cap: int,
    rows_total: int,
    clock: dict[str, float],
) -> tuple[DataFrame, _Done, int]:
    """Match in Spark tasks (one job), then stream the fresh rows through the driver's placement."""
    t = time.perf_counter()
    matched_dir = ctx.staging / "inc_matched"
    write_parquet(match_spark(ctx, base, run, new, vmap, emap, rows_total), matched_dir)
    clock["match"] = time.perf_counter() - t
    matched = read_parquet(ctx.spark, matched_dir)
    st = _done_spark(matched, ctx.num_vertices, ctx.parts)
    deg = degree_array(ctx.edges, ctx.num_vertices)
    clock["state"] = time.perf_counter() - t - clock["match"]
    placed, unplaced = _stream_added(ctx, matched.where(F.col("how") == incremental_match.FRESH), deg, st, cap)
    done = matched.where(F.col("how") != incremental_match.FRESH).select("eid", "src", "dst", "part")
    return done.unionByName(placed), st, unplaced


def refresh(
    ctx: PartitionContext, new: DatasetVersion, base: DatasetVersion, base_rec: StageRecord, run: str, out: StoreURI
) -> Refresh:
    """Partition ``new`` from ``base``'s ``partition/<run>``; writes assignment/ and replicas/ under ``out``
    (the attempt prefix, in any store).

    In this process when the base and the new edge set each have at most ``partition.incremental_local_edges``
    rows (the driver then holds both sets: about 130 bytes per row of both at the peak, 1.3 GB at 5M
    rows each), else in Spark; both give the same placement (the same
    match kernel, the same placement order).
    """
    spark, p, m = ctx.spark, ctx.parts, ctx.num_edges
    t0 = time.perf_counter()
    base_m = int(read_manifest(base).schema["num_edges"])
    vmap, emap = vid_map(base, new), etype_map(base, new)
    cap = math.ceil((1.0 + ctx.cfg.incremental_epsilon) * m / p)
    local = max(base_m, m) <= ctx.cfg.incremental_local_edges
    clock = {"ids": time.perf_counter() - t0}
    alloc: dict[str, np.ndarray] | DataFrame  # the new rows' partitions: arrays (local) or a DataFrame
    if local:
        alloc, st, unplaced = _refresh_local(ctx, base, run, new, vmap, emap, cap, clock)
    else:
        alloc, st, unplaced = _refresh_spark(ctx, base, run, new, vmap, emap, cap, base_m + m, clock)
    clock["place"] = time.perf_counter() - t0 - sum(clock.values())
    n_kept, n_attached = st.kept, st.attached
    info: dict[str, Any] = {
        "base": f"{base.graph}/{base.version}",
        "base_run": run,
        "base_fingerprint": base_rec.fingerprint,
        "mode": "local" if local else "spark",
        "same_ids": same_ids(vmap, emap),
        "kept": n_kept,
        "removed": base_m - n_kept,
        "added": m - n_kept,
        "attached": n_attached,
        "placed": m - n_kept - n_attached,
        "capacity": cap,
        "anchor_rf": _anchor_rf(base_rec),
        "seconds": {k: round(v, 2) for k, v in clock.items()},
    }
    if unplaced:
        return Refresh({}, {}, info, f"{unplaced} added rows found no partition under the capacity {cap}")
    t_place = time.perf_counter()
    if isinstance(alloc, dict):  # local: written from the arrays, no Spark job
        counts, metrics = write_outputs_local(out, alloc["eid"], alloc["part"], p, m, st.bits, st.sizes)
    else:
        counts, metrics = write_outputs(spark, alloc, out, p, m, st.bits, st.sizes)
    info["seconds"]["write"] = round(time.perf_counter() - t_place, 2)
    return Refresh(counts, metrics, info, drift(ctx.cfg, metrics, info["anchor_rf"]))


def _anchor_rf(base_rec: StageRecord) -> float:
    """RF of the last full run the base descends from (the base's own when it was a full run)."""
    inc = base_rec.counts.get("incremental") or {}
    return float(inc["anchor_rf"] if inc.get("path") == "incremental" else base_rec.metrics["rf"])


def drift(pc: PartitionConfig, metrics: dict[str, Any], anchor_rf: float) -> str:
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
