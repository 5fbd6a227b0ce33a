"""Dense, deterministic ids (0..n-1) for vertices and edges without collecting rows to the driver.

A global sort on a total order, then per-partition offsets: only one count per partition reaches the
driver. The same input gives the same ids whatever the partitioning, because the order is total
(rows that tie on every sort column are identical, so their relative order does not matter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import StorageLevel
    from pyspark.sql import Column, DataFrame, Row

_PID = "_pid"
_MID = "_mid"
_LOCAL_BITS = 33  # monotonically_increasing_id = partition << 33 | row-in-partition


def dense_index(
    df: DataFrame,
    order: Sequence[Column],
    name: str,
    group: Sequence[str] = (),
    aggs: Sequence[Column] = (),
    storage: StorageLevel | None = None,
) -> tuple[DataFrame, int, DataFrame, list[Row]]:
    """``df`` sorted by ``order`` with column ``name`` = position 0..n-1; returns (df, n, cached, rows).

    The sorted rows are persisted (the count pass and the write pass must see the same partitions);
    the caller unpersists ``cached`` once it has written the result. The count pass also groups by
    ``group`` and evaluates ``aggs``, so small statistics cost no extra job: ``rows`` holds them per
    (partition, group) with a ``count`` column.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cached = (
        df.orderBy(*order)
        .withColumn(_PID, F.spark_partition_id())
        .withColumn(_MID, F.monotonically_increasing_id())
        .persist(storage or StorageLevel.MEMORY_AND_DISK)
    )
    rows = cached.groupBy(_PID, *group).agg(F.count(F.lit(1)).alias("count"), *aggs).collect()
    counts: dict[int, int] = {}
    for r in rows:
        counts[r[_PID]] = counts.get(r[_PID], 0) + int(r["count"])
    nparts = max(counts, default=-1) + 1
    offsets, acc = [], 0
    for p in range(nparts):
        offsets.append(acc)
        acc += counts.get(p, 0)
    if nparts == 0:
        off = F.lit(0).cast("long")
    else:
        off = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets]), F.col(_PID) + 1)
    local = F.col(_MID).bitwiseAND(F.lit((1 << _LOCAL_BITS) - 1))
    out = cached.withColumn(name, (local + off).cast("long")).drop(_PID, _MID)
    return out, acc, cached, rows
