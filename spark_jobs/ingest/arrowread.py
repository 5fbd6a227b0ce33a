"""Tables read by Spark tasks with pyarrow: CSV/TSV by byte ranges, Parquet by row groups.

Why not Spark's readers: to see CSV rows with the wrong number of fields Spark's CSV reader must run
in PERMISSIVE mode with column pruning off, and then costs about 1.5 us per row on one core, every
field a string; and a row Spark reads must come back to Python for the scan anyway. Here each task
reads its part of the files from the shared file system (the same access Spark's readers need) with
pyarrow (CSV: about 0.25 us per row). ``edgestage`` uses the chunks directly; ``table_frame`` hands
them to Spark with the meaning Spark's readers give:

- CSV: every column a string; a row with the wrong number of fields is kept with its raw line in
  ``_corrupt`` and nulls elsewhere; lines starting with the comment character and empty lines are
  skipped; with ``header`` the first other line of every file is the header; '"' quotes with '""'
  inside; an empty field is null; ``.gz``/``.bz2`` files are read whole (one chunk each); a
  multi-character delimiter is replaced by a control character (so it must not occur in quotes);
- every file is opened through the store (``open_binary``, ``open_parquet``): a local path or a URI such as
  ``s3://bucket/edges.csv``, opened by the task itself, so inputs in a bucket need no JVM connector;
- Parquet: the columns typed as Spark reads them (unsigned integers widened, uint64 as
  decimal(20,0), timestamps in microseconds, dictionaries decoded);
- ``_fid`` is the file's index, ``_rowpos`` = (source << 55) | (chunk << 33) | the row's line offset in
  its chunk (Parquet: its row offset), so "first row" means first in file order, and ``rowlocate``
  turns it into a line of the file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from glisp_spark.worker_heap import freeze_worker_heap
from spark_jobs.ingest.columns import CORRUPT, FID, ROWPOS
from spark_jobs.ingest.linemap import kept_lines, row_lines
from spark_jobs.ingest.storeio import read_ipc_file

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SOURCE_SHIFT = 55
CHUNK_SHIFT = 33
_MIN_CHUNK = 4 << 20
_MAX_CHUNK = 128 << 20
ALT_DELIM = "\x1f"  # stands in for a multi-character delimiter
_READ_BUFFER = 1 << 20  # one ranged read per MiB on an object store, not one per line


InputPath = StoreURI | Path  # an input file: a URI, or a local path (what tests and local tools hand in)


def open_binary(path: str | InputPath) -> io.BufferedReader:
    """A buffered binary reader of an input file (a local path or a URI), through its store."""
    u = parse_uri(path, "ingest input")
    return io.BufferedReader(store_for(u).open_input(u), _READ_BUFFER)


def open_parquet(path: str | InputPath) -> Any:
    """A random-access file of a Parquet input (``pq.ParquetFile`` and ``pq.read_schema`` take it)."""
    u = parse_uri(path, "ingest input")
    return store_for(u).open_input(u)


def file_sizes(files: Sequence[InputPath]) -> list[int]:
    """The size of each input file (one listing call per file on an object store)."""
    out = []
    for f in files:
        u = parse_uri(f, "ingest input")
        store = store_for(u)
        info = store.fs.get_file_info(store.at(u))
        if info.size is None:
            raise FileNotFoundError(f"{u}: the input file is gone")
        out.append(int(info.size))
    return out


@dataclass(frozen=True)
class Chunk:
    fid: int  # the file's index in the run's file list
    path: str
    start: int
    end: int  # -1: the whole (compressed) file
    header: bool  # the chunk holds the header line (a whole compressed file) and drops it


@dataclass(frozen=True)
class RowGroups:
    """A Parquet chunk: some row groups of one file."""

    fid: int
    path: str
    groups: tuple[int, ...]


@dataclass(frozen=True)
class ParquetSpec:
    columns: tuple[str, ...]
    schema: pa.Schema  # the pyarrow schema every chunk is cast to (Spark-compatible types)


@dataclass(frozen=True)
class CsvSpec:
    columns: tuple[str, ...]
    delimiter: str
    comment: str
    header: bool


TableSpec = CsvSpec | ParquetSpec  # how to read a table's chunks
ReadTask = Sequence[Chunk | RowGroups]  # the chunks one Spark task reads (all of one kind)


def header_end(path: InputPath, comment: str) -> int:
    """Byte offset just after the header line: the first line that is neither empty nor a comment."""
    mark = comment.encode()
    with open_binary(path) as fh:
        pos = 0
        for line in fh:
            pos += len(line)
            if line.strip(b"\r\n") and not (mark and line.startswith(mark)):
                return pos
    return pos


def plan_chunks(
    files: Sequence[InputPath], file_offset: int, header: bool, parallelism: int, comment: str = ""
) -> list[list[Chunk]]:
    """Byte ranges of the files grouped into tasks: about three tasks per core, chunks of 4-128 MiB.
    The header line is skipped here (its end found on the driver), except in a compressed file, which
    is one chunk that drops its own header."""
    sizes = file_sizes(files)
    total = sum(sizes)
    target = int(min(_MAX_CHUNK, max(_MIN_CHUNK, total // max(1, 3 * parallelism) + 1)))
    chunks: list[Chunk] = []
    for i, (f, size) in enumerate(zip(files, sizes, strict=True)):
        if f.name.lower().endswith((".gz", ".bz2")):
            chunks.append(Chunk(file_offset + i, str(f), 0, -1, header))
            continue
        first = header_end(f, comment) if header else 0
        for start in range(first, max(size, first + 1), target):
            chunks.append(Chunk(file_offset + i, str(f), start, min(size, start + target), False))
    tasks: list[list[Chunk]] = []
    acc = 0
    for c in chunks:  # consecutive small chunks (small files) share a task
        n = c.end - c.start if c.end >= 0 else target
        if not tasks or acc + n > target:
            tasks.append([])
            acc = 0
        tasks[-1].append(c)
        acc += n
    return tasks


def read_lines(c: Chunk) -> bytes:
    """The complete lines that start inside the chunk's byte range."""
    return _lines_at(c)[1]


