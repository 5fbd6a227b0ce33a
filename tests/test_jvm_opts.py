"""The tests' JVM options reach the session's JVM, and its code cache has room for what a test session compiles.

With the client compiler alone (``-XX:TieredStopAtLevel=1``) the JDK's default code cache is 48 MB; a session
JVM of the Spark lane compiles about 70 MB of code, so with 48 MB it ran with the cache nearly full and swept
and recompiled all along (1,955 sweeps, 88,188 methods reclaimed in one lane): a quarter of the session JVMs'
CPU (docs/results/testing-2026-12-06-code-cache.md).

The drivers' class archive those JVMs map is built once however many runs ask for it at a time (``make test``
beside the fast lane, and the rest lane's two pytest processes): the others wait for that build.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from glisp_testing.jvm_opts import TEST_JVM_OPTS, built_once, prune

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


def test_the_archive_is_built_once_when_two_runs_ask_at_once(tmp_path: Path):
    """``make test`` starts the archive's build beside the fast lane and the rest lane's two pytest processes ask
    for it too: on a fresh machine the later ones wait for that build instead of running their own."""
    path = tmp_path / "cache" / "driver.jsa"
    start, built, found = threading.Barrier(3), [], []

    def build(tmp: Path) -> None:
        built.append(tmp)
        time.sleep(0.5)  # the others ask while this one builds
        tmp.write_bytes(b"classes")

    def ask() -> None:
        start.wait()
        found.append(built_once(path, build))

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for t in askers:
        t.start()
    for t in askers:
        t.join(30)
    assert found == [True, True, True] and len(built) == 1, (found, built)
    assert path.read_bytes() == b"classes"
    assert sorted(p.name for p in path.parent.iterdir()) == [".driver.jsa.lock", "driver.jsa"]  # no partial file


def test_a_failed_archive_build_leaves_no_file_and_the_next_run_builds_it(tmp_path: Path):
    path = tmp_path / "driver.jsa"

    def crash(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError("the warm-up driver died")

    with pytest.raises(OSError):
        built_once(path, crash)
    assert built_once(path, lambda tmp: None) is False  # a build that wrote nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == [".driver.jsa.lock"]
    assert built_once(path, lambda tmp: tmp.write_bytes(b"classes")) is True and path.read_bytes() == b"classes"


def test_a_stopped_builds_leftovers_are_removed_by_the_next_build(tmp_path: Path):
    """make stops the build when the gate or the fast lane fails; its JVM may still write its temporary archive
    after the build's own cleanup: the next build removes what a stopped one left."""
    path = tmp_path / "driver.jsa"
    (tmp_path / ".driver.jsa.999").write_bytes(b"half")
    (tmp_path / ".driver.jsa.999.warm-up").mkdir()
    (tmp_path / ".driver.jsa.999.warm-up" / "part-0.parquet").write_bytes(b"rows")
    assert built_once(path, lambda tmp: tmp.write_bytes(b"classes"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".driver.jsa.lock", "driver.jsa"]


def test_only_the_archives_used_last_are_kept_beside_this_checkouts(tmp_path: Path):
    """Every virtualenv (each fresh clone) gets its own 180 MB archive; the cache keeps this checkout's and the
    others used last, whatever their age against this one's."""
    names = [f"spark-driver-{k:016x}.jsa" for k in range(6)]
    used = [1000, 1005, 1001, 1004, 1002, 1003]  # when each was last used: not the order of their names
    for name, t in zip(names, used, strict=True):
        (tmp_path / name).write_bytes(b"classes")
        (tmp_path / f".{name}.lock").touch()
        os.utime(tmp_path / name, (t, t))
    (tmp_path / "notes.txt").write_text("not an archive")
    this = tmp_path / names[0]  # the oldest: kept all the same
    gone = prune(this, kept=3)
    assert sorted(p.name for p in gone) == [names[2], names[4], names[5]]
    left = sorted(p.name for p in tmp_path.iterdir())
    kept = [names[0], names[1], names[3]]
    assert left == sorted(["notes.txt", *kept, *(f".{n}.lock" for n in kept)])
