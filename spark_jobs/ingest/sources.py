"""The ingest plan and its per-source DataFrames: every configured edge/vertex table read, typed and
checked row by row with column expressions, so that ``job._build`` only sees uniform frames.

Each row gets at most one bad-input reason here; ``job`` counts the reasons per file and fails or
quarantines. Ids stay in the user's type (long when every source holds integers, else string) until
``job`` assigns dense vids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from glisp_core.config import EdgeSource, IngestConfig, VertexSource
from glisp_core.dataset.layout import check_name
from glisp_core.errors import BadInputError, ConfigError
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.ingest import checks
from spark_jobs.ingest.checks import RCOL, REASON, SI, Rule
from spark_jobs.ingest.idmap import dense_index
from spark_jobs.ingest.readers import CORRUPT, FID, ROWPOS, expand_paths, read_source, require_columns

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


def id_parts(df, name: str, id_long: bool):
    """(integer part, string part) of an id column: the integer when the trimmed text parses as one,
    the trimmed text unless it is exactly the integer's canonical form. Both null: a null/empty id.
    The string key is ``coalesce(string part, integer part as string)``, i.e. the trimmed text."""
    from pyspark.sql import functions as F

    none = F.lit(None).cast("string")
    if id_long or _dtype(df, name) in _INTEGRAL:
        return _col(name).cast("long"), none
    s = _trimmed(_col(name))
    i = s.try_cast("long")
    return i, F.when(i.isNull() | (i.cast("string") != s), s)


def key_string(int_part, str_part):
    """The string key of an id given as (integer part, string part)."""
    from pyspark.sql import functions as F

    return F.coalesce(str_part, int_part.cast("string"))


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


class IngestPlan:
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


def _open(spark, src: EdgeSource | VertexSource, what: str, files: list, offset: int, cols: dict, seq: int = 0):
    """Read one configured table and check that every column the config names is there."""
    sf = read_source(spark, src, what, files, offset, seq=seq)
    require_columns(sf, cols, what)
    return sf


def edge_columns(src: EdgeSource) -> dict[str, str]:
    return {"src": src.src, "dst": src.dst, "etype": src.etype, "weight": src.weight, "timestamp": src.timestamp}


def open_edge_source(spark, plan: IngestPlan, i: int, offset: int):
    """Edge table ``i`` read (lazily) and its configured columns checked."""
    return _open(
        spark,
        plan.ing.edges[i],
        f"ingest.edges[{i}]",
        plan.edge_files[i],
        offset,
        edge_columns(plan.ing.edges[i]),
        seq=i,
    )


def edge_source_frame(spark, plan: IngestPlan, i: int, offset: int, id_long: bool, sf=None):
    """Edge table ``i`` with its row rules; ``sf``: the table's SourceFrame if already open (or the
    rows ``edgestage`` left for the rules)."""
    from pyspark.sql import functions as F

    ing = plan.ing
    src: EdgeSource = ing.edges[i]
    sf = sf or open_edge_source(spark, plan, i, offset)
    df = sf.df
    s_int, s_str = id_parts(df, src.src, id_long)
    d_int, d_str = id_parts(df, src.dst, id_long)
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
        s_int.alias("_s_int"),
        s_str.alias("_s_str"),
        d_int.alias("_d_int"),
        d_str.alias("_d_str"),
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
        Rule("edge_null_id", c("_s_int").isNull() & c("_s_str").isNull(), src.src),
        Rule("edge_null_id", c("_d_int").isNull() & c("_d_str").isNull(), src.dst),
    ]
    if ing.id_type == "int" and not id_long:
        rules += [
            Rule("edge_bad_id", c("_s_int").isNull(), src.src),
            Rule("edge_bad_id", c("_d_int").isNull(), src.dst),
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
        nonint = c("_s_int").isNull() | c("_d_int").isNull()
    return df.withColumn(REASON, reason).withColumn(RCOL, rcol).withColumn("_nonint", nonint), sf


def vertex_source_frame(spark, plan: IngestPlan, i: int, offset: int, id_long: bool):
    from pyspark.sql import functions as F

    ing = plan.ing
    src: VertexSource = ing.vertices[i]
    what = f"ingest.vertices[{i}]"
    cols = {"id": src.id, "vtype": src.vtype, "label": src.label, "split": src.split, "features": src.features}
    cols.update({f"feature_columns[{j}]": fc for j, fc in enumerate(src.feature_columns)})
    sf = _open(spark, src, what, plan.vertex_files[i], offset, cols, seq=len(ing.edges) + i)
    df = sf.df
    c = F.col
    id_int, id_str = id_parts(df, src.id, id_long)
    vt = _trimmed(_col(src.vtype)) if src.vtype else F.lit(src.vertex_type or DEFAULT_VERTEX_TYPE)
    lab_long, lab_raw, lab_str = _label_columns(df, src)
    spl, spl_raw = _split_columns(src)
    feat, feat_raw = _feature_columns(df, src)
    df = df.select(
        F.lit(i).alias(SI),
        FID,
        ROWPOS,
        CORRUPT,
        id_int.alias("_id_int"),
        id_str.alias("_id_str"),
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
    reason, rcol = checks.reason_columns(_vertex_rules(plan, src, sf.df, id_long))
    nonint = F.lit(False)
    if ing.id_type == "auto" and not id_long:
        nonint = c("_id_int").isNull()
    labnonint = (c("_lab_str").isNotNull() & c("_lab").isNull()) if src.label else F.lit(False)
    df = (
        df.withColumn(REASON, reason)
        .withColumn(RCOL, rcol)
        .withColumn("_nonint", nonint)
        .withColumn("_labnonint", labnonint)
        .withColumn("_fw", F.when(c("_feat").isNotNull(), F.size(c("_feat"))).otherwise(F.lit(-1)))
        .withColumn("_fcol", F.lit(_feature_field(src) or None))
        .withColumn("_feat_raw", F.when(c(REASON).isNotNull(), c("_feat_raw")))  # text only for reports
    )
    return df, sf


def _label_columns(df, src: VertexSource):
    """(label as long, its raw text, its trimmed text when the column is a string); nulls without a label."""
    from pyspark.sql import functions as F

    lab_long, lab_raw, lab_str = F.lit(None).cast("long"), F.lit(None).cast("string"), F.lit(None).cast("string")
    if src.label:
        lab_raw = _col(src.label).cast("string")
        if _dtype(df, src.label) == "StringType":
            lab_str = _trimmed(_col(src.label))
            lab_long = lab_str.try_cast("long")
        else:
            lab_long, _ = _to_long(df, src.label)
    return lab_long, lab_raw, lab_str


def _split_columns(src: VertexSource):
    """(split code as byte: -1 none, null when the name is unknown; its raw text)."""
    from pyspark.sql import functions as F

    if not src.split:
        return F.lit(-1).cast("byte"), F.lit(None).cast("string")
    spl_raw = _trimmed(_col(src.split))
    m = F.create_map(*[x for k, v in _SPLIT_NAMES.items() for x in (F.lit(k), F.lit(v))])
    return F.when(spl_raw.isNull(), F.lit(-1)).otherwise(m[F.lower(spl_raw)]).cast("byte"), spl_raw


def _feature_columns(df, src: VertexSource):
    """(features as array<float>, null elements where a value does not parse; their raw text) from one array or
    string column, or from several scalar columns; nulls without features (or with an .npy file)."""
    from pyspark.sql import functions as F

    if src.features:
        fc = _col(src.features)
        if _dtype(df, src.features) == "StringType":  # "[1, 2, 3]" or "1;2;3" or "1 2 3"
            parts = F.split(F.regexp_replace(F.trim(fc), r"^\[|\]$", ""), r"[,;\s]+")
            return F.when(fc.isNotNull(), F.transform(parts, lambda x: x.try_cast("float"))), fc
        return fc.cast("array<float>"), fc.cast("string")
    if src.feature_columns:
        cols = [
            _trimmed(_col(x)).try_cast("float") if _dtype(df, x) == "StringType" else _col(x).cast("float")
            for x in src.feature_columns
        ]
        return F.array(*cols), F.concat_ws(",", *[_col(x).cast("string") for x in src.feature_columns])
    return F.lit(None).cast("array<float>"), F.lit(None).cast("string")


def _feature_field(src: VertexSource) -> str:
    """The field a vertex source's features come from, as reports name it ("" without features)."""
    return src.features or src.features_npy or ",".join(src.feature_columns)


