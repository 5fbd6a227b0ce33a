"""The Airflow DAG's commands (submit/airflow/glisp_refresh_dag.py), run for real: two snapshots of Cora,
the second trained, inferred, promoted and hot-reloaded into a running serve-cluster. The DAG file itself
is imported and its tasks listed where Airflow is installed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from glisp_core.dataset.manifest import read_manifest
from glisp_core.dataset.versions import read_latest

ROOT = Path(__file__).resolve().parent.parent
DAG_FILE = ROOT / "submit" / "airflow" / "glisp_refresh_dag.py"


def _dag_module():
    spec = importlib.util.spec_from_file_location("glisp_refresh_dag", DAG_FILE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _toml_tables(name: str, rows: list[dict]) -> str:
    """``[[name]]`` tables of non-empty fields (JSON strings and lists are TOML literals too)."""
    out = []
    for row in rows:
        out.append(f"[[{name}]]")
        out += [f"{k} = {json.dumps(v)}" for k, v in row.items() if v not in ("", [], None)]
    return "\n".join(out)


def _config(tmp_path: Path, edges: Path) -> Path:
    from glisp_core.config import to_dict
    from spark_jobs.generate.builtin import builtin_config

    ing = builtin_config("cora")
    e = {**to_dict(ing.edges[0]), "path": str(edges)}
    body = f"""
[dataset]
root = {json.dumps(str(tmp_path / "data"))}
[partition]
parts = 2
progress = false
[serve]
threads = 1
[train]
hidden = 16
epochs = 1
batch_size = 256
max_batches = 2
fanouts = [5, 5]
layers = 2
feature_cache_mb = 0
[infer]
fanouts = [5, 5]
[ingest]
graph = "cora"
{_toml_tables("ingest.edges", [e])}
{_toml_tables("ingest.vertices", [to_dict(v) for v in ing.vertices])}
"""
    path = tmp_path / f"refresh-{edges.stem}.toml"
    path.write_text(body)
    return path


def _run(steps) -> None:
    from glisp_app.cli import main

    for s in steps:
        rc = main(s.argv)
        assert rc == 0, f"step {s.task_id} ({' '.join(s.argv)}) exited with {rc}"


def test_refresh_commands_run_for_real(spark, tmp_path, server_processes):
    import numpy as np
    import pyarrow.parquet as pq

    from glisp_core.dataset.layout import resolve_dataset
    from glisp_serving.cluster.child import start_cluster, stop_cluster
    from spark_jobs.generate.builtin import builtin_config

    dag = _dag_module()
    rels = pq.read_table(builtin_config("cora").edges[0].path)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(rels, a)
    pq.write_table(rels.filter(np.random.default_rng(1).random(rels.num_rows) >= 0.05), b)  # 5% removed

    first = dag.refresh_commands("cora", "v1", str(_config(tmp_path, a)), "adadne-p2")
    assert [s.task_id for s in first] == ["ingest", "partition", "serialize", "reorder", "promote"]
    _run(first)
    gdir = tmp_path / "data" / "cora"
    assert read_latest(gdir) == "v1"
    v1 = resolve_dataset("cora/v1", tmp_path / "data")
    cluster_file = tmp_path / "cluster.json"
    proc = start_cluster(v1.path, "adadne-p2", cluster_file, threads=1)
    try:
        second = dag.refresh_commands(
            "cora", "v2", str(_config(tmp_path, b)), "adadne-p2", cluster_file=str(cluster_file), train_model="nightly"
        )
        assert [s.task_id for s in second] == [
            "ingest",
            "partition",
            "serialize",
            "reorder",
            "train",
            "infer",
            "promote",
            "reload_service",
        ]
        assert [s.spark for s in second] == [True, True, True, True, False, True, False, False]
        _run(second)
        assert read_latest(gdir) == "v2"
        v2 = resolve_dataset("cora/v2", tmp_path / "data")
        m = read_manifest(v2)
        assert m.stage("ingest").counts["input_edge_rows"] < rels.num_rows
        assert m.stage("train/nightly").params["partition_run"] == "adadne-p2"
        assert m.stage("infer/nightly-pds").counts["vertices"] == 2708
        assert json.loads(cluster_file.read_text())["dataset"] == str(v2.path)  # the service moved
    finally:
        assert stop_cluster(proc) == 0


def test_link_refresh_splits_before_training():
    """Every command parses with the CLI it calls; link prediction trains on the link-split run."""
    import argparse
    import importlib

    from glisp_app.cli import COMMANDS, add_common

    dag = _dag_module()
    steps = dag.refresh_commands("g", "v9", "r.toml", "adadne-p8", cluster_file="c.json", train_model="lp", task="link")
    for s in steps:
        parser = argparse.ArgumentParser(prog=f"glisp {s.argv[0]}")
        importlib.import_module(COMMANDS[s.argv[0]][0]).add_arguments(parser)
        add_common(parser)
        parser.parse_args(s.argv[1:])  # SystemExit (a failed test) on an unknown or missing argument
    by = {s.task_id: s.argv for s in steps}
    assert list(by) == [
        "ingest",
        "partition",
        "serialize",
        "reorder",
        "link_split",
        "train",
        "infer",
        "promote",
        "reload_service",
    ]
    assert by["train"][by["train"].index("--serve") + 1] == "adadne-p8-lp"  # the servers never hold test edges
    assert by["infer"][by["infer"].index("--model") + 1] == "lp"


def test_task_commands_send_spark_stages_through_glisp_submit():
    """Spark stages run ``glisp-submit [GLISP_SUBMIT_ARGS] -- <stage>``, the rest ``glisp <command>``; each line
    keeps the step's arguments word for word (quoted for bash), and the Airflow template stays one word."""
    import shlex

    dag = _dag_module()
    steps = dag.refresh_commands(
        "g", "{{ ts_nodash }}", "/etc/glisp/refresh v2.toml", "adadne-p8", cluster_file="/srv/c.json", train_model="m"
    )
    head = [
        "/opt/glisp/.venv/bin/python",
        "/opt/glisp/submit/glisp-submit",
        "--master",
        "yarn",
        "--conf",
        "spark.executor.cores=4",
        "--",
    ]
    for s in steps:
        words = shlex.split(dag.task_command(s, "/opt/glisp", "--master yarn --conf spark.executor.cores=4"))
        assert words == (head if s.spark else ["/opt/glisp/.venv/bin/glisp"]) + s.argv
    assert [s.task_id for s in steps if s.spark] == ["ingest", "partition", "serialize", "reorder", "infer"]


