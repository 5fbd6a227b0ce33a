"""Read one configured source (a file, a directory or a glob; CSV/TSV or Parquet) into a DataFrame.

Files are read by the executors with pyarrow (``arrowread``): CSV with every column a string and a
row with the wrong number of fields kept with its raw text in a corrupt-record column (so it is
reported rather than silently padded or dropped), Parquet typed as Spark would read it. The files
are expanded on the driver (they are fingerprinted anyway) and each row carries the index of its file.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from glisp_core.config import EdgeSource, VertexSource
from glisp_core.errors import BadInputError, ConfigError
from spark_jobs.ingest import arrowread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_PARQUET_EXT = (".parquet", ".pq", ".parquet.gzip", ".parquet.snappy", ".parquet.gz")
_CSV_EXT = (".csv", ".csv.gz", ".csv.bz2")
_TSV_EXT = (".tsv", ".tsv.gz", ".tsv.bz2", ".txt", ".txt.gz", ".edges", ".el")


def expand_paths(spec: str, what: str) -> list[Path]:
    """Files named by a path, a directory (recursively, skipping hidden/underscore files) or a glob."""
    if "://" in spec and not spec.startswith("file://"):
        raise ConfigError(what, "path", f"only local files are supported by ingest (got {spec!r})")
    spec = spec.removeprefix("file://")
    p = Path(os.path.expanduser(spec))
    if any(ch in spec for ch in "*?["):
        files = [Path(f) for f in glob.glob(os.path.expanduser(spec), recursive=True)]
    elif p.is_dir():
        files = [f for f in p.rglob("*") if not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)]
    else:
        files = [p] if p.exists() else []
    files = sorted(f.resolve() for f in files if f.is_file())
    if not files:
        raise ConfigError(what, "path", f"no input file matches it (got {spec!r})")
    return files


def detect_format(src: EdgeSource | VertexSource, files: list[Path], what: str) -> str:
    """csv, tsv or parquet: the configured format, or the one every file's name ends with."""
    if src.format != "auto":
        return src.format
    kinds = set()
    for f in files:
        name = f.name.lower()
        if name.endswith(_PARQUET_EXT):
            kinds.add("parquet")
        elif name.endswith(_CSV_EXT):
            kinds.add("csv")
        elif name.endswith(_TSV_EXT):
            kinds.add("tsv")
        else:
            raise ConfigError(
                what,
                "format",
                f"cannot tell the format of {f} from its name; set format to csv, tsv or parquet (got format = 'auto')",
            )
    if len(kinds) != 1:
        raise ConfigError(
            what,
            "format",
            f"files of several formats under {src.path!r}; give one format per source (got {sorted(kinds)})",
        )
    return kinds.pop()


@dataclass
class SourceFrame:
    """A source read as a DataFrame, with the facts later steps need to build messages."""

    df: DataFrame  # source columns + _fid + _corrupt (null for Parquet) + _rowpos
    files: list[Path]
    fmt: str
    columns: list[str]  # the source's own column names
    spec: arrowread.TableSpec  # how its chunks are read, and the read tasks, for edgestage
    tasks: Sequence[arrowread.ReadTask] = ()


def read_source(
    spark: SparkSession,
    src: EdgeSource | VertexSource,
    what: str,
    files: list[Path],
    file_offset: int,
    seq: int = 0,
) -> SourceFrame:
    """Read ``files`` of ``src``; ``file_offset`` numbers its files after those of earlier sources.

    ``seq`` (the source's index in the run) keeps row positions unique across sources.
    """
    fmt = detect_format(src, files, what)
    paths = [str(f) for f in files]
    par = arrowread.default_parallelism(spark)
    spec: arrowread.TableSpec
    tasks: Sequence[arrowread.ReadTask]
    if fmt == "parquet":
        spec = arrowread.parquet_spec(files, what)
        columns = list(spec.columns)
        tasks = arrowread.plan_row_groups(files, file_offset, par)
    else:
        delim = src.delimiter or ("\t" if fmt == "tsv" else ",")
        if src.columns:
            columns = list(src.columns)
        else:
            first = first_record(files, delim, src.comment)
            columns = [c.strip() for c in first] if src.header else _default_names(src, len(first))
        if not columns:
            raise BadInputError(
                paths[0], "-", 0, 0, "found: the file is empty (no header, no rows)", hint=f"check {what}.path"
            )
        if len(set(columns)) != len(columns):
            raise BadInputError(
                paths[0],
                ",".join(columns),
                1,
                None,
                "in the header repeat a column name",
                hint="give unique column names (or set columns = [...] with header = false)",
            )
        spec = arrowread.CsvSpec(columns=tuple(columns), delimiter=delim, comment=src.comment, header=src.header)
        tasks = arrowread.plan_chunks(files, file_offset, src.header, par, src.comment)
    df = arrowread.table_frame(spark, tasks, spec, seq)
    return SourceFrame(df=df, files=files, fmt=fmt, columns=columns, spec=spec, tasks=tasks)


def _open_text(path: Path) -> IO[str]:
    name = path.name.lower()
    if name.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", newline="")
    if name.endswith(".bz2"):
        import bz2

        return bz2.open(path, "rt", newline="")
    return open(path, newline="")


def first_record(files: list[Path], delimiter: str, comment: str) -> list[str]:
    """Fields of the first non-empty, non-comment line of the first non-empty file (the header), on
    the driver: cheaper than a Spark job for one line."""
    import csv

    for f in files:
        with _open_text(f) as fh:
            for line in fh:
                if not line.strip() or (comment and line.startswith(comment)):
                    continue
                return next(csv.reader([line], delimiter=delimiter, quotechar='"'))
    return []


def _default_names(src: EdgeSource | VertexSource, n: int) -> list[str]:
    """Names for a headerless file without ``columns``: the configured id columns first, then _c<i>."""
    first = [src.src, src.dst] if isinstance(src, EdgeSource) else [src.id]
    names = first[:n] + [f"_c{i}" for i in range(len(first), n)]
    return names


def require_columns(sf: SourceFrame, needed: dict[str, str], what: str) -> None:
    """Every configured column must exist: a missing one is a config error naming the choices."""
    for key, col in needed.items():
        if col and col not in sf.columns:
            raise ConfigError(
                what,
                key,
                f"column {col!r} is not in {sf.files[0]} (columns: {', '.join(sf.columns)}) (got {key} = {col!r})",
            )