def _lines_at(c: Chunk) -> tuple[int, bytes]:
    """(byte offset of the first line in the file, or in the decompressed file; the lines) of a chunk."""
    if c.end < 0:
        with open_binary(c.path) as raw:
            packed = raw.read()
        if c.path.lower().endswith(".gz"):
            import gzip

            return 0, gzip.decompress(packed)
        import bz2

        return 0, bz2.decompress(packed)
    with open_binary(c.path) as fh:
        pos = c.start
        if c.start > 0:
            fh.seek(c.start - 1)
            fh.readline()  # the line holding byte start-1 belongs to the previous chunk
            pos = fh.tell()
            if pos >= c.end:
                return pos, b""
        data = fh.read(c.end - pos)
        if data and not data.endswith(b"\n"):
            data += fh.readline()
    return pos, data


def drop_comment_lines(data: bytes, comment: str) -> bytes:
    """Remove the lines that start with ``comment`` (vectorised over the bytes)."""
    mark = comment.encode()
    if not data or mark not in data:
        return data
    a = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl + 1, [len(a)]))
    keep_line = np.ones(len(starts), dtype=bool)
    inside = starts < len(a)
    idx = np.flatnonzero(inside)
    match = np.ones(len(idx), dtype=bool)
    for k, byte in enumerate(mark):
        pos = starts[idx] + k
        match &= (pos < len(a)) & (a[np.minimum(pos, len(a) - 1)] == byte)
    keep_line[idx] = ~match
    if keep_line.all():
        return data
    return a[np.repeat(keep_line, ends - starts)].tobytes()


