"""What users consume from an inference run, as Parquet with their original ids.

- ``index/``: every vertex's original id, type, vid, partition and row in the run's arrays (what lookups by
  original id and the next version's refresh read);
- ``embeddings/``: every vertex's row of the last layer (the model's output: class logits for a node
  task, the embedding for a link task);
- ``predictions/`` (node task): the arg-max class and its softmax probability;
- ``scores/`` (link task): the dot-product score of every edge of the graph (each edge once: a
  vertex-cut stores it in one partition), or of the edge list ``infer.edges``.

Tasks read the last layer's Zarr array themselves (mapInArrow), so the rows go from Zarr to Parquet
through Spark's executors; only the vertices' ids are shuffled (to the tasks that read their rows), and the
driver only collects counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import Config
from glisp_core.dataset.layout import LABEL, ORIG_ID, PART, PREDICTION_COLUMNS, VID, VTYPE, DatasetVersion
from glisp_core.errors import BadInputError, GlispError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from glisp_infer.index import ROW, located
from glisp_infer.plan import InferPlan
from glisp_infer.store import INDEX_LABEL, INDEX_ROW, layer_name, open_array, read_rows
from glisp_spark.tables import mark_written, part_writer, read_csv, read_parquet, write_parquet
from glisp_spark.worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EDGE_STEP = 1 << 20  # edges scored per Arrow batch


def _fixed_list(h: np.ndarray) -> Any:
    import pyarrow as pa

    h = np.ascontiguousarray(h, np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(h.reshape(-1)), h.shape[1]).cast(pa.list_(pa.float32()))


class InOrder:
    """Rows of an array asked for in increasing order, batch after batch: each chunk is decoded once (the one read
    last is kept for the next batch). Rows in any order are still right, at a decode per change of chunk."""

    def __init__(self, arr: Any) -> None:
        self.arr, self.rows_per_chunk = arr, int(arr.chunks[0])
        self.chunk, self.block = -1, np.empty((0, *arr.shape[1:]), arr.dtype)

    def take(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        out = np.empty((len(rows), *self.arr.shape[1:]), self.arr.dtype)
        c = self.rows_per_chunk
        ks = rows // c
        cuts = np.flatnonzero(np.diff(ks)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(rows)], strict=True):
            k = int(ks[lo])
            if k != self.chunk:
                self.chunk, self.block = k, np.asarray(self.arr[k * c : (k + 1) * c])
            out[lo:hi] = self.block[rows[lo:hi] - k * c]
        return out


def vertex_columns(b: Any, emb: InOrder, labels: InOrder | None) -> dict[str, Any]:
    """The output columns of a batch of located ids (sorted by row): the ids, the last-layer row and, with
    ``labels`` (node task), the label (null: none, as glisp train writes it), the arg-max class and its
    probability."""
    import pyarrow as pa

    rows = b.column(ROW).to_numpy()
    h = np.asarray(emb.take(rows), np.float32)
    cols = {k: b.column(k) for k in (ORIG_ID, VTYPE, VID, PART, ROW)} | {"embedding": _fixed_list(h)}
    if labels is not None:
        lab = np.asarray(labels.take(rows), np.int64)
        z = np.exp(h - h.max(axis=1, keepdims=True))
        cols[LABEL] = pa.array(lab, pa.int64(), mask=lab < 0)
        cols["prediction"] = pa.array(h.argmax(axis=1).astype(np.int32))
        cols["score"] = pa.array((z.max(axis=1) / z.sum(axis=1)).astype(np.float32))
    return cols


def write_vertex_tables(ids: DataFrame, plan: InferPlan, tables: dict[str, Any]) -> int:
    """Write ``tables`` (name -> (directory URI, pyarrow schema): ``index``, ``embeddings`` and, node task,
    ``predictions``) from ``ids`` (:func:`located_ids`) in one pass: each task reads its chunks of the last
    layer (and of ``index/label``) once, in row order, and writes its own part file of every table
    (:func:`glisp_spark.tables.part_writer`), then ``_SUCCESS``. Returns the rows written."""
    qualified = [(u.qualified, schema) for u, schema in tables.values()]

    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        import contextlib

        import pyarrow as pa

        freeze_worker_heap()
        emb = InOrder(open_array(plan.store, layer_name(plan.layers)))
        labels = InOrder(open_array(plan.store, INDEX_LABEL)) if plan.task == "node" else None
        rows = 0
        with contextlib.ExitStack() as stack:
            writers = [(part_writer(stack, base, schema), schema) for base, schema in qualified]
            for b in batches:
                cols = vertex_columns(b, emb, labels)
                for w, schema in writers:
                    w.write_batch(pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema))
                rows += b.num_rows
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    total = sum(int(r["rows"]) for r in ids.mapInArrow(fn, "rows long").collect())
    for u, _ in tables.values():
        mark_written(u)
    return total


def located_ids(idm: DataFrame, plan: InferPlan) -> DataFrame:
    """Every vertex's ids with its row in the run, shuffled by chunk of rows and sorted by row. The id map's rows
    find their rows by the order's lookup arrays (map only); a task then reads each of its chunks of the arrays
    once, in order. Only the ids cross the shuffle, never the rows (a join by vid moved every embedding: 256
    floats a vertex for a link task's)."""
    from pyspark.sql import functions as F

    ids = located(idm.select(ORIG_ID, VTYPE, VID), plan)
    return ids.repartition(F.floor(F.col(ROW) / plan.layout.chunk_rows)).sortWithinPartitions(ROW)


def vertex_schemas(idm: DataFrame, node: bool) -> dict[str, Any]:
    """The pyarrow schemas of the run's ``index`` (each vertex's ids, partition and row), ``embeddings`` and
    (``node``) ``predictions``: the ids in the id map's own types."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    ids = to_arrow_schema(idm.select(ORIG_ID, VTYPE, VID).schema)
    out = {
        "index": pa.schema([*ids, pa.field(PART, pa.int32()), pa.field(ROW, pa.int64())]),
        "embeddings": pa.schema([*ids, pa.field("embedding", pa.list_(pa.float32()))]),
    }
    if node:
        by_name = {f.name: f for f in ids}
        extra = {LABEL: pa.int64(), "prediction": pa.int32(), "score": pa.float32()}
        out["predictions"] = pa.schema(
            [by_name[c] if c in by_name else pa.field(c, extra[c]) for c in PREDICTION_COLUMNS]
        )
    return out


def pair_scores(plan: InferPlan, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Dot-product scores of (src[i], dst[i]) from the last layer (glisp_core.models.link_scores)."""
    import torch

    from glisp_core.models import link_scores

    ids = np.unique(np.concatenate([src, dst]))
    rows = np.asarray(open_array(plan.store, INDEX_ROW).get_orthogonal_selection(ids), np.int64)
    emb, _ = read_rows(open_array(plan.store, layer_name(plan.layers)), rows)
    hs = torch.from_numpy(emb[np.searchsorted(ids, src)])
    hd = torch.from_numpy(emb[np.searchsorted(ids, dst)])
    return link_scores(hs, hd).numpy().astype(np.float32)


def edge_scores(plan: InferPlan) -> Any:
    """mapInArrow over partition ids: the score of every edge stored in each partition."""

    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        freeze_worker_heap()
        import pyarrow as pa

        for b in batches:
            for part in b.column(0).to_pylist():
                r = plan.open_partition(part)
                gid = np.asarray(r.global_id, np.int64)
                for a in range(0, r.num_edges, EDGE_STEP):
                    eids = np.arange(a, min(a + EDGE_STEP, r.num_edges), dtype=np.int64)
                    src, dst = gid[r.edge_src(eids)], gid[r.edge_dst(eids)]
                    yield pa.RecordBatch.from_pydict(
                        {
                            "src_vid": pa.array(src),
                            "dst_vid": pa.array(dst),
                            "etype": pa.array(r.edge_type(eids)),
                            "score": pa.array(pair_scores(plan, src, dst)),
                        }
                    )

    return fn


def list_scores(plan: InferPlan) -> Any:
    """mapInArrow over the user's edge list (with src_vid, dst_vid): appends ``score``."""

    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        freeze_worker_heap()
        import pyarrow as pa

        for b in batches:
            if b.num_rows == 0:
                continue
            s = pair_scores(plan, b.column("src_vid").to_numpy(), b.column("dst_vid").to_numpy())
            yield b.append_column("score", pa.array(s))

    return fn


def _idmap(spark: SparkSession, dv: DatasetVersion, vertex_types: list[str]) -> DataFrame:
    from pyspark.sql import functions as F

    names = F.array(*[F.lit(t) for t in vertex_types]) if vertex_types else F.array(F.lit(""))
    # the original ids in the user's own type (integers stay integers)
    return read_parquet(spark, dv.idmap).select(VID, ORIG_ID, F.element_at(names, F.col(VTYPE) + 1).alias(VTYPE))


def _parts_df(spark: SparkSession, plan: InferPlan) -> DataFrame:
    rdd = spark.sparkContext.parallelize([(k,) for k in range(plan.num_parts)], plan.num_parts)
    return spark.createDataFrame(rdd, "part int")


def write_outputs(
    spark: SparkSession,
    plan: InferPlan,
    cfg: Config,
    dv: DatasetVersion,
    out: StoreURI,
    vertex_types: list[str],
    edge_types: list[str],
) -> dict[str, int]:
    """Write embeddings (and predictions or scores) under ``out`` (the stage's attempt prefix); returns row counts."""
    from pyspark.sql import functions as F

    idm = _idmap(spark, dv, vertex_types)
    tables = {t: (out / t, schema) for t, schema in vertex_schemas(idm, plan.task == "node").items()}
    written = write_vertex_tables(located_ids(idm, plan), plan, tables)
    if written != plan.layout.num_vertices:
        raise GlispError(f"{out}: {written:,} vertices written, the run has {plan.layout.num_vertices:,}")
    counts = {t: written for t in tables if t != "index"}
    if plan.task == "link":
        if cfg.infer.edges:
            scored, counts["scores"] = _score_edge_list(spark, plan, cfg, idm)
        else:
            et = F.array(*[F.lit(t) for t in edge_types]) if edge_types else F.array(F.lit(""))
            scored = (
                _parts_df(spark, plan)
                .mapInArrow(edge_scores(plan), "src_vid long, dst_vid long, etype int, score float")
                .withColumn("etype", F.element_at(et, F.col("etype") + 1))
            )
            s_ids = idm.select(F.col(VID).alias("src_vid"), F.col(ORIG_ID).alias("src"), F.col(VTYPE).alias("src_type"))
            d_ids = idm.select(F.col(VID).alias("dst_vid"), F.col(ORIG_ID).alias("dst"), F.col(VTYPE).alias("dst_type"))
            scored = (
                scored.join(s_ids, "src_vid")
                .join(d_ids, "dst_vid")
                .select("src", "src_type", "dst", "dst_type", "etype", "score", "src_vid", "dst_vid")
            )
            counts["scores"] = _num_edges(plan)
        write_parquet(scored, out / "scores", "error")
    return counts


def _num_edges(plan: InferPlan) -> int:
    """Edges stored over all partitions (each edge in exactly one): the rows of ``scores/``, from each partition's
    ``meta.json`` (the driver maps no partition)."""
    import json

    from glisp_core.partition_format.spec import META_FILE

    total = 0
    for k in range(plan.num_parts):
        meta = plan.partition_dir(k) / META_FILE
        total += int(json.loads(store_for(meta).read_bytes(meta))["num_edges"])
    return total


def read_table(spark: SparkSession, path: str) -> DataFrame:
    """A Parquet or CSV (with a header) table from any store, chosen by extension (a directory is Parquet)."""
    low = path.lower()
    if low.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
        return read_csv(spark, path, "\t" if low.endswith(".tsv") else ",")
    return read_parquet(spark, path)


def _score_edge_list(spark: SparkSession, plan: InferPlan, cfg: Config, idm: DataFrame) -> tuple[DataFrame, int]:
    """The user's edge list with vertex ids resolved (unknown or ambiguous ids are bad input), scored;
    and its number of rows."""
    from pyspark.sql import functions as F

    ic = cfg.infer
    path = ic.edges
    df = read_table(spark, path)
    for col in (ic.edges_src, ic.edges_dst):
        if col not in df.columns:
            raise GlispError(
                f"{path}: no column {col!r} (columns: {df.columns}); set infer.edges_src / "
                "infer.edges_dst, e.g. --set infer.edges_src=source"
            )
    total = df.count()
    sides = []
    for side, col in (("src", ic.edges_src), ("dst", ic.edges_dst)):
        typed = f"{side}_type" in df.columns
        ids = idm.select(
            F.col(VID).alias(f"{side}_vid"), F.col(ORIG_ID).alias(f"_{side}_key"), F.col(VTYPE).alias(f"_{side}_vt")
        )
        sides.append((side, col, typed, ids))
    out = df.withColumn("_row", F.monotonically_increasing_id())
    for side, col, typed, ids in sides:
        cond = F.col(col).cast("string") == F.col(f"_{side}_key").cast("string")
        if typed:
            cond = cond & (F.col(f"{side}_type") == F.col(f"_{side}_vt"))
        out = out.join(ids, cond, "left")
        bad = out.filter(F.col(f"{side}_vid").isNull())
        nbad = bad.count()
        if nbad:
            ex = [r[0] for r in bad.select(col).limit(3).collect()]
            raise BadInputError(
                path,
                col,
                nbad,
                total,
                "name no vertex of the graph",
                ex,
                f"use the original ids of ingest{' with a ' + side + '_type column' if typed else ''}",
            )
        dup = out.groupBy("_row").count().filter(F.col("count") > 1)
        if dup.limit(1).count():
            ex = [r[0] for r in out.join(dup, "_row").select(col).limit(3).collect()]
            raise BadInputError(
                path,
                col,
                dup.count(),
                total,
                "match vertices of several types",
                ex,
                f"add a {side}_type column naming the vertex type",
            )
        out = out.drop(f"_{side}_key", f"_{side}_vt")
    out = out.drop("_row")
    par = max(1, spark.sparkContext.defaultParallelism)
    schema = out.schema.add("score", "float")
    return out.repartition(par).mapInArrow(list_scores(plan), schema), total
