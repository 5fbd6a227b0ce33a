"""Random edge assignment: each unordered vertex pair goes to hash(pair, seed) mod p."""

from __future__ import annotations

import numpy as np

from spark_jobs.partition import kernels
from spark_jobs.partition.arrow_map import assign_with
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult


def random_parts(src: np.ndarray, dst: np.ndarray, parts: int, seed: int) -> np.ndarray:
    return (kernels.pair_hash(src, dst, seed) % np.uint64(parts)).astype(np.int32)


class RandomEdge(Partitioner):
    name = "random"

    def partition(self, ctx: PartitionContext) -> PartitionResult:
        return PartitionResult(assign_with(ctx.edges, random_parts, ctx.parts, ctx.seed))
