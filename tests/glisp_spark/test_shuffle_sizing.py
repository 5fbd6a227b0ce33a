"""A stage sizes the session's shuffle partitions by its edge rows, so a shuffle partition's sort fits a task's
heap at any graph size (four partitions of 17M rows each did not, at R-MAT 22), and small graphs keep the base."""

from __future__ import annotations

import os

from glisp_core.config import SparkConfig
from glisp_spark.session import SHUFFLE_ROWS, base_shuffle_partitions, size_shuffles


def test_stages_raise_the_shuffle_partitions_with_their_rows_and_keep_a_set_value(spark):
    base = max(2, 2 * (os.cpu_count() or 2))
    conf = SparkConfig()
    assert base_shuffle_partitions(conf) == base
    try:
        assert size_shuffles(spark, conf, 10_000) == base  # a small graph: the base
        assert spark.conf.get("spark.sql.shuffle.partitions") == str(base)
        rows = 67_108_864  # R-MAT 22
        n = size_shuffles(spark, conf, rows)
        assert n == -(-rows // SHUFFLE_ROWS) == 34 and spark.conf.get("spark.sql.shuffle.partitions") == "34"
        assert size_shuffles(spark, conf, 10_000) == base  # the next, smaller stage of the same session
        assert size_shuffles(spark, SparkConfig(shuffle_partitions=7), rows) == 7  # the user's value, as set
        assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(base))


def test_ingest_sizes_its_shuffles_once_it_has_counted_the_edge_rows(spark, cfg, tmp_path, monkeypatch):
    """Ingest cannot know its edge rows before reading them: it sizes the shuffles after the read (here with
    500 rows per shuffle partition, so Cora's 5,429 rows take 11) and the version is the same as the base's."""
    import glisp_spark.session as S
    from glisp_core.config import with_values
    from spark_jobs.generate.builtin import builtin_config
    from spark_jobs.ingest.job import run_ingest

    base = spark.conf.get("spark.sql.shuffle.partitions")
    seen: list[int] = []
    real = S.size_shuffles

    def keep(sp, conf, rows):
        seen.append(rows)
        return real(sp, conf, rows)

    try:
        c = with_values(cfg, "dataset", root=str(tmp_path / "a"))
        first = run_ingest(spark, c, builtin_config("cora"), log=lambda _: None)
        monkeypatch.setattr(S, "SHUFFLE_ROWS", 500)
        monkeypatch.setattr("spark_jobs.ingest.job.size_shuffles", keep)
        c = with_values(cfg, "dataset", root=str(tmp_path / "b"))
        sized = run_ingest(spark, c, builtin_config("cora"), log=lambda _: None)
        assert seen == [5429] and spark.conf.get("spark.sql.shuffle.partitions") == "11"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", base)
    for table in ("edges", "vertices"):
        a, b = (_sorted(spark.read.parquet(str(getattr(dv, table)))) for dv in (first, sized))
        assert a == b, table


def _sorted(df):
    return df.orderBy(*df.columns).collect()