def test_a_spark_task_line_runs_glisp_submit_of_this_checkout():
    """The ingest task's bash line, with GLISP_HOME = this checkout, reaches glisp-submit (a dry run: the
    spark-submit line it would run), so the paths the DAG names exist where ``make`` puts them."""
    import subprocess

    dag = _dag_module()
    step = dag.refresh_commands("cora", "v1", "refresh.toml", "adadne-p2")[0]
    line = dag.task_command(step, str(ROOT), "--master local[1] --dry-run")
    r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--master 'local[1]'" in r.stdout and "driver.py ingest --version v1 --config refresh.toml" in r.stdout


def test_the_dag_imports_and_lists_its_tasks(monkeypatch):
    pytest.importorskip("airflow")
    monkeypatch.setenv("GLISP_TRAIN_MODEL", "nightly")
    monkeypatch.setenv("GLISP_CLUSTER_FILE", "/srv/glisp/cluster.json")
    monkeypatch.setenv("GLISP_SUBMIT_ARGS", "--master yarn")
    mod = _dag_module()
    assert mod.dag.dag_id == "glisp_refresh"
    tasks = mod.dag.topological_sort()
    assert [t.task_id for t in tasks] == [
        "ingest",
        "partition",
        "serialize",
        "reorder",
        "train",
        "infer",
        "promote",
        "reload_service",
    ]
    assert "glisp-submit --master yarn -- ingest" in tasks[0].bash_command
