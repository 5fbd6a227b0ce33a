"""Parquet tables of a dataset read and written by Spark on any store, with or without a JVM connector.

Spark's JVM opens local paths and HDFS itself, and S3 or GCS only with a connector jar (hadoop-aws, the GCS
connector) that not every cluster has. So a table under a URI the JVM cannot open is read and written by
pyarrow inside the Python tasks instead (``mapInArrow``): each task opens the store with
:func:`glisp_core.storage.store.store_for`, which reads credentials from the executor's environment exactly
as on the driver. Which way a URI goes is ``spark.glisp.storage.io``:

- ``auto`` (default): the JVM for local paths and ``hdfs://``/``viewfs://``; pyarrow in the tasks for object
  stores, so an ``s3://`` root works on a cluster without hadoop-aws (tested here against a real S3 API);
- ``jvm``: always the JVM (``s3://`` handed to it as ``s3a://``), for a cluster with its connector;
- ``python``: always pyarrow in the tasks (also on a local root: how tests exercise this path cheaply).

The pyarrow path reads one task per file (Spark's writer made one file per partition, so parallelism
matches) and writes one ``part-NNNNN.parquet`` per partition, then ``_SUCCESS``; there is no column pruning
or predicate pushdown, so callers select and filter after reading as they would anyway.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from glisp_core.errors import GlispError
from glisp_core.storage.schemes import TABLE
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

IO_KEY = "spark.glisp.storage.io"
Mode = Literal["auto", "jvm", "python"]


def io_mode(spark: SparkSession) -> Mode:
    mode = str(spark.conf.get(IO_KEY, "auto") or "auto")
    if mode not in ("auto", "jvm", "python"):
        raise GlispError(f"{IO_KEY}={mode!r}: use auto, jvm or python (glisp_spark/tables.py says what each does)")
    return mode  # type: ignore[return-value]


def jvm_opens(spark: SparkSession, uri: StoreURI | str) -> bool:
    """Whether Spark's JVM reads and writes ``uri`` itself (else pyarrow does, inside the tasks)."""
    mode = io_mode(spark)
    return mode == "jvm" or (mode == "auto" and TABLE[parse_uri(uri).scheme].jvm_native)


def spark_path(uri: StoreURI | str) -> str:
    """The URI as the JVM must see it: fully qualified, ``s3://`` as ``s3a://`` (Hadoop's S3 connector)."""
    u = parse_uri(uri)
    hadoop = TABLE[u.scheme].hadoop
    return f"{hadoop}://{u.authority}{u.path}" if hadoop else u.qualified


