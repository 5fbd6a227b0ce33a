"""A stage with nothing to do says so in one line, the same for every stage, without starting a JVM; and
``partition.progress = false`` hides progress, not the result line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from glisp_app.cli import main as glisp

pytestmark = pytest.mark.usefixtures("spark")


def _glisp_without_java(args: list[str]) -> subprocess.CompletedProcess:
    """``glisp ARGS`` in a fresh process whose JAVA_HOME names no Java: any Spark session would fail to start."""
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java", "PYTHONPATH": os.getcwd(), "GLISP_TRACEBACK": "1"}
    return subprocess.run([sys.executable, "-m", "glisp_app.cli", *args], capture_output=True, text=True, env=env)


def test_up_to_date_stages_say_one_line_without_a_jvm(tmp_path, capsys):
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{(i * 7 + 1) % 40}\n" for i in range(40)))
    root = str(tmp_path / "root")
    common = ["--root", root]
    assert glisp(["ingest", "--edges", str(edges), "--graph", "g", *common]) == 0
    part = ["partition", "g", "-a", "random", "-p", "2", "--name", "r2", "--set", "partition.progress=false"]
    assert glisp([*part, *common]) == 0
    out = capsys.readouterr().out
    assert "partition/r2: RF " in out  # progress off: the result line still shows
    assert glisp(["serialize", "g", "--partition", "r2", *common]) == 0
    assert glisp(["reorder", "g", "--partition", "r2", "--order", "pds", *common]) == 0
    capsys.readouterr()
    for args, stage in (
        (["ingest", "--edges", str(edges), "--graph", "g"], "ingest"),
        (part, "partition/r2"),
        (["serialize", "g", "--partition", "r2"], "serialize/r2"),
        (["reorder", "g", "--partition", "r2", "--order", "pds"], "reorder/r2/pds"),
    ):
        r = _glisp_without_java([*args, *common])
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{stage}: up to date"), r.stdout
        assert lines[0].endswith("(use --force to run it again)")
    # a stage that has to run does start Spark (and here fails to: the check above can fail)
    r = _glisp_without_java(["serialize", "g", "--partition", "r2", "--force", *common])
    assert r.returncode != 0 and "Java not found" in r.stderr


def test_an_up_to_date_pipeline_starts_no_jvm(tmp_path, capsys):
    """``glisp pipeline`` over unchanged inputs: every stage says it is up to date, in a process without Java."""
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{(i * 5 + 2) % 30}\n" for i in range(30)))
    args = ["pipeline", "--edges", str(edges), "--graph", "p", "--algorithm", "random", "--parts", "2"]
    args += ["--root", str(tmp_path / "root")]
    assert glisp(args) == 0
    capsys.readouterr()
    r = _glisp_without_java(args)
    assert r.returncode == 0, r.stderr
    for stage in ("ingest", "partition/random-p2", "serialize/random-p2", "reorder/random-p2/pds"):
        assert any(ln.startswith(f"{stage}: up to date") for ln in r.stdout.splitlines()), r.stdout
