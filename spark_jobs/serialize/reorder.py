"""``glisp reorder``: the inference order table (vid -> part, pos) for layerwise inference.

Every vertex belongs to exactly one inference partition: its own partition if interior, else its
master partition; that is exactly the master rule of serialize (spark_jobs.serialize.master, the one
implementation both stages call; reorder reads the ``masters/`` table serialize wrote when that stage is
current under the same rule), so an isolated vertex goes to its master too. Orders, with
``degree`` = global in-degree + out-degree:

* ``pds`` (Partition-based Degree Sort): (part, degree descending, vid)
* ``ns``  (natural sort): vid
* ``ds``  (degree sort): (degree descending, vid)
* ``ps``  (partition sort): (part, vid)

``pos`` is the vertex's position in the global order (dense 0..n-1): the row of the vertex in the
per-layer embedding array. ``part_pos`` is its position among the vertices of its own inference
partition, in the same order (dense 0..n_part-1). Beside the table, ``_index/`` holds the same as Zarr
arrays by vertex id and by partition (:mod:`glisp_core.dataset.order_index`): what inference tasks look up.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from glisp_core.config import Config
from glisp_core.dataset.layout import DST, MASTER, PART, POS, SRC, VID, DatasetVersion
from glisp_core.dataset.manifest import StageRecord, read_manifest
from glisp_core.dataset.order_index import INDEX_DIR, index_url
from glisp_core.dataset.publish import StagePublisher, up_to_date
from glisp_core.errors import ConfigError
from glisp_spark.session import size_shuffles
from glisp_spark.tables import read_parquet, write_parquet
from spark_jobs.serialize.job import resolve_run
from spark_jobs.serialize.master import compute_masters, published_masters
from spark_jobs.serialize.order_index import write_order_index

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

ORDERS = ("pds", "ns", "ds", "ps")


def check_order(order: str) -> str:
    """The order name, or a ConfigError naming the choices (no Spark needed)."""
    if order not in ORDERS:
        raise ConfigError("reorder.order", "order", f"expected one of {', '.join(ORDERS)} (got {order!r})")
    return order


def order_keys(order: str) -> list[Column]:
    """Sort keys of an order as Spark columns (ties broken by vid, so every order is total)."""
    from pyspark.sql import functions as F

    check_order(order)

    keys = {
        "pds": [F.col(PART).asc(), F.col("degree").desc(), F.col(VID).asc()],
        "ns": [F.col(VID).asc()],
        "ds": [F.col("degree").desc(), F.col(VID).asc()],
        "ps": [F.col(PART).asc(), F.col(VID).asc()],
    }
    return keys[order]


def dense_positions(df: DataFrame, keys: list[Column]) -> DataFrame:
    """``df`` sorted by ``keys`` with a dense 0..n-1 ``pos`` column, without a single-partition window.

    The sorted rows are checkpointed into the executors' block stores (``localCheckpoint``: Spark's own,
    no directory, so it works on any dataset root) to fix the sort's partitioning between the job that
    counts rows per partition and the one that numbers them.
    """
    from pyspark.sql import functions as F

    s = df.orderBy(*keys).withColumn("_pid", F.spark_partition_id()).withColumn("_mid", F.monotonically_increasing_id())
    s = s.localCheckpoint(eager=True)  # fixes the sort's partitioning before ids are turned into offsets
    sizes = dict.fromkeys(range(s.rdd.getNumPartitions()), 0)
    for r in s.groupBy("_pid").count().collect():
        sizes[int(r["_pid"])] = int(r["count"])
    offsets, acc = [], 0
    for pid in sorted(sizes):
        offsets.append(acc)
        acc += sizes[pid]
    off = F.array(*[F.lit(o).cast("long") for o in offsets]) if offsets else F.array(F.lit(0).cast("long"))
    pos = F.element_at(off, F.col("_pid") + 1) + F.col("_mid").bitwiseAND(F.lit((1 << 33) - 1))
    return s.withColumn(POS, pos).drop("_pid", "_mid")


def run_reorder(
    spark: SparkSession,
    cfg: Config,
    dv: DatasetVersion,
    order: str | None = None,
    run: str | None = None,
    force: bool = False,
) -> StageRecord:
    """Write ``reorder/<run>/<order>/`` (vid, part, pos, part_pos, degree) and publish it."""
    return run_reorders(spark, cfg, dv, [order or cfg.reorder.order], run=run, force=force)[0]


def run_reorders(
    spark: SparkSession, cfg: Config, dv: DatasetVersion, orders: list[str], run: str | None = None, force: bool = False
) -> list[StageRecord]:
    """Several orders of one partition run, sharing one master computation; one stage per order."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    for o in orders:
        check_order(o)  # the name only: building its Spark columns would start a session
    man = read_manifest(dv)
    run, num_parts = resolve_run(man, run or cfg.serialize.partition or None)
    pubs = {}
    for o in orders:
        params = {"partition": run, "parts": num_parts, "order": o, "master_rule": cfg.serialize.master_rule}
        params["index"] = INDEX_DIR  # stages published before the lookup arrays are not current
        pubs[o] = StagePublisher(dv, f"reorder/{run}/{o}", params, depends=["ingest", f"partition/{run}"])
    todo = [o for o in orders if force or not (pubs[o].is_current() or not pubs[o].claim())]
    for o in orders:
        if o not in todo:
            print(up_to_date(f"reorder/{run}/{o}"), flush=True)
    if not todo:
        return [_published(pubs[o]) for o in orders]
    size_shuffles(spark, cfg.spark, int(man.schema["num_edges"]))
    rule = cfg.serialize.master_rule
    masters = published_masters(spark, man, run, num_parts, rule)
    masters_from = f"serialize/{run}" if masters else "computed"
    masters = masters or compute_masters(spark, dv, run, num_parts, rule)
    if "degree" in masters.df.columns:  # serialize's tasks wrote every vertex's degree over every edge
        t = masters.df.select(VID, F.col(MASTER).alias(PART), "degree").persist(StorageLevel.MEMORY_AND_DISK)
    else:
        t = _masters_with_degrees(spark, dv, masters.df)
    starts = [sum(masters.per_part[:k]) for k in range(num_parts)]
    t_masters = time.perf_counter() - t0
    recs: dict[str, StageRecord] = {}
    for o in orders:
        if o not in todo:
            recs[o] = _published(pubs[o])
            continue
        t1 = time.perf_counter()
        pub = pubs[o]
        with pub:
            ranked = _positions(t, o, starts)
            out = ranked.select(VID, PART, POS, F.col("part_pos").cast("long").alias("part_pos"), "degree")
            out = out.persist(StorageLevel.MEMORY_AND_DISK)  # the table and its lookup arrays
            try:
                # the attempt prefix itself is the Parquet table: its files go in beside the attempt's lease
                write_parquet(out.sortWithinPartitions(POS), pub.tmp, mode="into")
                idx = write_order_index(
                    out, index_url(pub.tmp), list(masters.per_part), cfg.reorder.index_in_driver_vertices
                )
            finally:
                out.unpersist()
            counts = {
                "vertices": sum(masters.per_part),
                "vertices_per_part": masters.per_part,
                "isolated_vertices": masters.isolated,
                "masters_from": masters_from,
                "index_chunks_by_vid": idx["chunks_by_vid"],
                "index_chunks_by_part": idx["chunks_by_part"],
                "index_written_by": idx["written_by"],
            }
            timings = {
                "masters_s": round(t_masters, 3),
                "index_s": idx["index_s"],
                "total_s": round(time.perf_counter() - t1 + t_masters, 3),
            }
            recs[o] = pub.commit(counts=counts, timings=timings)
    t.unpersist()
    masters.unpersist()
    return [recs[o] for o in orders]


