"""Dataset tables through Spark on a local root (the JVM, and pyarrow in the tasks) and on a real S3 API."""

from __future__ import annotations

import pytest

from glisp_core.storage.store import store_for
from glisp_spark.tables import IO_KEY, jvm_opens, parquet_files, read_parquet, spark_path, write_parquet


@pytest.fixture
def python_io(spark):
    spark.conf.set(IO_KEY, "python")
    yield
    spark.conf.unset(IO_KEY)


def _frame(spark):
    return spark.range(0, 1000, 1, 3).selectExpr("id", "id * 2 AS twice", "array(cast(id AS float)) AS feat")


def test_s3_goes_through_the_tasks_and_round_trips(spark, s3_root):
    assert not jvm_opens(spark, s3_root) and jvm_opens(spark, "/tmp/x")
    assert spark_path(s3_root).startswith("s3a://")
    out = s3_root / "t"
    assert write_parquet(_frame(spark), out) == 1000
    assert [f.name for f in parquet_files(out)] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert store_for(out).exists(out / "_SUCCESS")
    back = read_parquet(spark, out).orderBy("id").collect()
    assert [(r["id"], r["twice"], list(r["feat"])) for r in back[:2]] == [(0, 0, [0.0]), (1, 2, [1.0])]
    assert len(back) == 1000
    # overwrite replaces, error refuses
    write_parquet(_frame(spark).limit(10).repartition(1), out)
    assert read_parquet(spark, out).count() == 10 and len(parquet_files(out)) == 1
    with pytest.raises(Exception, match="already exists"):
        write_parquet(_frame(spark), out, mode="error")


def test_python_io_on_a_local_root_equals_the_jvm(spark, tmp_path, python_io):
    write_parquet(_frame(spark), tmp_path / "py")
    spark.conf.set(IO_KEY, "jvm")
    write_parquet(_frame(spark), tmp_path / "jvm")
    jvm = sorted(tuple(r) for r in read_parquet(spark, tmp_path / "py").collect())
    spark.conf.set(IO_KEY, "python")
    py = sorted(tuple(r) for r in read_parquet(spark, tmp_path / "jvm").collect())
    assert jvm == py and len(py) == 1000


def test_an_empty_partition_still_writes_the_schema(spark, s3_root):
    out = s3_root / "empty"
    assert write_parquet(_frame(spark).filter("id < 0"), out) == 0
    assert read_parquet(spark, out).count() == 0
    assert read_parquet(spark, out).columns == ["id", "twice", "feat"]


def test_a_missing_table_names_its_uri(spark, s3_root):
    with pytest.raises(Exception, match="no Parquet files"):
        read_parquet(spark, s3_root / "nothing")


def test_an_unknown_mode_is_refused(spark):
    spark.conf.set(IO_KEY, "fast")
    try:
        with pytest.raises(Exception, match="auto, jvm or python"):
            jvm_opens(spark, "/x")
    finally:
        spark.conf.unset(IO_KEY)


def test_csv_in_a_bucket_is_read_by_the_tasks(spark, s3_root):
    """CSV files written by the tasks (write_files) read back through pyarrow in the tasks: rows and types."""
    from glisp_spark.tables import read_csv, write_files

    frame = spark.range(0, 500, 1, 2).selectExpr("id AS src", "id + 1 AS dst", "'x' AS tag")
    assert write_files(frame, s3_root / "pairs", "csv") == 500
    back = read_csv(spark, s3_root / "pairs")
    assert dict(back.dtypes) == {"src": "bigint", "dst": "bigint", "tag": "string"}
    assert sorted((r["src"], r["dst"]) for r in back.collect()) == [(i, i + 1) for i in range(500)]
    one = s3_root / "pairs" / "part-00001.csv"
    assert read_csv(spark, one).count() == 250
    with pytest.raises(Exception, match="no CSV files"):
        read_csv(spark, s3_root / "none.csv")
