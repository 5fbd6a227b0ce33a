"""Bad-input detection: every row gets at most one reason; counts come from one grouped aggregation.

A row's reason is the first rule it breaks (so counts of kinds add up to the rows set aside). In
"fail" mode the first problem is raised as a ``BadInputError`` naming the file, the column, the count,
the file's row total, up to three example rows, each with its line in the file (``limit(3)``; bad rows
are never collected) and a hint. In "quarantine" mode the bad rows of each kind go to
``ingest/rejects/<kind>/`` as Parquet with their file, reason, column, raw fields and ``line`` (the
file's line; a Parquet file's row number), the manifest counts them and the same line is printed. The
rejects are written by Spark's JVM where it opens the store, else by pyarrow in the tasks.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from glisp_core.errors import BadInputError
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI
from spark_jobs.ingest.columns import FID, RCOL, REASON, ROWPOS
from spark_jobs.ingest.rowlocate import RowLocator, chunk_key
from spark_jobs.ingest.storeio import join, open_atomic

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

CountRow = dict[str, Any]  # one group of a scan's counts: the group's columns and "count"

# kind -> (what is wrong with the rows, how to fix it); kinds are prefixed with the table.
PROBLEMS: dict[str, tuple[str, str]] = {
    "edge_malformed": ("have the wrong number of fields", "check the delimiter, quoting and header settings"),
    "edge_null_id": ("have a null or empty vertex id", "every edge needs both endpoints"),
    "edge_id_out_of_range": (
        "have an integer id outside the int64 range (-2^63 .. 2^63-1)",
        "set ingest.id_type = 'string' to keep such ids as strings",
    ),
    "edge_bad_id": ("have an id that is not an integer", "set ingest.id_type = 'string' or 'auto'"),
    "edge_unknown_type": (
        "have an empty edge type or one not in ingest.edge_types",
        "add the type to ingest.edge_types, or fix the rows",
    ),
    "edge_unknown_vertex_type": (
        "have an endpoint vertex type not in ingest.vertex_types",
        "add the type to ingest.vertex_types",
    ),
    "edge_bad_weight": ("have a missing, non-numeric, negative or non-finite weight", "weights must be numbers >= 0"),
    "edge_bad_timestamp": ("have a missing or non-integer timestamp", "timestamps must be integers (e.g. epoch ms)"),
    "edge_missing_endpoint": (
        "have an endpoint that is not in the vertex tables",
        "add the vertices to a vertex table, or drop the edges",
    ),
    "vertex_malformed": ("have the wrong number of fields", "check the delimiter, quoting and header settings"),
    "vertex_null_id": ("have a null or empty vertex id", "every vertex row needs an id"),
    "vertex_id_out_of_range": (
        "have an integer id outside the int64 range (-2^63 .. 2^63-1)",
        "set ingest.id_type = 'string' to keep such ids as strings",
    ),
    "vertex_bad_id": ("have an id that is not an integer", "set ingest.id_type = 'string' or 'auto'"),
    "vertex_unknown_type": (
        "have a vertex type that is null or not in ingest.vertex_types",
        "add the type to ingest.vertex_types, or fix the rows",
    ),
    "vertex_bad_label": ("have a label that is not an integer", "labels must be integers (or all non-numeric names)"),
    "vertex_bad_split": ("have a split that is not train/val/test or 0/1/2", "use train, val, test, 0, 1 or 2"),
    "vertex_bad_features": ("have missing or non-numeric features", "every feature value must be a number"),
    "vertex_feature_width": ("have a feature vector of the wrong width", "all feature vectors need the same width"),
    "vertex_duplicate": (
        "repeat a vertex id already given by an earlier row (the first row is kept)",
        "give each vertex once",
    ),
}


@dataclass
class Rule:
    kind: str
    flag: Column  # boolean: the row breaks this rule
    column: str  # the user's column name, for messages


def reason_columns(rules: Sequence[Rule]) -> tuple[Column, Column]:
    """(reason, column) Columns: the first broken rule of a row, or nulls for a good row."""
    from pyspark.sql import functions as F

    reason: Column | None = None
    rcol: Column | None = None
    for r in rules:
        reason = F.when(r.flag, F.lit(r.kind)) if reason is None else reason.when(r.flag, F.lit(r.kind))
        rcol = F.when(r.flag, F.lit(r.column)) if rcol is None else rcol.when(r.flag, F.lit(r.column))
    if reason is None or rcol is None:
        return F.lit(None).cast("string"), F.lit(None).cast("string")
    return reason, rcol


@dataclass
class Summary:
    """Grouped counts of one table: per (source, file, reason, column) and per file."""

    bad: dict[tuple[str, int, str], int] = field(default_factory=dict)  # (kind, fid, column) -> rows
    file_totals: dict[int, int] = field(default_factory=dict)
    total: int = 0
    extra: list[CountRow] = field(default_factory=list)  # the grouped rows, for callers that grouped by more

    def good(self) -> list[CountRow]:
        """The grouped rows of the good rows (no reason)."""
        return [r for r in self.extra if r[REASON] is None]

    def kind_counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (kind, _, _), n in self.bad.items():
            out[kind] += n
        return dict(out)


def summary_of(rows: list[CountRow]) -> Summary:
    """A Summary of grouped count rows (mappings with _fid, _reason, _rcol, count and any extra keys)."""
    s = Summary(extra=rows)
    for r in rows:
        n = int(r["count"])
        s.total += n
        s.file_totals[r[FID]] = s.file_totals.get(r[FID], 0) + n
        if r[REASON] is not None:
            key = (r[REASON], r[FID], r[RCOL])
            s.bad[key] = s.bad.get(key, 0) + n
    return s


def _examples(
    df: DataFrame, kind: str, fid: int, raw: dict[str, Column], where: RowLocator | None, n: int = 3
) -> list[str]:
    """Up to ``n`` example rows of one kind in one file, as ``line N: name=value`` text (``limit``: never a collect)."""
    from pyspark.sql import functions as F

    pos = [F.col(ROWPOS).alias("_pos")] if where is not None and ROWPOS in df.columns else []
    rows = df.filter((F.col(REASON) == kind) & (F.col(FID) == fid)).select(*[c.alias(k) for k, c in raw.items()], *pos)
    got = [r.asDict() for r in rows.limit(n).collect()]
    known = [int(r["_pos"]) for r in got if r.get("_pos") is not None]
    bases = where.bases(df.sparkSession, [chunk_key(p) for p in known]) if where is not None and known else {}
    out = []
    for r in got:
        at = r.pop("_pos", None)
        head = f"{where.describe(int(at), bases)}: " if where is not None and at is not None else ""
        out.append(head + _fields(r))
    return out


def _fields(row: dict[str, Any]) -> str:
    d = {k: v for k, v in row.items() if v is not None}
    return ", ".join(f"{k}={v!r}" for k, v in d.items()) or "(all fields empty)"


def _error(
    kind: str,
    fid: int,
    column: str,
    count: int,
    s: Summary,
    files: Sequence[str],
    examples: list[str],
    others: str = "",
) -> BadInputError:
    problem, hint = PROBLEMS[kind]
    fname = files[fid] if 0 <= fid < len(files) else "(unknown input file)"
    if others:
        hint = f"{hint}; also: {others}"
    return BadInputError(fname, column, count, s.file_totals.get(fid), problem, examples, hint)


def no_edges_error(first_file: str, edge_rows_in: int) -> BadInputError:
    """The error when the row rules (or the vertex tables) leave no edge at all: nothing to publish."""
    return BadInputError(
        first_file,
        "*",
        0,
        edge_rows_in,
        "are valid edges: no edge is left to ingest",
        hint="see the quarantined rows under ingest/rejects/",
    )


def handle_bad(
    df: DataFrame,
    s: Summary,
    files: Sequence[str],
    mode: str,
    raw: dict[str, Column],
    rejects_dir: Callable[[str], StoreURI],
    log: Callable[[str], None] = print,
    where: RowLocator | None = None,
) -> dict[str, int]:
    """Raise (fail) or write rejects (quarantine) for the bad rows of ``df``; returns rows per kind.
    ``where`` names each example's line (and fills the rejects' ``line``) from its row position."""
    from pyspark.sql import functions as F

    if not s.bad:
        return {}
    order = list(PROBLEMS)
    items = sorted(s.bad.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1], kv[0][2]))
    if mode == "fail":
        (kind, fid, column), count = items[0]
        others = "; ".join(
            f"{n:,} rows of {files[f] if 0 <= f < len(files) else '?'} {PROBLEMS[k][0]} (column '{c}')"
            for (k, f, c), n in items[1:4]
        )
        if len(items) > 4:
            others += f"; and {len(items) - 4} more problems"
        raise _error(kind, fid, column, count, s, files, _examples(df, kind, fid, raw, where), others)
    # quarantine: one write job for every kind (partitioned by reason), then examples read back cheaply
    file_names = F.create_map(*[x for i, f in enumerate(files) for x in (F.lit(i), F.lit(f))]) if files else None
    file_col = file_names[F.col(FID)] if file_names is not None else F.lit(None).cast("string")
    cols = [file_col.alias("file"), F.col(REASON).alias("reason"), F.col(RCOL).alias("column")]
    cols += [c.cast("string").alias(k) for k, c in raw.items()]
    located = where is not None and ROWPOS in df.columns
    pos = [F.col(ROWPOS)] if located else []
    bad = df.filter(F.col(REASON).isNotNull()).select(*cols, *pos, F.col(REASON).alias("_part"))
    if where is not None and located:
        bad = where.line_column(bad.sparkSession, bad, F.col(ROWPOS)).drop(ROWPOS)
    _write_rejects(bad, rejects_dir(""), list(dict.fromkeys(k for (k, _, _), _ in items)))
    for (kind, fid, column), count in items:
        fname = files[fid] if 0 <= fid < len(files) else None
        unit = where.unit(fid) if where is not None and located else None
        examples = _examples_from_rejects(rejects_dir(kind), fname, list(raw), unit)
        log("quarantined: " + str(_error(kind, fid, column, count, s, files, examples)) + f" -> {rejects_dir(kind)}")
    return s.kind_counts()


def _write_rejects(bad: DataFrame, parent: StoreURI, kinds: list[str]) -> None:
    """``bad`` (rows with ``_part`` = their kind) as ``<parent>/<kind>/`` Parquet tables, in one write job."""
    from glisp_spark.tables import jvm_opens, spark_path

    store = store_for(parent)
    if not (parent.is_local and jvm_opens(bad.sparkSession, parent)):  # a store cannot move a directory
        _write_by_kind(bad, parent)
        return
    staging = parent / f".staging-{uuid.uuid4().hex[:12]}"
    bad.write.partitionBy("_part").parquet(spark_path(staging))
    for kind in kinds:
        store.fs.move(store.at(staging / f"_part={kind}"), store.at(parent / kind))
    store.delete(staging)


def _write_by_kind(bad: DataFrame, parent: StoreURI) -> None:
    """The pyarrow way of :func:`_write_rejects`: each task writes ``<kind>/part-<task>.parquet`` per kind."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(bad.drop("_part").schema)
    base = str(parent)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from contextlib import ExitStack

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None, "the rejects writer runs inside a Spark task"
        writers: dict[str, Any] = {}
        with ExitStack() as stack:
            for b in batches:
                t = pa.Table.from_batches([b])
                for kind in pc.unique(t.column("_part")).to_pylist():
                    if kind not in writers:
                        f = stack.enter_context(open_atomic(join(base, kind, f"part-{ctx.partitionId():05d}.parquet")))
                        writers[kind] = stack.enter_context(pq.ParquetWriter(f, schema))
                    rows = t.filter(pc.equal(t.column("_part"), kind)).drop_columns(["_part"])
                    writers[kind].write_table(rows.cast(schema))
        yield pa.RecordBatch.from_pydict({"files": [len(writers)]})

    bad.mapInArrow(write, "files long").collect()


def _examples_from_rejects(
    path: StoreURI, fname: str | None, raw: list[str], unit: str | None, n: int = 3
) -> list[str]:
    """Up to ``n`` example rows of one file, read from the written rejects (a bounded scan, no Spark job);
    ``unit``: what the rejects' ``line`` counts in that file ('line' or 'row'), None without it."""
    import pyarrow.dataset as ds

    store = store_for(path)
    d = ds.dataset(store.at(path), filesystem=store.fs, format="parquet")
    flt = ds.field("file") == fname if fname is not None else None
    out = []
    for r in d.head(n, columns=[*raw, *(["line"] if unit else [])], filter=flt).to_pylist():
        line = r.pop("line", None)
        out.append((f"{unit} {line:,}: " if line is not None else "") + _fields(r))
    return out
