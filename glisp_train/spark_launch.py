"""Data-parallel trainers as Spark tasks: ``glisp train --cluster FILE --spark-processes N``.

Beside torchrun, pyspark's ``TorchDistributor`` starts the trainer processes on a Spark cluster: ``N`` barrier
tasks (``local_mode = False``), each running one torchrun process whose environment (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``) makes the group that :mod:`glisp_train.dist` joins. Their only input is
the cluster file, whose text travels with the task (the executors need not see the driver's disk) and is
written to a temporary file there; everything else comes from the servers, as for any trainer. Rank 0
publishes the run into the dataset when its executor can reach the version, else writes ``--output DIR``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from glisp_core.config import Config


def train_on_spark(
    cfg: Config,
    cluster_file: str,
    processes: int,
    output: str | None = None,
    force: bool = False,
    local_mode: bool = False,
    spark: Any = None,
) -> int:
    """Train through the service of ``cluster_file`` with ``processes`` trainers launched by TorchDistributor."""
    from pyspark.ml.torch.distributor import TorchDistributor

    from glisp_core.errors import GlispError
    from glisp_spark.session import get_spark

    if processes < 1:
        raise GlispError(f"--spark-processes: expected at least 1 trainer process (got {processes})")
    with open(cluster_file, encoding="utf-8") as f:
        text = f.read()
    spark = spark or get_spark(cfg.spark)
    import torch

    dist = TorchDistributor(num_processes=processes, local_mode=local_mode, use_gpu=torch.cuda.is_available())
    rc = dist.run(trainer_main, cfg, text, output, force)
    return int(rc or 0)


def trainer_main(cfg: Config, cluster_text: str, output: str | None, force: bool) -> int:
    """One trainer process (under torchrun, inside a Spark task): the cluster file from its text, then training."""
    from glisp_train.run import train_through_cluster

    fd, path = tempfile.mkstemp(prefix="glisp-cluster-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(cluster_text)
        return train_through_cluster(cfg, path, output=output, force=force)
    finally:
        os.unlink(path)
