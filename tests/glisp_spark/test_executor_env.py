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


def _site(tmp_path: Path, body: str) -> Path:
    """A site directory holding one real (tiny) distribution, ``glisptiny`` 1.0, whose module is ``body``."""
    site = tmp_path / "site"
    (site / "glisptiny").mkdir(parents=True, exist_ok=True)
    (site / "glisptiny" / "__init__.py").write_text(body)
    info = site / "glisptiny-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: glisptiny\nVersion: 1.0\n")
    (info / "RECORD").write_text("glisptiny/__init__.py,,\nglisptiny-1.0.dist-info/METADATA,,\n")
    return site


def test_an_archive_of_unchanged_packages_is_kept_and_any_change_rebuilds_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_site(tmp_path, "X = 1\n")))
    monkeypatch.setitem(PROFILES, "tiny", ("glisptiny",))
    out = tmp_path / "build"

    def member() -> str:
        with tarfile.open(out / "glisp-env-tiny.tar.gz") as t:
            f = t.extractfile("glisptiny/__init__.py")
            assert f is not None
            return f.read().decode()

    first = pack("tiny", out)
    assert not first.kept and first.distributions == ("glisptiny==1.0",) and member() == "X = 1\n"
    ino = first.archive.stat().st_ino if first.archive else 0
    again = pack("tiny", out)
    assert again.kept and again.archive and again.archive.stat().st_ino == ino  # not rewritten
    _site(tmp_path, "X = 22\n")  # the package reinstalled with other content
    changed = pack("tiny", out)
    assert not changed.kept and member() == "X = 22\n"
    assert not pack("tiny", out, compresslevel=1).kept  # other settings: another archive
    (out / "glisp-env-tiny.tar.gz").unlink()
    assert not pack("tiny", out, compresslevel=1).kept and member() == "X = 22\n"  # a removed archive is rebuilt
    (out / "glisp-env-tiny.inputs").write_text("0" * 64)  # a rebuild cut short left another digest
    assert not pack("tiny", out, compresslevel=1).kept


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
