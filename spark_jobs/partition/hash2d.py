"""2D hash (GraphX ``EdgePartition2D``): a vertex's edges fall in one row and one column of a sqrt(p) grid,
so a vertex is replicated at most about 2*sqrt(p) times."""

from __future__ import annotations

from spark_jobs.partition import kernels
from spark_jobs.partition.arrow_map import assign_with
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult


class Hash2D(Partitioner):
    name = "hash2d"

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        return PartitionResult(assign_with(ctx.edges, kernels.edge_partition_2d, ctx.parts))
