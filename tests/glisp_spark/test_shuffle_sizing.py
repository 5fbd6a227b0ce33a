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
