"""Every configured edge/vertex table as a DataFrame of uniform columns, each row with the first rule it breaks.

Why column expressions: the rules then run inside Spark's scan of the table (no Python per row), and a
row gets at most one reason, so the counts of kinds add up to the rows set aside (``checks``). Ids stay
in the user's type (an integer part and a string part, see ``id_parts``) until the idmap phase assigns
dense vids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glisp_core.config import EdgeSource, VertexSource
from glisp_core.storage.uri import StoreURI
from spark_jobs.ingest import checks
from spark_jobs.ingest.checks import Rule
from spark_jobs.ingest.columns import CORRUPT, FID, RCOL, REASON, ROWPOS, SI
from spark_jobs.ingest.npy_features import attach_npy
from spark_jobs.ingest.plan import IngestPlan
from spark_jobs.ingest.readers import SourceFrame, read_source, require_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

DEFAULT_EDGE_TYPE = "edge"
DEFAULT_VERTEX_TYPE = "vertex"
_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_SPLIT_NAMES = {"train": 0, "0": 0, "val": 1, "valid": 1, "validation": 1, "1": 1, "test": 2, "2": 2}


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")


def _trimmed(c: Column) -> Column:
    """String value, trimmed; empty -> null."""
    from pyspark.sql import functions as F

    s = F.trim(c.cast("string"))
    return F.when(s != "", s)


def _dtype(df: DataFrame, name: str) -> str:
    return type(df.schema[name].dataType).__name__


def id_parts(df: DataFrame, name: str, id_long: bool) -> tuple[Column, Column]:
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


def key_string(int_part: Column, str_part: Column) -> Column:
    """The string key of an id given as (integer part, string part)."""
    from pyspark.sql import functions as F

    return F.coalesce(str_part, int_part.cast("string"))


def _to_long(df: DataFrame, name: str) -> tuple[Column, Column]:
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


def _to_double(df: DataFrame, name: str) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    t = _dtype(df, name)
    c = _col(name)
    if t == "StringType":
        return _trimmed(c).try_cast("double"), c
    return c.cast("double"), F.lit(None).cast("string")


def _open(
    spark: SparkSession,
    src: EdgeSource | VertexSource,
    what: str,
    files: list[StoreURI],
    offset: int,
    cols: dict[str, str],
    seq: int = 0,
) -> SourceFrame:
    """Read one configured table and check that every column the config names is there."""
    sf = read_source(spark, src, what, files, offset, seq=seq)
    require_columns(sf, cols, what)
    return sf


def open_edge_source(spark: SparkSession, plan: IngestPlan, i: int, offset: int) -> SourceFrame:
    """Edge table ``i`` read (lazily) and its configured columns checked."""
    e = plan.ing.edges[i]
    cols = {"src": e.src, "dst": e.dst, "etype": e.etype, "weight": e.weight, "timestamp": e.timestamp}
    return _open(spark, e, f"ingest.edges[{i}]", plan.edge_files[i], offset, cols, seq=i)


# ---- edge tables --------------------------------------------------------------------------------
def edge_rules_frame(plan: IngestPlan, i: int, sf: SourceFrame, id_long: bool) -> DataFrame:
    """Edge table ``i`` (``sf``: the rows ``edgestage`` left for the rules) in uniform columns, with its
    row rules' reason and column, and ``_nonint`` (a good row with a non-integer id)."""
    from pyspark.sql import functions as F

    src: EdgeSource = plan.ing.edges[i]
    df = sf.df
    s_int, s_str = id_parts(df, src.src, id_long)
    d_int, d_str = id_parts(df, src.dst, id_long)
    et = _trimmed(_col(src.etype)) if src.etype else F.lit(src.edge_type or DEFAULT_EDGE_TYPE)
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
    reason, rcol = checks.reason_columns(_edge_rules(plan, src, id_long))
    nonint = F.lit(False)
    if plan.ing.id_type == "auto" and not id_long:
        nonint = F.col("_s_int").isNull() | F.col("_d_int").isNull()
    return df.withColumn(REASON, reason).withColumn(RCOL, rcol).withColumn("_nonint", nonint)


_INTEGER = r"^\s*[+-]?[0-9]+\s*$"  # an integer, whatever its size: a null long of this is out of range