def drop_header_line(data: bytes) -> bytes:
    """Remove the first non-empty line (the header)."""
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        if data[pos:end].strip(b"\r\n"):
            return data[end:]
        pos = end
    return b""


def parse_chunk(data: bytes, spec: CsvSpec) -> tuple[pa.Table, list[str], list[int]]:
    """(pyarrow Table of string columns, raw text of each malformed row, its 1-based record number) of
    ``chunk_bytes``."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    delim = delimiter(spec)
    bad: list[str] = []
    records: list[int] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        bad.append(row.text)
        records.append(row.number)
        return "skip"

    cols = list(spec.columns)
    if not data:
        return pa.table({c: pa.array([], pa.string()) for c in cols}), bad, records
    table = pacsv.read_csv(
        pa.py_buffer(data),
        read_options=pacsv.ReadOptions(use_threads=False, column_names=cols, block_size=max(1 << 20, len(data) + 1)),
        parse_options=pacsv.ParseOptions(
            delimiter=delim, quote_char='"', double_quote=True, invalid_row_handler=on_invalid
        ),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in cols},
            null_values=[""],
            strings_can_be_null=True,
            check_utf8=False,
        ),
    )
    return table, bad, records


def output_schema(spec: TableSpec) -> StructType:
    """The Spark schema of a table frame: source columns (CSV: strings), _corrupt, _fid, _rowpos."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type

    if isinstance(spec, ParquetSpec):
        fields = [T.StructField(f.name, from_arrow_type(f.type)) for f in spec.schema]
    else:
        fields = [T.StructField(c, T.StringType()) for c in spec.columns]
    fields += [T.StructField(CORRUPT, T.StringType()), T.StructField(FID, T.IntegerType())]
    fields.append(T.StructField(ROWPOS, T.LongType()))
    return T.StructType(fields)


def chunk_bytes(c: Chunk, spec: CsvSpec) -> bytes:
    """The chunk's lines, comment lines and the header removed; a multi-character delimiter replaced."""
    return prepare_lines(read_lines(c), c, spec)


def prepare_lines(data: bytes, c: Chunk, spec: CsvSpec) -> bytes:
    """``read_lines(c)`` as pyarrow parses it: comment lines and the header removed, a multi-character
    delimiter replaced."""
    if spec.comment:
        data = drop_comment_lines(data, spec.comment)
    if c.header:
        data = drop_header_line(data)
    if len(spec.delimiter) > 1:
        data = data.replace(spec.delimiter.encode(), ALT_DELIM.encode())
    return data


def delimiter(spec: CsvSpec) -> str:
    return spec.delimiter if len(spec.delimiter) == 1 else ALT_DELIM


def chunk_table(c: Chunk, spec: CsvSpec) -> tuple[pa.Table, list[str], np.ndarray]:
    """(string Table, raw text of each malformed row, the line offset of every row in the chunk: parsed
    rows, then malformed ones) of one chunk; BadInputError on bytes that are not UTF-8."""
    raw = read_lines(c)
    data = prepare_lines(raw, c, spec)
    if not data.isascii():  # the fast common case costs one scan; the slow one decodes, then locates
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise encoding_error(c, spec) from None
    table, bad, records = parse_chunk(data, spec)
    return table, bad, row_lines(kept_lines(raw, spec.comment, c.header), table.num_rows, records)


def encoding_error(c: Chunk, spec: CsvSpec) -> BadInputError:
    """Where the chunk's first byte that is not UTF-8 sits: file, line, column and byte offset."""
    pos, raw = _lines_at(c)
    try:
        raw.decode("utf-8")
        at = 0
    except UnicodeDecodeError as e:
        at = e.start
    line_start = raw.rfind(b"\n", 0, at) + 1
    line_end = raw.find(b"\n", at)
    text = raw[line_start : line_end if line_end >= 0 else len(raw)]
    field = text[: at - line_start].count(spec.delimiter.encode())
    column = spec.columns[field] if field < len(spec.columns) else f"field {field + 1}"
    if c.end < 0:
        where = f"byte {at} of the decompressed file"
        line = raw.count(b"\n", 0, at) + 1
    else:
        where = f"byte offset {pos + at}"
        line = _lines_before(c.path, pos) + raw.count(b"\n", 0, at) + 1
    return not_utf8(c.path, column, line, where, text, raw[at : at + 1])


