"""The master partition of every vertex: ONE implementation, used by serialize and by reorder.

A vertex's master partition stores its features/labels and is the inference partition that computes
its embedding. Rules (config ``serialize.master_rule``):

* ``least_loaded`` (default): an interior vertex (one replica) is mastered by its partition. The
  other vertices (boundary vertices, and isolated vertices, whose candidates are all P partitions)
  are split by ``xxhash64(vid)`` into ``SLICES`` slices processed in order. Before slice s the
  driver knows the number ``L_k`` of vertices mastered by each partition so far (one aggregation of
  P numbers); each vertex of slice s picks among its candidates by an exponential race
  ``argmin_k -ln(u(vid, k)) / w_k`` with ``w_k = max(T - L_k, 0) + eps``, ``T = n / P``: partition k
  wins with probability proportional to its remaining deficit, so under-loaded partitions fill up
  and over-loaded ones receive almost nothing. ``u`` is a hash of (vid, k), so the result is a pure
  function of (vertex ids, replica sets, P): deterministic across runs, machines and stages.
* ``hash``: ``parts[xxhash64(vid) mod |parts|]`` (isolated vertices: ``xxhash64(vid) mod P``).

Everything runs as Spark column expressions over the vertex table; only P counts per slice reach
the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glisp_core.dataset.layout import MASTER, PARTS, VID, DatasetVersion
from glisp_core.dataset.manifest import Manifest
from glisp_core.errors import BadInputError, ConfigError
from glisp_spark.tables import read_parquet

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SLICES = 4
MASTERS_DIR = "masters"  # serialize/<run>/@A/masters/: vid, master[, degree] (Parquet), what reorder reads
_MASK53 = (1 << 53) - 1


@dataclass
class Masters:
    """``df``: vid long, master int. Computed here it also has parts array<int> (isolated: [master]) and
    isolated bool, and is cached until :meth:`unpersist`; read from serialize's table it has degree where
    serialize wrote one, and is not cached (a Parquet table)."""

    df: DataFrame
    per_part: list[int]  # vertices mastered by each partition
    isolated: int
    cached: tuple[DataFrame, ...] = ()  # what ``df`` is computed from, cached beside it

    def unpersist(self) -> None:
        for d in (self.df, *self.cached):
            d.unpersist()


def _uniform(vid: Column, k: Column, salt: str) -> Column:
    """u in (0, 1] from a 64-bit hash of (vid, k): reproducible anywhere Spark's xxhash64 is."""
    from pyspark.sql import functions as F

    h = F.xxhash64(vid, k, F.lit(salt)).bitwiseAND(F.lit(_MASK53))
    return (h + F.lit(1)).cast("double") / F.lit(float(1 << 53))


def _race(cands: Column, vid: Column, weights: list[float]) -> Column:
    from pyspark.sql import functions as F

    w = F.array(*[F.lit(float(x)) for x in weights])
    scored = F.transform(
        cands,
        lambda k: F.struct((-F.log(_uniform(vid, k, "master")) / F.element_at(w, k + 1)).alias("s"), k.alias("k")),
    )
    return F.array_min(scored).getField("k")


