"""Apache Airflow DAG: refresh GLISP on every new snapshot of a graph, then move the service to it.

One task per stage, so retries and logs are per stage: the Spark stages go through ``submit/glisp-submit``
(the one place that builds GLISP's spark-submit line: the code zip, the Python of the driver and executors),
the others run ``glisp``. Then ``glisp promote`` moves the graph's ``latest`` once every stage of the new
version is published, and the sampling service is told to reload (it loads the new version beside the old
one and switches atomically). A failed stage stops the DAG run; ``latest`` and the running service stay on
the previous version, and clearing the failed task re-runs from that stage (every stage is idempotent).

Deploy: copy this file into the DAGs folder and set the variables below (in the environment of the
scheduler and workers): ``GLISP_HOME`` (a checkout with its virtualenv, ``make`` builds it), ``GLISP_CONFIG``
(the refresh config: ``[ingest]`` tables, ``[partition]``, ``[dataset] root`` and ``keep_versions``),
``GLISP_GRAPH``, ``GLISP_CLUSTER_FILE`` (the running ``serve-cluster``'s file), and optionally
``GLISP_SUBMIT_ARGS`` (glisp-submit's options: ``--master yarn --deploy-mode cluster --archives
env.tar.gz#environment --conf ...``; default: none, glisp-submit's ``local[*]``), ``GLISP_TRAIN_MODEL`` (a training run to
train on every snapshot, ``GLISP_TRAIN_TASK`` node or link), ``GLISP_INFER_MODEL`` (a training run to re-apply
to every snapshot) and ``GLISP_SCHEDULE``. Checked with Airflow 3.3.2 (``airflow dags test``, docs/reliability.md).

The commands are built by :func:`refresh_commands` and :func:`task_command`, plain functions the tests run
without Airflow (tests/test_scheduling.py); the DAG only wraps them in operators.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

GLISP_HOME = os.environ.get("GLISP_HOME", "/opt/glisp")


@dataclass(frozen=True)
class Step:
    task_id: str
    argv: list[str]  # arguments of ``glisp``
    spark: bool  # a Spark stage (spark-submit) or a plain command


def refresh_commands(
    graph: str,
    version: str,
    config: str,
    run: str,
    order: str = "pds",
    cluster_file: str = "",
    infer_model: str = "",
    train_model: str = "",
    task: str = "node",
) -> list[Step]:
    """The refresh of one snapshot as ``glisp`` commands, in order; ``version`` names the new version.

    ``train_model``: train that run on the new version (``glisp train --serve``: servers of the run
    started and stopped by the task; for ``task="link"`` over its link-split run, made first) and infer
    with it unless ``infer_model`` names another.
    """
    dataset = f"{graph}/{version}"
    cfg = ["--config", config]
    steps = [
        Step("ingest", ["ingest", "--version", version, *cfg], True),
        Step("partition", ["partition", dataset, *cfg], True),
        Step("serialize", ["serialize", dataset, "--partition", run, *cfg], True),
        Step("reorder", ["reorder", dataset, "--partition", run, "--order", order, *cfg], True),
    ]
    if train_model:
        serve_run = run
        if task == "link":
            steps.append(Step("link_split", ["link-split", dataset, "--run", run, *cfg], True))
            serve_run = f"{run}-lp"
        steps.append(
            Step("train", ["train", dataset, "--serve", serve_run, "--task", task, "--name", train_model, *cfg], False)
        )
        infer_model = infer_model or train_model
    if infer_model:
        steps.append(Step("infer", ["infer", dataset, "--model", infer_model, *cfg], True))
    steps.append(
        Step("promote", ["promote", dataset, "--run", run, "--require", f"reorder/{run}/{order}", *cfg], False)
    )
    if cluster_file:
        steps.append(Step("reload_service", ["serve-reload", dataset, "--cluster-file", cluster_file], False))
    return steps


def task_command(step: Step, home: str = GLISP_HOME, submit_args: str = "") -> str:
    """The bash line of one step: a Spark stage through ``glisp-submit`` with ``submit_args``, else ``glisp``."""
    if step.spark:
        head = [f"{home}/.venv/bin/python", f"{home}/submit/glisp-submit", *shlex.split(submit_args), "--"]
    else:
        head = [f"{home}/.venv/bin/glisp"]
    return shlex.join([*head, *step.argv])


try:  # the DAG itself only where Airflow is installed; the module stays importable without it
    import pendulum

    try:  # Airflow 3
        from airflow.providers.standard.operators.bash import BashOperator
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2
        from airflow import DAG
        from airflow.operators.bash import BashOperator
except ImportError:  # pragma: no cover - exercised where Airflow is installed
    DAG = None

if DAG is not None:  # pragma: no cover
    _env = os.environ.get
    with DAG(
        dag_id="glisp_refresh",
        description="GLISP: ingest -> partition -> serialize -> reorder [-> train] [-> infer] -> promote -> reload",
        schedule=_env("GLISP_SCHEDULE", "@daily"),
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,  # one refresh per graph at a time (glisp pipeline also refuses a second)
        default_args={"retries": 2, "retry_delay": pendulum.duration(minutes=5)},
        tags=["glisp"],
    ) as dag:
        steps = refresh_commands(
            graph=_env("GLISP_GRAPH", "graph"),
            version="{{ ts_nodash }}",
            config=_env("GLISP_CONFIG", f"{GLISP_HOME}/conf/refresh.toml"),
            run=_env("GLISP_RUN", "adadne-p8"),
            cluster_file=_env("GLISP_CLUSTER_FILE", ""),
            infer_model=_env("GLISP_INFER_MODEL", ""),
            train_model=_env("GLISP_TRAIN_MODEL", ""),
            task=_env("GLISP_TRAIN_TASK", "node"),
        )
        submit_args = _env("GLISP_SUBMIT_ARGS", "")
        prev = None
        for s in steps:
            task = BashOperator(task_id=s.task_id, bash_command=task_command(s, GLISP_HOME, submit_args))
            if prev is not None:
                prev >> task
            prev = task
