"""Phase map: staged edge endpoints -> vids (``mapping``), missing endpoints reported, rows bucketed by source vid.

Why the bucket plan is made here: its vid ranges need the number of vertices (idmap) and the input rows,
and the sort/write phase reads the same plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.ingest import mapping
from spark_jobs.ingest.checks import Summary, no_edges_error
from spark_jobs.ingest.columns import FID
from spark_jobs.ingest.edgefiles import BucketResult, EdgePlan, bucket_bounds
from spark_jobs.ingest.keys import RankMap
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.decide import Types
from spark_jobs.ingest.phases.idmap import VertexIds
from spark_jobs.ingest.phases.read_check import EdgeRead

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class MappedEdges:
    """The edges mapped and bucketed: per-task results, self-loops, good rows left, rows quarantined."""

    buckets: list[BucketResult]
    loops: int  # self-loops among the mapped rows (before any drop)
    good_rows: int  # rows that passed the rules and have both endpoints
    rejects: dict[str, int]


def edge_plan(ctx: IngestContext, types: Types, ids: VertexIds, rows_in: int) -> EdgePlan:
    """What the map and sort tasks need: vid ranges of the buckets, policies, type codes, column names."""
    ing, plan = ctx.plan.ing, ctx.plan
    ecode = {n: i for i, n in enumerate(types.edge_types)}
    vcode = {n: i for i, n in enumerate(ids.vertex_types)}
    par = int(ctx.spark.sparkContext.defaultParallelism)
    rows = rows_in * (1 if ing.directed else 2)
    return EdgePlan(
        stage=str(ctx.stage),
        out=str(ctx.out.edges),
        num_vertices=ids.n_vertices,
        bounds=bucket_bounds(ids.n_vertices, rows, par, ing.output_files),
        directed=ing.directed,
        drop_loops=ing.self_loops == "drop",
        duplicates=ing.duplicates,
        has_w=plan.weighted,
        has_ts=plan.timestamped,
        etype_const=tuple((i, ecode[n]) for i, n in types.etype_const.items() if n in ecode),
        etype_codes=tuple(ecode.items()),
        src_vtype=tuple((i, vcode[e.src_type]) for i, e in enumerate(ing.edges)) if plan.typed else (),
        dst_vtype=tuple((i, vcode[e.dst_type]) for i, e in enumerate(ing.edges)) if plan.typed else (),
        src_names=tuple(e.src for e in ing.edges),
        dst_names=tuple(e.dst for e in ing.edges),
    )


def map_edges(ctx: IngestContext, edges: EdgeRead, ids: VertexIds, eplan: EdgePlan, types: Types) -> MappedEdges:
    """Every staged row mapped (rank map: numpy tasks; else two joins with the dictionary) and bucketed."""
    files = edges.scan.staged_files()
    missing: Callable[[], DataFrame]
    if isinstance(ids.vids, RankMap):
        rank = ids.vids
        results = mapping.map_with_rank(ctx.spark, files, rank, eplan, ctx.plan.typed)
        missing = lambda: mapping.rank_missing_frame(ctx.spark, files, rank, eplan, ctx.plan.typed)  # noqa: E731
    else:
        joined = _joined(ctx, files, ids.vids, types, ids.vertex_types)
        results = mapping.map_with_join(joined, eplan)
        missing = lambda: mapping.join_missing_frame(joined, eplan)  # noqa: E731
    for r in results:
        ctx.ph.add_task_seconds(r.times)
    counts: dict[tuple[int, str], int] = {}
    for r in results:
        for k, n in r.missing.items():
            counts[k] = counts.get(k, 0) + n
    rejects = _missing_rejects(ctx, edges, counts, missing) if counts else {}
    good_rows = sum(int(r["count"]) for r in edges.summary.good()) - sum(counts.values())
    if good_rows <= 0:
        raise no_edges_error(ctx.plan.files[0], edges.rows_in)
    return MappedEdges(buckets=results, loops=sum(r.loops for r in results), good_rows=good_rows, rejects=rejects)


def _missing_rejects(
    ctx: IngestContext, edges: EdgeRead, counts: dict[tuple[int, str], int], missing: Callable[[], DataFrame]
) -> dict[str, int]:
    """Fail on or quarantine the rows with a missing endpoint (``counts`` per file and column); their
    frame is computed only now, for the examples or the rejects table."""
    from pyspark.sql import functions as F

    good_per_file: dict[int, int] = {}
    for r in edges.summary.good():
        good_per_file[r[FID]] = good_per_file.get(r[FID], 0) + int(r["count"])
    s2 = Summary(file_totals=good_per_file)
    for (fid, col), n in counts.items():
        s2.bad[("edge_missing_endpoint", fid, col)] = n
    raw = {k: F.col(k) for k in ("src", "dst", "etype", "weight", "timestamp")}
    return ctx.handle_bad(missing(), s2, raw)


def _joined(ctx: IngestContext, files: list[str], idx: DataFrame, types: Types, vtypes: list[str]) -> DataFrame:
    """Staged rows joined with the dictionary: vids in src/dst, null where the endpoint is missing."""
    from pyspark.sql import functions as F

    c, plan, ing = F.col, ctx.plan, ctx.plan.ing
    cols = {"_si": "short"}
    if ing.vertices:
        cols["_fid"] = "int"
    if any(e.etype for e in ing.edges):
        cols["_et"] = "string"
    if plan.weighted:
        cols["_w"] = "float"
    if plan.timestamped:
        cols["_ts"] = "bigint"
    if ing.duplicates == "drop" or ing.vertices:  # staged with a vertex table: a missing endpoint names its line
        cols["_rowpos"] = "bigint"
    e = mapping.staged_frame(ctx.spark, files, types.key_t, cols)
    m = idx.select(c("_vtc"), c("_k"), c("vid"))
    skeys, dkeys = ["_s"], ["_d"]
    if plan.typed:
        vcode = {n: i for i, n in enumerate(vtypes)}
        for side, attr, keys in (("_stc", "src_type", skeys), ("_dtc", "dst_type", dkeys)):
            codes = {i: vcode[getattr(x, attr)] for i, x in enumerate(ing.edges)}
            e = e.withColumn(side, F.create_map(*[y for k, v in codes.items() for y in (F.lit(k), F.lit(v))])[c("_si")])
            keys.append(side)
    ms = m.select(c("_k").alias("_s"), c("vid").alias("src"), *([c("_vtc").alias("_stc")] if plan.typed else []))
    md = m.select(c("_k").alias("_d"), c("vid").alias("dst"), *([c("_vtc").alias("_dtc")] if plan.typed else []))
    return e.join(ms, skeys, "left").join(md, dkeys, "left")