def _vertex_rules(plan: IngestPlan, src: VertexSource, raw_df, id_long: bool) -> list[Rule]:
    """The reject rules of a vertex source's rows, first match wins (``raw_df``: the source as read)."""
    from pyspark.sql import functions as F

    ing, c = plan.ing, F.col
    rules = [
        Rule("vertex_malformed", c(CORRUPT).isNotNull(), "*"),
        Rule("vertex_null_id", c("_id_int").isNull() & c("_id_str").isNull(), src.id),
    ]
    if ing.id_type == "int" and not id_long:
        rules.append(Rule("vertex_bad_id", c("_id_int").isNull(), src.id))
    bad_vt = c("_vt").isNull()
    if ing.vertex_types:
        bad_vt = bad_vt | ~c("_vt").isin(list(ing.vertex_types))
    rules.append(Rule("vertex_unknown_type", bad_vt, src.vtype or "vertex_type"))
    if src.label and _dtype(raw_df, src.label) != "StringType":
        rules.append(Rule("vertex_bad_label", c("_lab_raw").isNotNull() & c("_lab").isNull(), src.label))
    if src.split:
        rules.append(Rule("vertex_bad_split", c("_spl_raw").isNotNull() & c("_spl").isNull(), src.split))
    fname = _feature_field(src)
    if fname:
        rules.append(
            Rule(
                "vertex_bad_features",
                # array_contains(NaN) is true with a NaN, null with a null element (no lambda: cheaper)
                c("_feat").isNull()
                | F.coalesce(F.array_contains(c("_feat"), F.lit(float("nan")).cast("float")), F.lit(True)),
                fname,
            )
        )
    return rules


