"""One pass over a checked table: counts per reason, key sets, and the good rows staged as Arrow files.

Why one pass: the checks, the id-type decision, the key set for dense vids and the rows later steps
read all come from the same parsed rows. Each Spark task (``mapInArrow``) counts its rows per group
(file, reason, column, ...), adds the integer ids of its good rows to per-type ``KeySet``s and, when
asked, writes its good rows to ``<stage dir>/p<task>.<kind>.arrow`` (uncompressed Arrow IPC, memory
mapped by the next step). Only the counts and the key sets (per vertex, never per edge) reach the
driver. A staged file appears whole (``storeio``), its name fixed by the task's partition, so a retried
task rewrites the same content. The stage prefix lives inside the version's attempt in the dataset's
store (a local disk shared by the executors, or an object store), and the tasks open it themselves.

Ids are staged as int64 when every id of a batch is an integer in canonical form, else with their
string keys too (``p<task>.str.arrow``); see ``rules.id_parts``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_spark.tasks import map_partitions
from spark_jobs.ingest.checks import CountRow
from spark_jobs.ingest.columns import REASON, SI
from spark_jobs.ingest.keys import KeyPart, KeySet
from spark_jobs.ingest.storeio import IpcFiles, join

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

GroupKey = tuple[Any, ...]  # the values of a scan's group columns, in their order


@dataclass(frozen=True)
class KeySpec:
    """Where a row's vertex keys are: (integer part, string part) columns and the vertex type."""

    int_col: str
    str_col: str
    type_col: str = ""  # a column naming the type per row, or
    type_by_si: tuple[tuple[int, str], ...] = ()  # the type of each source (by _si)


@dataclass(frozen=True)
class StageSpec:
    """Which good-row columns to stage, and where: {staged name: (input column, arrow type name)}."""

    dir: str  # a local path or a URI string: the tasks open the store themselves
    keys: tuple[tuple[str, str, str], ...]  # (staged name, int part column, string part column)
    columns: tuple[tuple[str, str, str], ...]  # (staged name, input column, "int16"|"int32"|"int64"|"float32"|"string")


@dataclass
class TaskCounts:
    """What one task of a pass sends the driver: counts per group, key parts, staged files."""

    pid: int  # orders the tasks of every pass merged together
    counts: dict[GroupKey, int]
    parts: dict[str, KeyPart]  # vertex type -> the task's keys
    nonint: bool  # some good row has a non-integer id (then no parts)
    files: list[tuple[str, int]]  # staged (path, rows)


@dataclass
class ScanResult:
    """The merged pass: counts per group, key parts per vertex type, staged files."""

    counts: list[CountRow] = field(default_factory=list)  # group columns + "count"
    parts: dict[str, list[KeyPart]] = field(default_factory=dict)  # vertex type -> KeySet parts
    nonint: bool = False  # some good row has a non-integer id
    files: list[tuple[str, int]] = field(default_factory=list)  # staged (path, rows), in task order
    total: int = 0

    def staged_files(self) -> list[str]:
        """The staged files that hold rows."""
        return [p for p, n in self.files if n > 0]


def _src_type(si: np.ndarray, type_by_si: dict[int, str]) -> list[tuple[str, np.ndarray]]:
    out = []
    for s in np.unique(si):
        out.append((type_by_si.get(int(s), ""), si == s))
    return out


def _stage_batch(t: pa.Table, spec: StageSpec) -> tuple[str, pa.RecordBatch]:
    """(kind, RecordBatch) of the good rows ``t``. Kind "int": every key is an integer in canonical
    form, staged as int64 ``<name>``; kind "str": ``<name>`` (the integer part, may be null) plus
    ``<name>_key`` (the string key)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    canonical = all(t.column(sc).null_count == len(t) for _, _, sc in spec.keys)
    cols, names = [], []
    for name, ic, sc in spec.keys:
        cols.append(t.column(ic))
        names.append(name)
        if not canonical:
            cols.append(pc.coalesce(t.column(sc), pc.cast(t.column(ic), pa.string())))
            names.append(name + "_key")
    for name, col, typ in spec.columns:
        cols.append(pc.cast(t.column(col), getattr(pa, typ)()))
        names.append(name)
    batch = pa.RecordBatch.from_arrays([c.combine_chunks() if hasattr(c, "combine_chunks") else c for c in cols], names)
    return ("int" if canonical else "str"), batch


class _Writers:
    """The task's staged files, one per kind (``p<task>.<kind>.arrow``)."""

    def __init__(self, d: str, pid: int) -> None:
        self.dir, self.pid = d, pid
        self.files = IpcFiles()

    def write(self, kind: str, batch: pa.RecordBatch) -> None:
        self.files.write(join(self.dir, f"p{self.pid:05d}.{kind}.arrow"), batch)

    def close(self) -> list[tuple[str, int]]:
        return list(self.files.close().items())


