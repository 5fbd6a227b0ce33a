"""``IngestContext``: what every phase of one run reads (session, plan, output, timer, log) and what it cleans up.

Why one object: the phases share these few facts and nothing else; their results travel as the return
values of each phase, so a phase's inputs are its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from glisp_core.config import SparkConfig
from glisp_core.dataset.layout import DatasetVersion
from glisp_core.storage.uri import StoreURI
from glisp_spark.phases import Phases
from spark_jobs.ingest.arrowread import ReadTask
from spark_jobs.ingest.checks import Summary, handle_bad
from spark_jobs.ingest.plan import IngestPlan
from spark_jobs.ingest.rowlocate import RowLocator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class IngestContext:
    """One run's fixed facts; ``cached`` collects the frames the phases persist, for ``cleanup``."""

    spark: SparkSession
    plan: IngestPlan
    out: DatasetVersion  # the version being written (its temporary directory)
    stage: StoreURI  # staging prefix inside it (in the store: tasks write it, other tasks read it), removed by cleanup
    ph: Phases
    log: Callable[[str], None]
    id_long: bool  # every id column is an integer column: ids never go through strings
    spark_conf: SparkConfig  # sizes the shuffles once the edge rows are counted
    cached: list[DataFrame] = field(default_factory=list)
    read_tasks: dict[int, Sequence[ReadTask]] = field(default_factory=dict)  # per source: where its rows came from

    def handle_bad(self, df: DataFrame, summary: Summary, raw: dict[str, Column]) -> dict[str, int]:
        """Fail on the bad rows of ``df`` or quarantine them, as the config says; rows set aside per kind."""
        ing = self.plan.ing
        where = RowLocator.of(self.read_tasks)
        return handle_bad(df, summary, self.plan.files, ing.on_bad_input, raw, self.out.rejects, self.log, where)

    def cleanup(self) -> None:
        """Unpersist what the phases persisted and remove the staged files, whether the run succeeded or not."""
        for df in self.cached:
            df.unpersist()
        try:
            self.out.store.delete(self.stage)
        except OSError as e:  # left inside the attempt: removed with it when the attempt is discarded
            self.log(f"ingest: could not remove the staged files under {self.stage} ({e})")
