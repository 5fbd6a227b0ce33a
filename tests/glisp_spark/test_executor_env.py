"""The lean executor environment (``glisp pack-env``): which distributions a profile carries, and the batch stages
run with executors on a bare Python that has nothing but those packages, pyspark from Spark and the code zip."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from glisp_spark.executor_env import PROFILES, closure, pack

ROOT = Path(__file__).resolve().parents[2]


def _names(profile: str) -> set[str]:
    return {d.metadata["Name"].lower().replace("_", "-") for d in closure(PROFILES[profile])}


def test_profiles_carry_what_their_stages_import_and_never_pyspark():
    stages, infer, train = _names("stages"), _names("infer"), _names("train")
    assert {"numpy", "numba", "llvmlite", "pyarrow", "pandas", "zarr", "numcodecs", "boto3", "botocore"} <= stages
    assert not stages & {"pyspark", "py4j", "torch", "torch-geometric", "grpcio", "matplotlib", "mkdocs", "pytest"}
    assert "torch" in infer and not infer & {"pyspark", "grpcio", "torch-geometric"}
    assert {"torch", "grpcio", "protobuf"} <= train and "pyspark" not in train
    with pytest.raises(ValueError, match="unknown profile 'gpu'"):
        pack("gpu", Path("/nonexistent"))


def test_the_batch_stages_run_with_executors_on_a_bare_python_and_the_lean_packages(tmp_path, jvm_processes):
    got = pack("stages", tmp_path / "build", compresslevel=0)  # the names are checked, not the compression
    with tarfile.open(got.archive) as t:  # the packages at the archive's top, metadata kept, no test suites
        names = t.getnames()
    assert {"numpy", "numba", "pyarrow", "zarr"} <= {n.split("/")[0] for n in names}
    assert not [n for n in names if "/tests/" in n and not n.split("/")[0].endswith(".dist-info")]
    assert any(n.startswith("numpy-") and n.endswith(".dist-info/METADATA") for n in names)
    lean = got.directory
    bare = tmp_path / "bare"  # a node's own Python: the interpreter and its standard library, no packages
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    assert subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode != 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    cmd = [sys.executable, str(ROOT / "submit" / "glisp-submit"), "--master", "local[2]", "--python", python]
    cmd += ["--conf", f"spark.executorEnv.PYTHONPATH={lean}", "--build-dir", str(tmp_path / "build")]
    cmd += ["--conf", f"spark.executorEnv.XDG_CACHE_HOME={tmp_path / 'cache'}"]  # numba compiles once, not per stage
    cmd += ["--", "pipeline", "--builtin", "cora", "--root", str(tmp_path / "root"), "--parts", "2"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "stage=reorder status=done" in r.stdout + r.stderr
