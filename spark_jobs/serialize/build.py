"""The per-partition builder that runs inside a Spark task (cogrouped edges + vertices of one partition).

The task turns its Arrow tables into numpy, calls ``glisp_core.partition_format.write_partition`` into
the stage's attempt prefix, optionally writes the partition's Parquet copies there, and returns one summary
row (counts, bytes per field, the hash of the partition's meta.json). Nothing but that row goes back to the
driver. The task opens the store itself from the prefix's URI (``store_for``), so the attempt may be on a
local disk, a shared file system or an object store: no path is shared between the driver and a task.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import DTypeLike

from glisp_core.errors import GlispError
from glisp_core.partition_format import write_partition
from glisp_core.storage.store import store_for
from glisp_core.storage.uri import StoreURI, parse_uri
from spark_jobs.serialize.master import MASTERS_DIR

SUMMARY_SCHEMA = "part int, summary string"


@dataclass
class BuildContext:
    """What every task needs besides its rows (small, pickled into the task closure)."""

    out_dir: str  # the stage's attempt prefix, a fully qualified URI (file:///..., s3://...)
    num_parts: int
    edge_types: list[str]
    vertex_types: list[str]
    directed: bool
    weighted: bool
    timestamped: bool
    feature_dim: int
    has_labels: bool
    has_split: bool
    parquet_copy: bool
    degrees: bool = True  # the masters/ rows carry each vertex's degree (every ingest edge is in the partitions)
    extra: dict[str, Any] = field(default_factory=dict)


def _col(t: pa.Table, name: str, dtype: DTypeLike) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def build_partition(ctx: BuildContext, part: int, edges: pa.Table, verts: pa.Table) -> dict[str, Any]:
    """Build and write partition ``part``; returns its summary (sizes, counts).

    On a local disk the stage's attempt directory ``ctx.out_dir`` must exist: a task never recreates it, so
    a stage whose attempt was removed under it fails instead of publishing a partial output (on an object
    store, which has no directories, the stage's commit finds the attempt's lease gone instead).
    """
    out = parse_uri(ctx.out_dir)
    parts_col = verts.column("parts").combine_chunks() if verts.num_rows else pa.array([], pa.list_(pa.int32()))
    lengths = parts_col.value_lengths().to_numpy(zero_copy_only=False) if verts.num_rows else np.zeros(0, np.int64)
    rptr = np.zeros(verts.num_rows + 1, np.int64)
    np.cumsum(lengths, out=rptr[1:])
    rvals = parts_col.flatten().to_numpy(zero_copy_only=False) if verts.num_rows else np.zeros(0, np.int32)
    master = _col(verts, "master", np.int64)
    mine = np.flatnonzero(master == part)
    mverts = verts.take(pa.array(mine))
    feats = labels = split = None
    if ctx.feature_dim:
        fc = mverts.column("feat").combine_chunks()
        if fc.null_count:
            raise GlispError(f"partition {part}: {fc.null_count} mastered vertices have no feature vector (got null)")
        lens = fc.value_lengths().to_numpy(zero_copy_only=False)
        if len(lens) and (lens != ctx.feature_dim).any():
            raise GlispError(
                f"partition {part}: feature vectors must have {ctx.feature_dim} values (got {set(lens[:5])})"
            )
        feats = fc.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(mine), ctx.feature_dim)
    if ctx.has_labels:
        labels = mverts.column("label").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    if ctx.has_split:
        split = mverts.column("split").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int8)
    wp = write_partition(
        out / f"part-{part:05d}",
        part_id=part,
        num_parts=ctx.num_parts,
        vertex_gids=_col(verts, "vid", np.int64),
        out_degree=_col(verts, "out_deg", np.int64),
        in_degree=_col(verts, "in_deg", np.int64),
        replica_ptr=rptr,
        replica_parts=rvals,
        master=master,
        vtype=_col(verts, "vtype", np.int64),
        src=_col(edges, "src", np.int64),
        dst=_col(edges, "dst", np.int64),
        etype=_col(edges, "etype", np.int64),
        weight=_col(edges, "weight", np.float32) if ctx.weighted else None,
        ts=_col(edges, "ts", np.int64) if ctx.timestamped else None,
        edge_key=_col(edges, "eid", np.int64),
        edge_types=ctx.edge_types,
        vertex_types=ctx.vertex_types,
        master_gids=_col(mverts, "vid", np.int64),
        features=feats,
        labels=labels,
        split=split,
        feature_dim=ctx.feature_dim,
        directed=ctx.directed,
        extra=ctx.extra,
        create_parent=False,
    )
    _write_masters(ctx, out, part, mverts)
    if ctx.parquet_copy:
        ecols = (
            ["eid", "src", "dst", "etype"] + (["weight"] if ctx.weighted else []) + (["ts"] if ctx.timestamped else [])
        )
        et = edges.select(ecols).take(pa.array(wp.edge_order))
        et = et.append_column("part", pa.array(np.full(et.num_rows, part, np.int32)))
        et = et.append_column("leid", pa.array(np.arange(et.num_rows, dtype=np.int64)))
        store = store_for(out)
        store.write_table(et, out / "parquet" / "edges" / f"part-{part:05d}.parquet")
        vt = verts.select(["vid", "master", "parts"]).take(pa.array(wp.vertex_order))
        vt = vt.append_column("lid", pa.array(np.arange(vt.num_rows, dtype=np.int64)))
        vt = vt.append_column("part", pa.array(np.full(vt.num_rows, part, np.int32)))
        store.write_table(vt, out / "parquet" / "vertices" / f"part-{part:05d}.parquet")
    return wp.summary()


def _write_masters(ctx: BuildContext, out: StoreURI, part: int, mverts: pa.Table) -> None:
    """``masters/part-NNNNN.parquet``: the vertices this partition masters (vid, master[, degree]), what reorder
    reads instead of computing the masters and the degrees again (spark_jobs.serialize.master)."""
    vid = _col(mverts, "vid", np.int64)
    cols = {"vid": pa.array(vid), "master": pa.array(np.full(len(vid), part, np.int32))}
    if ctx.degrees:
        cols["degree"] = pa.array(_col(mverts, "out_deg", np.int64) + _col(mverts, "in_deg", np.int64))
    store_for(out).write_table(pa.table(cols), out / MASTERS_DIR / f"part-{part:05d}.parquet")


def make_task(ctx: BuildContext) -> Callable[[tuple, pa.Table, pa.Table], pa.Table]:
    """The cogroup function: (key, edges, vertices) -> one summary row."""
    ctx_dict = asdict(ctx)

    def task(key: tuple, edges: pa.Table, verts: pa.Table) -> pa.Table:
        c = BuildContext(**ctx_dict)
        got = key[0].as_py()
        if got is None:  # edges no assignment row names: counted for the driver's error, nothing built
            eids = edges.column("eid").slice(0, 3).to_pylist() if edges.num_rows else []
            summary = {"unassigned": edges.num_rows, "examples": eids}
            return pa.table({"part": pa.array([None], pa.int32()), "summary": [json.dumps(summary)]})
        part = int(got)
        summary = build_partition(c, part, edges, verts)
        return pa.table({"part": pa.array([part], pa.int32()), "summary": [json.dumps(summary)]})

    return task


def empty_inputs(ctx: BuildContext) -> tuple[pa.Table, pa.Table]:
    """Inputs of a partition that received no rows at all (tiny graphs, many partitions)."""
    e = {"eid": pa.int64(), "src": pa.int64(), "dst": pa.int64(), "etype": pa.int32()}
    if ctx.weighted:
        e["weight"] = pa.float32()
    if ctx.timestamped:
        e["ts"] = pa.int64()
    v = {
        "vid": pa.int64(),
        "out_deg": pa.int64(),
        "in_deg": pa.int64(),
        "parts": pa.list_(pa.int32()),
        "master": pa.int32(),
        "vtype": pa.int32(),
        "label": pa.int64(),
        "split": pa.int8(),
        "feat": pa.list_(pa.float32()),
    }
    return pa.schema(e).empty_table(), pa.schema(v).empty_table()
