"""``glisp train [DATASET] --cluster CLUSTER_FILE --task node|link --model sage|gcn|gat|rgcn|lightgcn``.

Trains through the sampling service (``--cluster``) or, as the accuracy reference, over a one-partition
run sampled in this process (``--in-process RUN``). Data-parallel under torchrun::

    torchrun --nproc-per-node 2 -m glisp_app.cli train --cluster glisp-cluster.json --task node
    glisp train --cluster glisp-cluster.json --spark-processes 4 --master spark://host:7077   # as Spark tasks

Publishes stage ``train/<name>`` of the served dataset version; a trainer that cannot read the dataset
directory (it has only the cluster file) writes the run to ``--output DIR`` instead.
"""

from __future__ import annotations

import argparse

from glisp_core.config import Config, with_values
from glisp_core.errors import GlispError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", help="dataset version (default: the one the cluster serves)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--cluster", help="cluster file written by 'glisp serve-cluster'")
    src.add_argument("--in-process", metavar="RUN", help="sample a one-partition run of DATASET in this process")
    src.add_argument("--serve", metavar="RUN", help="start servers of run RUN of DATASET here, train, stop them")
    p.add_argument("--task", choices=["node", "link"], help="train.task")
    p.add_argument(
        "--model",
        help="train.model: sage, gcn, gat, rgcn, lightgcn (link; no weights), or a user-defined model 'package.module:factory' (factory(spec) -> "
        "torch.nn.Module; see docs/training.md)",
    )
    p.add_argument(
        "--node-embeddings",
        type=int,
        metavar="DIM",
        help="train.node_embeddings: learn a DIM-wide row per vertex (held by the servers), input beside the features",
    )
    p.add_argument("--link-loss", choices=["bce", "bpr"], help="train.link_loss")
    p.add_argument("--epochs", type=int, help="train.epochs")
    p.add_argument("--batch-size", type=int, help="train.batch_size")
    p.add_argument("--fanouts", help="train.fanouts, comma-separated, the seeds' hop first (sets train.layers)")
    p.add_argument(
        "--eval",
        choices=["full", "sampled"],
        dest="evaluation",
        help="train.evaluation: validation and test at full neighbourhoods (default) or on sampled trees",
    )
    p.add_argument("--name", help="training run name (train.name)")
    p.add_argument("--output", help="write the run here instead of publishing it into the dataset version")
    p.add_argument(
        "--spark-processes",
        type=int,
        metavar="N",
        help="with --cluster: launch N data-parallel trainers as Spark tasks (pyspark's TorchDistributor)",
    )
    p.add_argument("--force", action="store_true", help="train even when train/<name> is published with these settings")


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_train.run import run_training, train_in_process, train_through_cluster

    fan = [int(f) for f in args.fanouts.split(",")] if args.fanouts else None
    cfg = with_values(
        cfg,
        "train",
        task=args.task,
        model=args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        fanouts=fan,
        layers=len(fan) if fan else None,
        name=args.name,
        evaluation=args.evaluation,
        node_embeddings=args.node_embeddings,
        link_loss=args.link_loss,
    )
    if (args.in_process or args.serve) and not args.dataset:
        raise GlispError(f"{'--in-process' if args.in_process else '--serve'} RUN needs DATASET")
    if args.serve:
        return run_training(cfg, args.dataset, args.serve, force=args.force, output=args.output)
    if args.in_process:
        return train_in_process(cfg, args.dataset, args.in_process, output=args.output, force=args.force)
    if args.spark_processes:
        from glisp_train.spark_launch import train_on_spark

        if not args.cluster:
            raise GlispError("--spark-processes launches trainers of a running service: give --cluster FILE")
        return train_on_spark(cfg, args.cluster, args.spark_processes, output=args.output, force=args.force)
    return train_through_cluster(cfg, args.cluster, args.dataset, output=args.output, force=args.force)
