"""Phases sort and write: each bucket sorted, its duplicate policy applied, written with dense eids.

Why two phases only sometimes: with the policy "keep" the bucket sizes (so the eid offsets) are known
after the map phase and one job sorts and writes; otherwise the sizes are known after the sort, and a
second job writes. The counts of the manifest (duplicates, reverse edges) follow from the rows written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_jobs.ingest.edgefiles import (
    BucketWritten,
    DegreeFreq,
    EdgePlan,
    sort_and_write_buckets,
    sort_buckets,
    write_buckets,
)
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.map_edges import MappedEdges


@dataclass(frozen=True)
class WrittenEdges:
    """The edge table as written: its rows, rows per type, degree frequencies, and what the policies did."""

    n_edges: int
    per_etype: dict[str, int]
    freq: list[DegreeFreq]  # per bucket (a vid range)
    loops_dropped: int
    doubled: int  # reverse edges added (undirected)
    dups_removed: int


def _offsets(rows: list[int] | np.ndarray) -> list[int]:
    """The first eid of each bucket."""
    return np.concatenate([[0], np.cumsum(rows)[:-1]]).tolist()


def _write(ctx: IngestContext, eplan: EdgePlan, mapped: MappedEdges) -> list[BucketWritten]:
    """Every bucket sorted and written: one job (policy "keep") or a sort job and a write job."""
    if eplan.duplicates == "keep":
        rows = np.sum([r.rows for r in mapped.buckets], axis=0) if mapped.buckets else np.zeros(eplan.nb, np.int64)
        with ctx.ph("sort"):
            return sort_and_write_buckets(ctx.spark, eplan, _offsets(rows))
    with ctx.ph("sort"):
        sorted_ = sort_buckets(ctx.spark, eplan)
    for s in sorted_:
        ctx.ph.add_task_seconds(s.times)
    offsets = _offsets([s.rows for s in sorted_])
    with ctx.ph("write"):
        return write_buckets(ctx.spark, eplan, offsets)


def write_edges(ctx: IngestContext, eplan: EdgePlan, mapped: MappedEdges, edge_types: list[str]) -> WrittenEdges:
    """The edge table written; its counts and degree frequencies."""
    ing = ctx.plan.ing
    final = _write(ctx, eplan, mapped)
    for r in final:
        ctx.ph.add_task_seconds(r.times)
    n_edges = int(sum(r.rows for r in final))
    et = np.sum([r.etype_rows for r in final], axis=0)
    loops_dropped = mapped.loops if ing.self_loops == "drop" else 0
    rows_before = mapped.good_rows - loops_dropped
    if ing.directed:
        dedup_rows, doubled = n_edges, 0
    else:
        unique_loops = sum(r.loops for r in final)
        dedup_rows = (n_edges + unique_loops) // 2
        doubled = n_edges - dedup_rows
    return WrittenEdges(
        n_edges=n_edges,
        per_etype={edge_types[i]: int(n) for i, n in enumerate(et) if n and i < len(edge_types)},
        freq=[r.freq for r in final],
        loops_dropped=loops_dropped,
        doubled=doubled,
        dups_removed=rows_before - dedup_rows,
    )
