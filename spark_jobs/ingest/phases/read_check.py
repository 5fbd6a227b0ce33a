"""Phase read_check: every table read and its row rules applied; counts, key sets and good edge rows staged.

Why this shape: the edge tables go through ``edgestage`` (one job; rows that surely pass every rule never
enter the JVM) and only the rows it leaves go through Spark's rules and ``scan`` (one more job, usually
none). The vertex tables are read, checked and scanned meanwhile in a background thread. Bad edge rows fail
the run or are quarantined here; bad vertex rows wait for the vertex_checks phase (it adds two rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glisp_core.errors import BadInputError
from glisp_spark.background import Background
from spark_jobs.ingest.checks import Summary, no_edges_error, summary_of
from spark_jobs.ingest.columns import CORRUPT, FID, RCOL, REASON, ROWPOS, SI
from spark_jobs.ingest.edgestage import GROUP, EdgeTable, StageOpts, dirty_frame, stage_edges
from spark_jobs.ingest.keys import KeyPart
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.readers import SourceFrame
from spark_jobs.ingest.rules import (
    DEFAULT_EDGE_TYPE,
    edge_rules_frame,
    key_string,
    open_edge_source,
    vertex_source_frame,
)
from spark_jobs.ingest.scan import KeySpec, ScanResult, StageSpec, merge_payloads, scan, scan_payloads

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@dataclass(frozen=True)
class EdgeRead:
    """The edge tables read and checked: counts per group (``edgestage.GROUP``), the merged scan (integer
    key parts when there are no vertex tables, the staged good rows) and the rows quarantined per kind."""

    summary: Summary
    scan: ScanResult
    rejects: dict[str, int]

    @property
    def rows_in(self) -> int:
        """Input edge rows, good or bad."""
        return self.summary.total


@dataclass(frozen=True)
class VertexRows:
    """The vertex tables read and their row rules applied (persisted), with counts and integer key parts."""

    rows: DataFrame
    summary: Summary
    parts: dict[str, list[KeyPart]]  # vertex type -> the tasks' key parts (integer ids only)


def read_check(ctx: IngestContext) -> tuple[EdgeRead, VertexRows | None]:
    """Both kinds of tables read and checked: the vertex tables are read while the edge job runs."""
    reading = Background(lambda: read_vertices(ctx)) if ctx.plan.ing.vertices else None
    try:
        edges = read_edges(ctx)
        if not edges.summary.good():
            raise no_edges_error(ctx.plan.files[0], edges.rows_in)
    except BaseException:
        if reading is not None:
            reading.wait()
        raise
    return edges, reading.result() if reading is not None else None


# ---- edge tables ----------------------------------------------------------------------------------
def _open_edges(ctx: IngestContext) -> tuple[list[EdgeTable], list[SourceFrame]]:
    """An EdgeTable (what ``edgestage`` needs) and the SourceFrame of every edge table."""
    plan, ing = ctx.plan, ctx.plan.ing
    tables, frames, offset = [], [], 0
    for i, e in enumerate(ing.edges):
        sf = open_edge_source(ctx.spark, plan, i, offset)
        ctx.read_tasks[i] = sf.tasks
        offset += len(sf.files)
        frames.append(sf)
        ok_et = bool(e.etype) or not ing.edge_types or (e.edge_type or DEFAULT_EDGE_TYPE) in ing.edge_types
        ok_vt = not (plan.typed and ing.vertex_types) or {e.src_type, e.dst_type} <= set(ing.vertex_types)
        tables.append(
            EdgeTable(
                si=i,
                spec=sf.spec,
                tasks=tuple(sf.tasks),
                src=e.src,
                dst=e.dst,
                weight=e.weight,
                timestamp=e.timestamp,
                etype=e.etype,
                allowed_types=tuple(ing.edge_types),
                constants_ok=ok_et and ok_vt,
                int_ids=ing.id_type != "string",
                src_type=e.src_type,
                dst_type=e.dst_type,
            )
        )
    return tables, frames


def _stage_specs(ctx: IngestContext) -> tuple[StageSpec, list[KeySpec]]:
    """Which columns of a good edge row are staged, and (no vertex tables, integer ids) which keys are collected."""
    ing = ctx.plan.ing
    cols = [("_si", SI, "int16")]
    if ing.vertices:
        cols.append(("_fid", FID, "int32"))
    if any(e.etype for e in ing.edges):
        cols.append(("_et", "_et", "string"))
    if ctx.plan.weighted:
        cols.append(("_w", "_w", "float32"))
    if ctx.plan.timestamped:
        cols.append(("_ts", "_ts", "int64"))
    if ing.duplicates == "drop" or ing.vertices:  # with vertex tables: a missing endpoint names its line
        cols.append(("_rowpos", ROWPOS, "int64"))
    stage = StageSpec(str(ctx.stage / "edges"), (("_s", "_s_int", "_s_str"), ("_d", "_d_int", "_d_str")), tuple(cols))
    keys = []
    if not ing.vertices and ing.id_type != "string":
        st = tuple((i, e.src_type) for i, e in enumerate(ing.edges))
        dt = tuple((i, e.dst_type) for i, e in enumerate(ing.edges))
        keys = [KeySpec("_s_int", "_s_str", type_by_si=st), KeySpec("_d_int", "_d_str", type_by_si=dt)]
    return stage, keys


def _for_scan(ctx: IngestContext, i: int, df: DataFrame) -> DataFrame:
    """The columns the scan needs; a table's constant edge type is known from _si, not shipped per row."""
    from pyspark.sql import functions as F

    et = F.col("_et") if ctx.plan.ing.edges[i].etype else F.lit(None).cast("string")
    cols = [SI, FID, ROWPOS, REASON, RCOL, "_nonint", "_s_int", "_s_str", "_d_int", "_d_str", "_w", "_ts"]
    return df.select(*cols, et.alias("_et"))


