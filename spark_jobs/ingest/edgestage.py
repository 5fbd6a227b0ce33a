"""Edge tables straight to staged files: rows that certainly pass every row rule skip the JVM.

Why: handing a row to Spark (Arrow -> rows) costs about 1 us, several times reading it, and the row
rules are column expressions in Spark (``rules``). A row is *clean* when its ids (and weight,
timestamp) are integers (CSV: in the canonical forms of ``textparse``), a weight is finite and
non-negative, a CSV row has the right number of fields, and its edge type (a constant or a string
without surrounding blanks) is allowed. For such a row every rule is known to pass. So each task of
ONE Spark job (``stage_edges``):

- reads its chunks (``arrowread``: CSV parsed by pyarrow, ``textparse`` for the typed fields; Parquet
  row groups), splits clean rows from the others with numpy;
- writes the clean rows to ``edges/c<table>-<task>.int.arrow`` in the form ``scan`` stages good rows,
  counts them and adds their ids to the key sets;
- writes every other row as read (CSV: text, malformed rows with their raw line) to
  ``dirty/t<table>-<task>.arrow``. Those rows (usually none) then go through Spark's row rules
  (``dirty_frame``), so what a rule decides and what a bad-row report shows is unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_spark.tasks import run_tasks
from spark_jobs.ingest import arrowread
from spark_jobs.ingest.columns import FID, RCOL, REASON, SI
from spark_jobs.ingest.keys import KeySet
from spark_jobs.ingest.scan import GroupKey, TaskCounts
from spark_jobs.ingest.storeio import IpcFiles, join
from spark_jobs.ingest.textparse import parse_canonical, string_parts

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

GROUP = (FID, REASON, RCOL, SI, "_et", "_nonint")  # the grouping of the edge scan's counts


@dataclass(frozen=True)
class EdgeTable:
    """What a task needs to know about one edge table (pickled into the tasks)."""

    si: int
    spec: arrowread.TableSpec
    tasks: tuple[arrowread.ReadTask, ...]  # chunk lists (arrowread.plan_chunks / plan_row_groups)
    src: str
    dst: str
    weight: str
    timestamp: str
    etype: str  # column with the type name, or "" for a constant type
    allowed_types: tuple[str, ...]  # ingest.edge_types ([] = any)
    constants_ok: bool  # the table's constant edge/vertex types pass the rules
    int_ids: bool  # ids may be integers (id_type is not "string")
    src_type: str = ""
    dst_type: str = ""


@dataclass(frozen=True)
class StageOpts:
    """Where the tasks stage, and what besides the clean rows' columns."""

    dir: str  # the staging prefix: a local path or a URI string (the tasks open the store themselves)
    keys: bool  # collect integer key sets (no vertex tables)
    fid: bool  # stage the file index (for missing-endpoint reports)
    rowpos: bool  # stage the row position (duplicates = "drop")


def _clean_type(col: pa.Array, allowed: tuple[str, ...]) -> np.ndarray:
    """Edge type fields that trim to themselves, are not empty and are allowed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.ingest.kernels import no_blank_ends  # numba: imported only by a task that needs it

    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    offsets, data, valid = string_parts(arr)

    ok = np.empty(len(arr), dtype=np.bool_)
    no_blank_ends(offsets, data, ok)
    if valid is not None:
        ok &= valid
    if allowed:
        ok &= np.asarray(pc.is_in(arr, value_set=pa.array(list(allowed), arr.type)).fill_null(False))
    return ok


def _typed_values(col: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, ok) of an id/weight/timestamp column: ``ok`` where every row rule is sure to pass.
    Text: the canonical forms of ``textparse``; Parquet integers (non-null, and >= 0 for a weight);
    Parquet floats as weights (non-null, finite, >= 0); anything else is left to Spark's rules."""
    import pyarrow as pa

    t = col.type
    n = len(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return parse_canonical(col, kind)
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_signed_integer(t):
        v = col.fill_null(0).to_numpy().astype(np.int64 if kind == "long" else np.float64)
        return v, (valid & (v >= 0)) if kind == "double" else valid
    if kind == "double" and pa.types.is_floating(t):
        v = col.cast(pa.float64()).fill_null(0.0).to_numpy()
        return v, valid & np.isfinite(v) & (v >= 0)
    return np.zeros(n, np.int64 if kind == "long" else np.float64), np.zeros(n, dtype=bool)


StagedColumns = dict[str, Any]  # staged column -> numpy array, or Arrow strings for _et


def _split_clean(table: pa.Table, t: EdgeTable) -> tuple[np.ndarray, StagedColumns]:
    """(clean mask, {staged column: numpy array or, for the type, Arrow strings}) of a chunk."""
    import pyarrow as pa

    n = table.num_rows
    clean = np.full(n, t.constants_ok and t.int_ids, dtype=bool)
    cols: StagedColumns = {}
    if not clean.any():
        return clean, cols
    fields = ((t.src, "_s", "long"), (t.dst, "_d", "long"), (t.weight, "_w", "double"), (t.timestamp, "_ts", "long"))
    for name, out, kind in fields:
        if name:
            values, ok = _typed_values(table.column(name).combine_chunks(), kind)
            clean &= ok
            cols[out] = values
    if t.etype:
        et = table.column(t.etype).combine_chunks()
        if pa.types.is_string(et.type):
            clean &= _clean_type(et, t.allowed_types)
        else:
            clean[:] = False
        cols["_et"] = et
    if "_w" in cols:
        cols["_w"] = cols["_w"].astype(np.float32)
    return clean, cols


@dataclass
class ChunkRows:
    """A chunk split: clean rows as staged columns, the other rows as text (Spark's rules decide)."""

    clean: StagedColumns
    clean_pos: np.ndarray
    dirty: pa.Table  # the well-formed other rows, every column as read
    dirty_pos: np.ndarray
    bad: list[str]  # raw text of the rows with the wrong number of fields
    bad_pos: np.ndarray


@dataclass
class _TaskAcc:
    """What a staging task adds up over its chunks."""

    counts: dict[GroupKey, int] = field(default_factory=dict)
    sets: dict[str, KeySet] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)


