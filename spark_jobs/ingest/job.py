"""``run_ingest``: configured edge/vertex tables -> a new dataset version, published atomically.

Steps (each a Spark job over cached data, never a per-row Python loop, never a collect of rows):
  1. read every source (``sources``: each row gets at most one bad-input reason), count reasons per
     file in one aggregation; fail or quarantine;
  2. decide the id type, the type codes and the feature width from those (small) aggregates;
  3. dense vids: global sort of the distinct vertex keys + per-partition offsets;
  4. map edge endpoints to vids (two joins), check endpoints against the vertex tables;
  5. policies (self-loops, duplicates, undirected doubling), dense eids by a global sort, write;
  6. statistics from the written tables; manifest; rename the version into place.
"""

from __future__ import annotations

import time
from pathlib import Path

from glisp_core.config import Config, IngestConfig, to_dict
from glisp_core.dataset.layout import (
    DST,
    EID,
    ETYPE,
    FEAT,
    LABEL,
    ORIG_ID,
    SPLIT,
    SRC,
    TS,
    VID,
    VTYPE,
    WEIGHT,
    DatasetVersion,
    check_name,
    list_versions,
)
from glisp_core.dataset.manifest import Manifest, StageRecord, now_iso
from glisp_core.dataset.paths import confine, confine_all
from glisp_core.dataset.publish import VersionPublisher, file_fingerprints, fingerprint
from glisp_core.errors import BadInputError
from spark_jobs.ingest import checks
from spark_jobs.ingest.checks import RCOL, REASON, SI
from spark_jobs.ingest.idmap import dense_index
from spark_jobs.ingest.readers import CORRUPT, FID, ROWPOS
from spark_jobs.ingest.sources import (
    DEFAULT_VERTEX_TYPE,
    IngestPlan,
    edge_source_frame,
    ids_native_long,
    vertex_source_frame,
)
from spark_jobs.ingest.stats import degree_metrics

FORMAT_TAG = "glisp-ingest-1"  # bump when the output of the same input and params changes


def _find_existing(root: Path, graph: str, fp: str, version: str) -> DatasetVersion | None:
    candidates = [version] if version else list(reversed(list_versions(root, graph)))
    for v in candidates:
        dv = DatasetVersion(root, graph, v)
        try:
            rec = Manifest.read(dv.manifest_path).stages.get("ingest")
        except Exception:  # noqa: BLE001 - an unreadable manifest is simply not a match
            continue
        if rec is not None and rec.fingerprint == fp and dv.ingest.exists():
            return dv
    return None


def ingest_fingerprint(ing: IngestConfig, inputs: list[dict]) -> str:
    params = {k: v for k, v in to_dict(ing).items() if k != "version"}
    return fingerprint(FORMAT_TAG, params, inputs)


def run_ingest(
    spark, cfg: Config, ingest: IngestConfig | None = None, force: bool = False, log=print
) -> DatasetVersion:
    """Ingest ``ingest`` (default ``cfg.ingest``) into a new version under ``cfg.dataset.root``."""
    ing = ingest or cfg.ingest
    t0 = time.perf_counter()
    plan = IngestPlan(ing)
    root = Path(cfg.dataset.root)
    confine(root, cfg.dataset.confine_to, "dataset.root")
    confine_all(plan.all_input_paths(), cfg.dataset.confine_to, "ingest table or feature file")
    inputs = file_fingerprints(plan.all_input_paths(), cfg.dataset.checksum)
    fp = ingest_fingerprint(ing, inputs)
    existing = _find_existing(root, ing.graph, fp, ing.version)
    if existing is not None and not force:
        log(f"ingest: {existing.path} is up to date (same inputs and parameters); use --force to rebuild")
        return existing
    # --force rebuilds the version that holds these inputs in place instead of adding a duplicate
    version = ing.version or (
        existing.version if existing else f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{fp[:8]}"
    )
    check_name("version", version)
    key = "spark.sql.csv.parser.columnPruning.enabled"
    old = spark.conf.get(key, None)
    spark.conf.set(key, "false")  # a pruned CSV parser cannot see rows with extra/missing fields
    cached: list = []
    try:
        with VersionPublisher(root, ing.graph, version) as pub:
            manifest = _build(spark, cfg, plan, pub.tmp_dv, cached, log, t0)
            manifest.inputs = inputs
            manifest.stages["ingest"].fingerprint = fp
            dv = pub.commit(manifest)
    finally:
        for df in cached:
            df.unpersist()
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)
    return dv


