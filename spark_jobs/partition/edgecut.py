"""Edge-cut by owner (DistDGL style): every edge row goes to the owner partition of its source vertex,
owner(v) = pmod(xxhash64(v, seed), p), so each vertex's out-neighbourhood lives wholly on its owner.

The sampling service's ``routing="owner"`` mode uses such a run as the edge-cut baseline: a frontier
vertex is sent only to its owner. It is not a vertex-cut partitioner: the two directions of an
undirected edge go to the owners of their two sources (the contract's pair rule is a SHOULD that this
algorithm deliberately breaks). Pure Spark column expressions; no Python in the data path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult

if TYPE_CHECKING:
    from pyspark.sql import Column


def owner_expr(vid: Column, parts: int, seed: int) -> Column:
    """Owner partition of vertex column ``vid``: a seeded 64-bit hash of the id, modulo ``parts``."""
    return F.pmod(F.xxhash64(vid.cast("long"), F.lit(int(seed)).cast("long")), F.lit(int(parts))).cast("int")


class EdgeCut(Partitioner):
    name = "edgecut"

    def params(self) -> dict:
        return {"owner": "pmod(xxhash64(src, seed), parts)"}

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        alloc = ctx.edges.select("eid", "src", "dst", owner_expr(F.col("src"), ctx.parts, ctx.seed).alias("part"))
        return PartitionResult(alloc)
