"""The JVM options of every JVM the test suite starts (the session's, the CLI subprocesses', a standalone
cluster's daemons and executors).

Those JVMs live for seconds to minutes on small data: the client compiler alone and the serial collector
cost about a third less CPU than the defaults (C2's compiler threads and the parallel GC's threads compete
with the work on two cores). Only the tests run this way; a user's JVMs keep Spark's and the JDK's defaults.
"""

from __future__ import annotations

from collections.abc import MutableMapping

TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# what Spark's launch scripts add to the driver (spark-submit, which PySpark runs too), to the launcher JVM that
# builds its command line, and to a standalone master's and worker's JVMs
VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS")


def use_test_jvm_options(env: MutableMapping[str, str]) -> None:
    for var in VARIABLES:
        env[var] = f"{TEST_JVM_OPTS} {env.get(var, '')}".strip()
