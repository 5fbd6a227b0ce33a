"""Phase idmap: the vertex types, dense vids, and the vertex-side tables (idmap, vertices, features).

Two ways to vids, as ``keys`` explains: the rank map (integer ids, at most ``max_rank_map_vertices``
vertices; built on the driver from the key parts, no Spark job, and the vertex-side tables are written in
the background while the edges are mapped) or the dictionary (a global sort of the distinct (type, key),
written here; the edges are then joined with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from glisp_core.storage.uri import StoreURI
from glisp_spark.background import Background
from glisp_spark.tables import write_parquet
from spark_jobs.ingest.columns import REASON
from spark_jobs.ingest.dense_index import dense_index
from spark_jobs.ingest.keys import KeyPart, RankMap, build_rank_map, part_size
from spark_jobs.ingest.mapping import staged_frame
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.decide import Types
from spark_jobs.ingest.phases.read_check import EdgeRead
from spark_jobs.ingest.phases.vertex_checks import CheckedVertices
from spark_jobs.ingest.plan import IngestPlan
from spark_jobs.ingest.rules import DEFAULT_VERTEX_TYPE
from spark_jobs.ingest.vertex_tables import write_vertex_rows, write_vertex_tables

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_ROWS_PER_FILE = 4_000_000  # vertex-side tables: one Parquet file per this many rows (output_files = 0)


@dataclass(frozen=True)
class VertexCounts:
    """What the vertex-side tables hold, for the manifest."""

    per_vtype: dict[str, int] = field(default_factory=dict)
    maxlab: int | None = None  # the largest label
    nfeat: int = 0  # vertices with features


@dataclass(frozen=True)
class VertexIds:
    """Dense vids: the rank map or the (key, vid) dictionary, and the vertex-side tables' counts (or
    their writing in the background, rank map path)."""

    vertex_types: list[str]  # in code (and vid) order
    n_vertices: int
    vids: RankMap | DataFrame  # the rank map, or the dictionary (_vtc, _k, vid, ...) the edges are joined with
    tables: VertexCounts | Background[VertexCounts]

    @property
    def id_map(self) -> str:
        """How the manifest names the way vids were found."""
        return "rank" if isinstance(self.vids, RankMap) else "join"


def assign_vids(ctx: IngestContext, edges: EdgeRead, vertices: CheckedVertices | None, types: Types) -> VertexIds:
    """The vertex types and dense vids; the vertex-side tables written (or their writing started)."""
    parts = _rank_parts(ctx, edges, vertices, types)
    good_v = vertices.summary.good() if vertices is not None else []
    vtypes = _vertex_types(ctx.plan, {r["_vt"] for r in good_v if r["_vt"] is not None})
    rank = build_rank_map(parts, vtypes) if parts is not None else None
    if rank is not None and rank.n > ctx.plan.ing.max_rank_map_vertices:
        rank = None
    if rank is not None:  # the vertex-side tables are written while the edges are mapped
        if vertices is None:
            writing = Background(partial(_tables_from_rank, ctx, rank, vtypes))
        else:
            writing = Background(partial(_vertex_rows_by_rank, ctx, vertices, types, rank, vtypes))
        return VertexIds(vertex_types=vtypes, n_vertices=rank.n, vids=rank, tables=writing)
    index, n, counts = _dictionary(ctx, edges, vertices, types, vtypes)
    return VertexIds(vertex_types=vtypes, n_vertices=n, vids=index, tables=counts)


def _rank_parts(
    ctx: IngestContext, edges: EdgeRead, vertices: CheckedVertices | None, types: Types
) -> dict[str, list[KeyPart]] | None:
    """Key parts per vertex type name when the rank map applies, else None (the join path)."""
    if types.key_t != "long":
        return None
    if vertices is not None:
        parts = vertices.parts
    else:
        parts = {(k or DEFAULT_VERTEX_TYPE): v for k, v in edges.scan.parts.items()}
        if edges.scan.nonint:
            return None
    limit = ctx.plan.ing.max_rank_map_vertices
    if sum(part_size(p) for ps in parts.values() for p in ps) > 4 * limit:  # merging alone would cost too much
        return None
    return parts


def _vertex_types(plan: IngestPlan, names: set[str]) -> list[str]:
    """The configured vertex types, or the names seen (vertex tables, typed endpoints), sorted."""
    ing = plan.ing
    if ing.vertex_types:
        return list(ing.vertex_types)
    if plan.typed:
        names = names | {x for e in ing.edges for x in (e.src_type, e.dst_type)}
    if not ing.vertices and not plan.typed:
        names = {DEFAULT_VERTEX_TYPE}
    return sorted(n for n in names if n)


def _output_files(ctx: IngestContext, rows: int) -> int:
    """Files per vertex-side table: ``output_files``, or one per 4M rows."""
    return ctx.plan.ing.output_files or max(1, -(-rows // _ROWS_PER_FILE))


def _tables_from_rank(ctx: IngestContext, rank: RankMap, vtypes: list[str]) -> VertexCounts:
    """idmap and vertices of a graph without vertex tables, from the rank map alone (one job)."""
    files = _output_files(ctx, rank.n)
    write_vertex_tables(ctx.spark, rank, str(ctx.out.idmap), str(ctx.out.vertices), files)
    return VertexCounts(per_vtype={n: t.n for n, t in zip(vtypes, rank.types, strict=True) if t.n})


def _code_of(col: Column, codes: dict[str, int], nullable: bool = False) -> Column:
    """The code of each name in ``col`` (a constant when there is one name and no null)."""
    from pyspark.sql import functions as F

    if len(codes) == 1 and not nullable:
        return F.lit(next(iter(codes.values()))).cast("int")
    return F.create_map(*[x for k, v in codes.items() for x in (F.lit(k), F.lit(v))])[col].cast("int")


def _vertex_key_frame(vertices: CheckedVertices, types: Types, vtypes: list[str]) -> DataFrame:
    """The good vertex rows as (_vtc, _k, label, split, feat)."""
    from pyspark.sql import functions as F

    c = F.col
    vcode = {n: i for i, n in enumerate(vtypes)}
    lab = c("_lab")
    if types.label_names is not None:
        lab = _code_of(c("_lab_str"), {n: i for i, n in enumerate(types.label_names)}, True).cast("long")
    return vertices.rows.filter(c(REASON).isNull()).select(
        _code_of(c("_vt"), vcode).alias("_vtc"),
        c("_k"),
        lab.alias("label"),
        c("_spl").alias("split"),
        c("_feat").alias("feat"),
    )


def _vertex_rows_by_rank(
    ctx: IngestContext, vertices: CheckedVertices, types: Types, rank: RankMap, vtypes: list[str]
) -> VertexCounts:
    """Vertex-side tables of integer-id vertex tables, vids from the rank map (one job, no sort)."""
    out = ctx.out
    dirs = {"idmap": str(out.idmap), "vertices": str(out.vertices), "features": str(out.features)}
    parts = write_vertex_rows(_vertex_key_frame(vertices, types, vtypes), rank, dirs, types.feature_dim > 0)
    per_vtype: dict[str, int] = {}
    for p in parts:
        for code, n in p.per_type.items():
            per_vtype[vtypes[code]] = per_vtype.get(vtypes[code], 0) + n
    labs = [p.maxlab for p in parts if p.maxlab is not None]
    if sum(per_vtype.values()) != rank.n:
        raise AssertionError(f"{sum(per_vtype.values())} vertex rows for {rank.n} vertices")
    return VertexCounts(per_vtype=per_vtype, maxlab=max(labs) if labs else None, nfeat=sum(p.nfeat for p in parts))


def _dictionary(
    ctx: IngestContext, edges: EdgeRead, vertices: CheckedVertices | None, types: Types, vtypes: list[str]
) -> tuple[DataFrame, int, VertexCounts]:
    """Dense vids by a global sort of the distinct (type, key): vertex tables, or string ids; the
    dictionary, the number of vertices and the counts of the vertex-side tables it writes."""
    from pyspark.sql import functions as F

    c = F.col
    vcode = {n: i for i, n in enumerate(vtypes)}
    keys = (
        _vertex_key_frame(vertices, types, vtypes) if vertices is not None else _endpoint_keys(ctx, edges, types, vcode)
    )
    idx, n, idx_cached, vagg = dense_index(
        keys,
        [c("_vtc"), c("_k")],
        "vid",
        group=["_vtc"],
        aggs=[F.max("label").alias("maxlab"), F.count("feat").alias("nfeat")],
    )
    ctx.cached.append(idx_cached)
    per_vtype: dict[str, int] = {}
    for r in vagg:
        name = vtypes[r["_vtc"]]
        per_vtype[name] = per_vtype.get(name, 0) + int(r["count"])
    counts = VertexCounts(
        per_vtype=per_vtype,
        maxlab=max((r["maxlab"] for r in vagg if r["maxlab"] is not None), default=None),
        nfeat=sum(int(r["nfeat"]) for r in vagg),
    )
    _write_dictionary_tables(ctx, idx, _output_files(ctx, n), types.feature_dim > 0)
    return idx, n, counts


def _write_dictionary_tables(ctx: IngestContext, idx: DataFrame, nfiles: int, with_features: bool) -> None:
    """idmap, vertices and (``with_features``) features from the dictionary, by Spark's writer (the JVM's,
    or pyarrow in the tasks for a store the JVM cannot open: ``glisp_spark.tables``)."""
    from pyspark.sql import functions as F

    c = F.col

    def write(df: DataFrame, uri: StoreURI) -> None:
        write_parquet(df.coalesce(nfiles), uri)

    write(idx.select(c("vid"), c("_k").alias("orig_id"), c("_vtc").cast("int").alias("vtype")), ctx.out.idmap)
    write(
        idx.select(c("vid"), c("_vtc").cast("int").alias("vtype"), c("label").cast("long"), c("split").cast("byte")),
        ctx.out.vertices,
    )
    if with_features:
        write(idx.filter(c("feat").isNotNull()).select(c("vid"), c("feat")), ctx.out.features)


def _endpoint_keys(ctx: IngestContext, edges: EdgeRead, types: Types, vcode: dict[str, int]) -> DataFrame:
    """Distinct (type code, key) of the good edge endpoints (no vertex tables, join path)."""
    from pyspark.sql import functions as F

    c, ing = F.col, ctx.plan.ing
    sf = staged_frame(ctx.spark, edges.scan.staged_files(), types.key_t, {"_si": "short"})
    if ctx.plan.typed:
        st = {i: vcode[e.src_type] for i, e in enumerate(ing.edges)}
        dt = {i: vcode[e.dst_type] for i, e in enumerate(ing.edges)}
        s_code = F.create_map(*[x for k, v in st.items() for x in (F.lit(k), F.lit(v))])[c("_si")]
        d_code = F.create_map(*[x for k, v in dt.items() for x in (F.lit(k), F.lit(v))])[c("_si")]
    else:
        s_code = d_code = F.lit(0)
    ends = sf.select(s_code.alias("_vtc"), c("_s").alias("_k")).unionByName(
        sf.select(d_code.alias("_vtc"), c("_d").alias("_k"))
    )
    return ends.distinct().select(
        "_vtc",
        "_k",
        F.lit(None).cast("long").alias("label"),
        F.lit(-1).cast("byte").alias("split"),
        F.lit(None).cast("array<float>").alias("feat"),
    )