def scan(
    df: DataFrame, group: Sequence[str], keys: Sequence[KeySpec] = (), stage: StageSpec | None = None
) -> ScanResult:
    """Run the pass (one Spark job); ``df`` must carry ``group``, REASON and what keys/stage name."""
    return merge_payloads(scan_payloads(df, group, keys, stage), group)


def _needed_columns(group: Sequence[str], keys: Sequence[KeySpec], stage: StageSpec | None) -> list[str]:
    """Only the columns the pass reads cross from the JVM to the task."""
    need = list(dict.fromkeys([*group, REASON]))
    for k in keys:
        need += [k.int_col, k.str_col] + ([k.type_col] if k.type_col else [SI] if k.type_by_si else [])
    if stage is not None:
        need += [c for _, ic, sc in stage.keys for c in (ic, sc)] + [c for _, c, _ in stage.columns]
    return list(dict.fromkeys(need))


def _add_keys(good: pa.Table, keys: Sequence[KeySpec], sets: dict[str, KeySet]) -> bool:
    """Add the integer ids of the good rows to the per-type key sets; False when an id is not an integer."""
    import pyarrow.compute as pc

    for ks in keys:
        if good.column(ks.int_col).null_count:
            return False
        ids = good.column(ks.int_col).to_numpy()
        if ks.type_col:
            tv = good.column(ks.type_col)
            for name in pc.unique(tv).to_pylist():
                m = pc.equal(tv, name) if name is not None else pc.is_null(tv)
                sets.setdefault(name or "", KeySet()).add(ids[m.to_numpy(zero_copy_only=False)])
        else:
            si = good.column(SI).to_numpy() if ks.type_by_si else np.zeros(good.num_rows, np.int32)
            for name, m in _src_type(si, dict(ks.type_by_si)):
                sets.setdefault(name, KeySet()).add(ids[m])
    return True


def _scan_task(
    pid: int, batches: Iterator[pa.RecordBatch], group: list[str], keys: list[KeySpec], stage: StageSpec | None
) -> TaskCounts:
    """One task of the pass: counts per group of every row; key sets and staged files of the good rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    counts: dict[GroupKey, int] = {}
    sets: dict[str, KeySet] = {}
    nonint = False
    writers = _Writers(stage.dir, pid) if stage is not None else None
    for b in batches:
        if b.num_rows == 0:
            continue
        t = pa.Table.from_batches([b])
        g = t.group_by(group, use_threads=False).aggregate([([], "count_all")])
        for row in g.to_pylist():
            k = tuple(row[c] for c in group)
            counts[k] = counts.get(k, 0) + row["count_all"]
        good = t.filter(pc.is_null(t.column(REASON)))
        if good.num_rows == 0:
            continue
        if keys and not nonint:
            nonint = not _add_keys(good, keys, sets)
        if writers is not None and stage is not None:
            kind, batch = _stage_batch(good, stage)
            writers.write(kind, batch)
    parts = {} if nonint else {k: v.part() for k, v in sets.items()}
    files = writers.close() if writers is not None else []
    return TaskCounts(pid=(1 << 40) + pid, counts=counts, parts=parts, nonint=nonint, files=files)  # after edgestage's


def scan_payloads(
    df: DataFrame, group: Sequence[str], keys: Sequence[KeySpec] = (), stage: StageSpec | None = None
) -> list[TaskCounts]:
    """The pass's per-task results, for merging with others."""
    need = _needed_columns(group, keys, stage)
    group_cols, key_specs = list(group), list(keys)

    def task(pid: int, batches: Iterator[pa.RecordBatch]) -> Iterator[TaskCounts]:
        yield _scan_task(pid, batches, group_cols, key_specs, stage)

    return map_partitions(df.select(*need), task)


def merge_payloads(payloads: list[TaskCounts], group: Sequence[str]) -> ScanResult:
    """One ScanResult of task results, in task order."""
    res = ScanResult()
    merged: dict[GroupKey, int] = {}
    for p in sorted(payloads, key=lambda p: p.pid):
        for k, n in p.counts.items():
            merged[k] = merged.get(k, 0) + n
        res.nonint |= p.nonint
        for name, part in p.parts.items():
            res.parts.setdefault(name, []).append(part)
        res.files += p.files
    res.counts = [{**dict(zip(group, k, strict=True)), "count": n} for k, n in merged.items()]
    res.total = sum(merged.values())
    if res.nonint:
        res.parts = {}
    return res