def not_utf8(path: str, column: str, line: int, where: str, text: bytes, bad: bytes) -> BadInputError:
    """The error for bytes that are not UTF-8: file, column, line, where (a byte offset), the byte and the line."""
    return BadInputError(
        path,
        column,
        1,
        None,
        f"are not valid UTF-8: line {line:,}, {where} (0x{bad.hex()})",
        [text[:80].decode("utf-8", "backslashreplace")],
        "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
    )


def _lines_before(path: str, offset: int) -> int:
    """Newlines in the file before byte ``offset`` (read only to report an error)."""
    n, left = 0, offset
    with open_binary(path) as fh:
        while left > 0:
            block = fh.read(min(left, 8 << 20))
            if not block:
                break
            n, left = n + block.count(b"\n"), left - len(block)
    return n


def text_batches(
    table: pa.Table, bad: list[str], fid: int, rowpos: np.ndarray, bad_rowpos: np.ndarray
) -> Iterator[pa.RecordBatch]:
    """Record batches of a table frame: the rows, then the malformed ones (nulls + _corrupt)."""
    import pyarrow as pa

    n = table.num_rows
    if n:
        out = {name: table.column(name).combine_chunks() for name in table.column_names}
        out[CORRUPT] = pa.nulls(n, pa.string())
        out[FID] = pa.array(np.full(n, fid, np.int32))
        out[ROWPOS] = pa.array(rowpos)
        yield pa.RecordBatch.from_pydict(out)
    if bad:
        k = len(bad)
        cols = {name: pa.nulls(k, table.schema.field(name).type) for name in table.column_names}
        cols[CORRUPT] = pa.array(bad, pa.string())
        cols[FID] = pa.array(np.full(k, fid, np.int32))
        cols[ROWPOS] = pa.array(bad_rowpos)
        yield pa.RecordBatch.from_pydict(cols)


def chunk_base(source_seq: int, chunk_index: int) -> int:
    """The row position of a chunk's first row."""
    return (source_seq << SOURCE_SHIFT) | (chunk_index << CHUNK_SHIFT)


