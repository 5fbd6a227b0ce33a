"""The tests' JVM options reach the session's JVM, and its code cache has room for what a test session compiles.

With the client compiler alone (``-XX:TieredStopAtLevel=1``) the JDK's default code cache is 48 MB; a session
JVM of the Spark lane compiles about 70 MB of code, so with 48 MB it ran with the cache nearly full and swept
and recompiled all along (1,955 sweeps, 88,188 methods reclaimed in one lane): a quarter of the session JVMs'
CPU (docs/results/testing-2026-12-06-code-cache.md).
"""

from __future__ import annotations

from glisp_testing.jvm_opts import TEST_JVM_OPTS

MIB = 1 << 20


def test_the_session_jvm_runs_the_test_options_with_room_for_its_compiled_code(spark):
    jvm = spark.sparkContext._jvm
    mx = jvm.java.lang.management.ManagementFactory
    args = set(mx.getRuntimeMXBean().getInputArguments())
    assert set(TEST_JVM_OPTS.split()) <= args, args
    pools = {p.getName(): p for p in mx.getMemoryPoolMXBeans()}
    code = [p for name, p in pools.items() if "CodeCache" in name or "nmethods" in name]
    assert code, sorted(pools)
    reserved = sum(p.getUsage().getMax() for p in code)
    used = sum(p.getUsage().getUsed() for p in code)
    assert reserved >= 200 * MIB, f"{reserved / MIB:.0f} MiB of code cache"
    # the JDK sweeps hard once less than 10 % is free (StartAggressiveSweepingAt): far from it here
    assert used < 0.5 * reserved, (used / MIB, reserved / MIB)
