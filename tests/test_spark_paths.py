"""Paths and Python that reach Spark: qualified paths, the executors' Python, the shipped code, built-in inputs.

The cluster itself is exercised in tests/cluster/; these are the cheap checks beside it.
"""

from __future__ import annotations

import ast
import os
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("glisp_app", "glisp_core", "glisp_spark", "glisp_sampling", "spark_jobs", "glisp_serving", "glisp_train")
PACKAGES += ("glisp_infer",)
SPARK_IO = {"parquet", "csv", "json", "text", "orc", "load", "save", "setCheckpointDir", "addPyFile", "addFile"}


def _spark_path_calls(tree: ast.AST):
    """Calls like ``spark.read.parquet(x)``, ``df.write...csv(x)``, ``sc.setCheckpointDir(x)``: their first argument."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in SPARK_IO and any(
                s in ast.unparse(node.func.value) for s in ("read", "write", "sparkContext", "spark")
            ):
                yield node


def test_every_spark_path_is_qualified():
    """A path given to Spark as ``str(...)``, an f-string or a literal has no scheme, so on a cluster whose
    fs.defaultFS is hdfs:// Spark would look for it on HDFS: each must go through qualify() first."""
    bad = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for call in _spark_path_calls(ast.parse(f.read_text(), str(f))):
                arg = call.args[0]
                unqualified = isinstance(arg, ast.JoinedStr | ast.Constant) or (
                    isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "str"
                )
                if unqualified:
                    bad.append(f"{f.relative_to(ROOT)}:{call.lineno}: {ast.unparse(call)[:100]}")
    assert not bad, "Spark paths without qualify():\n" + "\n".join(bad)


def test_executors_python(monkeypatch):
    """spark.pyspark.python wins; a local master falls back to this interpreter; a cluster master to the
    cluster's own (PYSPARK_PYTHON stays unset, so Spark starts the executors' python3)."""
    from glisp_spark.session import _executor_python, is_local_master

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    _executor_python("spark://10.0.0.1:7077", None)
    assert "PYSPARK_PYTHON" not in os.environ
    _executor_python("yarn", "./environment/bin/python")
    assert os.environ["PYSPARK_PYTHON"] == "./environment/bin/python"
    monkeypatch.delenv("PYSPARK_PYTHON")
    _executor_python("local[2]", None)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert is_local_master("local") and is_local_master("local-cluster[2,1,1024]")
    assert not is_local_master("spark://h:7077") and not is_local_master("k8s://https://h") and not is_local_master("")


def test_code_zip_holds_the_packages_and_is_kept_when_unchanged(tmp_path):
    from glisp_spark.codezip import PACKAGES as SHIPPED
    from glisp_spark.codezip import build_zip

    z = build_zip(tmp_path, ROOT)
    names = set(zipfile.ZipFile(z).namelist())
    assert {f"{p}/__init__.py" for p in SHIPPED} <= names and "glisp_spark/session.py" in names
    before = z.stat().st_mtime_ns
    assert build_zip(tmp_path, ROOT) == z and z.stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == [z.name]


def test_the_code_zip_of_the_same_code_in_another_checkout_is_the_same_bytes(tmp_path):
    """A fresh clone's files have new modification times: its zip must still be byte for byte the zip of the same
    code elsewhere (the executors' kernel caches are keyed by the zip's content digest), and another file's
    content must change it."""
    import shutil

    from glisp_spark.codezip import PACKAGES as SHIPPED
    from glisp_spark.codezip import build_zip

    a = build_zip(tmp_path / "a", ROOT)
    other = tmp_path / "checkout"
    for pkg in SHIPPED:
        shutil.copytree(ROOT / pkg, other / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    moved = other / "glisp_spark" / "codezip.py"
    os.utime(moved, (1_000_000_000, 1_000_000_000))
    b = build_zip(tmp_path / "b", other)
    assert a.read_bytes() == b.read_bytes()
    moved.write_text(moved.read_text() + "\n# changed\n")
    assert build_zip(tmp_path / "c", other).read_bytes() != a.read_bytes()


def test_builtin_inputs_are_copied_to_the_shared_root(tmp_path):
    pytest.importorskip("graphdatascience")
    from spark_jobs.generate.builtin import builtin_config, resources_dir, share_builtin

    ing = builtin_config("cora")
    shared = share_builtin(ing, tmp_path / "_builtin")
    paths = [Path(s.path) for s in (*shared.edges, *shared.vertices)]
    assert paths and all(p.is_relative_to(tmp_path) and p.is_file() for p in paths)
    assert all(p.read_bytes() == (resources_dir() / p.relative_to(tmp_path / "_builtin")).read_bytes() for p in paths)
    stamps = [p.stat().st_mtime_ns for p in paths]
    assert share_builtin(ing, tmp_path / "_builtin") == shared  # a rerun fingerprints the same inputs
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    assert dict(shared.__dict__, edges=None, vertices=None) == dict(ing.__dict__, edges=None, vertices=None)


_KERNEL = "from numba import njit\n\n@njit(cache=True)\ndef plus_one(x):\n    return x + 1\n"
_USE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from kmod.k import plus_one; assert plus_one(41) == 42; "
    "print(sum(plus_one.stats.cache_hits.values()), sum(plus_one.stats.cache_misses.values()))"
)


def _run_from_zip_at(z: Path, where: Path, cache: Path, locators: str | None) -> tuple[int, int]:
    """Import a cached kernel from a copy of the zip ``z`` at ``where`` (a new directory, as Spark gives each
    application) in a fresh process; numba's (cache hits, misses) for it."""
    import shutil
    import subprocess

    where.mkdir(parents=True)
    shutil.copy(z, where / z.name)  # a new path and a new modification time
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=str(cache))
    if locators:
        env["NUMBA_CACHE_LOCATOR_CLASSES"] = locators
    r = subprocess.run([sys.executable, "-c", _USE, str(where / z.name)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    hits, misses = map(int, r.stdout.split())
    return hits, misses


def test_kernels_from_the_code_zip_are_compiled_once_across_applications(tmp_path):
    """With the session's locators a kernel imported from the zip at a new path (the next application) loads
    from the cache; with numba's own it compiles again: the cache followed the zip's path."""
    from glisp_core.numba_cache import LOCATORS

    z = tmp_path / "glisp-0.0.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("kmod/__init__.py", "")
        f.writestr("kmod/k.py", _KERNEL)
    for name, locators, second in (("content", LOCATORS, (1, 0)), ("numba", None, (0, 1))):
        cache = tmp_path / f"cache-{name}"
        assert _run_from_zip_at(z, tmp_path / name / "app-1", cache, locators) == (0, 1)
        assert _run_from_zip_at(z, tmp_path / name / "app-2", cache, locators) == second, name
