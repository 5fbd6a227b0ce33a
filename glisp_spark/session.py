"""The only SparkSession factory: ``local[*]`` embedded, or whatever spark-submit configured.

Which Python the executors run: ``spark.pyspark.python`` when configured (a packed virtualenv shipped with
``--archives``/``spark.archives``, e.g. ``./environment/bin/python``, or the cluster image's Python); else this
interpreter for a ``local[...]`` master only, where driver and executors share the machine; else what the
cluster gives them (``PYSPARK_PYTHON`` in the driver's environment, or Spark's ``python3``). A path of the
driver's machine is never sent to executors on other hosts. For a cluster master GLISP's own code goes with
the application as a zip (``addPyFile``) unless spark-submit already shipped one (``--py-files``).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from glisp_core.config import SparkConfig
from glisp_core.errors import GlispError
from glisp_core.storage.limits import limits_env
from glisp_core.storage.uri import is_local, parse_uri, qualify
from glisp_spark import daemon
from glisp_spark.executor_watch import watch
from glisp_spark.tables import jvm_opens

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

MIN_JAVA = 17
WORKER_PRELOAD = ("numpy", "pyarrow", "pyarrow.parquet", "numba")  # what every stage's tasks import
LOG4J2 = Path(__file__).with_name("log4j2.properties")  # the driver's logging: WARN and up, no start-up notices


ALLOW_MISMATCH = "spark.glisp.allowVersionMismatch"


def version_mismatch(python_side: str, jvm_side: str) -> str | None:
    """Why pyspark ``python_side`` and the cluster's Spark ``jvm_side`` should not run together, or None: their
    major.minor must agree (the Python worker protocol and Arrow exchange change between minor releases)."""
    a, b = python_side.split(".")[:2], jvm_side.split(".")[:2]
    if a == b:
        return None
    return (
        f"pyspark {python_side} (this Python) with Spark {jvm_side} (the cluster): GLISP runs with the same "
        f"major.minor on both sides; install pyspark=={'.'.join(b)}.* in the driver's and executors' environment "
        f"(or set {ALLOW_MISMATCH}=true to run anyway)"
    )


def check_versions(spark: SparkSession) -> None:
    """Fail at start-up, naming both versions, when pyspark and the cluster's Spark differ in major.minor."""
    import pyspark

    why = version_mismatch(pyspark.__version__, spark.version)
    if why and str(spark.conf.get(ALLOW_MISMATCH, "false")).lower() != "true":
        raise GlispError(why)


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


SHUFFLE_ROWS = 2_000_000  # edge rows a shuffle partition starts with at most: its sort fits a task's heap share


def base_shuffle_partitions(conf: SparkConfig) -> int:
    """``spark.shuffle_partitions``, else twice the cores: what a small graph's shuffles use."""
    return conf.shuffle_partitions or max(2, 2 * (os.cpu_count() or 2))


