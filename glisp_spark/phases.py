"""The stage timer of every Spark job: wall time and Spark job count per phase, for the manifest timings and the benchmark.

Each phase runs under its own Spark job group, so ``statusTracker().getJobIdsForGroup`` counts the
jobs it started (including the ones Spark starts for it, e.g. broadcasts and adaptive re-planning).
Tasks also report the CPU seconds (``time.process_time``) they spent on each activity (parsing,
sorting, writing, ...); those are summed over all tasks here as ``task_<activity>_cpu_s``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

_PROPS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class Phases:
    """``with phases("name"):`` times a phase and puts its Spark jobs in a group of their own."""

    def __init__(self, spark: SparkSession | None, stage: str) -> None:
        self.spark = spark
        self.prefix = f"{stage}-{uuid.uuid4().hex[:8]}"
        self.seconds: dict[str, float] = {}
        self.order: list[str] = []
        self.task_seconds: dict[str, float] = {}

    @property
    def sc(self) -> SparkContext | None:
        """The session's context once it runs (a lazy session that no phase used yet has none: no job groups)."""
        from glisp_spark.session import started

        return self.spark.sparkContext if self.spark is not None and started(self.spark) else None

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            self.order.append(name)
            self.seconds[name] = 0.0
        sc = self.sc  # a session that starts inside this phase groups nothing of it
        old = [sc.getLocalProperty(p) for p in _PROPS] if sc else []
        if sc:
            sc.setJobGroup(f"{self.prefix}:{name}", f"{self.prefix.split('-')[0]}: {name}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0
            if sc:
                for p, v in zip(_PROPS, old, strict=True):
                    sc.setLocalProperty(p, v)  # type: ignore[arg-type]  # None clears the property

    def add_task_seconds(self, times: dict[str, float]) -> None:
        for k, v in times.items():
            self.task_seconds[k] = self.task_seconds.get(k, 0.0) + float(v)

    def jobs(self, name: str) -> int:
        if not self.sc:
            return 0
        return len(self.sc.statusTracker().getJobIdsForGroup(f"{self.prefix}:{name}"))

    def timings(self) -> dict[str, float]:
        """Flat manifest timings: <phase>_s and <phase>_jobs in phase order, then task_<activity>_cpu_s."""
        out: dict[str, float] = {}
        for name in self.order:
            out[f"{name}_s"] = round(self.seconds[name], 3)
            out[f"{name}_jobs"] = self.jobs(name)
        for k in sorted(self.task_seconds):
            out[f"task_{k}_cpu_s"] = round(self.task_seconds[k], 3)
        return out