def _build(spark, cfg: Config, plan: IngestPlan, out: DatasetVersion, cached: list, log, t0: float) -> Manifest:
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    c = F.col
    ing = plan.ing
    timings: dict[str, float] = {}
    id_long = ids_native_long(plan, spark)

    # ---- 1. edges: read + row checks + one aggregation --------------------------------------
    frames, offset = [], 0
    for i in range(len(ing.edges)):
        df, sf = edge_source_frame(spark, plan, i, offset, id_long)
        frames.append(df)
        offset += len(sf.files)
    e0 = frames[0]
    for f in frames[1:]:
        e0 = e0.unionByName(f)
    e0 = e0.persist(StorageLevel.MEMORY_AND_DISK)  # parsed once; read by the checks, the id map and the joins
    cached.append(e0)
    es = checks.summarize(e0, ["_et", "_nonint", SI])
    edge_rows_in = es.total
    for i in range(len(ing.edges)):
        n_src = sum(int(r["count"]) for r in es.extra if r[SI] == i)
        if n_src == 0:
            f0 = plan.edge_files[i][0]
            raise BadInputError(
                str(f0) if len(plan.edge_files[i]) == 1 else ing.edges[i].path,
                "*",
                0,
                0,
                "found: the edge input has no rows at all",
                hint="check the path and the file",
            )
    raw_e = {
        "src": c("_s"),
        "dst": c("_d"),
        "etype": c("_et"),
        "weight": F.coalesce(c("_w_raw"), c("_w").cast("string")),
        "timestamp": F.coalesce(c("_ts_raw"), c("_ts").cast("string")),
        "record": c(CORRUPT),
    }
    rejects: dict[str, int] = {}
    rejects.update(checks.handle_bad(e0, es, plan.files, ing.on_bad_input, raw_e, out.rejects, log))
    timings["read_check_edges_s"] = round(time.perf_counter() - t0, 3)

    # ---- 1b. vertices ----------------------------------------------------------------------
    v0 = None
    vs = None
    if ing.vertices:
        vframes = []
        for i in range(len(ing.vertices)):
            df, sf = vertex_source_frame(spark, plan, i, offset, id_long)
            vframes.append(df)
            offset += len(sf.files)
        v0 = vframes[0]
        for f in vframes[1:]:
            v0 = v0.unionByName(f)
        v0 = v0.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(v0)
        vs = checks.summarize(v0, ["_vt", "_nonint", "_labnonint", "_fw", SI])
        for i in range(len(ing.vertices)):
            if sum(int(r["count"]) for r in vs.extra if r[SI] == i) == 0:
                raise BadInputError(
                    ing.vertices[i].path,
                    "*",
                    0,
                    0,
                    "found: the vertex input has no rows at all",
                    hint="check the path and the file",
                )

    # ---- 2. decisions from the aggregates --------------------------------------------------
    good_e = [r for r in es.extra if r[REASON] is None]
    good_v = [r for r in vs.extra if r[REASON] is None] if vs else []
    if id_long:
        id_type = "int"
    elif ing.id_type == "auto":
        nonint = any(r["_nonint"] for r in good_e) or any(r["_nonint"] for r in good_v)
        id_type = "string" if nonint else "int"
    else:
        id_type = ing.id_type
    key_t = "long" if id_type == "int" else "string"

    feature_dim = 0
    label_names: list[str] | None = None
    if v0 is not None:
        widths: dict[int, int] = {}
        for r in good_v:
            if r["_fw"] >= 0:
                widths[r["_fw"]] = widths.get(r["_fw"], 0) + int(r["count"])
        if widths:
            feature_dim = max(widths.items(), key=lambda kv: (kv[1], -kv[0]))[0]
        if any(r["_labnonint"] for r in good_v):
            names = (
                v0.filter(c(REASON).isNull() & c("_lab_str").isNotNull())
                .select("_lab_str")
                .distinct()
                .limit(100_001)
                .collect()
            )
            if len(names) > 100_000:
                raise BadInputError(
                    plan.files[0],
                    "label",
                    len(names),
                    None,
                    "distinct non-integer labels",
                    hint="labels must be integers or a small set of class names",
                )
            label_names = sorted(r["_lab_str"] for r in names)
        # second-phase vertex rules: feature width, then duplicate ids (first row kept)
        fw_bad = c(REASON).isNull() & (c("_fw") >= 0) & (c("_fw") != feature_dim)
        v1 = (
            v0.withColumn(RCOL, F.when(fw_bad, c("_fcol")).otherwise(c(RCOL)))
            .withColumn(REASON, F.when(fw_bad, F.lit("vertex_feature_width")).otherwise(c(REASON)))
            .withColumn("_k", c("_id").cast(key_t))
        )
        kcols = ["_vt", "_k"] if plan.typed else ["_k"]
        first = v1.filter(c(REASON).isNull()).groupBy(*kcols).agg(F.min(ROWPOS).alias("_first"))
        dup = c(REASON).isNull() & (c(ROWPOS) != c("_first"))
        idcols = {i: v.id for i, v in enumerate(ing.vertices)}
        id_name = F.create_map(*[x for i, n in idcols.items() for x in (F.lit(i), F.lit(n))])[c(SI)]
        v2 = (
            v1.join(first, kcols, "left")
            .withColumn(RCOL, F.when(dup, id_name).otherwise(c(RCOL)))
            .withColumn(REASON, F.when(dup, F.lit("vertex_duplicate")).otherwise(c(REASON)))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        cached.append(v2)
        vs = checks.summarize(v2, ["_vt"])
        raw_v = {
            "id": c("_id"),
            "vtype": c("_vt"),
            "label": c("_lab_raw"),
            "split": c("_spl_raw"),
            "features": c("_feat_raw"),
            "record": c(CORRUPT),
        }
        rejects.update(checks.handle_bad(v2, vs, plan.files, ing.on_bad_input, raw_v, out.rejects, log))
        v0.unpersist()
        v0 = v2
        good_v = [r for r in vs.extra if r[REASON] is None]

    # vertex and edge type codes
    if ing.vertex_types:
        vertex_types = list(ing.vertex_types)
    else:
        names = {r["_vt"] for r in good_v if r["_vt"] is not None}
        if plan.typed:
            names |= {x for e in ing.edges for x in (e.src_type, e.dst_type)}
        if not ing.vertices and not plan.typed:
            names = {DEFAULT_VERTEX_TYPE}
        vertex_types = sorted(names)
    if ing.edge_types:
        edge_types = list(ing.edge_types)
    else:
        edge_types = sorted({r["_et"] for r in good_e if r["_et"] is not None})
    vcode = {n: i for i, n in enumerate(vertex_types)}
    ecode = {n: i for i, n in enumerate(edge_types)}

    def code_of(col, codes: dict[str, int], nullable: bool = False):
        if len(codes) == 1 and not nullable:
            return F.lit(next(iter(codes.values()))).cast("int")
        return F.create_map(*[x for k, v in codes.items() for x in (F.lit(k), F.lit(v))])[col].cast("int")

    # ---- 3. dense vertex ids ---------------------------------------------------------------
    t1 = time.perf_counter()
    eg = e0.filter(c(REASON).isNull())
    lab = c("_lab")
    if label_names is not None:
        lab = code_of(c("_lab_str"), {n: i for i, n in enumerate(label_names)}, nullable=True).cast("long")
    if v0 is not None:
        keys = v0.filter(c(REASON).isNull()).select(
            code_of(c("_vt"), vcode).alias("_vtc"),
            c("_k"),
            lab.alias(LABEL),
            c("_spl").alias(SPLIT),
            c("_feat").alias(FEAT),
        )
    else:
        if plan.typed:
            ends = eg.select(code_of(c("_st"), vcode).alias("_vtc"), c("_s").cast(key_t).alias("_k")).unionByName(
                eg.select(code_of(c("_dt"), vcode).alias("_vtc"), c("_d").cast(key_t).alias("_k"))
            )
        else:
            ends = eg.select(F.lit(0).alias("_vtc"), c("_s").cast(key_t).alias("_k")).unionByName(
                eg.select(F.lit(0).alias("_vtc"), c("_d").cast(key_t).alias("_k"))
            )
        keys = ends.distinct().select(
            "_vtc",
            "_k",
            F.lit(None).cast("long").alias(LABEL),
            F.lit(-1).cast("byte").alias(SPLIT),
            F.lit(None).cast("array<float>").alias(FEAT),
        )
    idx, n_vertices, idx_cached, vagg = dense_index(
        keys,
        [c("_vtc"), c("_k")],
        VID,
        group=["_vtc"],
        aggs=[F.max(LABEL).alias("maxlab"), F.count(FEAT).alias("nfeat")],
    )
    cached.append(idx_cached)
    nfiles = ing.output_files

    def write(df, path: Path) -> None:
        if nfiles > 0:
            df = df.coalesce(nfiles)
        df.write.mode("overwrite").parquet(str(path))

    write(idx.select(c(VID), c("_k").alias(ORIG_ID), c("_vtc").cast("int").alias(VTYPE)), out.idmap)
    write(
        idx.select(c(VID), c("_vtc").cast("int").alias(VTYPE), c(LABEL).cast("long"), c(SPLIT).cast("byte")),
        out.vertices,
    )
    if feature_dim:
        write(idx.filter(c(FEAT).isNotNull()).select(c(VID), c(FEAT)), out.features)
    timings["idmap_s"] = round(time.perf_counter() - t1, 3)

    # ---- 4. map endpoints to vids ----------------------------------------------------------
    t2 = time.perf_counter()
    m = idx.select(c("_vtc"), c("_k"), c(VID))
    has_w = any(e.weight for e in ing.edges)
    has_ts = any(e.timestamp for e in ing.edges)
    typed_cols = [code_of(c("_st"), vcode).alias("_stc"), code_of(c("_dt"), vcode).alias("_dtc")] if plan.typed else []
    e1 = eg.select(
        SI,
        FID,
        ROWPOS,
        c("_s"),
        c("_d"),
        code_of(c("_et"), ecode).alias(ETYPE),
        F.coalesce(c("_w"), F.lit(1.0)).cast("float").alias(WEIGHT),
        F.coalesce(c("_ts"), F.lit(0)).cast("long").alias(TS),
        c("_s").cast(key_t).alias("_sk"),
        c("_d").cast(key_t).alias("_dk"),
        *typed_cols,
    )
    how = "left" if v0 is not None else "inner"
    ms = m.select(c("_k").alias("_sk"), c(VID).alias(SRC), *([c("_vtc").alias("_stc")] if plan.typed else []))
    md = m.select(c("_k").alias("_dk"), c(VID).alias(DST), *([c("_vtc").alias("_dtc")] if plan.typed else []))
    skeys = ["_sk", "_stc"] if plan.typed else ["_sk"]
    dkeys = ["_dk", "_dtc"] if plan.typed else ["_dk"]
    e1 = e1.join(ms, skeys, how).join(md, dkeys, how)
    src_names = F.create_map(*[x for i, e in enumerate(ing.edges) for x in (F.lit(i), F.lit(e.src))])[c(SI)]
    dst_names = F.create_map(*[x for i, e in enumerate(ing.edges) for x in (F.lit(i), F.lit(e.dst))])[c(SI)]
    if v0 is not None:
        e1 = e1.withColumn(
            REASON, F.when(c(SRC).isNull() | c(DST).isNull(), F.lit("edge_missing_endpoint"))
        ).withColumn(RCOL, F.when(c(SRC).isNull(), src_names).when(c(DST).isNull(), dst_names))
    else:
        e1 = e1.withColumn(REASON, F.lit(None).cast("string")).withColumn(RCOL, F.lit(None).cast("string"))
    e1 = e1.withColumn("_loop", c(SRC) == c(DST)).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(e1)
    s2 = checks.summarize(e1, ["_loop"])
    e0.unpersist()
    raw_e2 = {"src": c("_s"), "dst": c("_d"), "etype": c(ETYPE), "weight": c(WEIGHT), "timestamp": c(TS)}
    rejects.update(checks.handle_bad(e1, s2, plan.files, ing.on_bad_input, raw_e2, out.rejects, log))
    good_rows = sum(int(r["count"]) for r in s2.extra if r[REASON] is None)
    loops = sum(int(r["count"]) for r in s2.extra if r[REASON] is None and r["_loop"])
    if good_rows == 0:
        raise BadInputError(
            plan.files[0],
            "*",
            0,
            edge_rows_in,
            "are valid edges: no edge is left to ingest",
            hint="see the quarantined rows under ingest/rejects/",
        )
    timings["map_s"] = round(time.perf_counter() - t2, 3)

    # ---- 5. policies, dense eids, write ---------------------------------------------------
    t3 = time.perf_counter()
    e = e1.filter(c(REASON).isNull()).select(SRC, DST, ETYPE, WEIGHT, TS, ROWPOS)
    loops_dropped = 0
    if ing.self_loops == "drop":
        e = e.filter(c(SRC) != c(DST))
        loops_dropped = loops
    rows_before = good_rows - loops_dropped
    if not ing.directed:  # one canonical direction per undirected edge; doubled after the duplicate policy
        e = e.select(F.least(SRC, DST).alias(SRC), F.greatest(SRC, DST).alias(DST), ETYPE, WEIGHT, TS, ROWPOS)
    if ing.duplicates == "merge":
        e = e.groupBy(SRC, DST, ETYPE).agg(F.sum(WEIGHT).cast("float").alias(WEIGHT), F.min(TS).alias(TS))
    elif ing.duplicates == "drop":
        first = F.min_by(F.struct(c(WEIGHT), c(TS)), c(ROWPOS))
        e = (
            e.groupBy(SRC, DST, ETYPE)
            .agg(first.alias("_f"))
            .select(SRC, DST, ETYPE, c("_f." + WEIGHT).alias(WEIGHT), c("_f." + TS).alias(TS))
        )
    else:
        e = e.select(SRC, DST, ETYPE, WEIGHT, TS)
    if not ing.directed:
        e = e.unionByName(e.filter(c(SRC) != c(DST)).select(c(DST).alias(SRC), c(SRC).alias(DST), ETYPE, WEIGHT, TS))
    order = [c(SRC), c(DST), c(ETYPE), c(WEIGHT), c(TS)]
    edges, n_edges, edges_cached, eagg = dense_index(
        e, order, EID, group=[ETYPE], aggs=[F.sum((c(SRC) == c(DST)).cast("long")).alias("loops")]
    )
    cached.append(edges_cached)
    out_cols = [c(EID), c(SRC).cast("long"), c(DST).cast("long"), c(ETYPE).cast("int")]
    if has_w:
        out_cols.append(c(WEIGHT).cast("float"))
    if has_ts:
        out_cols.append(c(TS).cast("long"))
    write(edges.select(*out_cols), out.edges)
    edges_cached.unpersist()
    if ing.directed:
        dedup_rows = n_edges
        doubled = 0
    else:
        unique_loops = sum(int(r["loops"]) for r in eagg)
        dedup_rows = (n_edges + unique_loops) // 2
        doubled = n_edges - dedup_rows
    dups_removed = rows_before - dedup_rows
    timings["edges_s"] = round(time.perf_counter() - t3, 3)

    # ---- 6. statistics --------------------------------------------------------------------
    t4 = time.perf_counter()
    written = spark.read.parquet(str(out.edges))
    per_etype: dict[str, int] = {}
    for r in eagg:
        per_etype[edge_types[r[ETYPE]]] = per_etype.get(edge_types[r[ETYPE]], 0) + int(r["count"])
    metrics = degree_metrics(written, n_vertices, n_edges)
    timings["stats_s"] = round(time.perf_counter() - t4, 3)
    per_vtype: dict[str, int] = {}
    for r in vagg:
        per_vtype[vertex_types[r["_vtc"]]] = per_vtype.get(vertex_types[r["_vtc"]], 0) + int(r["count"])
    maxlab = max((r["maxlab"] for r in vagg if r["maxlab"] is not None), default=None)
    timings["total_s"] = round(time.perf_counter() - t0, 3)
    timings["edges_per_s"] = round(edge_rows_in / max(timings["total_s"], 1e-9), 1)

    counts = {
        "vertices": n_vertices,
        "edges": n_edges,
        "input_edge_rows": edge_rows_in,
        "vertices_per_type": per_vtype,
        "edges_per_type": per_etype,
        "rejects": rejects,
        "rejected_rows": sum(rejects.values()),
        "self_loops": loops,
        "self_loops_dropped": loops_dropped,
        "duplicates_removed": dups_removed,
        "reverse_edges_added": doubled,
        "vertices_with_features": sum(int(r["nfeat"]) for r in vagg),
    }
    schema = {
        "directed": ing.directed,
        "num_vertices": n_vertices,
        "num_edges": n_edges,
        "vertex_types": vertex_types,
        "edge_types": edge_types,
        "weighted": has_w,
        "timestamped": has_ts,
        "feature_dim": feature_dim,
        "num_classes": int(maxlab) + 1 if maxlab is not None else 0,
        "id_type": id_type,
    }
    if label_names is not None:
        schema["label_names"] = label_names
    rec = StageRecord(
        name="ingest",
        path="ingest",
        fingerprint="",
        params=to_dict(ing),
        counts=counts,
        metrics=metrics,
        timings=timings,
        completed_at=now_iso(),
    )
    log(
        f"ingest: |V|={n_vertices:,} |E|={n_edges:,} from {edge_rows_in:,} edge rows in {timings['total_s']:.1f}s "
        f"({timings['edges_per_s']:,.0f} edges/s)"
    )
    return Manifest(graph=ing.graph, version=out.version, created_at=now_iso(), schema=schema, stages={"ingest": rec})