def _edge_raw() -> dict[str, Column]:
    """The raw fields a bad edge row is reported with."""
    from pyspark.sql import functions as F

    c = F.col
    return {
        "src": key_string(c("_s_int"), c("_s_str")),
        "dst": key_string(c("_d_int"), c("_d_str")),
        "etype": c("_et"),
        "weight": F.coalesce(c("_w_raw"), c("_w").cast("string")),
        "timestamp": F.coalesce(c("_ts_raw"), c("_ts").cast("string")),
        "record": c(CORRUPT),
    }


def _no_rows_error(ctx: IngestContext, summary: Summary) -> BadInputError | None:
    """The error for the first edge table without a single row (good or bad), if any."""
    ing = ctx.plan.ing
    for i in range(len(ing.edges)):
        if sum(int(r["count"]) for r in summary.extra if r[SI] == i) == 0:
            f0 = ctx.plan.edge_files[i][0]
            return BadInputError(
                str(f0) if len(ctx.plan.edge_files[i]) == 1 else ing.edges[i].path,
                "*",
                0,
                0,
                "found: the edge input has no rows at all",
                hint="check the path and the file",
            )
    return None


def read_edges(ctx: IngestContext) -> EdgeRead:
    """Every table through ``edgestage`` (one job), the rows it left through Spark's rules and
    ``scan`` (one more job, only when there are such rows); counts, key sets and files merged."""
    tables, sources = _open_edges(ctx)
    stage, keys = _stage_specs(ctx)
    ing = ctx.plan.ing
    opts = StageOpts(str(ctx.stage), keys=bool(keys), fid=bool(ing.vertices), rowpos=ing.duplicates == "drop")
    staged = stage_edges(ctx.spark, tables, opts)
    for times in staged.times:
        ctx.ph.add_task_seconds(times)
    frames = []
    for si, paths in staged.dirty.items():
        if paths:
            sf = sources[si]
            df = dirty_frame(ctx.spark, paths, sf.spec)
            dirty = SourceFrame(df=df, files=sf.files, fmt=sf.fmt, columns=sf.columns, spec=sf.spec)
            frames.append((si, edge_rules_frame(ctx.plan, si, dirty, ctx.id_long)))
    payloads = list(staged.tasks)
    if frames:
        payloads += scan_payloads(_union([_for_scan(ctx, i, df) for i, df in frames]), list(GROUP), keys, stage)
    res = merge_payloads(payloads, list(GROUP))
    summary = summary_of(res.counts)
    err = _no_rows_error(ctx, summary)
    if err is not None:
        raise err
    rejects: dict[str, int] = {}
    if summary.bad:  # every bad row is in the rule frames (a clean row is never bad)
        rejects = ctx.handle_bad(_union([df for _, df in frames]), summary, _edge_raw())
    return EdgeRead(summary=summary, scan=res, rejects=rejects)


# ---- vertex tables --------------------------------------------------------------------------------
def read_vertices(ctx: IngestContext) -> VertexRows:
    """Every vertex table with its row rules, persisted, and one scan: counts and integer key parts."""
    from pyspark.storagelevel import StorageLevel

    plan, ing = ctx.plan, ctx.plan.ing
    vframes = []
    offset = sum(len(f) for f in plan.edge_files)
    for i in range(len(ing.vertices)):
        df, sf = vertex_source_frame(ctx.spark, plan, i, offset, ctx.id_long)
        ctx.read_tasks[len(ing.edges) + i] = sf.tasks
        vframes.append(df)
        offset += len(sf.files)
    rows = _union(vframes).persist(StorageLevel.MEMORY_AND_DISK)
    ctx.cached.append(rows)
    keys = [KeySpec("_id_int", "_id_str", type_col="_vt")] if ing.id_type != "string" else []
    res = scan(rows, [FID, REASON, RCOL, "_vt", "_nonint", "_labnonint", "_fw", SI], keys)
    summary = summary_of(res.counts)
    for i in range(len(ing.vertices)):
        if sum(int(r["count"]) for r in summary.extra if r[SI] == i) == 0:
            raise BadInputError(
                ing.vertices[i].path,
                "*",
                0,
                0,
                "found: the vertex input has no rows at all",
                hint="check the path and the file",
            )
    return VertexRows(rows=rows, summary=summary, parts=res.parts)


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out