def _masters_with_degrees(spark: SparkSession, dv: DatasetVersion, masters: DataFrame) -> DataFrame:
    """(vid, part: its master, degree), persisted: every order ranks this table."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    edges = read_parquet(spark, dv.edges)
    deg = (
        edges.select(F.col(SRC).alias(VID))
        .unionAll(edges.select(F.col(DST).alias(VID)))
        .groupBy(VID)
        .agg(F.count("*").alias("degree"))
    )
    return (
        masters.select(VID, F.col(MASTER).alias(PART))
        .join(deg, VID, "left")
        .fillna(0, ["degree"])
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _positions(t: DataFrame, order: str, starts: list[int]) -> DataFrame:
    """``t`` with ``part_pos`` (the rank within the partition) and ``pos`` (the global position) of ``order``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = order_keys(order)
    ranked = t.withColumn("part_pos", F.row_number().over(Window.partitionBy(PART).orderBy(*keys)) - 1)
    if order in ("pds", "ps"):  # partition-major: the global position is the partition's start + part_pos
        start = F.element_at(F.array(*[F.lit(x).cast("long") for x in starts]), F.col(PART) + 1)
        return ranked.withColumn(POS, start + F.col("part_pos"))
    if order == "ns":  # vids are dense 0..n-1 (ingest contract)
        return ranked.withColumn(POS, F.col(VID))
    return dense_positions(ranked, keys)


def _published(pub: StagePublisher) -> StageRecord:
    """The record of a stage found current (``is_current``: published with these parameters)."""
    rec = pub.record()
    assert rec is not None, "a current stage has a record"
    return rec
