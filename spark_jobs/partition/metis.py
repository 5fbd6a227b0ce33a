"""METIS (edge-cut, via pymetis) is optional: registered, but usable only when pymetis is installed.

Not implemented beyond the availability check: pymetis is not a dependency of this build, and an
edge-cut partitioner needs the whole graph in one process, which GLISP's vertex-cut path avoids.
"""

from __future__ import annotations

import importlib.util

from glisp_core.errors import StageError
from spark_jobs.partition.base import PartitionContext, Partitioner, PartitionResult, register


@register
class Metis(Partitioner):
    name = "metis"
    requires = "pymetis (pip install 'glisp[metis]')"

    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("pymetis") is not None

    def partition(self, ctx: PartitionContext) -> PartitionResult:  # pragma: no cover - pymetis absent here
        raise StageError("partition algorithm 'metis' is not implemented in this build (got pymetis installed)")
