"""DBH (Xie et al. 2014): hash the lower-degree endpoint, so hubs are cut and low-degree vertices stay whole."""

from __future__ import annotations

from spark_jobs.partition import kernels
from spark_jobs.partition.arrow_map import assign_with
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult
from spark_jobs.partition.degrees import degree_array


class DBH(Partitioner):
    name = "dbh"

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        deg = degree_array(ctx.edges, ctx.num_vertices)
        bc = ctx.spark.sparkContext.broadcast((deg, ctx.parts, ctx.seed))
        return PartitionResult(assign_with(ctx.edges, kernels.dbh, broadcast=bc))
