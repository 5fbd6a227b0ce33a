"""Library entry points of training: what ``glisp train`` and the refresh pipeline both call.

- :func:`run_training`: train on partition run ``run`` of a dataset through servers started here for the
  training and stopped after (``glisp train DATASET --serve RUN``; the pipeline's train stage).
- :func:`train_through_cluster`: train through a running service, given only its cluster file.
- :func:`train_in_process`: the accuracy reference, a one-partition run sampled in this process.

Each returns 0 when the run is published (or already was, with the same settings), and publishes stage
``train/<name>`` of the dataset version, or writes the run to ``output`` when given.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from glisp_core.config import Config
from glisp_core.dataset.layout import DatasetVersion, resolve_dataset
from glisp_core.dataset.publish import StagePublisher, up_to_date
from glisp_core.dataset.versions import VersionLease
from glisp_core.errors import GlispError
from glisp_core.storage.uri import parse_uri
from glisp_train.dist import Dist, close_dist, dist_barrier, init_dist
from glisp_train.progress import Progress
from glisp_train.publish import record, run_params, train_publisher, write_outputs, write_standalone
from glisp_train.source import GraphSource, check_dataset_matches, open_cluster, open_in_process
from glisp_train.trainer import TrainResult, describe_evaluation, train
from glisp_train.with_servers import is_current, run_name, serving


def run_training(cfg: Config, dataset: str, run: str, force: bool = False, output: str | None = None) -> int:
    """Train on ``run`` of ``dataset`` through servers of that run started here, unless it is up to date."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise GlispError(
            "--serve starts servers for one trainer process; under torchrun start 'glisp serve-cluster' "
            "once and give every process --cluster"
        )
    dv = resolve_dataset(dataset, cfg.dataset.root)
    name = run_name(cfg, run)
    if not output and not force and is_current(cfg, dv, name, run):
        print(up_to_date(f"train/{name}"), flush=True)
        return 0
    with serving(cfg, dv, run) as cluster_file:
        return train_through_cluster(cfg, str(cluster_file), str(dv.path), output=output, force=force)


def train_through_cluster(
    cfg: Config, cluster_file: str, dataset: str | None = None, output: str | None = None, force: bool = False
) -> int:
    """Train through the service that ``cluster_file`` names (``dataset``, when given, must be the one it serves)."""
    d = _init(cfg)
    source = open_cluster(cluster_file, cfg)
    return _train_closing(cfg, source, d, dataset, output, force)


def train_in_process(cfg: Config, dataset: str, run: str, output: str | None = None, force: bool = False) -> int:
    """Train over one-partition run ``run`` of ``dataset`` sampled in this process (the accuracy reference); the run
    is created first when the dataset has none of that name."""
    ensure_one_partition_run(cfg, dataset, run)
    d = _init(cfg)
    source = open_in_process(dataset, run, cfg)
    return _train_closing(cfg, source, d, dataset, output, force)


def ensure_one_partition_run(cfg: Config, dataset: str, run: str) -> None:
    """Partition (one partition) and serialize run ``run`` of ``dataset`` unless it is published: what
    ``glisp partition DATASET --algorithm random --parts 1 --name RUN`` and ``glisp serialize DATASET --partition
    RUN`` do. An existing run of another size is left alone (the in-process source then says what to do)."""
    from glisp_core.config import with_values
    from glisp_core.dataset.manifest import read_manifest

    dv = resolve_dataset(dataset, cfg.dataset.root)
    man = read_manifest(dv)
    have = man.has_stage(f"partition/{run}")
    if man.has_stage(f"serialize/{run}") or int(os.environ.get("RANK", "0")):
        return
    if have and int(man.stage(f"partition/{run}").counts.get("parts", 0)) != 1:
        return
    from glisp_spark.session import get_spark
    from spark_jobs.partition.job import run_partition
    from spark_jobs.serialize.job import run_serialize

    print(
        f"glisp train: {dv.path} has no run {run!r}; creating it with one partition (glisp partition --algorithm "
        f"random --parts 1 --name {run}, then glisp serialize --partition {run})",
        file=sys.stderr,
        flush=True,
    )
    c = with_values(cfg, "partition", algorithm="random", parts=1, name=run, incremental=False, progress=False)
    spark = get_spark(cfg.spark)
    if not have:
        run_partition(spark, c, dv)
    run_serialize(spark, c, dv, run=run)


def _init(cfg: Config) -> Dist:
    c = cfg.client
    return init_dist(timeout_s=max(120.0, c.deadline_s * (c.retries + 2) * 2))


def _train_closing(
    cfg: Config, source: GraphSource, d: Dist, dataset: str | None, output: str | None, force: bool
) -> int:
    try:
        check_dataset_matches(source, dataset, cfg)
        return _train(cfg, source, d, Progress(enabled=d.is_main), output, force)
    finally:
        source.close()
        close_dist(d)


def _train(cfg: Config, source: GraphSource, d: Dist, progress: Progress, output: str | None, force: bool) -> int:
    tc = cfg.train
    name = tc.name or f"{tc.task}-{tc.model.replace(':', '.')}-{source.run}"
    params = run_params(cfg, source, d.world, d.device.type)
    pub = None
    if not output:
        if source.dv is None:
            raise GlispError(
                "the dataset directory the cluster serves is not readable here; pass --output DIR to write the "
                "run there (routing and labels come from the servers either way)"
            )
        pub = train_publisher(source.dv, name, source.run, params)
        if pub.is_current() and not force:
            progress.log(up_to_date(f"train/{name}"))
            return 0
    progress.log(
        f"glisp train: {tc.task} / {tc.model} on {source.description}, {d.world} process(es) on "
        f"{d.device.type}, run {name}"
    )
    # retention never deletes the version a trainer reads (the lease lapses if this process dies)
    lease: AbstractContextManager[object] = (
        VersionLease(source.dv, f"glisp train {name}")
        if source.dv is not None and _can_lease(source.dv)
        else nullcontext()
    )
    with lease:
        result = train(cfg, source, d, progress)
    try:
        return _publish(cfg, source, d, result, pub, name, output, params)
    finally:
        if result.embeddings is not None:
            dist_barrier(d)  # every process is done with the rows before the table goes
            if d.is_main:
                result.embeddings.release()


def _publish(
    cfg: Config,
    source: GraphSource,
    d: Dist,
    result: TrainResult,
    pub: StagePublisher | None,
    name: str,
    output: str | None,
    params: dict[str, Any],
) -> int:
    """The main process publishes the run (or writes it to ``output``) and says where."""
    test = ", ".join(f"{k} {v:.4f}" for k, v in result.test.items() if k != "predictions")
    if not d.is_main:
        return 0
    if pub is not None and source.dv is not None:
        with pub:
            write_outputs(pub.tmp, result, cfg, source)
            counts, metrics, timings = record(result)
            pub.commit(counts=counts, metrics=metrics, timings=timings)
        where: object = source.dv.train(name)
    else:
        where = write_standalone(parse_uri(str(output), "--output"), result, cfg, source, params)
    print(
        f"glisp train: best epoch {result.best_epoch} of {len(result.epochs)}; test {test} "
        f"({describe_evaluation(result.evaluation)}); checkpoint {where}",
        file=sys.stdout,
        flush=True,
    )
    return 0


def _can_lease(dv: DatasetVersion) -> bool:
    """Whether this process may hold a lease on ``dv``: a local version it can write, or one in an object store
    (reached with the credentials that publish the checkpoint there)."""
    return not dv.path.is_local or os.access(dv.path.local, os.W_OK)
