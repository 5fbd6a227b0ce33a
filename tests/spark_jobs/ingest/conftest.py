"""Fixtures for the ingest tests: a config rooted in tmp_path and a runner."""

from __future__ import annotations

import dataclasses

import pytest

from glisp_core.config import IngestConfig, with_values


@pytest.fixture
def icfg(cfg, tmp_path):
    return with_values(cfg, "dataset", root=str(tmp_path / "data"))


@pytest.fixture
def ingest(spark, icfg):
    """ingest(IngestConfig, force=False, **changes) -> DatasetVersion, against the test root."""
    from spark_jobs.ingest.job import run_ingest

    def run(ing: IngestConfig, force: bool = False, log=print, **changes):
        if changes:
            ing = dataclasses.replace(ing, **changes)
        return run_ingest(spark, icfg, ing, force=force, log=log)

    return run
