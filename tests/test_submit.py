"""glisp-submit builds a spark-submit line that ships the code and runs the same CLI."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_builds_the_line(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "submit" / "glisp-submit"), "--master", "yarn", "--deploy-mode", "cluster",
         "--archives", "env.tar.gz#env", "--conf", "spark.executor.cores=4", "--build-dir", str(tmp_path),
         "--dry-run", "--", "partition", "mygraph", "--parts", "8"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = r.stdout.strip()
    assert "spark-submit " in line.split(" --name")[0] + " "
    for part in ("--master yarn", "--deploy-mode cluster", "spark.pyspark.python=./env/bin/python",
                 "--conf spark.executor.cores=4", "--py-files", "driver.py partition mygraph --parts 8"):  # fmt: skip
        assert part in line
    z = next(tmp_path.glob("glisp-*.zip"))
    names = set(zipfile.ZipFile(z).namelist())
    assert "glisp_core/cli.py" in names and "spark_jobs/partition/job.py" in names
    assert not any("__pycache__" in n for n in names)


def test_stage_args_are_required():
    r = subprocess.run(
        [sys.executable, str(ROOT / "submit" / "glisp-submit"), "--dry-run"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "after '--'" in r.stderr