@dataclass
class StagedEdges:
    """The staging job's results: one TaskCounts per task, the dirty files per table, task CPU times."""

    tasks: list[TaskCounts]
    dirty: dict[int, list[str]]
    times: list[dict[str, float]]


def _split_rows(table: pa.Table, bad: list[str], t: EdgeTable, pos: np.ndarray) -> ChunkRows:
    """The chunk's clean rows (staged columns) apart from the others (the source columns as read);
    ``pos``: the row positions of the parsed rows, then of the malformed ones."""
    import pyarrow as pa

    n = table.num_rows
    clean, cols = _split_clean(table, t)
    if not clean.all():
        m = pa.array(clean)
        cols = {k: v.filter(m) if isinstance(v, pa.Array) else v[clean] for k, v in cols.items()}
    dirty = table.filter(pa.array(~clean)) if not clean.all() else table.slice(0, 0)
    return ChunkRows(cols, pos[:n][clean], dirty, pos[:n][~clean], bad, pos[n:])


def _stage_chunk(
    c: arrowread.Chunk | arrowread.RowGroups,
    j: int,
    t: EdgeTable,
    task: int,
    first: int,
    opts: StageOpts,
    acc: _TaskAcc,
    files: IpcFiles,
) -> None:
    """One chunk: clean rows staged, counted and keyed; the other rows set down for Spark's rules."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t0 = time.process_time()
    table, bad, lines = arrowread.read_chunk(c, t.spec)
    rows = _split_rows(table, bad, t, arrowread.chunk_base(t.si, first + j) + lines)
    t1 = time.process_time()
    out = rows.clean
    nc = len(rows.clean_pos)
    if nc:
        out["_si"] = np.full(nc, t.si, np.int16)
        if opts.fid:
            out["_fid"] = np.full(nc, c.fid, np.int32)
        if opts.rowpos or opts.fid:  # fid: a row may lack an endpoint vertex, and its error names its line
            out["_rowpos"] = rows.clean_pos
        path = join(opts.dir, "edges", f"c{t.si:03d}-{task:05d}.int.arrow")
        files.write(path, pa.RecordBatch.from_pydict(out))
        if "_et" in out:
            for vc in pc.value_counts(out["_et"]).to_pylist():  # one entry per distinct type
                key = (c.fid, None, None, t.si, vc["values"], False)
                acc.counts[key] = acc.counts.get(key, 0) + int(vc["counts"])
        else:
            key = (c.fid, None, None, t.si, None, False)
            acc.counts[key] = acc.counts.get(key, 0) + nc
        if opts.keys:
            for name, arr in ((t.src_type, out["_s"]), (t.dst_type, out["_d"])):
                acc.sets.setdefault(name, KeySet()).add(arr)
    if rows.dirty.num_rows or rows.bad:
        path = join(opts.dir, "dirty", f"t{t.si:03d}-{task:05d}.arrow")
        for b in arrowread.text_batches(rows.dirty, rows.bad, c.fid, rows.dirty_pos, rows.bad_pos):
            files.write(path, b)
    t2 = time.process_time()
    acc.times["parse"] = acc.times.get("parse", 0.0) + (t1 - t0)
    acc.times["stage"] = acc.times.get("stage", 0.0) + (t2 - t1)


def stage_edges(spark: SparkSession, tables: list[EdgeTable], opts: StageOpts) -> StagedEdges:
    """One Spark job over every chunk of the edge tables."""
    work = [(ti, k) for ti, t in enumerate(tables) for k in range(len(t.tasks))]

    def task(w: int) -> tuple[TaskCounts, int, list[str], dict[str, float]]:
        ti, k = work[w]
        t = tables[ti]
        first = arrowread.chunk_indices(t.tasks)[k]
        acc = _TaskAcc()
        files = IpcFiles()
        for j, c in enumerate(t.tasks[k]):
            _stage_chunk(c, j, t, k, first, opts, acc, files)
        written = files.close()
        staged = [(p, n) for p, n in written.items() if "/edges/" in p]
        parts = {name: s.part() for name, s in acc.sets.items()}
        counts = TaskCounts(pid=w, counts=acc.counts, parts=parts, nonint=False, files=staged)
        return counts, t.si, [p for p in written if "/dirty/" in p], acc.times

    results = run_tasks(spark, len(work), task)
    dirty: dict[int, list[str]] = {}
    for _, si, paths, _ in results:
        dirty.setdefault(si, []).extend(paths)
    return StagedEdges(tasks=[r[0] for r in results], dirty=dirty, times=[r[3] for r in results])


def dirty_frame(spark: SparkSession, files: list[str], spec: arrowread.TableSpec) -> DataFrame:
    """The rows a table's tasks left for Spark's rules, as ``arrowread.table_frame`` gives them."""
    return arrowread.ipc_frame(spark, files, arrowread.output_schema(spec))
