"""The JVM options of every JVM the test suite starts (the session's, the CLI subprocesses', a standalone
cluster's daemons and executors).

Those JVMs live for seconds to minutes on small data: the client compiler alone and the serial collector
cost about a third less CPU than the defaults (C2's compiler threads and the parallel GC's threads compete
with the work on two cores). The client compiler alone gets the JDK's small code cache (48 MB), which a
session JVM of the Spark lane outgrows (about 70 MB of code): nearly full, the JVM swept and recompiled all
along, a quarter of its CPU; so the cache is the tiered default's size, 240 MB. Only the tests run this way;
a user's JVMs keep Spark's and the JDK's defaults.

Class data sharing: a Spark driver loads some 10,000 classes at start. A dynamic CDS archive of them (the
JDK's ``-XX:ArchiveClassesAtExit``, written once per machine, JDK and pyspark by :func:`build_archive`, kept in
the user's cache) lets every later driver map them instead (a local session starts in about half the time).
A JVM whose class path or JDK does not match the archive, or that finds no archive, starts as before: the
JDK checks it and, with its CDS logging off, says nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path

TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
# what Spark's launch scripts add to the driver (spark-submit, which PySpark runs too), to the launcher JVM that
# builds its command line, and to a standalone master's and worker's JVMs
VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS")
QUIET_CDS = "-Xlog:cds*=off"  # a mismatching or missing archive is not an error: no lines in the tests' output

# what the archive's driver does: sessions, SQL, a shuffle, Parquet, Arrow and a Python UDF (the classes the
# tests' drivers load), then exit, when the JDK writes the archive
_WARM_UP = """
import sys
from pyspark.sql import SparkSession, functions as F
s = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = s.range(2000).withColumn("k", F.col("id") % 7)
df.groupBy("k").agg(F.count("*").alias("n")).orderBy("k").collect()
df.write.mode("overwrite").parquet(sys.argv[1])
s.read.parquet(sys.argv[1]).mapInArrow(lambda it: it, df.schema).count()
s.stop()
"""


def archive_path() -> Path:
    """Where this machine's archive lives: named by the JDK, pyspark and its jars (another of either: another
    archive)."""
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError):  # no Java: no JVM will start, and no archive is built
        java = "none"
    key = hashlib.sha1("\n".join([java, pyspark.__version__, sys.prefix, *jars]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "glisp-tests" / f"spark-driver-{key}.jsa"


ARCHIVES_KEPT = 4  # archives left in the cache directory: this checkout's and the others used last


def build_archive(path: Path) -> bool:
    """Write ``path`` by running a small local Spark job in a fresh driver, once (an existing archive is kept;
    a run's two pytest processes and ``make test``'s early build share one). False when it could not be built.
    Marks ``path`` used and removes the archives of other virtualenvs used least recently (:func:`prune`)."""
    built = built_once(path, _dump_archive)
    if built:
        os.utime(path)
        prune(path)
    return built


def prune(path: Path, kept: int = ARCHIVES_KEPT) -> list[Path]:
    """Remove the archives beside ``path`` (each a virtualenv's, 180 MB, one more for every fresh clone) but
    ``path`` and the ``kept - 1`` others used last, with their locks. A JVM that mapped a removed archive keeps
    its mapping; one that starts later finds none and starts as before. Returns the archives removed."""
    others = sorted((p for p in path.parent.glob("spark-driver-*.jsa") if p != path), key=_last_used, reverse=True)
    gone = others[max(kept - 1, 0) :]
    for old in gone:
        for f in (old, old.with_name(f".{old.name}.lock")):
            try:  # another checkout's run may prune at the same time: what it removed first is gone either way
                f.unlink(missing_ok=True)
            except OSError:
                pass
    return gone


def _last_used(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:  # removed meanwhile by another run's prune
        return 0.0


def built_once(path: Path, build: Callable[[Path], object]) -> bool:
    """``path`` made by ``build(tmp)`` and one rename, so a reader never sees half of it, and made once however
    many processes ask at a time: the first holds a lock beside it while it builds, the others wait on the lock
    and then find the file. True when the file is there."""
    if path.exists():
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(f".{path.name}.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a builder dies
        if not path.exists():
            for stale in path.parent.glob(f".{path.name}.*"):  # a stopped build's leftovers: nobody else builds now
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                elif stale != lock_path:
                    stale.unlink(missing_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            try:
                build(tmp)
                if tmp.exists() and tmp.stat().st_size > 0:
                    os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    return path.exists()


def _dump_archive(tmp: Path) -> None:
    """The warm-up driver, started with ``-XX:ArchiveClassesAtExit=tmp``: the JDK writes ``tmp`` as it exits
    (also when a stopped build's SIGTERM reaches it after this process has gone: the next build removes it)."""
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = f"{TEST_JVM_OPTS} -XX:ArchiveClassesAtExit={tmp} {QUIET_CDS}"
    env["PYSPARK_PYTHON"] = sys.executable
    out = tmp.with_name(f"{tmp.name}.warm-up")  # beside ``tmp``, under its name: a stopped build's is removed too
    try:
        subprocess.run([sys.executable, "-c", _WARM_UP, str(out)], env=env, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        shutil.rmtree(out, ignore_errors=True)


def use_test_jvm_options(env: MutableMapping[str, str]) -> None:
    """Prepend the tests' JVM options to each launch variable."""
    for var in VARIABLES:
        env[var] = f"{TEST_JVM_OPTS} {env.get(var, '')}".strip()


def use_driver_archive(env: MutableMapping[str, str], archive: Path) -> None:
    """Drivers (``SPARK_SUBMIT_OPTS``) map ``archive``; one that does not exist or match is ignored silently."""
    opt = f"-XX:SharedArchiveFile={archive} {QUIET_CDS}"
    if opt not in env.get("SPARK_SUBMIT_OPTS", ""):
        env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {opt}".strip()


if __name__ == "__main__":  # make test starts this beside the fast lane, so the rest lane finds the archive made
    import signal

    # make stops the build when the gate or the fast lane fails: exit through the cleanup, no half archive left
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(0 if build_archive(archive_path()) else 1)
