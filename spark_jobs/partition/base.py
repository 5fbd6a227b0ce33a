"""The partitioner interface and registry: one module per algorithm, one registration line each.

A partitioner turns the ingested edge rows into an allocation DataFrame ``(eid, src, dst, part)`` with
exactly one row per edge row; ``job.run_partition`` writes the outputs and measures them, the same way
for every algorithm.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glisp_core.config import PartitionConfig
from glisp_core.errors import ConfigError


@dataclass
class PartitionContext:
    """What a partitioner gets: the edges (eid, src, dst), the graph's size and a scratch directory."""

    spark: Any
    edges: Any  # DataFrame eid long, src long, dst long
    num_vertices: int
    num_edges: int
    cfg: PartitionConfig
    staging: Path  # scratch space inside the stage's temporary directory (removed before publishing)
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

    alloc: Any
    rounds: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    # partition sets already known to the algorithm (uint64 bitsets, |V| x ceil(p/64)): replicas/ is then
    # written from them by the driver instead of a Spark group-by over every edge row
    replica_bits: Any = None
    edges_per_part: Any = None  # the algorithm's own |E_i| (checked against the written assignment)


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


_REGISTRY: dict[str, type[Partitioner]] = {}


def register(cls: type[Partitioner]) -> type[Partitioner]:
    """Class decorator: make an algorithm available to ``glisp partition --algorithm NAME``."""
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    from spark_jobs.partition import adadne, dbh, dne, edgecut, hash2d, hdrf, metis, random_edge  # noqa: F401


def algorithms() -> list[str]:
    """Names of the registered algorithms."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_partitioner(cfg: PartitionConfig) -> Partitioner:
    _load_builtins()
    cls = _REGISTRY.get(cfg.algorithm)
    if cls is None:
        raise ConfigError(
            "partition", "algorithm", f"expected one of {', '.join(sorted(_REGISTRY))} (got {cfg.algorithm!r})"
        )
    if cfg.parts < 1:
        raise ConfigError("partition", "parts", f"expected a positive number of partitions (got {cfg.parts})")
    return cls(cfg)


class Clock:
    """Named wall-clock sections for StageRecord.timings."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    def section(self, name: str) -> _Section:
        return _Section(self, name)


class _Section:
    def __init__(self, clock: Clock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.clock.t[self.name] = round(self.clock.t.get(self.name, 0.0) + time.perf_counter() - self.t0, 3)
