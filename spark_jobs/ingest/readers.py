"""Read one configured source (a file, a directory or a glob; CSV/TSV or Parquet) into a DataFrame.

Files are read by the executors with pyarrow (``arrowread``): CSV with every column a string and a
row with the wrong number of fields kept with its raw text in a corrupt-record column (so it is
reported rather than silently padded or dropped), Parquet typed as Spark would read it. The files
are expanded on the driver (they are fingerprinted anyway) and each row carries the index of its file.
A source may be a local path or a store URI (``s3://bucket/dir/edges.csv``, a prefix, a glob): it is
listed and read through the store, so no JVM connector is needed.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from glisp_core.config import EdgeSource, VertexSource
from glisp_core.errors import BadInputError, ConfigError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from spark_jobs.ingest import arrowread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_PARQUET_EXT = (".parquet", ".pq", ".parquet.gzip", ".parquet.snappy", ".parquet.gz")
_CSV_EXT = (".csv", ".csv.gz", ".csv.bz2")
_TSV_EXT = (".tsv", ".tsv.gz", ".tsv.bz2", ".txt", ".txt.gz", ".edges", ".el")


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def expand_paths(spec: str, what: str) -> list[StoreURI]:
    """Files named by a path or URI, a directory or prefix (recursively, skipping hidden/underscore files)
    or a glob; local files as their resolved paths."""
    if "://" in spec and not spec.startswith("file://"):
        files = _expand_remote(parse_uri(spec, f"{what}.path"), what)
    else:
        files = [parse_uri(str(f)) for f in _expand_local(spec.removeprefix("file://"))]
    if not files:
        raise ConfigError(what, "path", f"no input file matches it (got {spec!r})")
    return files


def _expand_local(spec: str) -> list[Path]:
    p = Path(os.path.expanduser(spec))
    if _is_glob(spec):
        files = [Path(f) for f in glob.glob(os.path.expanduser(spec), recursive=True)]
    elif p.is_dir():
        files = [f for f in p.rglob("*") if not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)]
    else:
        files = [p] if p.exists() else []
    return sorted(f.resolve() for f in files if f.is_file())


def _expand_remote(u: StoreURI, what: str) -> list[StoreURI]:
    """The objects a URI names: one object, every object below a prefix, or those a glob matches
    (``*`` within a path segment, ``**`` across segments, as ``glob`` with ``recursive=True``)."""
    store = store_for(u)
    parts = u.path.strip("/").split("/")
    first = next((i for i, x in enumerate(parts) if _is_glob(x)), None)
    try:
        if first is None:
            if not store.is_dir(u):
                return [u] if store.exists(u) else []
            rels = [r for r, _ in store.files(u) if not any(x.startswith((".", "_")) for x in r.split("/"))]
            return [u.join(r) for r in sorted(rels)]
        base = StoreURI(u.scheme, u.authority, "/" + "/".join(parts[:first]))
        rels = [r for r, _ in store.files(base) if _glob_match(r.split("/"), parts[first:])]
    except OSError as e:
        raise ConfigError(what, "path", f"cannot list {u}: {e}") from None
    return [base.join(r) for r in sorted(rels)]


def _glob_match(names: list[str], pattern: list[str]) -> bool:
    """Whether path segments ``names`` match the glob segments ``pattern`` (hidden names only explicitly)."""
    if not pattern:
        return not names
    if pattern[0] == "**":  # any number of segments, none hidden
        return any(
            _glob_match(names[i:], pattern[1:])
            for i in range(len(names) + 1)
            if not any(n.startswith(".") for n in names[:i])
        )
    if not names or (names[0].startswith(".") and not pattern[0].startswith(".")):
        return False
    return fnmatch.fnmatchcase(names[0], pattern[0]) and _glob_match(names[1:], pattern[1:])


def detect_format(src: EdgeSource | VertexSource, files: list[StoreURI], what: str) -> str:
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
    files: list[StoreURI]
    fmt: str
    columns: list[str]  # the source's own column names
    spec: arrowread.TableSpec  # how its chunks are read, and the read tasks, for edgestage
    tasks: Sequence[arrowread.ReadTask] = ()


def read_source(
    spark: SparkSession,
    src: EdgeSource | VertexSource,
    what: str,
    files: list[StoreURI],
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


@contextmanager
def _open_lines(path: StoreURI) -> Iterator[IO[bytes]]:
    """The file's bytes (decompressed for .gz/.bz2), read through its store; decoded line by line by the
    caller, so that bytes past the line it needs are never decoded."""
    name = path.name.lower()
    with ExitStack() as stack:
        raw: IO[bytes] = stack.enter_context(arrowread.open_binary(path))
        if name.endswith(".gz"):
            import gzip

            raw = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))  # type: ignore[arg-type]
        elif name.endswith(".bz2"):
            import bz2

            raw = stack.enter_context(bz2.BZ2File(raw, "rb"))
        yield raw


def first_record(files: list[StoreURI], delimiter: str, comment: str) -> list[str]:
    """Fields of the first non-empty, non-comment line of the first non-empty file (the header), on
    the driver: cheaper than a Spark job for one line."""
    import csv

    for f in files:
        with _open_lines(f) as fh:
            offset = 0
            for number, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    at = f"byte offset {offset + e.start}"
                    raise arrowread.not_utf8(str(f), "header", number, at, raw, raw[e.start : e.start + 1]) from None
                offset += len(raw)
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