def chunk_rowpos(source_seq: int, chunk_index: int, n: int, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row positions of a chunk's n parsed rows, then its malformed rows (``lines``: their line offsets)."""
    pos = chunk_base(source_seq, chunk_index) + lines
    return pos[:n], pos[n:]


def chunk_indices(tasks: Sequence[ReadTask]) -> list[int]:
    """The index of each task's first chunk (chunks are numbered in file order)."""
    out, k = [], 0
    for t in tasks:
        out.append(k)
        k += len(t)
    return out


def read_chunk(c: Chunk | RowGroups, spec: TableSpec) -> tuple[pa.Table, list[str], np.ndarray]:
    """(Table of the source columns, raw text of each malformed row, each row's line offset in the
    chunk: parsed rows then malformed ones; for Parquet its row offset) of a CSV or Parquet chunk."""
    if isinstance(c, RowGroups) and isinstance(spec, ParquetSpec):
        t = parquet_chunk(c, spec)
        return t, [], np.arange(t.num_rows, dtype=np.int64)
    if isinstance(c, Chunk) and isinstance(spec, CsvSpec):
        return chunk_table(c, spec)
    raise TypeError(f"a {type(c).__name__} is not read with a {type(spec).__name__}")


def table_frame(spark: SparkSession, tasks: Sequence[ReadTask], spec: TableSpec, source_seq: int) -> DataFrame:
    """The DataFrame of ``tasks`` (one Spark partition each), read by the executors."""
    first = chunk_indices(tasks)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        for b in batches:
            for task in b.column(0).to_pylist():
                for j, c in enumerate(tasks[task]):
                    table, bad, lines = read_chunk(c, spec)
                    pos, bad_pos = chunk_rowpos(source_seq, first[task] + j, table.num_rows, lines)
                    yield from text_batches(table, bad, c.fid, pos, bad_pos)

    return spark.range(0, len(tasks), 1, max(1, len(tasks))).mapInArrow(read, output_schema(spec))


# ---- Parquet ---------------------------------------------------------------------------------------
def _spark_type(t: pa.DataType) -> pa.DataType:
    """The arrow type Spark reads a Parquet column of type ``t`` as (recursively for lists)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type)
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(t.bit_width, pa.decimal128(20, 0))
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_spark_type(t.value_type))
    return t


def parquet_spec(files: Sequence[InputPath], what: str) -> ParquetSpec:
    """The columns of the first file (as Spark without schema merging) and their Spark-compatible types."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_type

    from glisp_core.errors import ConfigError

    with open_parquet(files[0]) as f:
        schema = pq.read_schema(f)
    fields = []
    for f in schema:
        if f.name.startswith("__index_level_"):
            continue
        t = _spark_type(f.type)
        try:
            from_arrow_type(t)
        except Exception as e:  # noqa: BLE001 - an arrow type Spark has no type for
            raise ConfigError(what, "path", f"column {f.name!r} of {files[0]} has type {f.type} ({e})") from None
        fields.append(pa.field(f.name, t))
    return ParquetSpec(columns=tuple(f.name for f in fields), schema=pa.schema(fields))


def plan_row_groups(files: Sequence[InputPath], file_offset: int, parallelism: int) -> list[list[RowGroups]]:
    """Row groups of the files in file order, grouped into about three tasks per core (and tasks of at
    most 128 MiB of compressed data); a row group is never split."""
    import pyarrow.parquet as pq

    groups: list[tuple[int, str, int, int]] = []
    for i, f in enumerate(files):
        with open_parquet(f) as fh:
            md = pq.ParquetFile(fh).metadata
        for g in range(md.num_row_groups):
            groups.append((file_offset + i, str(f), g, md.row_group(g).total_byte_size))
    total = sum(g[3] for g in groups)
    target = int(min(_MAX_CHUNK, max(_MIN_CHUNK, total // max(1, 3 * parallelism) + 1)))
    tasks: list[list[RowGroups]] = []
    acc = 0
    for fid, path, g, size in groups:
        if not tasks or acc + size > target:
            tasks.append([])
            acc = 0
        if tasks[-1] and tasks[-1][-1].path == path:
            last = tasks[-1][-1]
            tasks[-1][-1] = RowGroups(fid, path, (*last.groups, g))
        else:
            tasks[-1].append(RowGroups(fid, path, (g,)))
        acc += size
    return tasks or [[]]


def parquet_chunk(c: RowGroups, spec: ParquetSpec) -> pa.Table:
    """The chunk's rows, the spec's columns cast to their Spark-compatible types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_parquet(c.path) as fh:
        t = pq.ParquetFile(fh).read_row_groups(list(c.groups), columns=list(spec.columns), use_threads=False)
    cols = []
    for f in spec.schema:
        col = t.column(f.name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col.cast(f.type) if col.type != f.type else col)
    return pa.table(cols, schema=spec.schema)


def ipc_frame(spark: SparkSession, files: list[str], schema: StructType) -> DataFrame:
    """A DataFrame of Arrow IPC files written by tasks (one Spark partition each), read through the store."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_worker_heap()
        for b in batches:
            for i in b.column(0).to_pylist():
                yield from read_ipc_file(files[i]).to_batches(max_chunksize=1 << 20)

    return spark.range(0, len(files), 1, max(1, len(files))).mapInArrow(read, schema)


def default_parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - a session without a context (Spark Connect) still reads
        return os.cpu_count() or 2
