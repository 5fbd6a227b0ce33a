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


def _tables(root):
    """Three local tables: plain columns in two files; columns Spark converts its own way (unsigned, timestamp,
    dictionary); a partition directory ``k=1``."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 5
    plain = pa.table(
        {
            "i8": pa.array(range(n), pa.int8()),
            "i16": pa.array(range(n), pa.int16()),
            "i32": pa.array(range(n), pa.int32()),
            "i64": pa.array(range(n), pa.int64()),
            "f32": pa.array([0.5 * i for i in range(n)], pa.float32()),
            "f64": pa.array([0.25 * i for i in range(n)], pa.float64()),
            "ok": pa.array([i % 2 == 0 for i in range(n)]),
            "s": pa.array([f"v{i}" for i in range(n)]),
            "ls": pa.array([f"w{i}" for i in range(n)], pa.large_string()),
            "b": pa.array([bytes([i]) for i in range(n)], pa.binary()),
            "d": pa.array([datetime.date(2026, 1, 1 + i) for i in range(n)], pa.date32()),
            "feat": pa.array([[float(i), None] for i in range(n)], pa.list_(pa.float32())),
            "ids": pa.array([[i] for i in range(n)], pa.list_(pa.int64())),
        }
    )
    odd = pa.table(
        {
            "u32": pa.array(range(n), pa.uint32()),
            "t": pa.array([datetime.datetime(2026, 1, 1, i) for i in range(n)], pa.timestamp("us")),
            "cat": pa.array(["a", "b", "a", "c", "b"]).dictionary_encode(),
        }
    )
    for name, t, files in (
        ("plain", plain, ("part-0", "part-1")),
        ("odd", odd, ("part-0",)),
        ("parted/k=1", plain, ("part-0",)),
    ):
        (root / name).mkdir(parents=True)
        for f in files:
            pq.write_table(t, root / name / f"{f}.parquet")
    return {"plain": False, "odd": True, "parted": True}  # whether Spark must infer the schema (a job)


def test_a_local_table_opens_with_sparks_own_schema_and_no_job_where_its_footer_says_it(spark, tmp_path):
    """Spark runs a job to read a footer for every table it opens without a schema; the driver reads it instead
    where the conversion is certain, and the table is the one Spark's own reader gives."""
    sc = spark.sparkContext
    for name, infers in _tables(tmp_path).items():
        sc.setJobGroup(f"footer-{name}", name)
        try:
            df = read_parquet(spark, tmp_path / name)
            jobs = sc.statusTracker().getJobIdsForGroup(f"footer-{name}")
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        assert bool(jobs) == infers, (name, jobs)
        own = spark.read.parquet(str(tmp_path / name))
        assert df.schema == own.schema, name
        assert sorted(map(str, df.collect())) == sorted(map(str, own.collect())) and df.count() in (5, 10)
