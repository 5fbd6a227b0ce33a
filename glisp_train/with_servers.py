"""``glisp train DATASET --serve RUN``: train through servers this process starts and stops.

A scheduled refresh (``glisp pipeline --train``, the Airflow DAG's ``train`` task) trains on a version
that no standing service serves yet. It starts ``glisp serve-cluster`` of the run on this machine
(:mod:`glisp_serving.cluster.child`), trains through it exactly as ``--cluster`` does, and stops it. The
servers get this process's dataset, serve and client settings (security included), on free ports, with
no metrics or health side ports that could collide with a standing service, and never following
``latest`` (it names the version being replaced). Whether the run is already published with these
settings is checked first, so an up-to-date model starts no server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from glisp_core.config import Config, as_overrides
from glisp_core.dataset.layout import DatasetVersion

TEMP_SERVE = [
    "serve.port=0",
    "serve.metrics_port=-1",
    "serve.health_port=-1",
    "serve.follow_latest_s=0",
    "serve.replicas=1",
]


def run_name(cfg: Config, run: str) -> str:
    """The training run's name: ``train.name``, else ``<task>-<model>-<partition run>`` (as ``glisp train``)."""
    return cfg.train.name or f"{cfg.train.task}-{cfg.train.model.replace(':', '.')}-{run}"


def is_current(cfg: Config, dv: DatasetVersion, name: str, run: str) -> bool:
    """``train/<name>`` is published with exactly the settings one process training here would record."""
    from glisp_core.models import default_device
    from glisp_sampling.cluster_facts import dataset_facts
    from glisp_train.publish import params_for, train_publisher

    _, fingerprint, _ = dataset_facts(dv, run)
    params = params_for(cfg, "cluster", run, fingerprint, 1, default_device().type)
    return train_publisher(dv, name, run, params).is_current()


@contextmanager
def serving(cfg: Config, dv: DatasetVersion, run: str) -> Iterator[Path]:
    """The cluster file of a serve-cluster of ``run`` of ``dv`` that lives for the ``with`` block."""
    from glisp_serving.cluster.child import local_cluster

    sets = as_overrides(cfg, "dataset", "serve", "client") + TEMP_SERVE
    args = [a for kv in sets for a in ("--set", kv)]
    with local_cluster(str(dv.path), run, config_args=args, timeout_s=cfg.serve.start_timeout_s) as cluster_file:
        yield cluster_file
