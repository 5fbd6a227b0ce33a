"""The partition refresh in Spark, for graphs past ``partition.incremental_local_edges``: nothing per vertex of
the graph in the driver.

1. Where every base vertex kept its vid (an anti-join of both id maps by vid says so), the base rows are taken
   as they are (their edge types renumbered in the JVM where a type's code moved). Otherwise the vertex map
   base vid -> new vid is a Spark join of both id maps, written by tasks as a Zarr array
   (:func:`spark_jobs.partition.incremental_ids.write_vid_map`) that the tasks rewriting the base's rows read.
   ``counts.incremental.vid_map`` says which ("identity" or "written").
2. The match runs in Spark tasks, each over the pairs hashed to it, writing the rows it decides itself
   (:func:`match_spark`).
3. The added rows that joined no kept pair are placed in the driver, streamed in (k, pair, eid) order through
   :func:`spark_jobs.partition.incremental_place.place_capped`. The placement only reads and updates the
   vertices those rows touch: tasks over the match's files gather their degrees and partition sets (as
   bitset words; :mod:`spark_jobs.partition.incremental_touched`), and the driver indexes them compactly
   (O(touched vertices), about ``PLACE_BYTES_PER_VERTEX`` each). When that state would pass
   ``partition.state_auto_mb`` the refresh declines and a full (sharded) run follows.
4. replicas/ is then written by a Spark group-by over the allocation, not from driver bitsets.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from glisp_core.dataset.manifest import read_manifest
from glisp_core.errors import StageError
from glisp_core.storage.store import store_for
from glisp_spark.tables import mark_written, part_writer, read_parquet, write_parquet
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.partition import incremental_match
from spark_jobs.partition.incremental_ids import is_identity, vid_map_of, vids_unchanged, write_vid_map
from spark_jobs.partition.incremental_place import Done, Laps, Placed, place_capped
from spark_jobs.partition.incremental_touched import degrees_and_words
from spark_jobs.partition.rounds import ALLOC_PA
from spark_jobs.partition.staging import stream_batches

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from glisp_core.dataset.layout import DatasetVersion
    from glisp_core.dataset.manifest import Manifest
    from glisp_core.storage.uri import StoreURI
    from spark_jobs.partition.base import PartitionContext

MATCHED_PA = pa.schema(
    [(n, pa.int64()) for n in ("eid", "src", "dst")]
    + [("part", pa.int32()), ("how", pa.int32())]
    + [(n, pa.int64()) for n in ("rows", "k")]
)
# driver bytes per touched vertex besides its bitset: its vid and degree, and the Arrow tables they come from
PLACE_BYTES_PER_VERTEX = 96
BROADCAST_TOUCHED = 1 << 21  # touched vertices sent to every task by broadcast up to this many (16 MB of vids)
FRESH = incremental_match.FRESH


def serialized_edges(man: Manifest, run: str) -> StoreURI | None:
    """``serialize/<run>``'s Parquet copy of the edges, where that stage is current (built from this ingest and
    partition run) and wrote its copies; None otherwise."""
    name = f"serialize/{run}"
    rec = man.stages.get(name)
    if rec is None or not rec.params.get("parquet_copy") or man.location is None or not man.has_stage(name):
        return None
    return man.location.serialized_edges(run)


def base_rows(spark: SparkSession, base: Manifest, run: str) -> tuple[DataFrame, str]:
    """The base run's edge rows (eid, src, dst, etype, part) and where they were read.

    A current ``serialize/<run>`` holds exactly those rows in its Parquet copy (each assigned row in its one
    partition, an edge-subset run's subset as well): one scan. Otherwise the edges joined with the assignment,
    which hashes both by eid (a shuffled hash join, the assignment's two columns the build side)."""
    copy = serialized_edges(base, run)
    if copy is not None:
        return read_parquet(spark, copy).select("eid", "src", "dst", "etype", "part"), f"serialize/{run}"
    assert base.location is not None  # a manifest read from a dataset version
    rows = read_parquet(spark, base.location.edges).select("eid", "src", "dst", "etype")
    assignment = read_parquet(spark, base.location.assignment(run)).select("eid", "part")
    return rows.join(assignment.hint("shuffle_hash"), "eid"), "assignment"


def base_rows_in_new_ids(
    spark: SparkSession, base: Manifest, run: str, vmap_url: str | None, emap: np.ndarray
) -> tuple[DataFrame, str]:
    """The base's edge rows (eid, src, dst, etype in the new version's ids, part) and where they were read
    (:func:`base_rows`); rows that lost an endpoint or their edge type are dropped (they are removed edges).
    ``vmap_url`` None: every vertex kept its vid (as a snapshot that appends or changes edges only gives), the
    rows stay in the JVM, their edge types renumbered there by a lookup where ``emap`` is not the identity."""
    rows, source = base_rows(spark, base, run)
    if vmap_url is None:
        if is_identity(emap):
            return rows.select("eid", "src", "dst", F.col("etype").cast("int"), F.col("part").cast("int")), source
        codes = F.array(*[F.lit(int(c)) for c in emap])  # one code per edge type
        t = F.element_at(codes, F.col("etype").cast("int") + 1).alias("etype")
        out = rows.select("eid", "src", "dst", t, F.col("part").cast("int")).where(F.col("etype") >= 0)
        return out, source
    bc = spark.sparkContext.broadcast(emap)  # one code per edge type

    def remap(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        vm, em = vid_map_of(vmap_url), bc.value
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

    return rows.mapInArrow(remap, "eid long, src long, dst long, etype int, part int"), source


# A row's edge type, base partition and side travel to the match's tasks as one 64-bit column (``tag``): moving
# rows into Python costs per value, and three columns of six were a fifth of the match at R-MAT 22.
_PART_BITS = 24  # partition + 1 (0 for a new row): the partition format's 2^23 partitions


def row_tag(etype: Column, part: Column, side: int) -> Column:
    """``etype << 25 | (part + 1) << 1 | side`` as a long (:func:`split_tag` inverts it)."""
    return (
        F.shiftleft(etype.cast("long"), _PART_BITS + 1)
        + F.shiftleft(part.cast("long") + 1, 1)
        + F.lit(side).cast("long")
    )


def split_tag(tag: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(etype, part, side) of :func:`row_tag`'s column."""
    tag = np.asarray(tag, np.int64)
    part = ((tag >> 1) & ((1 << _PART_BITS) - 1)) - 1
    return tag >> (_PART_BITS + 1), part.astype(np.int32), tag & 1


def _match_batches(batches: list[pa.RecordBatch], seed: int) -> pa.RecordBatch | None:
    """:func:`incremental_match.match` over Arrow batches of base and new rows (eid, src, dst, tag; a pair-closed
    set)."""
    if not batches:
        return None
    c = {
        n: np.concatenate([b.column(b.schema.get_field_index(n)).to_numpy(zero_copy_only=False) for b in batches])
        for n in ("eid", "src", "dst", "tag")
    }
    c["etype"], c["part"], c["side"] = split_tag(c["tag"])
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


def match_spark(ctx: PartitionContext, old: DataFrame, new: DatasetVersion, rows_total: int, out: StoreURI) -> None:
    """Write the new edge rows (eid, src, dst, part, how, rows, k) as :func:`incremental_match.match` decides
    them to the Parquet table ``out``: the base rows ``old`` (in new ids) and the new rows are hashed to tasks
    by unordered pair, each task runs the match over its pairs and writes its rows itself (pyarrow, a file per
    task), so they never go back through the JVM's rows and Parquet writer (most of the match's time at R-MAT
    22 was that). Every new row must come out decided once: the rows written are checked against the version's.
    """
    cur = read_parquet(ctx.spark, new.edges).select(
        "eid", "src", "dst", row_tag(F.col("etype"), F.lit(-1), 1).alias("tag")
    )
    tasks = max(1, math.ceil(rows_total / ctx.cfg.incremental_batch_edges))
    seed, base = ctx.seed, out.qualified

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        got = _match_batches(list(batches), seed)
        with contextlib.ExitStack() as stack:  # a file for every task, empty or not: the table has its schema
            part_writer(stack, base, MATCHED_PA).write_batch(got if got is not None else MATCHED_PA.empty_table())
        yield pa.RecordBatch.from_pydict({"rows": [0 if got is None else got.num_rows]})

    store_for(out).delete(out)
    u = old.select("eid", "src", "dst", row_tag(F.col("etype"), F.col("part"), 0).alias("tag")).unionByName(cur)
    u = u.repartition(tasks, F.least("src", "dst"), F.greatest("src", "dst"))
    written = sum(int(r["rows"]) for r in u.mapInArrow(fn, "rows long").collect())
    if written != ctx.num_edges:
        raise StageError(
            f"partition refresh: the match decided {written:,} rows of the new version's {ctx.num_edges:,}"
        )
    mark_written(out)


# ---- the placement's state: the vertices the added rows touch ----------------------------------------


@dataclass
class Touched:
    """The placement's state in compact indices: ``vids`` (sorted) are the vertices the added rows touch, their
    degrees in the new version and their partition sets so far (``done.bits``, one row per entry of vids)."""

    vids: np.ndarray
    deg: np.ndarray
    done: Done
    source: str  # how they were gathered: "tasks" reading the match's files, or a Spark "aggregate"

    def index(self, vid: np.ndarray) -> np.ndarray:
        """The compact index of each of ``vid`` (all among the touched vertices, or an error)."""
        i = np.searchsorted(self.vids, vid)
        ok = i < len(self.vids)
        ok[ok] = self.vids[i[ok]] == vid[ok]
        if not ok.all():
            raise StageError(f"partition refresh: rows name vertices {vid[~ok][:3].tolist()} outside its state")
        return i

    @property
    def nbytes(self) -> int:
        return int(self.vids.nbytes + self.deg.nbytes + self.done.bits.nbytes)


def _ends(rows: DataFrame, *cols: str) -> DataFrame:
    return rows.select(F.explode(F.array("src", "dst")).alias("vid"), *cols)


def _done_counts(matched: DataFrame, p: int) -> tuple[np.ndarray, int, int]:
    """Rows per partition of the kept and attached rows, and how many of each (one row per (how, part))."""
    c = matched.where(F.col("how") != FRESH).groupBy("how", "part").count().toArrow()
    how, part, cnt = (c.column(x).to_numpy() for x in ("how", "part", "count"))
    sizes = np.bincount(part, weights=cnt, minlength=p).astype(np.int64)
    kept = int(cnt[how == incremental_match.KEPT].sum())
    return sizes, kept, int(cnt.sum()) - kept


def touched_state(ctx: PartitionContext, matched: DataFrame, matched_dir: StoreURI, done: Done) -> Touched | str:
    """The placement's state for the vertices of the fresh rows (their partition sets set in ``done.bits``), or
    why it would not fit the driver. Up to ``BROADCAST_TOUCHED`` of them, tasks read the match's files
    (:mod:`spark_jobs.partition.incremental_touched`); past that, a Spark aggregate of the rows' ends."""
    p = ctx.parts
    tdir = ctx.staging / "inc_touched"
    write_parquet(_ends(matched.where(F.col("how") == FRESH)).distinct(), tdir)
    touched = read_parquet(ctx.spark, tdir)
    n = touched.count()
    need = n * (PLACE_BYTES_PER_VERTEX + 8 * ((p + 63) // 64))
    if need > ctx.cfg.state_auto_mb << 20:
        return (
            f"placing the added rows would hold {need / 2**20:.0f} MB in the driver for the {n:,} vertices they "
            f"touch, past partition.state_auto_mb = {ctx.cfg.state_auto_mb}"
        )
    words = (p + 63) // 64
    if n <= BROADCAST_TOUCHED:
        vids = np.sort(touched.toArrow().column("vid").to_numpy())
        _check_vids(ctx, vids, n)
        d, done.bits = degrees_and_words(ctx.spark, matched_dir, vids, words, ctx.staging / "inc_touched_parts")
        return Touched(vids, d, done, "tasks")
    t = _degrees_and_words(matched, touched, words).toArrow()  # a row per touched vertex
    order = np.argsort(t.column("vid").to_numpy())
    vids, d = t.column("vid").to_numpy()[order], t.column("d").to_numpy()[order].astype(np.int64)
    _check_vids(ctx, vids, n)
    done.bits = np.stack([t.column(f"w{w}").to_numpy()[order].view(np.uint64) for w in range(words)], axis=1)
    return Touched(vids, d, done, "aggregate")


def _check_vids(ctx: PartitionContext, vids: np.ndarray, n: int) -> None:
    if len(vids) != n or (n and (vids[0] < 0 or vids[-1] >= ctx.num_vertices)):
        raise StageError(
            f"partition refresh: {n:,} vertices touched by added rows, {len(vids):,} with a degree in the new "
            f"rows, vids {vids[:1].tolist()}..{vids[-1:].tolist()} of 0..{ctx.num_vertices - 1}"
        )


def _degrees_and_words(matched: DataFrame, touched: DataFrame, words: int) -> DataFrame:
    """Per vertex of ``touched``: its degree in the new rows (``matched`` holds each once; a self-loop counts
    twice) and its partition set among the decided rows as ``words`` bitset words ``w0..``, in one hash
    aggregate. The ends are first kept to the touched vertices by a shuffled semi-join (past
    ``BROADCAST_TOUCHED`` of them, where this path runs), so the aggregate holds their groups, not every
    vertex's of the graph."""
    ends = _ends(matched, "part", "how").join(touched, "vid", "left_semi")
    bit = f"CASE WHEN how != {FRESH} AND part DIV 64 = {{w}} THEN shiftleft(1L, part % 64) ELSE 0L END"
    words_of = [F.expr(f"bit_or({bit.format(w=w)})").alias(f"w{w}") for w in range(words)]
    return ends.groupBy("vid").agg(F.count(F.lit(1)).alias("d"), *words_of)


def stream_added(ctx: PartitionContext, fresh: DataFrame, st: Touched, cap: int) -> tuple[DataFrame, int]:
    """Place the fresh rows with :func:`place_capped`, streamed through the driver in (k, pair, eid) order;
    returns (their allocation, rows without room)."""
    lo, hi = F.least("src", "dst"), F.greatest("src", "dst")
    stream_dir, out_dir = ctx.staging / "inc_stream", ctx.staging / "inc_placed"
    write_parquet(fresh.orderBy("k", lo, hi, "eid").select("eid", "src", "dst", "rows"), stream_dir)
    last = np.array([-1, -1, -1], np.int64)
    unplaced, lam = 0, ctx.cfg.incremental_lam
    out = out_dir / "part-00000.parquet"
    with store_for(out).open_output(out) as sink, pq.ParquetWriter(sink, ALLOC_PA) as w:
        for b in stream_batches(stream_dir, ctx.cfg.incremental_batch_edges):
            eid, src, dst, rows = (b.column(i).to_numpy() for i in range(4))
            a, z = st.index(src), st.index(dst)  # compact ids keep the vids' order: pairs stay pairs
            part = place_capped(a, z, rows, st.deg, st.done.bits, st.done.sizes, cap, lam, last)
            unplaced += int((part < 0).sum())
            w.write_batch(pa.record_batch([eid, src, dst, part], schema=ALLOC_PA))
    return read_parquet(ctx.spark, out_dir), unplaced


def refresh_spark(
    ctx: PartitionContext,
    base: DatasetVersion,
    run: str,
    new: DatasetVersion,
    emap: np.ndarray,
    cap: int,
    clock: dict[str, float],
) -> Placed:
    """Map the ids and match in Spark tasks, then stream the fresh rows through the driver's placement."""
    lap = Laps(clock)
    base_man = read_manifest(base)
    base_n, base_m = (int(base_man.schema[k]) for k in ("num_vertices", "num_edges"))
    vmap_url = str(ctx.staging / "inc_vmap.zarr")
    same_vids = vids_unchanged(ctx.spark, base, new, base_n, ctx.num_vertices)
    if not same_vids:  # some vertex left or moved: the base rows are rewritten through the map
        write_vid_map(ctx.spark, base, new, vmap_url)
    vmap = "identity" if same_vids else "written"
    same = same_vids and is_identity(emap)
    lap("ids")
    matched_dir = ctx.staging / "inc_matched"
    old, source = base_rows_in_new_ids(ctx.spark, base_man, run, None if same_vids else vmap_url, emap)
    match_spark(ctx, old, new, base_m + ctx.num_edges, matched_dir)
    lap("match")
    matched = read_parquet(ctx.spark, matched_dir)
    done = Done(np.zeros((0, 1), np.uint64), *_done_counts(matched, ctx.parts))
    st = touched_state(ctx, matched, matched_dir, done)
    lap("state")
    if isinstance(st, str):
        return Placed(None, done, 0, same, st, {"base_rows": source, "vid_map": vmap}, same_vids)
    placed, unplaced = stream_added(ctx, matched.where(F.col("how") == FRESH), st, cap)
    lap("place")
    decided = matched.where(F.col("how") != FRESH).select("eid", "src", "dst", "part")
    state: dict[str, int | str] = {
        "touched_vertices": len(st.vids),
        "touched_state": st.source,
        "driver_state_bytes": st.nbytes,
        "base_rows": source,
        "vid_map": vmap,
    }
    return Placed(decided.unionByName(placed), done, unplaced, same, state=state, same_vids=same_vids)
