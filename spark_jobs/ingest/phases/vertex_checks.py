"""Phase vertex_checks: the two vertex rules that need every row at once, then fail or quarantine.

Why after read_check: the feature width is right when it is the most common width (known only from the
counts of every row), and a duplicate id is a row whose id an earlier row (by row position) already gave.
When the first scan shows neither can happen (one width; as many distinct integer ids as good rows),
no join and no second scan are needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.ingest.checks import Summary, summary_of
from spark_jobs.ingest.columns import CORRUPT, FID, RCOL, REASON, ROWPOS, SI
from spark_jobs.ingest.keys import KeyPart, merge_parts
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.decide import Types
from spark_jobs.ingest.phases.read_check import VertexRows
from spark_jobs.ingest.rules import key_string
from spark_jobs.ingest.scan import KeySpec, scan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class CheckedVertices:
    """Every vertex row with its final reason and ``_k`` (its key in the vid dictionary), persisted."""

    rows: DataFrame
    summary: Summary
    parts: dict[str, list[KeyPart]]  # vertex type -> the tasks' key parts (integer ids only)
    rejects: dict[str, int]


def _vertex_raw() -> dict[str, Column]:
    """The raw fields a bad vertex row is reported with."""
    from pyspark.sql import functions as F

    c = F.col
    return {
        "id": key_string(c("_id_int"), c("_id_str")),
        "vtype": c("_vt"),
        "label": c("_lab_raw"),
        "split": c("_spl_raw"),
        "features": c("_feat_raw"),
        "record": c(CORRUPT),
    }


def _no_second_phase_problem(vertices: VertexRows, types: Types, typed: bool) -> bool:
    """True when no good row has a stray feature width and every integer key is distinct (from the
    first scan's counts and key sets): then the duplicate check needs no join."""
    good = vertices.summary.good()
    if types.key_t != "long" or not vertices.parts or not good:
        return False
    if any(r["_fw"] >= 0 and r["_fw"] != types.feature_dim for r in good):
        return False
    if typed:
        distinct = sum(merge_parts(ps).n for ps in vertices.parts.values())
    else:  # untyped edges: an id names one vertex whatever its type
        distinct = merge_parts([p for ps in vertices.parts.values() for p in ps]).n
    return distinct == sum(int(r["count"]) for r in good)


def _second_phase_rows(ctx: IngestContext, rows: DataFrame, types: Types, key: Column) -> DataFrame:
    """``rows`` with the feature-width rule (the most common width wins), then the duplicate rule (the
    first row by position keeps the id), each only for a row that broke no earlier rule."""
    from pyspark.sql import functions as F

    c = F.col
    fw_bad = c(REASON).isNull() & (c("_fw") >= 0) & (c("_fw") != types.feature_dim)
    feat_text = F.when(c("_feat").isNotNull(), c("_feat").cast("string"))
    v1 = (
        rows.withColumn(RCOL, F.when(fw_bad, c("_fcol")).otherwise(c(RCOL)))
        .withColumn("_feat_raw", F.when(fw_bad, feat_text).otherwise(c("_feat_raw")))
        .withColumn(REASON, F.when(fw_bad, F.lit("vertex_feature_width")).otherwise(c(REASON)))
        .withColumn("_k", key)
    )
    kcols = ["_vt", "_k"] if ctx.plan.typed else ["_k"]
    first = v1.filter(c(REASON).isNull()).groupBy(*kcols).agg(F.min(ROWPOS).alias("_first"))
    dup = c(REASON).isNull() & (c(ROWPOS) != c("_first"))
    idcols = {i: v.id for i, v in enumerate(ctx.plan.ing.vertices)}
    id_name = F.create_map(*[x for i, n in idcols.items() for x in (F.lit(i), F.lit(n))])[c(SI)]
    return (
        v1.join(first, kcols, "left")
        .withColumn(RCOL, F.when(dup, id_name).otherwise(c(RCOL)))
        .withColumn(REASON, F.when(dup, F.lit("vertex_duplicate")).otherwise(c(REASON)))
    )


def vertex_checks(ctx: IngestContext, vertices: VertexRows, types: Types) -> CheckedVertices:
    """Feature width and duplicate ids checked (a join and a second scan only when they can fail)."""
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    c = F.col
    key = c("_id_int") if types.key_t == "long" else key_string(c("_id_int"), c("_id_str"))
    if _no_second_phase_problem(vertices, types, ctx.plan.typed):
        rows = vertices.rows.withColumn("_k", key)
        rejects = ctx.handle_bad(rows, vertices.summary, _vertex_raw())
        return CheckedVertices(rows=rows, summary=vertices.summary, parts=vertices.parts, rejects=rejects)
    v2 = _second_phase_rows(ctx, vertices.rows, types, key).persist(StorageLevel.MEMORY_AND_DISK)
    ctx.cached.append(v2)
    keys = [KeySpec("_id_int", "_id_str", type_col="_vt")] if types.key_t == "long" else []
    res = scan(v2, [FID, REASON, RCOL, "_vt"], keys)
    summary = summary_of(res.counts)
    rejects = ctx.handle_bad(v2, summary, _vertex_raw())
    vertices.rows.unpersist()
    return CheckedVertices(rows=v2, summary=summary, parts=res.parts, rejects=rejects)