def _edge_rules(plan: IngestPlan, src: EdgeSource, id_long: bool) -> list[Rule]:
    """The reject rules of an edge source's rows, first match wins."""
    from pyspark.sql import functions as F

    ing, c = plan.ing, F.col
    rules = [
        Rule("edge_malformed", c(CORRUPT).isNotNull(), "*"),
        Rule("edge_null_id", c("_s_int").isNull() & c("_s_str").isNull(), src.src),
        Rule("edge_null_id", c("_d_int").isNull() & c("_d_str").isNull(), src.dst),
    ]
    if ing.id_type == "int" and not id_long:
        rules += [
            Rule("edge_id_out_of_range", c("_s_int").isNull() & c("_s_str").rlike(_INTEGER), src.src),
            Rule("edge_id_out_of_range", c("_d_int").isNull() & c("_d_str").rlike(_INTEGER), src.dst),
            Rule("edge_bad_id", c("_s_int").isNull(), src.src),
            Rule("edge_bad_id", c("_d_int").isNull(), src.dst),
        ]
    bad_et = c("_et").isNull()
    if ing.edge_types:
        bad_et = bad_et | ~c("_et").isin(list(ing.edge_types))
    rules.append(Rule("edge_unknown_type", bad_et, src.etype or "edge_type"))
    if plan.typed and ing.vertex_types:
        rules.append(Rule("edge_unknown_vertex_type", F.lit(src.src_type not in ing.vertex_types), "src_type"))
        rules.append(Rule("edge_unknown_vertex_type", F.lit(src.dst_type not in ing.vertex_types), "dst_type"))
    if src.weight:
        wv = c("_w")
        rules.append(Rule("edge_bad_weight", wv.isNull() | F.isnan(wv) | (wv < 0) | (wv == float("inf")), src.weight))
    if src.timestamp:
        rules.append(Rule("edge_bad_timestamp", c("_ts").isNull(), src.timestamp))
    return rules


# ---- vertex tables ------------------------------------------------------------------------------
def vertex_source_frame(
    spark: SparkSession, plan: IngestPlan, i: int, offset: int, id_long: bool
) -> tuple[DataFrame, SourceFrame]:
    """Vertex table ``i`` read in uniform columns with its row rules' reason and column, and what the
    later phases group by: ``_nonint``, ``_labnonint`` (a non-integer label), ``_fw`` (feature width)."""
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
    lab_long, lab_raw, lab_str = _label_columns(df, src, ing.label_missing)
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
        vkey = c("_id_int") if id_long else key_string(c("_id_int"), c("_id_str"))
        df = attach_npy(spark, df, src, vkey, id_long)
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


def _label_columns(df: DataFrame, src: VertexSource, missing: str = "") -> tuple[Column, Column, Column]:
    """(label as long, its raw text, its trimmed text when the column is a string); nulls without a label: an empty
    cell, a null, or the value ``ingest.label_missing`` names (e.g. "0" or "unknown"), which never becomes a class."""
    from pyspark.sql import functions as F

    lab_long, lab_raw, lab_str = F.lit(None).cast("long"), F.lit(None).cast("string"), F.lit(None).cast("string")
    if src.label:
        lab_raw = _col(src.label).cast("string")
        if _dtype(df, src.label) == "StringType":
            lab_str = _trimmed(_col(src.label))
            lab_long = lab_str.try_cast("long")
        else:
            lab_long, _ = _to_long(df, src.label)
        if missing:  # the marker as text ("unknown") or as a number ("0" matches 0 and 0.0)
            gone = _trimmed(lab_raw) == F.lit(missing.strip())
            try:
                gone = gone | (_col(src.label).try_cast("double") == F.lit(float(missing)))
            except ValueError:
                pass
            gone = F.coalesce(gone, F.lit(False))
            lab_long, lab_raw, lab_str = (F.when(gone, F.lit(None)).otherwise(x) for x in (lab_long, lab_raw, lab_str))
    return lab_long, lab_raw, lab_str


def _split_columns(src: VertexSource) -> tuple[Column, Column]:
    """(split code as byte: -1 none, null when the name is unknown; its raw text)."""
    from pyspark.sql import functions as F

    if not src.split:
        return F.lit(-1).cast("byte"), F.lit(None).cast("string")
    spl_raw = _trimmed(_col(src.split))
    m = F.create_map(*[x for k, v in _SPLIT_NAMES.items() for x in (F.lit(k), F.lit(v))])
    return F.when(spl_raw.isNull(), F.lit(-1)).otherwise(m[F.lower(spl_raw)]).cast("byte"), spl_raw


def _feature_columns(df: DataFrame, src: VertexSource) -> tuple[Column, Column]:
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


def _vertex_rules(plan: IngestPlan, src: VertexSource, raw_df: DataFrame, id_long: bool) -> list[Rule]:
    """The reject rules of a vertex source's rows, first match wins (``raw_df``: the source as read)."""
    from pyspark.sql import functions as F

    ing, c = plan.ing, F.col
    rules = [
        Rule("vertex_malformed", c(CORRUPT).isNotNull(), "*"),
        Rule("vertex_null_id", c("_id_int").isNull() & c("_id_str").isNull(), src.id),
    ]
    if ing.id_type == "int" and not id_long:
        rules.append(Rule("vertex_id_out_of_range", c("_id_int").isNull() & c("_id_str").rlike(_INTEGER), src.id))
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
