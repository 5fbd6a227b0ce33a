"""``glisp train [DATASET] --cluster CLUSTER_FILE --task node|link --model sage|gcn|gat|rgcn``.

Trains through the sampling service (``--cluster``) or, as the accuracy reference, over a one-partition
run sampled in this process (``--in-process RUN``). Data-parallel under torchrun::

    torchrun --nproc-per-node 2 -m glisp_app.cli train --cluster glisp-cluster.json --task node

Publishes stage ``train/<name>`` of the served dataset version; a trainer that cannot read the dataset
directory (it has only the cluster file) writes the run to ``--output DIR`` instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from glisp_core.config import Config, with_values
from glisp_core.errors import GlispError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", help="dataset version (default: the one the cluster serves)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--cluster", help="cluster file written by 'glisp serve-cluster'")
    src.add_argument("--in-process", metavar="RUN", help="sample a one-partition run of DATASET in this process")
    src.add_argument("--serve", metavar="RUN", help="start servers of run RUN of DATASET here, train, stop them")
    p.add_argument("--task", choices=["node", "link"], help="train.task")
    p.add_argument("--model", choices=["sage", "gcn", "gat", "rgcn"], help="train.model")
    p.add_argument("--epochs", type=int, help="train.epochs")
    p.add_argument("--batch-size", type=int, help="train.batch_size")
    p.add_argument("--fanouts", help="train.fanouts, comma-separated, the seeds' hop first (sets train.layers)")
    p.add_argument("--name", help="training run name (train.name)")
    p.add_argument("--output", help="write the run here instead of publishing it into the dataset version")
    p.add_argument("--force", action="store_true", help="train even when train/<name> is published with these settings")


def main(args: argparse.Namespace, cfg: Config) -> int:
    from glisp_train.dist import close_dist, init_dist
    from glisp_train.progress import Progress
    from glisp_train.source import check_dataset_matches, open_cluster, open_in_process

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
    )
    if (args.in_process or args.serve) and not args.dataset:
        raise GlispError(f"{'--in-process' if args.in_process else '--serve'} RUN needs DATASET")
    if args.serve:
        return _train_serving(args, cfg)
    c = cfg.client
    d = init_dist(timeout_s=max(120.0, c.deadline_s * (c.retries + 2) * 2))
    source = open_cluster(args.cluster, cfg) if args.cluster else open_in_process(args.dataset, args.in_process, cfg)
    try:
        check_dataset_matches(source, args.dataset, cfg)
        return _run(args, cfg, source, d, Progress(enabled=d.is_main))
    finally:
        source.close()
        close_dist(d)


def _train_serving(args: argparse.Namespace, cfg: Config) -> int:
    """--serve RUN: up to date, or servers of RUN started here for one training (glisp_train.with_servers)."""
    from glisp_core.dataset.layout import resolve_dataset
    from glisp_train.with_servers import is_current, run_name, serving

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise GlispError(
            "--serve starts servers for one trainer process; under torchrun start 'glisp serve-cluster' "
            "once and give every process --cluster"
        )
    dv = resolve_dataset(args.dataset, cfg.dataset.root)
    name = run_name(cfg, args.serve)
    if not args.output and not args.force and is_current(cfg, dv, name, args.serve):
        print(f"train/{name}: up to date (use --force to train again)", flush=True)
        return 0
    with serving(cfg, dv, args.serve) as cluster_file:
        return main(
            argparse.Namespace(**{**vars(args), "serve": None, "cluster": str(cluster_file), "dataset": str(dv.path)}),
            cfg,
        )


def train_serving(cfg: Config, dataset: str, run: str, force: bool = False) -> int:
    """``glisp train DATASET --serve RUN`` with ``cfg`` (the refresh pipeline's train stage)."""
    args = argparse.Namespace(
        dataset=dataset,
        cluster=None,
        in_process=None,
        serve=run,
        task=None,
        model=None,
        epochs=None,
        batch_size=None,
        fanouts=None,
        name=None,
        output=None,
        force=force,
    )
    return main(args, cfg)


def _run(args: argparse.Namespace, cfg: Config, source, d, progress) -> int:
    from glisp_train.publish import record, run_params, train_publisher, write_outputs, write_standalone
    from glisp_train.trainer import train

    tc = cfg.train
    name = tc.name or f"{tc.task}-{tc.model}-{source.run}"
    params = run_params(cfg, source, d.world, d.device.type)
    pub = None
    if not args.output:
        if source.dv is None:
            raise GlispError(
                "the dataset directory the cluster serves is not readable here; pass --output DIR to write the "
                "run there (routing and labels come from the servers either way)"
            )
        pub = train_publisher(source.dv, name, source.run, params)
        if pub.is_current() and not args.force:
            progress.log(f"train/{name}: up to date (use --force to train again)")
            return 0
    progress.log(
        f"glisp train: {tc.task} / {tc.model} on {source.description}, {d.world} process(es) on "
        f"{d.device.type}, run {name}"
    )
    from contextlib import nullcontext

    from glisp_core.dataset.versions import VersionLease

    # retention never deletes the version a trainer reads (the lease lapses if this process dies)
    writable = source.dv is not None and os.access(source.dv.path, os.W_OK)
    lease = VersionLease(source.dv, f"glisp train {name}") if writable else nullcontext()
    with lease:
        result = train(cfg, source, d, progress)
    test = ", ".join(f"{k} {v:.4f}" for k, v in result.test.items() if k != "predictions")
    if not d.is_main:
        return 0
    if pub is not None:
        with pub:
            write_outputs(pub.tmp, result, cfg, source)
            counts, metrics, timings = record(result)
            pub.commit(counts=counts, metrics=metrics, timings=timings)
        where = source.dv.train(name)
    else:
        where = write_standalone(Path(args.output), result, cfg, source, params)
    print(
        f"glisp train: best epoch {result.best_epoch} of {len(result.epochs)}; test {test}; checkpoint {where}",
        file=sys.stdout,
        flush=True,
    )
    return 0
