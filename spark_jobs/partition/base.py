"""The partitioner interface: what an algorithm gets (:class:`PartitionContext`) and returns
(:class:`PartitionResult`). The algorithms are listed by name in :mod:`spark_jobs.partition.registry`.

A partitioner turns the ingested edge rows into an allocation DataFrame ``(eid, src, dst, part)`` with
exactly one row per edge row; ``job.run_partition`` writes the outputs and measures them, the same way
for every algorithm.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glisp_core.config import PartitionConfig
from glisp_core.storage.uri import StoreURI

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class PartitionContext:
    """What a partitioner gets: the edges (eid, src, dst), the graph's size and a scratch prefix in the store."""

    spark: SparkSession
    edges: DataFrame  # eid long, src long, dst long
    num_vertices: int
    num_edges: int
    cfg: PartitionConfig
    staging: StoreURI  # scratch prefix in the attempt, read and written through the store (removed before publishing)
    source: StoreURI  # the ingested edge table ``edges`` reads: a partitioner holding the graph reads it directly
    log: Callable[[str], None] = field(default=lambda s: print(s, file=sys.stderr, flush=True))

    @property
    def parts(self) -> int:
        return self.cfg.parts

    @property
    def seed(self) -> int:
        return self.cfg.seed


@dataclass
class PartitionResult:
    """An allocation DataFrame (eid, src, dst, part) plus what the algorithm measured on the way."""

    alloc: DataFrame
    rounds: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    # partition sets already known to the algorithm (uint64 bitsets, |V| x ceil(p/64)): replicas/ is then
    # written from them by the driver instead of a Spark group-by over every edge row
    replica_bits: np.ndarray | None = None
    edges_per_part: np.ndarray | None = None  # the algorithm's own |E_i| (checked against the written assignment)


class Partitioner(ABC):
    """One vertex-cut algorithm. Subclasses set ``name`` and implement ``partition``."""

    name: str = ""
    iterative: bool = False

    def __init__(self, cfg: PartitionConfig) -> None:
        self.cfg = cfg

    def params(self) -> dict[str, Any]:
        """Algorithm parameters recorded in the manifest (and part of the stage fingerprint)."""
        return {}

    @abstractmethod
    def partition(self, ctx: PartitionContext) -> PartitionResult:
        """Allocate every edge row of ``ctx.edges`` to one of ``ctx.parts`` partitions."""
