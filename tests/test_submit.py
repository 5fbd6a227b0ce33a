"""glisp-submit builds a spark-submit line that ships the code and runs the same CLI."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_builds_the_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "submit" / "glisp-submit"),
            "--master",
            "yarn",
            "--deploy-mode",
            "cluster",
            "--archives",
            "env.tar.gz#env",
            "--conf",
            "spark.executor.cores=4",
            "--build-dir",
            str(tmp_path),
            "--dry-run",
            "--",
            "partition",
            "mygraph",
            "--parts",
            "8",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    line = r.stdout.strip()
    assert "spark-submit " in line.split(" --name")[0] + " "
    for part in (
        "--master yarn",
        "--deploy-mode cluster",
        "spark.pyspark.python=./env/bin/python",
        "--conf spark.executor.cores=4",
        "--py-files",
        "driver.py partition mygraph --parts 8",
    ):
        assert part in line
    assert "spark.pyspark.driver.python" not in line  # cluster mode: the driver runs on the cluster's Python
    z = next(tmp_path.glob("glisp-*.zip"))
    names = set(zipfile.ZipFile(z).namelist())
    assert "glisp_app/cli.py" in names and "spark_jobs/partition/job.py" in names
    assert not any("__pycache__" in n for n in names)
    # an unchanged zip is not rewritten: numba's kernel cache is keyed by its modification time
    before = z.stat().st_mtime_ns
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "submit" / "glisp-submit"),
            "--master",
            "yarn",
            "--build-dir",
            str(tmp_path),
            "--dry-run",
            "--",
            "report",
            "g",
        ],
        capture_output=True,
        check=True,
    )
    assert z.stat().st_mtime_ns == before and [p.name for p in tmp_path.iterdir()] == [z.name]


def test_a_local_master_runs_the_checkout_in_place_unless_another_python_runs_the_executors(tmp_path):
    def line(*own: str) -> str:
        r = subprocess.run(
            [
                sys.executable,
                str(ROOT / "submit" / "glisp-submit"),
                *own,
                "--build-dir",
                str(tmp_path),
                "--dry-run",
                "--",
                "report",
                "g",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return r.stdout

    assert "--py-files" not in line("--master", "local[2]") and not list(tmp_path.glob("*.zip"))
    shipped = line("--master", "local[2]", "--python", "/opt/py/bin/python")
    assert "--py-files" in shipped and "spark.pyspark.python=/opt/py/bin/python" in shipped


def test_stage_args_are_required():
    r = subprocess.run(
        [sys.executable, str(ROOT / "submit" / "glisp-submit"), "--dry-run"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "after '--'" in r.stderr


def test_cron_line_runs_real_commands():
    """Every ``glisp`` command of submit/cron/glisp-refresh.cron parses with the CLI it calls."""
    import argparse
    import importlib
    import shlex

    from glisp_app.cli import COMMANDS, add_common

    lines = [
        ln
        for ln in (ROOT / "submit" / "cron" / "glisp-refresh.cron").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert len(lines) == 1 and len(lines[0].split()[:5]) == 5  # one schedule: five time fields
    words = shlex.split(lines[0].split(None, 5)[5])
    calls = [i for i, w in enumerate(words) if w.endswith("bin/glisp")]
    assert [words[i + 1] for i in calls] == ["pipeline", "serve-reload"]
    for i in calls:
        name, rest = words[i + 1], []
        for w in words[i + 2 :]:
            if w in ("&&", ">>", "2>&1") or w.endswith("bin/glisp"):
                break
            rest.append(w)
        parser = argparse.ArgumentParser(prog=f"glisp {name}")
        importlib.import_module(COMMANDS[name][0]).add_arguments(parser)
        add_common(parser)
        parser.parse_args(rest)  # SystemExit (a failed test) on an unknown or missing argument


def test_a_real_local_submit_runs_on_the_checkouts_python(tmp_path, jvm_processes):
    """spark-submit of a stage, for real (local[1]), with a ``python3`` on PATH that has none of GLISP's packages:
    the driver and the Python workers must run on the checkout's Python, not on whatever ``python3`` is."""
    import os

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'not the python GLISP needs' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "submit" / "glisp-submit"),
            "--master",
            "local[1]",
            "--build-dir",
            str(tmp_path / "build"),
            "--",
            "ingest",
            "--builtin",
            "cora",
            "--root",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "|V| = 2,708" in r.stdout and "not the python" not in r.stderr
    assert "--py-files" not in r.stdout.splitlines()[0]  # the checkout runs in place (make installs it editable)
    assert len(list((tmp_path / "data" / "cora").glob("*/_version.json"))) == 1


PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from glisp_core.config import SparkConfig
from glisp_spark.session import get_spark
spark = get_spark(SparkConfig(master="local[3]", shuffle_partitions=4, app_name="probe"))
print("PROBE " + json.dumps({{"master": spark.sparkContext.master,
    "shuffle": spark.conf.get("spark.sql.shuffle.partitions"), "extra": spark.conf.get("spark.glisp.probe", "")}}))
spark.stop()
"""


def test_spark_submit_settings_win_over_the_config(tmp_path, jvm_processes):
    """Under spark-submit, its --master and --conf are what the session runs with (the config's master and
    its own defaults apply only where spark-submit set nothing)."""
    import json
    import os

    import pyspark

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE.format(root=str(ROOT)))
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [str(submit), "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=77"]
    cmd += ["--conf", "spark.glisp.probe=yes", str(probe)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("PROBE "))
    assert json.loads(line[6:]) == {"master": "local[1]", "shuffle": "77", "extra": "yes"}