def _attach_npy(spark, df, src: VertexSource, plan: IngestPlan, i: int, id_long: bool):
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
        freeze_worker_heap()
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
        vkey = F.col("_id_int") if id_long else key_string(F.col("_id_int"), F.col("_id_str"))
        key = F.col("_nid").cast("long") if id_long else F.trim(F.col("_nid").cast("string"))
        npy = npy.withColumn("_nid", key).drop("_row")
        base = base.withColumn("_nid", vkey)
        unknown = npy.join(base.select("_nid"), "_nid", "left_anti")
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
        out = base.join(npy, "_nid", "left").drop("_nid")
    return out.withColumn("_feat_raw", F.lit(f"row of {Path(src.features_npy).name}"))


# ----------------------------------------------------------------------------------------------
# The job
# ----------------------------------------------------------------------------------------------


def ids_native_long(plan: IngestPlan, spark) -> bool:
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


def decide_id_type(ing: IngestConfig, id_long: bool, good_e: list, good_v: list) -> str:
    """ "int" or "string": integer ids when configured so, or (auto) when every good id parses."""
    if id_long:
        return "int"
    if ing.id_type == "auto":
        nonint = any(r["_nonint"] for r in good_e) or any(r["_nonint"] for r in good_v)
        return "string" if nonint else "int"
    return ing.id_type


def vertex_feature_dim(good_v: list) -> int:
    """The most common feature width of the good vertex rows (ties: the smaller), 0 without features."""
    widths: dict[int, int] = {}
    for r in good_v:
        if r["_fw"] >= 0:
            widths[r["_fw"]] = widths.get(r["_fw"], 0) + int(r["count"])
    return max(widths.items(), key=lambda kv: (kv[1], -kv[0]))[0] if widths else 0


def label_names(v0, plan: IngestPlan) -> list[str]:
    """Sorted distinct non-integer labels of the good vertex rows (at most 100,000 names)."""
    from pyspark.sql import functions as F

    from spark_jobs.ingest.checks import REASON

    c = F.col
    names = (
        v0.filter(c(REASON).isNull() & c("_lab_str").isNotNull()).select("_lab_str").distinct().limit(100_001).collect()
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
    return sorted(r["_lab_str"] for r in names)
