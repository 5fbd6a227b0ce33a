"""The only SparkSession factory: ``local[*]`` embedded, or whatever spark-submit configured."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from glisp_core.config import SparkConfig
from glisp_core.errors import GlispError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA = 17


def check_java() -> None:
    """Fail with one sentence when Java is missing or too old (Spark 4 needs Java 17+)."""
    java = (
        shutil.which("java") if not os.environ.get("JAVA_HOME") else str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    )
    if not java or not Path(java).exists():
        raise GlispError(
            "Java not found: Spark 4 needs Java 17 or newer; install it (e.g. 'apt-get install openjdk-17-jre-headless') "
            "or set JAVA_HOME"
        )


def get_spark(conf: SparkConfig | None = None, checkpoint_dir: str | None = None) -> SparkSession:
    """Build or reuse the session; under spark-submit the master and resources come from spark-submit."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = conf or SparkConfig()
    active = SparkSession.getActiveSession()
    if active is not None:
        _set_checkpoint(active, conf, checkpoint_dir)
        return active
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    preset = SparkConf()  # picks up spark-submit's settings when launched by it
    b = SparkSession.builder.appName(conf.app_name)
    if not preset.contains("spark.master"):
        b = b.master(conf.master)
        b = b.config("spark.driver.memory", conf.driver_memory)
    cores = os.cpu_count() or 2
    shuffle = conf.shuffle_partitions or max(2, 2 * cores)
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle),
        "spark.sql.adaptive.enabled": str(conf.adaptive).lower(),
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.adaptive.skewJoin.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": str(conf.ui).lower(),
        "spark.ui.showConsoleProgress": str(sys.stderr.isatty()).lower(),  # Spark's stage bars on a terminal
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Dlog4j2.level=warn",
    }
    settings.update(conf.conf)
    for k, v in settings.items():
        if not preset.contains(k):
            b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(conf.log_level)
    _set_checkpoint(spark, conf, checkpoint_dir)
    return spark


def _set_checkpoint(spark: SparkSession, conf: SparkConfig, checkpoint_dir: str | None) -> None:
    d = conf.checkpoint_dir or checkpoint_dir
    if d and not spark.sparkContext.getCheckpointDir():
        if "://" not in d:
            Path(d).mkdir(parents=True, exist_ok=True)
        spark.sparkContext.setCheckpointDir(d)


def default_parallelism(spark: SparkSession) -> int:
    return int(spark.sparkContext.defaultParallelism)
