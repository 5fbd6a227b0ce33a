"""Where a bad row sits in its file: the line of a CSV file, the row of a Parquet file.

Why: an error that names a file and a column but not the row leaves the user searching a file of
millions of lines. A row's ``_rowpos`` holds its source, its chunk and its line offset in that chunk
(``arrowread``); the lines before a chunk are counted only when a message or a rejects table needs them,
by one Spark job over the byte ranges up to the chunks asked for (the driver sums one count per range).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.ingest.arrowread import (
    CHUNK_SHIFT,
    SOURCE_SHIFT,
    Chunk,
    ReadTask,
    RowGroups,
    open_binary,
    open_parquet,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_CHUNK_MASK = (1 << (SOURCE_SHIFT - CHUNK_SHIFT)) - 1
_ROW_MASK = (1 << CHUNK_SHIFT) - 1
_COUNT_BLOCK = 8 << 20


def chunk_key(rowpos: int) -> int:
    """The (source, chunk) part of a row position: rows of one chunk share it."""
    return rowpos >> CHUNK_SHIFT


@dataclass(frozen=True)
class RowLocator:
    """Each source's chunks in index order (``seq``: the source's index in the run, as in ``_rowpos``)."""

    sources: Mapping[int, Sequence[Chunk | RowGroups]]

    @staticmethod
    def of(tasks_by_source: Mapping[int, Sequence[ReadTask]]) -> RowLocator:
        return RowLocator({seq: [c for t in tasks for c in t] for seq, tasks in tasks_by_source.items()})

    def chunk(self, key: int) -> Chunk | RowGroups | None:
        chunks = self.sources.get(key >> (SOURCE_SHIFT - CHUNK_SHIFT), ())
        i = key & _CHUNK_MASK
        return chunks[i] if i < len(chunks) else None

    def unit(self, fid: int) -> str:
        """What a position in file ``fid`` counts: 'row' in a Parquet file, else 'line'."""
        parquet = any(isinstance(c, RowGroups) and c.fid == fid for cs in self.sources.values() for c in cs)
        return "row" if parquet else "line"

    def bases(self, spark: SparkSession, keys: Iterable[int]) -> dict[int, int]:
        """Lines (CSV) or rows (Parquet) of the file before the first row of each chunk in ``keys``."""
        out: dict[int, int] = {}
        ranges: list[tuple[str, int, int]] = []  # byte ranges whose newlines are counted
        wanted: dict[int, tuple[str, int]] = {}
        for key in set(keys):
            c = self.chunk(key)
            if c is None or (isinstance(c, Chunk) and c.end < 0):
                out[key] = 0  # a compressed file is one chunk from its first line
            elif isinstance(c, RowGroups):
                out[key] = _rows_before(c)
            elif c.start > 0:
                wanted[key] = (c.path, c.start)
        ends = {(p, s) for p, s in wanted.values()}
        for path in {p for p, _ in ends}:
            cuts = sorted({0, *(s for p, s in ends if p == path)})
            ranges += [(path, a, b) for a, b in zip(cuts, cuts[1:], strict=False)]
        counted = _count_newlines(spark, ranges) if ranges else []
        for key, (path, start) in wanted.items():
            before = [r for r in counted if r[0] == path and r[2] <= start]
            lines = sum(r[3] for r in before)
            last = max(before, key=lambda r: r[2])
            out[key] = lines + (0 if last[4] else 1)  # a line cut at the start belongs to the chunk before
        return out

    def describe(self, rowpos: int, bases: Mapping[int, int]) -> str:
        """'line N' (CSV, the file's line as an editor numbers it) or 'row N' (Parquet) of a row."""
        key = chunk_key(rowpos)
        n = bases.get(key, 0) + (rowpos & _ROW_MASK) + 1
        c = self.chunk(key)
        return f"{self.unit(c.fid) if c is not None else 'line'} {n:,}"

    def line_column(self, spark: SparkSession, df: DataFrame, rowpos: Column) -> DataFrame:
        """``df`` with ``line``: the file line (CSV) or row number (Parquet) of each row (null without a position)."""
        from pyspark.sql import functions as F

        keys = [r[0] for r in df.select(F.shiftright(rowpos, CHUNK_SHIFT).alias("_ck")).distinct().collect()]
        bases = self.bases(spark, [k for k in keys if k is not None])
        table = spark.createDataFrame([(k, v) for k, v in bases.items()] or [(-1, 0)], "_ck long, _base long")
        line = F.col("_base") + rowpos.bitwiseAND(F.lit(_ROW_MASK)) + F.lit(1)
        out = df.withColumn("_ck", F.shiftright(rowpos, CHUNK_SHIFT)).join(F.broadcast(table), "_ck", "left")
        return out.withColumn("line", line).drop("_ck", "_base")


def _rows_before(c: RowGroups) -> int:
    import pyarrow.parquet as pq

    with open_parquet(c.path) as fh:
        md = pq.ParquetFile(fh).metadata
    return sum(md.row_group(g).num_rows for g in range(c.groups[0]))


def _count_newlines(spark: SparkSession, ranges: list[tuple[str, int, int]]) -> list[tuple[str, int, int, int, bool]]:
    """(path, start, end, newlines in [start, end), whether byte end-1 is a newline) of each range, one task each."""
    from glisp_spark.tasks import run_tasks

    def count(i: int) -> tuple[str, int, int, int, bool]:
        path, start, end = ranges[i]
        n, left, last = 0, end - start, b""
        with open_binary(path) as fh:
            fh.seek(start)
            while left > 0:
                block = fh.read(min(left, _COUNT_BLOCK))
                if not block:
                    break
                n, left, last = n + block.count(b"\n"), left - len(block), block[-1:]
        return path, start, end, n, last == b"\n"

    return run_tasks(spark, len(ranges), count)
