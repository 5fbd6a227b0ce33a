"""One real local Spark session per test run, shared by every test that asks for it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from glisp_core.config import SparkConfig
    from glisp_spark.session import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConfig(
        master="local[2]",
        app_name="glisp-tests",
        driver_memory="3g",
        shuffle_partitions=4,
        ui=False,
        log_level="ERROR",
    )
    s = get_spark(conf, checkpoint_dir=str(tmp_path_factory.mktemp("checkpoints")))
    yield s
    s.stop()


@pytest.fixture
def cfg():
    """Defaults from conf/default.toml, with no environment overrides leaking in."""
    from glisp_core.config import load_config

    return load_config(env={})
