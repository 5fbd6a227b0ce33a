"""``run_ingest``: configured edge/vertex tables -> a new dataset version, published atomically.

Steps (each a Spark job over cached data, never a per-row Python loop, never a collect of rows):
  1. read every source, give each row at most one bad-input reason, count reasons per file in one
     aggregation; fail or quarantine;
  2. decide the id type, the type codes and the feature width from those (small) aggregates;
  3. dense vids: global sort of the distinct vertex keys + per-partition offsets;
  4. map edge endpoints to vids (two joins), check endpoints against the vertex tables;
  5. policies (self-loops, duplicates, undirected doubling), dense eids by a global sort, write;
  6. statistics from the written tables; manifest; rename the version into place.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from glisp_core.config import Config, EdgeSource, IngestConfig, VertexSource, to_dict
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
from glisp_core.dataset.publish import VersionPublisher, file_fingerprints, fingerprint
from glisp_core.errors import BadInputError, ConfigError
from spark_jobs.ingest import checks
from spark_jobs.ingest.checks import RCOL, REASON, SI, Rule
from spark_jobs.ingest.idmap import dense_index
from spark_jobs.ingest.readers import CORRUPT, FID, ROWPOS, expand_paths, read_source, require_columns
from spark_jobs.ingest.stats import degree_metrics

FORMAT_TAG = "glisp-ingest-1"  # bump when the output of the same input and params changes
DEFAULT_EDGE_TYPE = "edge"
DEFAULT_VERTEX_TYPE = "vertex"
_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_SPLIT_NAMES = {"train": 0, "0": 0, "val": 1, "valid": 1, "validation": 1, "1": 1, "test": 2, "2": 2}


def _col(name: str):
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")


def _trimmed(c):
    """String value, trimmed; empty -> null."""
    from pyspark.sql import functions as F

    s = F.trim(c.cast("string"))
    return F.when(s != "", s)


def _dtype(df, name: str) -> str:
    return type(df.schema[name].dataType).__name__


def _to_long(df, name: str):
    """(typed long column or null when not an integer, raw string or null)."""
    from pyspark.sql import functions as F

    t = _dtype(df, name)
    c = _col(name)
    if t in _INTEGRAL:
        return c.cast("long"), F.lit(None).cast("string")
    if t in ("FloatType", "DoubleType", "DecimalType"):
        return F.when(c == F.floor(c), c.cast("long")), c.cast("string")
    if t == "TimestampType" or t == "TimestampNTZType":
        return F.unix_millis(c), c.cast("string")
    s = _trimmed(c)
    return s.try_cast("long"), c.cast("string")


def _to_double(df, name: str):
    from pyspark.sql import functions as F

    t = _dtype(df, name)
    c = _col(name)
    if t == "StringType":
        return _trimmed(c).try_cast("double"), c
    return c.cast("double"), F.lit(None).cast("string")


# ----------------------------------------------------------------------------------------------
# Reading and row checks
# ----------------------------------------------------------------------------------------------


class _Plan:
    """What the driver knows about the run: sources, files, id handling, typed keys."""

    def __init__(self, ing: IngestConfig) -> None:
        self.ing = ing
        if not ing.graph:
            raise ConfigError("ingest", "graph", "a graph name is required (got '')")
        check_name("graph", ing.graph)
        if not ing.edges:
            raise ConfigError("ingest", "edges", "at least one [[ingest.edges]] source is required (got [])")
        typed = [bool(e.src_type or e.dst_type) for e in ing.edges]
        self.typed = any(typed)
        if self.typed and not all(bool(e.src_type and e.dst_type) for e in ing.edges):
            i = next(i for i, e in enumerate(ing.edges) if not (e.src_type and e.dst_type))
            raise ConfigError(
                "ingest",
                f"edges[{i}].src_type/dst_type",
                "when any edge table names endpoint vertex types, every one must name both "
                f"(got src_type={ing.edges[i].src_type!r}, dst_type={ing.edges[i].dst_type!r})",
            )
        if self.typed:
            for i, v in enumerate(ing.vertices):
                if not (v.vtype or v.vertex_type):
                    raise ConfigError(
                        "ingest",
                        f"vertices[{i}].vtype",
                        "edge tables are typed, so vertex tables must give a vtype column or a "
                        "vertex_type (got neither)",
                    )
        self.edge_files = [expand_paths(e.path, f"ingest.edges[{i}]") for i, e in enumerate(ing.edges)]
        self.vertex_files = [expand_paths(v.path, f"ingest.vertices[{i}]") for i, v in enumerate(ing.vertices)]
        self.npy_files: list[Path] = []
        for i, v in enumerate(ing.vertices):
            for key in ("features_npy", "features_npy_ids"):
                p = getattr(v, key)
                if p:
                    if not Path(p).is_file():
                        raise ConfigError("ingest", f"vertices[{i}].{key}", f"file not found (got {p!r})")
                    self.npy_files.append(Path(p).resolve())
            if v.features_npy and not v.features_npy_ids and len(self.vertex_files[i]) != 1:
                raise ConfigError(
                    "ingest",
                    f"vertices[{i}].features_npy_ids",
                    "features_npy aligned by row order needs a single-file vertex table; give "
                    f"features_npy_ids (got {len(self.vertex_files[i])} files)",
                )
        self.files: list[str] = [str(f) for fs in self.edge_files + self.vertex_files for f in fs]

    def all_input_paths(self) -> list[Path]:
        seen = dict.fromkeys([f for fs in self.edge_files + self.vertex_files for f in fs] + self.npy_files)
        return list(seen)


def _edge_source_frame(spark, plan: _Plan, i: int, offset: int, id_long: bool):
    from pyspark.sql import functions as F

    ing = plan.ing
    src: EdgeSource = ing.edges[i]
    what = f"ingest.edges[{i}]"
    sf = read_source(spark, src, what, plan.edge_files[i], offset)
    require_columns(
        sf, {"src": src.src, "dst": src.dst, "etype": src.etype, "weight": src.weight, "timestamp": src.timestamp}, what
    )
    df = sf.df

    def ident(name):
        return _col(name).cast("long") if id_long else _trimmed(_col(name))

    s, d = ident(src.src), ident(src.dst)
    et = _trimmed(_col(src.etype)) if src.etype else F.lit(src.edge_type or DEFAULT_EDGE_TYPE)
    etype_col = src.etype or "edge_type"
    if src.weight:
        w, w_raw = _to_double(df, src.weight)
    else:
        w, w_raw = F.lit(None).cast("double"), F.lit(None).cast("string")
    if src.timestamp:
        ts, ts_raw = _to_long(df, src.timestamp)
    else:
        ts, ts_raw = F.lit(None).cast("long"), F.lit(None).cast("string")
    df = df.select(
        F.lit(i).alias(SI),
        FID,
        ROWPOS,
        CORRUPT,
        s.alias("_s"),
        d.alias("_d"),
        et.alias("_et"),
        F.lit(src.src_type or None).cast("string").alias("_st"),
        F.lit(src.dst_type or None).cast("string").alias("_dt"),
        w.alias("_w"),
        w_raw.alias("_w_raw"),
        ts.alias("_ts"),
        ts_raw.cast("string").alias("_ts_raw"),
    )
    c = F.col
    rules = [
        Rule("edge_malformed", c(CORRUPT).isNotNull(), "*"),
        Rule("edge_null_id", c("_s").isNull(), src.src),
        Rule("edge_null_id", c("_d").isNull(), src.dst),
    ]
    if ing.id_type == "int" and not id_long:
        rules += [
            Rule("edge_bad_id", c("_s").try_cast("long").isNull(), src.src),
            Rule("edge_bad_id", c("_d").try_cast("long").isNull(), src.dst),
        ]
    bad_et = c("_et").isNull()
    if ing.edge_types:
        bad_et = bad_et | ~c("_et").isin(list(ing.edge_types))
    rules.append(Rule("edge_unknown_type", bad_et, etype_col))
    if plan.typed and ing.vertex_types:
        rules.append(Rule("edge_unknown_vertex_type", F.lit(src.src_type not in ing.vertex_types), "src_type"))
        rules.append(Rule("edge_unknown_vertex_type", F.lit(src.dst_type not in ing.vertex_types), "dst_type"))
    if src.weight:
        wv = c("_w")
        rules.append(Rule("edge_bad_weight", wv.isNull() | F.isnan(wv) | (wv < 0) | (wv == float("inf")), src.weight))
    if src.timestamp:
        rules.append(Rule("edge_bad_timestamp", c("_ts").isNull(), src.timestamp))
    reason, rcol = checks.reason_columns(rules)
    nonint = F.lit(False)
    if ing.id_type == "auto" and not id_long:
        nonint = c("_s").try_cast("long").isNull() | c("_d").try_cast("long").isNull()
    return df.withColumn(REASON, reason).withColumn(RCOL, rcol).withColumn("_nonint", nonint), sf


def _vertex_source_frame(spark, plan: _Plan, i: int, offset: int, id_long: bool):
    from pyspark.sql import functions as F

    ing = plan.ing
    src: VertexSource = ing.vertices[i]
    what = f"ingest.vertices[{i}]"
    sf = read_source(spark, src, what, plan.vertex_files[i], offset)
    require_columns(
        sf, {"id": src.id, "vtype": src.vtype, "label": src.label, "split": src.split, "features": src.features}, what
    )
    for j, fc in enumerate(src.feature_columns):
        require_columns(sf, {f"feature_columns[{j}]": fc}, what)
    df = sf.df
    c = F.col
    vid = _col(src.id).cast("long") if id_long else _trimmed(_col(src.id))
    vt = _trimmed(_col(src.vtype)) if src.vtype else F.lit(src.vertex_type or DEFAULT_VERTEX_TYPE)
    lab_long, lab_raw, lab_str = F.lit(None).cast("long"), F.lit(None).cast("string"), F.lit(None).cast("string")
    if src.label:
        t = _dtype(df, src.label)
        lab_raw = _col(src.label).cast("string")
        if t == "StringType":
            lab_str = _trimmed(_col(src.label))
            lab_long = lab_str.try_cast("long")
        else:
            lab_long, _ = _to_long(df, src.label)
    spl = F.lit(-1).cast("byte")
    spl_raw = F.lit(None).cast("string")
    if src.split:
        spl_raw = _trimmed(_col(src.split))
        m = F.create_map(*[x for k, v in _SPLIT_NAMES.items() for x in (F.lit(k), F.lit(v))])
        spl = F.when(spl_raw.isNull(), F.lit(-1)).otherwise(m[F.lower(spl_raw)]).cast("byte")
    has_feat = bool(src.features or src.feature_columns or src.features_npy)
    if src.features:
        t = _dtype(df, src.features)
        fc = _col(src.features)
        if t == "StringType":  # "[1, 2, 3]" or "1;2;3" or "1 2 3"
            parts = F.split(F.regexp_replace(F.trim(fc), r"^\[|\]$", ""), r"[,;\s]+")
            feat = F.when(fc.isNotNull(), F.transform(parts, lambda x: x.try_cast("float")))
            feat_raw = fc
        else:
            feat = fc.cast("array<float>")
            feat_raw = fc.cast("string")
    elif src.feature_columns:
        cols = [
            _trimmed(_col(x)).try_cast("float") if _dtype(df, x) == "StringType" else _col(x).cast("float")
            for x in src.feature_columns
        ]
        feat = F.array(*cols)
        feat_raw = F.concat_ws(",", *[_col(x).cast("string") for x in src.feature_columns])
    else:
        feat, feat_raw = F.lit(None).cast("array<float>"), F.lit(None).cast("string")
    df = df.select(
        F.lit(i).alias(SI),
        FID,
        ROWPOS,
        CORRUPT,
        vid.alias("_id"),
        vt.alias("_vt"),
        lab_long.alias("_lab"),
        lab_raw.alias("_lab_raw"),
        lab_str.alias("_lab_str"),
        spl.alias("_spl"),
        spl_raw.alias("_spl_raw"),
        feat.alias("_feat"),
        feat_raw.alias("_feat_raw"),
    )
    if src.features_npy:
        df = _attach_npy(spark, df, src, plan, i, id_long)
    rules = [Rule("vertex_malformed", c(CORRUPT).isNotNull(), "*"), Rule("vertex_null_id", c("_id").isNull(), src.id)]
    if ing.id_type == "int" and not id_long:
        rules.append(Rule("vertex_bad_id", c("_id").try_cast("long").isNull(), src.id))
    bad_vt = c("_vt").isNull()
    if ing.vertex_types:
        bad_vt = bad_vt | ~c("_vt").isin(list(ing.vertex_types))
    rules.append(Rule("vertex_unknown_type", bad_vt, src.vtype or "vertex_type"))
    if src.label and _dtype(sf.df, src.label) != "StringType":
        rules.append(Rule("vertex_bad_label", c("_lab_raw").isNotNull() & c("_lab").isNull(), src.label))
    if src.split:
        rules.append(Rule("vertex_bad_split", c("_spl_raw").isNotNull() & c("_spl").isNull(), src.split))
    if has_feat:
        fname = src.features or src.features_npy or ",".join(src.feature_columns)
        rules.append(
            Rule(
                "vertex_bad_features",
                c("_feat").isNull() | F.exists(c("_feat"), lambda x: x.isNull() | F.isnan(x)),
                fname,
            )
        )
    reason, rcol = checks.reason_columns(rules)
    nonint = F.lit(False)
    if ing.id_type == "auto" and not id_long:
        nonint = c("_id").try_cast("long").isNull()
    labnonint = (c("_lab_str").isNotNull() & c("_lab").isNull()) if src.label else F.lit(False)
    df = (
        df.withColumn(REASON, reason)
        .withColumn(RCOL, rcol)
        .withColumn("_nonint", nonint)
        .withColumn("_labnonint", labnonint)
        .withColumn("_fw", F.when(c("_feat").isNotNull(), F.size(c("_feat"))).otherwise(F.lit(-1)))
        .withColumn("_fcol", F.lit(src.features or src.features_npy or ",".join(src.feature_columns) or None))
    )
    return df, sf


def _attach_npy(spark, df, src: VertexSource, plan: _Plan, i: int, id_long: bool):
    """Features from a (n, d) .npy, read in parallel slices by the executors (mmap), never on the driver."""
    from pyspark.sql import functions as F

    arr = np.load(src.features_npy, mmap_mode="r")
    if arr.ndim != 2:
        raise BadInputError(
            src.features_npy,
            "features_npy",
            1,
            1,
            f"is not a 2-D array (shape {arr.shape})",
            hint="save an (n, d) array",
        )
    n, d = arr.shape
    ids = None
    if src.features_npy_ids:
        ids = np.load(src.features_npy_ids, mmap_mode="r")
        if ids.ndim != 1 or len(ids) != n:
            raise BadInputError(
                src.features_npy_ids,
                "features_npy_ids",
                len(ids),
                n,
                f"ids for {n} feature rows (shape {ids.shape})",
                hint="one id per feature row",
            )
    npy_path, ids_path = str(Path(src.features_npy).resolve()), src.features_npy_ids
    id_kind = "long" if (ids is not None and ids.dtype.kind in "iu") else "string"
    parts = max(1, min(64, (n * d * 4) // (32 << 20) + 1))
    schema = "_row long, _feat array<float>" + (f", _nid {id_kind}" if ids is not None else "")

    def read_rows(batches):
        import numpy as np
        import pyarrow as pa

        a = np.load(npy_path, mmap_mode="r")
        b = np.load(ids_path, mmap_mode="r") if ids_path else None
        for batch in batches:
            rows = batch.column(0).to_numpy()
            x = np.ascontiguousarray(a[rows], dtype=np.float32)
            feat = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]).cast(pa.list_(pa.float32()))
            cols = {"_row": pa.array(rows, pa.int64()), "_feat": feat}
            if b is not None:
                v = b[rows]
                cols["_nid"] = pa.array(v.astype(np.int64)) if v.dtype.kind in "iu" else pa.array(v.astype(str))
            yield pa.RecordBatch.from_pydict(cols)

    npy = spark.range(0, n, numPartitions=parts).mapInArrow(read_rows, schema)
    base = df.drop("_feat", "_feat_raw")
    if ids is None:
        cnt = base.count()
        if cnt != n:
            raise BadInputError(
                src.features_npy,
                "features_npy",
                n,
                cnt,
                f"feature rows but the vertex table {src.path} has {cnt} rows",
                hint="features_npy without features_npy_ids must align row by row",
            )
        indexed, _, _, _ = dense_index(base, [F.col(ROWPOS)], "_row")
        out = indexed.join(npy, "_row", "left").drop("_row")
    else:
        key = F.col("_nid").cast("long") if id_long else F.trim(F.col("_nid").cast("string"))
        npy = npy.withColumn("_nid", key).drop("_row")
        unknown = npy.join(base.select(F.col("_id").alias("_nid")), "_nid", "left_anti")
        nu = unknown.count()
        if nu:
            ex = [r["_nid"] for r in unknown.limit(3).collect()]
            raise BadInputError(
                src.features_npy_ids,
                "features_npy_ids",
                nu,
                n,
                f"name ids that are not in the vertex table {src.path}",
                ex,
                hint="every feature id must be a vertex of that table",
            )
        out = base.join(npy.withColumnRenamed("_nid", "_id"), "_id", "left")
    return out.withColumn("_feat_raw", F.lit(f"row of {Path(src.features_npy).name}"))


# ----------------------------------------------------------------------------------------------
# The job
# ----------------------------------------------------------------------------------------------


def _ids_native_long(plan: _Plan, spark) -> bool:
    """True when every id column is an integer column (Parquet), so ids never go through strings."""
    if plan.ing.id_type == "string":
        return False
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs.ingest.readers import detect_format

    for i, e in enumerate(plan.ing.edges):
        if detect_format(e, plan.edge_files[i], f"ingest.edges[{i}]") != "parquet":
            return False
        sch = pq.read_schema(plan.edge_files[i][0])
        for c in (e.src, e.dst):
            if c not in sch.names or not pa.types.is_integer(sch.field(c).type):
                return False
    for i, v in enumerate(plan.ing.vertices):
        if detect_format(v, plan.vertex_files[i], f"ingest.vertices[{i}]") != "parquet":
            return False
        sch = pq.read_schema(plan.vertex_files[i][0])
        if v.id not in sch.names or not pa.types.is_integer(sch.field(v.id).type):
            return False
    return True


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
    plan = _Plan(ing)
    root = Path(cfg.dataset.root)
    inputs = file_fingerprints(plan.all_input_paths(), cfg.dataset.checksum)
    fp = ingest_fingerprint(ing, inputs)
    existing = _find_existing(root, ing.graph, fp, ing.version)
    if existing is not None and not force:
        log(f"ingest: {existing.path} is up to date (same inputs and parameters); use --force to rebuild")
        return existing
    version = ing.version or f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{fp[:8]}"
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


def _build(spark, cfg: Config, plan: _Plan, out: DatasetVersion, cached: list, log, t0: float) -> Manifest:
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    c = F.col
    ing = plan.ing
    timings: dict[str, float] = {}
    id_long = _ids_native_long(plan, spark)

    # ---- 1. edges: read + row checks + one aggregation --------------------------------------
    frames, offset = [], 0
    for i in range(len(ing.edges)):
        df, sf = _edge_source_frame(spark, plan, i, offset, id_long)
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
            df, sf = _vertex_source_frame(spark, plan, i, offset, id_long)
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
