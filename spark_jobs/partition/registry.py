"""The partitioning algorithms by name: what ``glisp partition --algorithm NAME`` can run.

Each algorithm is one module defining a :class:`~spark_jobs.partition.base.Partitioner`; adding one is
one import and one entry here.
"""

from __future__ import annotations

from glisp_core.config import PartitionConfig
from glisp_core.errors import ConfigError
from spark_jobs.partition.adadne import AdaDNE
from spark_jobs.partition.base import Partitioner
from spark_jobs.partition.dbh import DBH
from spark_jobs.partition.dne import DNE
from spark_jobs.partition.edgecut import EdgeCut
from spark_jobs.partition.hash2d import Hash2D
from spark_jobs.partition.hdrf import HDRF
from spark_jobs.partition.metis import Metis
from spark_jobs.partition.random_edge import RandomEdge

ALGORITHMS: dict[str, type[Partitioner]] = {
    cls.name: cls for cls in (AdaDNE, DBH, DNE, EdgeCut, Hash2D, HDRF, Metis, RandomEdge)
}


def algorithms() -> list[str]:
    """Names of the available algorithms, sorted."""
    return sorted(ALGORITHMS)


def get_partitioner(cfg: PartitionConfig) -> Partitioner:
    """The configured algorithm (``cfg.algorithm``) for ``cfg.parts`` partitions."""
    cls = ALGORITHMS.get(cfg.algorithm)
    if cls is None:
        raise ConfigError(
            "partition", "algorithm", f"expected one of {', '.join(sorted(ALGORITHMS))} (got {cfg.algorithm!r})"
        )
    if cfg.parts < 1:
        raise ConfigError("partition", "parts", f"expected a positive number of partitions (got {cfg.parts})")
    return cls(cfg)
