"""The Python worker daemon of a local session: its tasks' libraries imported before it forks a worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import py4j
import py4j.version
import pyspark
from pyspark import cloudpickle

from glisp_spark import daemon
from glisp_spark.session import WORKER_PRELOAD

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import a test module


def test_preload_imports_what_it_can_says_why_not_and_keeps_stdout_clean(tmp_path: Path):
    """The daemon's stdout is where it tells the JVM its port: a module that prints at import, from Python or
    from C, must not write there. One that is missing leaves the daemon running."""
    (tmp_path / "noisy.py").write_text("import os\nprint('python print')\nos.write(1, b'fd write\\n')\n")
    code = (
        "import json, sys\nfrom glisp_spark.daemon import preload\n"
        "r = preload(['noisy', 'json', 'no_such_module_glisp'])\n"
        "sys.stdout.write('RESULT ' + json.dumps(r))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("RESULT "), r.stdout  # nothing before the caller's own output
    assert "python print" in r.stderr and "fd write" in r.stderr
    got = json.loads(r.stdout.removeprefix("RESULT "))
    assert got["noisy"] is None and got["json"] is None
    assert got["no_such_module_glisp"].startswith("ModuleNotFoundError")


def test_preload_in_this_process_reports_each_module():
    got = daemon.preload(["json", "no_such_module_glisp"])
    assert got["json"] is None and got["no_such_module_glisp"].startswith("ModuleNotFoundError")


def test_requested_modules_come_from_the_environment():
    assert daemon.requested({daemon.PRELOAD_ENV: "numpy, torch,,pyarrow.parquet "}) == [
        "numpy",
        "torch",
        "pyarrow.parquet",
    ]
    assert daemon.requested({}) == []


def test_only_the_installed_pysparks_own_zips_are_taken_off_the_path(tmp_path: Path):
    """A local master's workers get the zips inside the installed package: taken off. A zip of another Spark
    (a cluster's installation) or of another py4j stays, as does everything that is not such a zip."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    own = [str(lib / "pyspark.zip"), str(lib / f"py4j-{py4j.version.__version__}-src.zip")]
    other = [str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip"), str(lib / "py4j-0.0.1-src.zip")]
    path = [str(tmp_path), own[0], other[0], own[1], other[1], str(lib / "pyspark.zip.d"), str(tmp_path / "a.zip")]
    assert daemon.installed_copies(path) == own
    saved = list(sys.path)
    try:
        sys.path[:] = [*path, *saved]  # where the installed packages' metadata is found, as in a daemon
        assert daemon.prefer_installed_pyspark() == own
        assert sys.path == [*(e for e in path if e not in own), *saved]
    finally:
        sys.path[:] = saved


def _pyspark_files() -> list[tuple[str, str, list[str]]]:
    import py4j as p4
    import pyspark as ps

    return [(ps.__file__, p4.__file__, [e for e in sys.path if Path(e).name.startswith(("pyspark", "py4j"))])]


def test_a_local_sessions_workers_import_the_installed_pyspark_with_its_bytecode(spark):
    """PySpark's zips first on the workers' path (it puts them there) would make each daemon compile PySpark
    from its sources: the workers import the installed package instead, and neither zip is on their path."""
    rows = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(lambda _: _pyspark_files()).collect()
    assert rows == [(pyspark.__file__, py4j.__file__, [])] * 2, rows
    assert ".zip" not in pyspark.__file__


def _parent() -> list[tuple[str, str, bool]]:
    """In a task: the parent's command line, its preload variable and whether it mapped libtorch."""
    ppid = os.getppid()
    cmd = open(f"/proc/{ppid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    env = dict(kv.split("=", 1) for kv in open(f"/proc/{ppid}/environ", "rb").read().decode().split("\0") if "=" in kv)
    torch = "libtorch_cpu" in open(f"/proc/{ppid}/maps").read()
    return [(cmd, env.get("GLISP_WORKER_PRELOAD", ""), torch)]


def test_a_local_sessions_workers_are_forked_from_a_daemon_that_imported_their_libraries(spark):
    """The test session asks for torch and PyG besides every stage's modules (tests/conftest.py): the daemon
    each worker was forked from is GLISP's, it was asked for them, and libtorch is in its memory."""
    rows = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(lambda _: _parent()).collect()
    assert len(rows) == 2
    for cmd, asked, torch in rows:
        assert f"-m {daemon.MODULE}" in cmd, cmd
        assert asked.split(",") == [*WORKER_PRELOAD, "torch", "torch_geometric"], asked
        assert torch