def compute_masters(spark: SparkSession, dv: DatasetVersion, run: str, num_parts: int, rule: str) -> Masters:
    """Master partition of every ingest vertex under ``rule`` (see module docstring).

    Spark actions: one over the joined vertices (the input checks, the interior vertices' counts and the
    isolated count together), then one per slice; under ``hash`` one count of the result instead of the slices.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if rule not in ("least_loaded", "hash"):
        raise ConfigError("serialize.master_rule", "master_rule", f"expected 'least_loaded' or 'hash' (got {rule!r})")
    verts = read_parquet(spark, dv.vertices).select(VID)
    reps = read_parquet(spark, dv.replicas(run)).select(VID, PARTS)
    j = verts.withColumn("_v", F.lit(True)).join(reps.withColumn("_r", F.lit(True)), VID, "full_outer")
    bad_vid = F.col("_v").isNull()
    bad_parts = F.col("_r").isNotNull() & ((F.size(PARTS) == 0) | F.exists(PARTS, lambda p: (p < 0) | (p >= num_parts)))
    v = (
        j.select(VID, PARTS, bad_vid.alias("_bad_vid"), bad_parts.alias("_bad_parts"))
        .withColumn("isolated", F.col(PARTS).isNull())
        .withColumn("_cand", F.coalesce(F.col(PARTS), F.sequence(F.lit(0), F.lit(num_parts - 1))))
        .withColumn(
            "_slice",
            F.when(F.size("_cand") == 1, F.lit(-1)).otherwise(
                F.pmod(F.xxhash64(F.col(VID), F.lit("slice")), F.lit(SLICES))
            ),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    first = F.when(F.col("_slice") == -1, F.element_at("_cand", 1)).otherwise(F.lit(-1))
    rows = (
        v.groupBy(first.alias("m"))
        .agg(
            F.count("*").alias("n"),
            F.sum(F.col("_bad_vid").cast("long")).alias("bad_vid"),
            F.sum(F.col("_bad_parts").cast("long")).alias("bad_parts"),
            F.sum(F.col("isolated").cast("long")).alias("isolated"),
        )
        .collect()
    )
    _check(
        dv, run, num_parts, j, bad_vid, bad_parts, sum(r["bad_vid"] for r in rows), sum(r["bad_parts"] for r in rows)
    )
    iso = sum(int(r["isolated"]) for r in rows)
    vid = F.col(VID)
    if rule == "hash":
        master = F.element_at("_cand", (F.pmod(F.xxhash64(vid, F.lit("master")), F.size("_cand")) + 1).cast("int"))
    else:
        counts = dict.fromkeys(range(num_parts), 0)
        for r in rows:
            if r["m"] >= 0:
                counts[int(r["m"])] = int(r["n"])
        target = sum(int(r["n"]) for r in rows) / num_parts
        eps = max(target, 1.0) * 1e-6
        master = F.when(F.col("_slice") == -1, F.element_at("_cand", 1))
        for s in range(SLICES):
            w = [max(target - counts[k], 0.0) + eps for k in range(num_parts)]
            expr = _race(F.col("_cand"), vid, w)
            for r in v.filter(F.col("_slice") == s).groupBy(expr.alias("m")).count().collect():
                counts[int(r["m"])] += int(r["count"])
            master = master.when(F.col("_slice") == s, expr)
    mcol = master.cast("int")
    parts = F.when(F.col("isolated"), F.array(mcol)).otherwise(F.col(PARTS))
    out = v.select(VID, parts.alias(PARTS), mcol.alias(MASTER), "isolated").persist(StorageLevel.MEMORY_AND_DISK)
    if rule == "hash":
        counts = dict.fromkeys(range(num_parts), 0)
        for r in out.groupBy(MASTER).count().collect():
            counts[int(r[MASTER])] = int(r["count"])
    # after the slices every vertex is counted once, in its master's count: the per-partition totals
    return Masters(df=out, per_part=[counts[k] for k in range(num_parts)], isolated=iso, cached=(v,))


def _check(
    dv: DatasetVersion,
    run: str,
    num_parts: int,
    j: DataFrame,
    bad_vid: Column,
    bad_parts: Column,
    n_vid: int,
    n_parts: int,
) -> None:
    """Replica rows naming no ingest vertex, or with no partition or one outside [0, P): the file, the count and
    examples (read again only when there are some)."""
    if n_vid:
        ex = [r[VID] for r in j.filter(bad_vid).limit(3).collect()]
        raise BadInputError(
            str(dv.replicas(run)),
            VID,
            n_vid,
            None,
            "name vertices that ingest/vertices does not have",
            ex,
            "re-run 'glisp partition' on this dataset version",
        )
    if n_parts:
        ex = [f"vid={r[VID]} parts={list(r[PARTS])}" for r in j.filter(bad_parts).limit(3).collect()]
        raise BadInputError(
            str(dv.replicas(run)),
            PARTS,
            n_parts,
            None,
            f"have an empty replica set or a partition id outside [0, {num_parts})",
            ex,
        )


def published_masters(spark: SparkSession, man: Manifest, run: str, num_parts: int, rule: str) -> Masters | None:
    """The masters ``serialize/<run>`` wrote (its ``masters/`` table), where they are what :func:`compute_masters`
    gives now: the stage is current (built from this ingest and partition run), under ``rule`` and ``num_parts``,
    by a build that writes the table. Masters are a pure function of those inputs, so reorder reads them
    instead of computing them again. None otherwise."""
    name = f"serialize/{run}"
    rec = man.stages.get(name)
    if rec is None or "masters_rows" not in rec.counts or man.location is None:
        return None
    if rec.params.get("master_rule") != rule or int(rec.params.get("parts", -1)) != num_parts:
        return None
    if not man.has_stage(name):  # its ingest and partition run are no longer the current ones
        return None
    df = read_parquet(spark, man.location.serialized(run) / MASTERS_DIR)  # vid, master[, degree]
    per_part = [int(x) for x in rec.counts["master_per_part"]]
    return Masters(df=df, per_part=per_part, isolated=int(rec.counts["isolated_vertices"]))
