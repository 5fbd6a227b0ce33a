"""``glisp serialize``: ingest edges + a partition assignment -> one binary GLISP partition per server.

Spark computes what needs the whole graph (global degrees, replica sets, masters), routes each edge
and each vertex replica to its partition, and one cogroup task per partition builds and writes that
partition's files into the stage's attempt prefix in the store (spark_jobs.serialize.build). The driver
only collects one summary row per partition (with the hash of the partition's meta.json), checks what the
store holds against those rows, then publishes the stage with its footprint in the manifest. The attempt
may be on any store the tasks can open (a local or shared disk, HDFS, S3): the driver and the tasks share
no path, only its URI.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from glisp_core.config import Config, SerializeConfig
from glisp_core.dataset.layout import (
    DST,
    EID,
    ETYPE,
    FEAT,
    LABEL,
    MASTER,
    PART,
    PARTS,
    SPLIT,
    SRC,
    TS,
    VID,
    VTYPE,
    WEIGHT,
    DatasetVersion,
)
from glisp_core.dataset.manifest import Manifest, StageRecord, read_manifest
from glisp_core.dataset.publish import StagePublisher, up_to_date
from glisp_core.errors import BadInputError, StageError
from glisp_core.partition_format import FIELD_BY_NAME, FORMAT_VERSION, META_FILE
from glisp_core.storage.store import Store
from glisp_core.storage.uri import StoreURI
from glisp_spark.session import size_shuffles
from glisp_spark.tables import read_parquet
from spark_jobs.serialize.build import SUMMARY_SCHEMA, BuildContext, build_partition, empty_inputs, make_task
from spark_jobs.serialize.master import MASTERS_DIR, compute_masters

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def latest_partition_run(man: Manifest) -> str:
    """The partition run published last (by completion time, then name)."""
    run = man.latest_run("partition")
    if run is None:
        raise StageError(f"{man.graph}/{man.version}: no partition stage published; run 'glisp partition' first")
    return run


def resolve_run(man: Manifest, run: str | None) -> tuple[str, int]:
    """Partition run name (explicit or the latest) and its number of partitions."""
    run = run or latest_partition_run(man)
    rec = man.stage(f"partition/{run}")
    parts = rec.counts.get("parts", rec.params.get("parts"))
    if not isinstance(parts, int) or parts < 1:
        raise StageError(f"stage partition/{run}: counts.parts must be a positive int (got {parts!r})")
    return run, parts


def _check_assignment(
    spark: SparkSession, dv: DatasetVersion, run: str, num_parts: int, num_edges: int, subset: bool = False
) -> tuple[DataFrame, DataFrame]:
    """Every ingest edge has exactly one assignment row with a part in [0, P); returns edges joined with part.

    The check reads the assignment alone (its row count, its parts' range): the edge set is joined once, by the
    build, whose join puts an edge no assignment row names in a group of its own that the build reports
    (:func:`_build_partitions`). Only a row count other than the edges' makes the check join, to say which rows.

    ``subset``: the run partitions only some ingest edges (a link-prediction training graph, whose held-out
    edges are left out); then every assignment row names a distinct ingest edge, ``num_edges`` of them, and
    the returned edges are that subset (so global degrees count only the edges served).
    """
    from pyspark.sql import functions as F

    edges = read_parquet(spark, dv.edges)
    assign = read_parquet(spark, dv.assignment(run)).select(EID, F.col(PART).cast("int").alias(PART))
    if subset:
        edges = edges.join(assign.select(EID), EID, "left_semi")
    joined = edges.join(assign, EID, "left")
    outside = (F.col(PART) < 0) | (F.col(PART) >= num_parts)
    stats = assign.agg(F.count("*").alias("rows"), F.sum(outside.cast("long")).alias("out_of_range")).collect()[0]
    path = str(dv.assignment(run))
    if stats["out_of_range"]:
        ex = [f"eid={r[EID]} part={r[PART]}" for r in assign.filter(outside).limit(3).collect()]
        raise BadInputError(path, PART, stats["out_of_range"], num_edges, f"are outside [0, {num_parts})", ex)
    if stats["rows"] != num_edges:
        join_check(joined, path, num_edges)
    return edges, joined


def join_check(joined: DataFrame, path: str, num_edges: int) -> None:
    """BadInputError when some edges have no assignment row or some have several (one join of both; run only
    when the assignment's row count is off or a build failed, to name the cause)."""
    from pyspark.sql import functions as F

    stats = joined.agg(F.count("*").alias("rows"), F.sum(F.col(PART).isNull().cast("long")).alias("missing"))
    got = stats.collect()[0]
    if got["missing"]:
        ex = [r[EID] for r in joined.filter(F.col(PART).isNull()).select(EID).limit(3).collect()]
        raise unassigned_error(path, got["missing"], num_edges, ex)
    if got["rows"] != num_edges:
        raise BadInputError(
            path,
            EID,
            got["rows"] - num_edges,
            num_edges,
            "are extra assignment rows (duplicate eids)",
            hint="re-run 'glisp partition'",
        )


def unassigned_error(path: str, count: int, num_edges: int, examples: list[Any]) -> BadInputError:
    """Ingest edges that no row of the assignment at ``path`` names."""
    return BadInputError(
        path, EID, count, num_edges, "of ingest/edges have no assignment row", examples, "re-run 'glisp partition'"
    )


def check_written(
    store: Store,
    out: StoreURI,
    run: str,
    summaries: list[dict[str, Any]],
    num_edges: int,
    parquet: bool,
    expected: str = "ingest has",
) -> None:
    """What the store holds, not what the tasks reported, must be complete before the stage is published.

    One listing of the attempt, and every partition's meta.json read back (small): it must be the one its
    task wrote (the hash the task returned), every field object must have the size it records, and its edge
    and vertex counts must match the task's summary; the edge total must match ``expected`` (ingest's, or the
    partition run's for an edge subset). No field is read here: the content hashes in meta.json are what a
    server checks its copy against.
    """
    sizes = dict(store.files(out))
    on_disk = 0
    for k, s in enumerate(summaries):
        name = f"part-{k:05d}"
        try:
            raw = store.read_bytes(out / name / META_FILE)
        except FileNotFoundError:
            raise StageError(
                f"serialize/{run}: partition {k} is not complete in the store (no {name}/{META_FILE})"
            ) from None
        if hashlib.sha256(raw).hexdigest() != s["meta_sha256"]:
            raise StageError(f"serialize/{run}: {out / name / META_FILE} is not the one partition {k}'s task wrote")
        meta = json.loads(raw)
        for field, fm in meta["fields"].items():
            rel = f"{name}/{fm['file']}"
            if sizes.get(rel) != fm["nbytes"]:
                got = "missing" if rel not in sizes else f"{sizes[rel]:,} bytes"
                raise StageError(
                    f"serialize/{run}: partition {k} is not complete in the store: {out / rel} ({field}) is {got}, "
                    f"its meta.json says {fm['nbytes']:,} bytes"
                )
        if (meta["num_edges"], meta["num_vertices"]) != (s["edges"], s["vertices"]):
            raise StageError(
                f"serialize/{run}: partition {k} holds {meta['num_edges']:,} edges and {meta['num_vertices']:,} "
                f"vertices in the store, its task reported {s['edges']:,} and {s['vertices']:,}"
            )
        on_disk += int(meta["num_edges"])
        if parquet and s["edges"] and f"parquet/edges/{name}.parquet" not in sizes:
            raise StageError(f"serialize/{run}: the Parquet copy of partition {k} is missing")
        if f"{MASTERS_DIR}/{name}.parquet" not in sizes:
            raise StageError(
                f"serialize/{run}: the masters of partition {k} are missing ({MASTERS_DIR}/{name}.parquet)"
            )
    if on_disk != num_edges:
        raise StageError(f"serialize/{run}: partitions hold {on_disk:,} edges in the store, {expected} {num_edges:,}")


def footprint(summaries: list[dict[str, Any]], num_edges: int) -> dict[str, Any]:
    """Bytes per field summed over partitions, per directed edge, structure subtotal, per partition."""
    per_field: dict[str, int] = {}
    for s in summaries:
        for k, v in s["field_bytes"].items():
            per_field[k] = per_field.get(k, 0) + int(v)
    total = sum(per_field.values())
    groups: dict[str, int] = {}
    for k, v in per_field.items():
        g = FIELD_BY_NAME[k].group
        groups[g] = groups.get(g, 0) + v
    e = max(num_edges, 1)
    return {
        "bytes_total": total,
        "bytes_per_edge": round(total / e, 4),
        "structure_bytes_per_edge": round(groups.get("structure", 0) / e, 4),
        "bytes_per_group": groups,
        "bytes_per_field": dict(sorted(per_field.items(), key=lambda kv: -kv[1])),
        "bytes_per_edge_by_field": {k: round(v / e, 4) for k, v in sorted(per_field.items(), key=lambda kv: -kv[1])},
        "bytes_per_part": [s["total_bytes"] for s in sorted(summaries, key=lambda s: s["part"])],
    }


def run_serialize(
    spark: SparkSession, cfg: Config, dv: DatasetVersion, run: str | None = None, force: bool = False
) -> StageRecord:
    """Serialize partition run ``run`` (default: cfg.serialize.partition, else the latest) of ``dv``."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    man = read_manifest(dv)
    man.stage("ingest")
    run, num_parts = resolve_run(man, run or cfg.serialize.partition or None)
    sc = cfg.serialize
    params = {
        "partition": run,
        "parts": num_parts,
        "master_rule": sc.master_rule,
        "parquet_copy": sc.parquet_copy,
        "format_version": FORMAT_VERSION,
    }
    pub = StagePublisher(dv, f"serialize/{run}", params, depends=["ingest", f"partition/{run}"])
    if not force and (pub.is_current() or not pub.claim()):
        rec = pub.record()
        assert rec is not None
        print(up_to_date(f"serialize/{run}"), flush=True)
        return rec
    schema = man.schema
    prec = man.stage(f"partition/{run}")
    subset = bool(prec.params.get("edge_subset"))  # e.g. glisp link-split: the held-out edges are not served
    num_edges = int(prec.counts["edges"]) if subset else int(schema["num_edges"])
    timings: dict[str, float] = {}
    size_shuffles(spark, cfg.spark, num_edges)
    with pub:
        edges, joined = _check_assignment(spark, dv, run, num_parts, num_edges, subset)
        timings["check_s"] = round(time.perf_counter() - t0, 3)
        vertices = read_parquet(spark, dv.vertices)
        flags = vertices.agg(F.count(LABEL).alias("labels"), F.max(SPLIT).alias("split")).collect()[0]
        has_labels = int(schema.get("num_classes", 0) or 0) > 0 or bool(flags["labels"])
        has_split = flags["split"] is not None and int(flags["split"]) >= 0
        fdim = int(schema.get("feature_dim", 0) or 0)

        t = time.perf_counter()
        masters = compute_masters(spark, dv, run, num_parts, sc.master_rule)
        timings["masters_s"] = round(time.perf_counter() - t, 3)
        vrows = _vertex_rows(spark, dv, _vertex_info(edges, vertices, masters.df), vertices, fdim)
        ecols = (
            [PART, EID, SRC, DST, ETYPE]
            + ([WEIGHT] if schema.get("weighted") else [])
            + ([TS] if schema.get("timestamped") else [])
        )
        ctx = _build_context(pub, dv, run, num_parts, schema, sc, fdim, has_labels, has_split, subset)
        t = time.perf_counter()
        apath = str(dv.assignment(run))
        try:
            summ = _build_partitions(ctx, run, joined.select(*ecols), vrows, apath, num_edges)
        except StageError:  # a partition's rows did not fit its replicas: name unassigned or repeated rows if so
            join_check(joined, apath, num_edges)
            raise
        timings["build_s"] = round(time.perf_counter() - t, 3)
        masters.unpersist()
        check_written(
            dv.store,
            pub.tmp,
            run,
            summ,
            num_edges,
            sc.parquet_copy,
            f"partition/{run} assigns" if subset else "ingest has",
        )
        counts, metrics = _counts_and_metrics(summ, num_edges, masters.isolated)
        counts["masters_rows"] = sum(masters.per_part)
        timings["total_s"] = round(time.perf_counter() - t0, 3)
        return pub.commit(counts=counts, metrics=metrics, timings=timings)


def _build_context(
    pub: StagePublisher,
    dv: DatasetVersion,
    run: str,
    num_parts: int,
    schema: dict[str, Any],
    sc: SerializeConfig,
    fdim: int,
    has_labels: bool,
    has_split: bool,
    subset: bool,
) -> BuildContext:
    """What every partition's build task needs: the layout of the graph and where the attempt writes. An edge
    subset's degrees are not the ones reorder orders by, so its masters/ rows carry none."""
    return BuildContext(
        out_dir=pub.tmp.qualified,
        num_parts=num_parts,
        edge_types=list(schema.get("edge_types") or ["e0"]),
        vertex_types=list(schema.get("vertex_types") or ["v0"]),
        directed=bool(schema.get("directed", True)),
        weighted=bool(schema.get("weighted")),
        timestamped=bool(schema.get("timestamped")),
        feature_dim=fdim,
        has_labels=has_labels,
        has_split=has_split,
        parquet_copy=sc.parquet_copy,
        degrees=not subset,
        extra={"stage": f"serialize/{run}", "graph": dv.graph, "version": dv.version, "master_rule": sc.master_rule},
    )


def _vertex_info(edges: DataFrame, vertices: DataFrame, masters: DataFrame) -> DataFrame:
    """One row per vertex: its replica set, master and type, and its degrees over ``edges``."""
    from pyspark.sql import functions as F

    out_deg = edges.groupBy(F.col(SRC).alias(VID)).agg(F.count("*").alias("out_deg"))
    in_deg = edges.groupBy(F.col(DST).alias(VID)).agg(F.count("*").alias("in_deg"))
    return (
        masters.select(VID, PARTS, MASTER)
        .join(vertices.select(VID, VTYPE), VID)
        .join(out_deg, VID, "left")
        .join(in_deg, VID, "left")
        .fillna(0, ["out_deg", "in_deg"])
    )


def _vertex_rows(
    spark: SparkSession, dv: DatasetVersion, vinfo: DataFrame, vertices: DataFrame, fdim: int
) -> DataFrame:
    """One row per (vertex, partition holding a replica): degrees, replica set, master and type, plus, on the
    master's row, the label, split and features."""
    from pyspark.sql import functions as F

    vrows = vinfo.select(VID, "out_deg", "in_deg", PARTS, MASTER, VTYPE, F.explode(PARTS).alias(PART))
    mrows = vinfo.select(VID, F.col(MASTER).alias(PART)).join(vertices.select(VID, LABEL, SPLIT), VID)
    if fdim:
        mrows = mrows.join(read_parquet(spark, dv.features).select(VID, FEAT), VID, "left")
    else:
        mrows = mrows.withColumn(FEAT, F.lit(None).cast("array<float>"))
    return vrows.join(mrows, [VID, PART], "left")


def _build_partitions(
    ctx: BuildContext, run: str, erows: DataFrame, vrows: DataFrame, assignment: str, num_edges: int
) -> list[dict[str, Any]]:
    """Build every partition in one Spark task per partition (cogrouped edge and vertex rows); a partition that
    received no rows at all is built empty here. Returns the summaries in partition order. Edges the
    ``assignment`` does not name form a group without a partition: its task counts them, and they fail the stage
    here (BadInputError naming the file, with examples)."""
    task = make_task(ctx)
    try:
        rows = erows.groupBy(PART).cogroup(vrows.groupBy(PART)).applyInArrow(task, SUMMARY_SCHEMA).collect()
    except Exception as e:  # a task's GlispError arrives wrapped in a Py4J/Python exception
        msg = str(e)
        if "GlispError" in msg or "BadInputError" in msg:
            line = next((ln for ln in msg.splitlines() if "Error:" in ln and "partition" in ln), msg.splitlines()[-1])
            raise StageError(f"serialize/{run}: a partition task failed: {line.strip()}") from None
        raise
    for r in rows:
        if r["part"] is None:
            got = json.loads(r["summary"])
            raise unassigned_error(assignment, int(got["unassigned"]), num_edges, got["examples"])
    summaries = {int(r["part"]): json.loads(r["summary"]) for r in rows}
    for k in range(ctx.num_parts):
        if k not in summaries:
            e_empty, v_empty = empty_inputs(ctx)
            summaries[k] = build_partition(ctx, k, e_empty, v_empty)
    return [summaries[k] for k in range(ctx.num_parts)]


def _counts_and_metrics(
    summ: list[dict[str, Any]], num_edges: int, isolated: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stage record's counts (per partition) and metrics (footprint, master balance)."""
    num_parts = len(summ)
    mp = [s["master"] for s in summ]
    counts = {
        "parts": num_parts,
        "edges_per_part": [s["edges"] for s in summ],
        "vertices_per_part": [s["vertices"] for s in summ],
        "master_per_part": mp,
        "isolated_vertices": isolated,
        "replicas": sum(s["vertices"] for s in summ),
    }
    mean_master = sum(mp) / num_parts
    metrics = {**footprint(summ, num_edges), "master_balance": round(max(mp) / mean_master, 4) if mean_master else 1.0}
    return counts, metrics