def read_parquet(spark: SparkSession, uri: StoreURI | str) -> DataFrame:
    """The Parquet file or directory at ``uri`` as a DataFrame (files starting with ``_`` or ``.`` skipped)."""
    u = parse_uri(uri)
    if jvm_opens(spark, u):
        known = footer_schema(u)
        reader = spark.read if known is None else spark.read.schema(known)
        return reader.parquet(spark_path(u))
    from pyspark.sql.pandas.types import from_arrow_schema

    files = parquet_files(u)
    if not files:
        raise GlispError(f"{u}: no Parquet files to read (an empty or missing table)")
    schema = first_footer(files)
    names = [f.qualified for f in files]

    def read(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        for b in batches:
            for i in b.column(0).to_pylist():
                yield from _file_batches(names[i], schema)

    # every column nullable, as Spark's own Parquet reader gives it: a table read either way has one schema
    return spark.range(0, len(names), 1, len(names)).mapInArrow(read, as_nullable(from_arrow_schema(schema)))


def footer_schema(u: StoreURI) -> Any:
    """Spark's schema of a local Parquet table, made in the driver from its first file's footer; None where Spark
    must infer it: not a local path, partition directories (``k=v``, whose columns no footer holds), or a
    column type whose conversion is not the one Spark's reader makes (only plain numbers, booleans, text,
    bytes, dates and lists of those are converted). Without it Spark runs a job, one task reading one footer,
    for every table it opens: a barrier each on a cluster."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not u.is_local:
        return None
    files = parquet_files(u)
    if not files or any("=" in part for f in files for part in f.local.parts[len(u.local.parts) :]):
        return None
    schema = first_footer(files)
    if not all(_plain(f.type) for f in schema):
        return None
    return as_nullable(from_arrow_schema(schema))


def first_footer(files: list[StoreURI]) -> pyarrow.Schema:
    """The Arrow schema in the footer of a table's first file, read through its store."""
    import pyarrow.parquet as pq

    with store_for(files[0]).open_input(files[0]) as f:
        return pq.read_schema(f)


def _plain(t: pyarrow.DataType) -> bool:
    """A type whose Spark type is the same read from a footer as converted from Arrow."""
    import pyarrow.types as pt

    if pt.is_list(t) or pt.is_large_list(t):
        return _plain(t.value_type)
    scalar = (pt.is_signed_integer, pt.is_floating, pt.is_boolean, pt.is_string, pt.is_large_string, pt.is_binary)
    return (any(f(t) for f in scalar) and not pt.is_float16(t)) or pt.is_large_binary(t) or pt.is_date32(t)


def as_nullable(dt: Any) -> Any:
    """``dt`` with every field, element and value nullable (what Spark's file sources make of a read schema)."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(dt, StructType):
        return StructType([StructField(f.name, as_nullable(f.dataType), True, f.metadata) for f in dt.fields])
    if isinstance(dt, ArrayType):
        return ArrayType(as_nullable(dt.elementType), True)
    if isinstance(dt, MapType):
        return MapType(as_nullable(dt.keyType), as_nullable(dt.valueType), True)
    return dt


def read_csv(spark: SparkSession, uri: StoreURI | str, sep: str = ",") -> DataFrame:
    """A CSV file or directory with a header row (``.gz``/``.bz2`` too) as a DataFrame: Spark's reader where
    the JVM opens the URI, else pyarrow in the tasks, one task per file, types inferred from the first file."""
    u = parse_uri(uri)
    if jvm_opens(spark, u):
        return spark.read.option("header", True).option("sep", sep).csv(spark_path(u))
    from pyspark.sql.pandas.types import from_arrow_schema

    store = store_for(u)
    files = [u] if not store.is_dir(u) else [u.join(r) for r, _ in store.files(u) if not r.startswith(("_", "."))]
    if not files or not store.exists(files[0]):
        raise GlispError(f"{u}: no CSV files to read")
    names = [f.qualified for f in files]
    schema = next(_csv_batches(names[0], sep, None)).schema

    def read(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        for b in batches:
            for i in b.column(0).to_pylist():
                yield from _csv_batches(names[i], sep, schema)

    return spark.range(0, len(names), 1, len(names)).mapInArrow(read, from_arrow_schema(schema))


def _csv_batches(name: str, sep: str, schema: pyarrow.Schema | None) -> Iterator[pyarrow.RecordBatch]:
    import pyarrow.csv as pacsv

    types = None if schema is None else {f.name: f.type for f in schema}
    with store_for(name).fs.open_input_stream(store_for(name).at(name), compression="detect") as f:
        reader = pacsv.open_csv(
            f, parse_options=pacsv.ParseOptions(delimiter=sep), convert_options=pacsv.ConvertOptions(column_types=types)
        )
        for b in reader:
            if schema is not None and not b.schema.equals(schema):
                raise GlispError(f"{name}: its columns differ from the first file's ({b.schema} vs {schema})")
            yield b


def parquet_files(uri: StoreURI | str) -> list[StoreURI]:
    """The data files of a Parquet table (one file, or a directory's ``*.parquet`` not hidden), sorted."""
    u = parse_uri(uri)
    store = store_for(u)
    if not store.is_dir(u):
        return [u] if store.exists(u) else []
    return [
        u.join(rel)
        for rel, _ in store.files(u)
        if rel.endswith(".parquet") and not any(p.startswith(("_", ".")) for p in rel.split("/"))
    ]


def _file_batches(name: str, schema: pyarrow.Schema) -> Iterator[pyarrow.RecordBatch]:
    import pyarrow.parquet as pq

    with store_for(name).open_input(name) as f:
        pf = pq.ParquetFile(f)
        if not pf.schema_arrow.equals(schema):
            raise GlispError(f"{name}: its schema differs from the table's first file ({pf.schema_arrow} vs {schema})")
        yield from pf.iter_batches()


def write_parquet(df: DataFrame, uri: StoreURI | str, mode: Literal["overwrite", "error", "into"] = "overwrite") -> int:
    """Write ``df`` as a Parquet directory at ``uri``; the rows written (-1 when the JVM wrote them).

    ``into`` writes the table's files into ``uri`` whatever else it holds and removes nothing: how a stage
    whose output is the table itself writes its attempt prefix, whose lease object must stay (Spark's
    ``append`` on the JVM path; ``uri`` must hold no table yet).

    The pyarrow path is :func:`write_files`. An object appears when its stream closes, so a killed task leaves
    no file; one failing with an exception may leave a partial one (pyarrow's S3 stream cannot abort), which
    its retry replaces and which a failed job's discarded attempt takes with it.
    """
    u = parse_uri(uri)
    spark = df.sparkSession
    if jvm_opens(spark, u):
        df.write.mode({"overwrite": "overwrite", "error": "errorifexists", "into": "append"}[mode]).parquet(
            spark_path(u)
        )
        return -1
    store = store_for(u)
    if mode != "into" and store.exists(u):
        if mode != "overwrite":
            raise GlispError(f"{u}: already exists")
        store.delete(u)
    return write_files(df, u, "parquet")


def write_files(df: DataFrame, uri: StoreURI | str, fmt: Literal["parquet", "csv"]) -> int:
    """pyarrow inside the tasks: one ``part-NNNNN.<fmt>`` per partition (CSV with a header), then ``_SUCCESS``;
    the rows written. Files are named by partition, so a retried or speculative task replaces its own."""
    from pyspark.sql.pandas.types import to_arrow_schema

    u = parse_uri(uri)
    schema, base = to_arrow_schema(df.schema), u.qualified

    def write(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        import pyarrow as pa

        rows = 0
        with contextlib.ExitStack() as stack:
            w = part_writer(stack, base, schema, fmt)
            for b in batches:
                w.write_batch(b.cast(schema) if b.schema != schema else b)
                rows += b.num_rows
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    total = sum(int(r["rows"]) for r in df.mapInArrow(write, "rows long").collect())
    mark_written(u)
    return total


def part_writer(
    stack: contextlib.ExitStack, base: str, schema: pyarrow.Schema, fmt: Literal["parquet", "csv"] = "parquet"
) -> Any:
    """Inside a Spark task: a writer of ``schema`` to ``base/part-NNNNN.<fmt>`` (NNNNN the task's partition, so
    a retried or speculative task replaces its own file), closed with ``stack``: the object appears whole when
    its stream closes. How :func:`write_files` and other passes that write tables from their tasks name them."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "a part file is written inside a Spark task"
    name = f"{base}/part-{ctx.partitionId():05d}.{fmt}"
    f = stack.enter_context(store_for(name).open_output(name))
    return stack.enter_context(pq.ParquetWriter(f, schema) if fmt == "parquet" else pacsv.CSVWriter(f, schema))


def mark_written(uri: StoreURI | str) -> None:
    """``_SUCCESS`` in a table directory whose tasks all wrote their part files."""
    u = parse_uri(uri)
    store_for(u).write_bytes(u / "_SUCCESS", b"")


def read_arrow_table(uri: StoreURI | str, **kw: Any) -> pyarrow.Table:
    """A Parquet file or directory as one pyarrow Table on this process (driver or task), from any store."""
    u = parse_uri(uri)
    return store_for(u).read_table(u, **kw)
