"""A held-out split given by the user (``train.link_heldout``, ``glisp link-split --heldout FILE``).

Recommendation benchmarks come with their own test interactions; a model must be judged on exactly those,
with no further hidden hold-out. The file (CSV with a header, or Parquet) names each held-out edge by its
endpoints' original ids (``src``, ``dst``, as ingested) and its ``split`` (``val``/``validation``/``1`` or
``test``/``2``). Every edge between the two endpoints is then held out (both directions, as the hashed split
holds out unordered pairs); every other edge is trained on. A row naming an unknown vertex, an unknown split
value, or a pair that is not an edge of the graph fails the stage, naming the file, the column and examples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.errors import GlispError
from glisp_core.storage.uri import parse_uri
from glisp_spark.tables import read_csv, read_parquet

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

COLUMNS = ("src", "dst", "split")
VAL, TEST = ("1", "val", "validation"), ("2", "test")


def given_pairs(spark: SparkSession, dv: DatasetVersion, path: str) -> DataFrame:
    """(lo, hi, split) per held-out unordered vertex pair of ``path``: vertex ids, split 1 = val, 2 = test."""
    from pyspark.sql import functions as F

    uri = parse_uri(path, "train.link_heldout")
    df = read_parquet(spark, uri) if uri.path.endswith(".parquet") else read_csv(spark, uri)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise GlispError(
            f"{path}: the held-out edges need columns {list(COLUMNS)}; missing {missing} (has {df.columns})"
        )
    raw = F.lower(F.trim(F.col("split").cast("string")))
    code = F.when(raw.isin(*VAL), 1).when(raw.isin(*TEST), 2)
    rows = df.select(
        F.col("src").cast("string").alias("s"),
        F.col("dst").cast("string").alias("d"),
        raw.alias("raw"),
        code.alias("split"),
    )
    _refuse(rows.filter(F.col("split").isNull()), path, "split", f"a value that is not one of {VAL + TEST}", "raw")
    ids = read_parquet(spark, dv.idmap).select(F.col("orig_id").cast("string").alias("oid"), "vid")
    _refuse(
        ids.groupBy("oid").count().filter(F.col("count") > 1),
        path,
        "src/dst",
        "an original id that several vertex types share (not supported here)",
        "oid",
    )
    named = rows.join(_ids_as(ids, "s", "sv"), "s", "left").join(_ids_as(ids, "d", "dv"), "d", "left")
    _refuse(named.filter(F.col("sv").isNull()), path, "src", "an id that is not a vertex of the graph", "s")
    _refuse(named.filter(F.col("dv").isNull()), path, "dst", "an id that is not a vertex of the graph", "d")
    pairs = named.select(F.least("sv", "dv").alias("lo"), F.greatest("sv", "dv").alias("hi"), "split")
    return pairs.groupBy("lo", "hi").agg(F.max("split").cast("byte").alias("split"))  # val and test: test


def check_all_edges(given: DataFrame, matched: DataFrame, path: str) -> None:
    """Every pair of the file is an edge of the graph (``matched``: the pairs found among the edges)."""
    missing = given.join(matched, ["lo", "hi"], "left_anti")
    _refuse(missing, path, "src/dst", "a pair that is not an edge of the graph (vertex ids shown)", "lo", "hi")


def pair_key(src: Column, dst: Column) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    return F.least(src, dst), F.greatest(src, dst)


def _ids_as(ids: DataFrame, key: str, vid: str) -> DataFrame:
    return ids.withColumnRenamed("oid", key).withColumnRenamed("vid", vid)


def _refuse(bad: DataFrame, path: str, column: str, what: str, *show: str) -> None:
    """GlispError with the count and up to three examples when ``bad`` has rows."""

    examples = bad.select(*show).limit(3).collect()
    if not examples:
        return
    n = bad.count()
    shown = "; ".join(", ".join(f"{k}={r[k]!r}" for k in show) for r in examples)
    raise GlispError(f"{path}, column {column!r}: {n:,} held-out rows have {what} (e.g. {shown})")