def size_shuffles(spark: SparkSession, conf: SparkConfig, rows: int) -> int:
    """Set the session's shuffle partitions for a stage over ``rows`` edge rows and return them: the base, raised
    so that none starts with more than SHUFFLE_ROWS rows (at R-MAT 22 four partitions of 17M rows each made a
    sort-merge join's sort run out of a 4 GB heap); AQE coalesces the small ones. A set
    ``spark.shuffle_partitions`` is kept as it is."""
    n = conf.shuffle_partitions or max(base_shuffle_partitions(conf), -(-rows // SHUFFLE_ROWS))
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n


def get_spark(
    conf: SparkConfig | None = None, checkpoint_dir: str | None = None, preload: Sequence[str] = ()
) -> SparkSession:
    """Build or reuse the session; under spark-submit the master and resources come from spark-submit.
    ``preload``: modules a local master's Python workers get imported before they fork (besides
    :data:`WORKER_PRELOAD`); for a session already running, what it started with."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = conf or SparkConfig()
    active = SparkSession.getActiveSession()
    if active is not None:
        _set_checkpoint(active, conf, checkpoint_dir)
        return active
    check_java()
    preset = _submitted_conf() or SparkConf()
    master = preset.get("spark.master", None) or conf.master
    _executor_python(master, preset.get("spark.pyspark.python", None) or conf.conf.get("spark.pyspark.python"))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(conf.app_name)
    if not preset.contains("spark.master"):
        b = b.master(conf.master)
        b = b.config("spark.driver.memory", conf.driver_memory)
    settings = {
        "spark.sql.shuffle.partitions": str(base_shuffle_partitions(conf)),
        "spark.sql.adaptive.enabled": str(conf.adaptive).lower(),
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.adaptive.skewJoin.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": str(conf.ui).lower(),
        "spark.ui.showConsoleProgress": str(sys.stderr.isatty()).lower(),  # Spark's stage bars on a terminal
        "spark.sql.session.timeZone": "UTC",
        # Spark's start-up notices (loopback hostname, native-hadoop library) stay off the user's terminal
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}",
    }
    if is_local_master(master):  # nothing is shipped: the workers import GLISP from their path, so can the daemon
        settings["spark.python.daemon.module"] = daemon.MODULE
        settings[f"spark.executorEnv.{daemon.PRELOAD_ENV}"] = ",".join(dict.fromkeys((*WORKER_PRELOAD, *preload)))
    else:
        from glisp_core.numba_cache import LOCATORS

        # executors import GLISP from the shipped zip: numba's kernel cache keyed by its content, not its path
        settings["spark.executorEnv.NUMBA_CACHE_LOCATOR_CLASSES"] = LOCATORS
        # the store's timeouts and retries the CLI set (glisp_core.storage.limits), for the executors' store calls
        settings.update({f"spark.executorEnv.{k}": v for k, v in limits_env().items()})
    settings.update(conf.conf)
    for k, v in settings.items():
        if not preset.contains(k):
            b = b.config(k, v)
    spark = b.getOrCreate()
    check_versions(spark)
    spark.sparkContext.setLogLevel(conf.log_level)
    dynamic = spark.sparkContext.getConf().get("spark.dynamicAllocation.enabled", "false") == "true"
    if not is_local_master(master) and not dynamic:
        watch(spark.sparkContext, conf.max_executor_losses, conf.no_executor_timeout_s)
    _ship_code(spark, master)
    _set_checkpoint(spark, conf, checkpoint_dir)
    return spark


class LazySpark:
    """A SparkSession that starts on first use, so that a stage with nothing to do (its record current) says so
    without starting a JVM. Every attribute is the session's; :func:`started` tells whether it ever started.

    :meth:`prestart` starts it in a background thread when the caller already knows the stage has work: the JVM
    and the SparkContext come up while the driver imports what it needs (torch and PyG for inference, 3 s of
    Python that would otherwise come first)."""

    def __init__(
        self, conf: SparkConfig | None = None, checkpoint_dir: str | None = None, preload: Sequence[str] = ()
    ) -> None:
        self._conf, self._checkpoint_dir, self._preload = conf, checkpoint_dir, tuple(preload)
        self._session: SparkSession | None = None
        self._starting: threading.Thread | None = None
        self._failed: BaseException | None = None

    def prestart(self) -> None:
        """Start the session now, in a daemon thread; the first use waits for it (and raises what it raised)."""
        if self._session is not None or self._starting is not None:
            return
        import pyspark.sql  # noqa: F401  # here, so the two threads do not import the same modules at once

        def start() -> None:
            try:
                self._session = get_spark(self._conf, self._checkpoint_dir, self._preload)
            except BaseException as e:  # re-raised by the first use, in the thread that uses the session
                self._failed = e

        self._starting = threading.Thread(target=start, name="glisp-spark-start", daemon=True)
        self._starting.start()

    def session(self) -> SparkSession:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            if self._failed is not None:
                failed, self._failed = self._failed, None
                raise failed
        if self._session is None:
            self._session = get_spark(self._conf, self._checkpoint_dir, self._preload)
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)


def lazy_spark(
    conf: SparkConfig | None = None, checkpoint_dir: str | None = None, preload: Sequence[str] = ()
) -> SparkSession:
    """:class:`LazySpark` typed as the session it stands for (the stage functions take a SparkSession)."""
    return cast("SparkSession", LazySpark(conf, checkpoint_dir, preload))


def prestart(spark: Any) -> None:
    """Start a :class:`LazySpark` now, in the background (see :meth:`LazySpark.prestart`); a session is left as is."""
    if isinstance(spark, LazySpark):
        spark.prestart()


def started(spark: Any) -> bool:
    """Whether ``spark`` is a running session or one starting (a :class:`LazySpark` that nothing used or
    prestarted is not)."""
    return not isinstance(spark, LazySpark) or spark._session is not None or spark._starting is not None


def planned_master(conf: SparkConfig) -> str:
    """The master the session gets (spark-submit's, else ``spark.master``), known without starting it."""
    preset = _submitted_conf()
    return str((preset.get("spark.master", None) if preset is not None else None) or conf.master)


def _submitted_conf() -> SparkConf | None:
    """spark-submit's settings when it launched this process (None otherwise).

    A ``SparkConf()`` made before the JVM gateway is up is an empty Python dict; under spark-submit the gateway
    already runs (``PYSPARK_GATEWAY_PORT``), and connecting to it first lets SparkConf read what spark-submit
    set (``--master``, ``--conf``). Outside spark-submit the gateway must not start yet: the driver's memory
    is only settable when it starts.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf()


def is_local_master(master: str | None) -> bool:
    """``local``, ``local[N]``, ``local-cluster[...]``: every executor runs on the driver's machine."""
    return bool(master) and str(master).startswith("local")


def _executor_python(master: str, configured: str | None) -> None:
    """Set ``PYSPARK_PYTHON``, which PySpark sends to the executors as the Python to start (see the module doc)."""
    if configured:
        os.environ["PYSPARK_PYTHON"] = configured  # spark-submit's rule: the conf wins over the environment
    elif is_local_master(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _ship_code(spark: SparkSession, master: str) -> None:
    """Executors on other hosts import GLISP from a zip of this process's packages (built like glisp-submit's),
    unless spark-submit already shipped one with ``--py-files``. Shipped even to a cluster whose image has GLISP
    installed: it goes first on the executors' path, so they run exactly the driver's code."""
    if is_local_master(master):
        return
    shipped = spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    if any(Path(f).name.startswith("glisp-") and f.endswith(".zip") for f in shipped.split(",")):
        return
    from glisp_spark.codezip import build_zip, zip_dir

    path = list(sys.path)
    spark.sparkContext.addPyFile(qualify(build_zip(zip_dir())))
    sys.path[:] = path  # the driver keeps importing its own sources, where numba's kernel cache stays warm


def _set_checkpoint(spark: SparkSession, conf: SparkConfig, checkpoint_dir: str | None) -> None:
    """Spark's checkpoint directory, where its JVM can open it.

    Skipped for a URI the JVM cannot open (``s3://`` without a connector: Spark would fail creating it):
    no stage checkpoints to it (``localCheckpoint`` needs no directory), so there is nothing to lose.
    """
    d = conf.checkpoint_dir or checkpoint_dir
    if d and not jvm_opens(spark, d):
        return
    if d and not spark.sparkContext.getCheckpointDir():
        if is_local(d):
            Path(parse_uri(d).path).mkdir(parents=True, exist_ok=True)
        spark.sparkContext.setCheckpointDir(qualify(d))  # a bare path would be on fs.defaultFS (HDFS on YARN)


def default_parallelism(spark: SparkSession) -> int:
    return int(spark.sparkContext.defaultParallelism)
